#!/usr/bin/env python3
"""Build the tiny random BERT used by bert-trace's golden tests.

Usage:

    python scripts/make_tiny_model.py golden/tiny

Writes, into OUT_DIR:

- ``model.safetensors`` and ``config.json`` from ``BertForPreTraining.save_pretrained``
  (the MLM decoder weight is tied to the word embeddings, so it is not stored),
- ``vocab.txt``, a hand-made WordPiece vocabulary of about 200 entries,
- ``tokenizer_config.json`` (``BertTokenizer``, ``do_lower_case: true``).

There is deliberately no ``tokenizer.json``: the Rust side must build the
tokenizer from ``vocab.txt`` (the MiniLM checkpoint covers ``tokenizer.json``).

The model is random but deterministic: every number comes from
``torch.manual_seed(0)``, and rerunning the script gives a byte-identical
``model.safetensors`` (the script checks this itself by building the model
twice). Biases and LayerNorm parameters are re-drawn so that none of them is 0
or 1, which means a forgotten bias or LayerNorm affine shows up as a mismatch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile

import torch
from safetensors import safe_open
from transformers import AutoTokenizer, BertConfig, BertForPreTraining

SEED = 0

# Special tokens are deliberately NOT at ids 0..4 (which is where transformers 5
# puts them when it silently ignores a vocab file), and not at BERT's 100..103
# either, so an implementation that hard-codes ids fails loudly.
SPECIALS = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# Single characters. "d" and "z" are left out on purpose: a word such as "day"
# then has no WordPiece split at all and becomes [UNK].
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
DIGITS = list("0123456789")
LETTERS = [c for c in "abcdefghijklmnopqrstuvwxyz" if c not in "dz"]
CJK = ["北", "京", "我", "爱", "中", "国", "人", "你", "好"]

# Whole words. Every word of the golden inputs is here except:
#   "rome"  -> "ro" "##me"     (no "rom"/"rome" entry)
#   "built" -> "bu" "##ilt"    (no "bui"/"buil"/"built" entry)
#   "naive" -> "na" "##ive"    (no "nai"/"naiv"/"naive" entry; the input is "naïve")
#   "day"   -> "[UNK]"         (no "d", "da" or "day")
# "cafe" is whole (the input is "Café": the uncased tokenizer strips accents).
WORDS = """
the an of and to in is it that was he she they we you as do does did not be at on
for with by from when where what who how why which all one two three there this these
have has had are were been his her their them its more some other out up about into
over after before new old good great small big time year people world life man woman
child city country home house way word name place work love water food cat dog sat mat
book read write see go come make take know think say said tell give find like want use
so but or if no yes then than now just only also very well here romans roman ro na bu
cafe empire history language latin italy rule rules law laws army road roads wall
""".split()

SUFFIXES = ["##s", "##es", "##ed", "##ing", "##er", "##est", "##ly", "##me", "##ive",
            "##ilt", "##e", "##n", "##t", "##y", "##a", "##o", "##i", "##an", "##ian"]


def build_vocab() -> list[str]:
    vocab = SPECIALS + PUNCT + DIGITS + LETTERS + CJK + WORDS + SUFFIXES
    dupes = {t for t in vocab if vocab.count(t) > 1}
    assert not dupes, f"duplicate vocab entries: {sorted(dupes)}"
    for forbidden in ["rom", "rome", "bui", "buil", "built", "nai", "naiv", "naive", "d", "da", "day"]:
        assert forbidden not in vocab, f"{forbidden!r} must not be in the vocab"
    return vocab


def build_config(vocab_size: int) -> BertConfig:
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        type_vocab_size=2,
        hidden_act="gelu",
        layer_norm_eps=1e-12,
        # 0.2 rather than BERT's 0.02: with hidden_size 32 the default makes every
        # attention row nearly uniform, which would hide mistakes in the scores.
        initializer_range=0.2,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        pad_token_id=0,
        architectures=["BertForPreTraining"],
    )


def build_model(vocab_size: int) -> BertForPreTraining:
    torch.manual_seed(SEED)
    model = BertForPreTraining(build_config(vocab_size))
    model.eval()
    # Re-draw every bias and LayerNorm parameter. named_parameters() yields each
    # shared parameter once (cls.predictions.decoder.bias IS cls.predictions.bias),
    # in module registration order, so the draws are deterministic.
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif "LayerNorm.bias" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    # The MLM decoder must share the word embeddings and cls.predictions.bias.
    dec = model.cls.predictions.decoder
    assert dec.weight is model.bert.embeddings.word_embeddings.weight, "decoder weight is not tied"
    assert dec.bias is model.cls.predictions.bias, "decoder bias is not tied to cls.predictions.bias"
    return model


def save(model: BertForPreTraining, vocab: list[str], out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    with open(os.path.join(out_dir, "vocab.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(t + "\n" for t in vocab))
    tok_config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": True,
        "strip_accents": None,
        "tokenize_chinese_chars": True,
        "unk_token": "[UNK]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
        "model_max_length": 64,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(tok_config, f, indent=2, ensure_ascii=False)
        f.write("\n")


def sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def check_tokenizer(out_dir: str, vocab: list[str]) -> None:
    """Load the tokenizer the way dump_reference.py does and check it uses our vocab."""
    tok = AutoTokenizer.from_pretrained(out_dir)
    want = {t: i for i, t in enumerate(vocab)}
    got = tok.get_vocab()
    assert got == want, "AutoTokenizer did not load vocab.txt (transformers 5 vocab_file trap?)"
    expect = {
        "When in Rome, do as the [MASK] do.":
            "[CLS] when in ro ##me , do as the [MASK] do . [SEP]",
        "Rome was not built in a day.":
            "[CLS] ro ##me was not bu ##ilt in a [UNK] . [SEP]",
        "Café naïve 北京我爱中国":
            "[CLS] cafe na ##ive 北 京 我 爱 中 国 [SEP]",
    }
    for text, tokens in expect.items():
        ids = tok(text)["input_ids"]
        got_tokens = " ".join(tok.convert_ids_to_tokens(ids))
        assert got_tokens == tokens, f"{text!r}: got {got_tokens!r}, want {tokens!r}"
        print(f"  {text!r} -> {got_tokens}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    args = ap.parse_args()

    vocab = build_vocab()
    model = build_model(len(vocab))
    save(model, vocab, args.out_dir)
    st_path = os.path.join(args.out_dir, "model.safetensors")

    # Determinism: build and save a second time into a scratch dir and compare bytes.
    with tempfile.TemporaryDirectory() as scratch:
        save(build_model(len(vocab)), vocab, scratch)
        for name in ["model.safetensors", "config.json", "vocab.txt", "tokenizer_config.json"]:
            a, b = sha256(os.path.join(args.out_dir, name)), sha256(os.path.join(scratch, name))
            assert a == b, f"{name} differs between two runs: not deterministic"

    print(f"vocab: {len(vocab)} entries")
    print(f"model.safetensors: {os.path.getsize(st_path)} bytes, sha256 {sha256(st_path)} (rebuilt twice, identical)")
    print("safetensors tensors:")
    with safe_open(st_path, "pt") as f:
        for key in f.keys():
            sl = f.get_slice(key)
            print(f"  {key} {sl.get_dtype()} {list(sl.get_shape())}")
    print("tokenizer check:")
    check_tokenizer(args.out_dir, vocab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
