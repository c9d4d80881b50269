#!/usr/bin/env python3
"""Build a random checkpoint the size of bert-base-uncased, for benchmarks only.

Usage:

    python scripts/make_bench_model.py OUT_DIR

Writes ``config.json`` and ``model.safetensors`` (from ``BertModel.save_pretrained``: the
encoder and the pooler, no pretraining heads; with ``--pretraining``, ``BertForPreTraining``'s,
which adds the MLM and NSP heads, for the experiments' benchmark), ``vocab.txt`` (30522 entries) and
``tokenizer_config.json`` into OUT_DIR. Keep OUT_DIR outside the repository (``/tmp`` or
``target/``): the weights are 418 MB and must never be committed.

The sizes are bert-base's (hidden 768, 12 layers, 12 heads, intermediate 3072, vocab 30522,
512 positions); the weights are random (``torch.manual_seed(0)``), which makes no difference to
speed. The vocabulary holds the special tokens at bert-base-uncased's ids, the words of the
benchmark sentence and filler entries, so that the sentence tokenizes to whole words.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from transformers import BertConfig, BertForPreTraining, BertModel

SEED = 0
VOCAB_SIZE = 30522

# The sentence the cold-start benchmark traces: 10 words, so 12 tokens with [CLS] and [SEP].
SENTENCE = "the quick brown fox jumps over the lazy sleeping dog"


def build_vocab() -> list[str]:
    # bert-base-uncased's layout: [PAD] at 0, [unused0..98], then [UNK] [CLS] [SEP] [MASK] at
    # 100..103.
    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += list("abcdefghijklmnopqrstuvwxyz0123456789.,!?'\"-")
    vocab += sorted(set(SENTENCE.split()))
    vocab += [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
    filler = VOCAB_SIZE - len(vocab)
    vocab += [f"[unused{99 + i}]" for i in range(filler)]
    assert len(vocab) == VOCAB_SIZE and len(set(vocab)) == VOCAB_SIZE
    return vocab


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--pretraining", action="store_true", help="with the MLM and NSP heads (BertForPreTraining)")
    args = parser.parse_args()

    torch.manual_seed(SEED)
    config = BertConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
        hidden_act="gelu",
    )
    model = (BertForPreTraining if args.pretraining else BertModel)(config).eval()
    os.makedirs(args.out_dir, exist_ok=True)
    model.save_pretrained(args.out_dir)
    with open(os.path.join(args.out_dir, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(build_vocab()) + "\n")
    with open(os.path.join(args.out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "BertTokenizer", "do_lower_case": True}, f, indent=2)
    print(f"bert-base-sized random checkpoint in {args.out_dir}")


if __name__ == "__main__":
    main()
