#!/usr/bin/env python3
"""Build the tiny random BERT used by bert-trace's golden tests.

Usage:

    python scripts/make_tiny_model.py golden/tiny
    python scripts/make_tiny_model.py --chinese golden/tiny-chinese
    python scripts/make_tiny_model.py --hidden-act gelu_new --seed 1 golden/tiny-gelu-new
    python scripts/make_tiny_model.py --hidden-act relu --seed 2 golden/tiny-relu
    python scripts/make_tiny_model.py --classifier negative,neutral,positive --seed 3 golden/tiny-classifier

Writes, into OUT_DIR:

- ``model.safetensors`` and ``config.json`` from ``BertForPreTraining.save_pretrained``
  (the MLM decoder weight is tied to the word embeddings, so it is not stored),
- ``vocab.txt``, a hand-made WordPiece vocabulary of about 200 entries,
- ``tokenizer_config.json`` (``BertTokenizer``, ``do_lower_case: true``).

There is deliberately no ``tokenizer.json``: the Rust side must build the
tokenizer from ``vocab.txt`` (the MiniLM checkpoint covers ``tokenizer.json``).

With ``--chinese`` it builds a model shaped like bert-base-chinese instead: a
cased vocabulary of CJK characters, full-width punctuation and some Latin words
in both cases; ``tokenizer.json``, ``tokenizer_config.json`` (``do_lower_case:
false``) and ``vocab.txt`` written the way ``BertTokenizer.save_pretrained``
writes them (plus ``vocab.txt``, which bert-base-chinese also ships); and a
``BertForMaskedLM`` (MLM head, no pooler, no NSP head).

``--classifier NAMES`` builds a ``BertForSequenceClassification`` instead (the
pooler and ``classifier``, no pretraining heads), whose labels are NAMES, in order,
in config.json's ``id2label`` and ``label2id``: the start of a fine-tuning run.

``--hidden-act NAME`` sets the config's ``hidden_act`` (any name of
transformers' ``ACT2FN``: ``gelu``, the default, is the exact erf form;
``gelu_new`` the tanh approximation; ``relu``), used by every layer's
feed-forward and by the MLM transform. ``--seed N`` (default 0) picks the
random weights. With neither, the output is exactly what it always was.

The model is random but deterministic: every number comes from
``torch.manual_seed(N)`` (and ``N + 1`` for the biases and LayerNorms), and
rerunning the script gives a byte-identical ``model.safetensors`` (the script
checks this itself by building the model twice). Biases and LayerNorm parameters are re-drawn so that none of them is 0
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
from torch import nn
from safetensors import safe_open
from transformers import (AutoTokenizer, BertConfig, BertForMaskedLM, BertForPreTraining,
                          BertForSequenceClassification, BertTokenizer)
from transformers.activations import ACT2FN

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


# The Chinese variant: cased, so "BERT" and "bert" are different words, and accents are kept.
CHINESE_CJK = list(
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对"
    "可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同"
    "三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明社长北京爱门安首伦敦罗马城市语"
)
CHINESE_PUNCT = list("，。！？、：；「」《》（）") + list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
# Latin words in the case they are written; "BERT" is deliberately absent (it splits into
# "BE" "##RT"), and so is "CAFÉ" (no piece covers it: [UNK]).
CHINESE_LATIN = """
Beijing China Rome London Paris the is in and not a of to BERT's bert Bert Café café cafe
Hello hello World world BE
""".split()
CHINESE_PIECES = ["##RT", "##s", "##ing", "##ed"]
# 龘 is deliberately not in the vocabulary: it becomes [UNK].
CHINESE_ABSENT = ["龘", "BERT", "CAFÉ", "cAFE"]


def build_chinese_vocab() -> list[str]:
    vocab = SPECIALS + CHINESE_PUNCT + DIGITS + CHINESE_CJK + CHINESE_LATIN + CHINESE_PIECES
    # A character listed twice in CHINESE_CJK keeps its first place.
    vocab = list(dict.fromkeys(vocab))
    for forbidden in CHINESE_ABSENT:
        assert forbidden not in vocab, f"{forbidden!r} must not be in the vocab"
    return vocab


def build_vocab() -> list[str]:
    vocab = SPECIALS + PUNCT + DIGITS + LETTERS + CJK + WORDS + SUFFIXES
    dupes = {t for t in vocab if vocab.count(t) > 1}
    assert not dupes, f"duplicate vocab entries: {sorted(dupes)}"
    for forbidden in ["rom", "rome", "bui", "buil", "built", "nai", "naiv", "naive", "d", "da", "day"]:
        assert forbidden not in vocab, f"{forbidden!r} must not be in the vocab"
    return vocab


def build_config(vocab_size: int, architecture: str = "BertForPreTraining", hidden_act: str = "gelu",
                 labels: list[str] | None = None) -> BertConfig:
    by_labels = {} if labels is None else {"id2label": dict(enumerate(labels)),
                                            "label2id": {name: i for i, name in enumerate(labels)}}
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        type_vocab_size=2,
        hidden_act=hidden_act,
        layer_norm_eps=1e-12,
        # 0.2 rather than BERT's 0.02: with hidden_size 32 the default makes every
        # attention row nearly uniform, which would hide mistakes in the scores.
        initializer_range=0.2,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        pad_token_id=0,
        architectures=[architecture],
        **by_labels,
    )


def build_model(vocab_size: int, chinese: bool = False, hidden_act: str = "gelu",
                seed: int = SEED, labels: list[str] | None = None) -> nn.Module:
    torch.manual_seed(seed)
    if labels is not None:
        model = BertForSequenceClassification(build_config(vocab_size, "BertForSequenceClassification", hidden_act,
                                                           labels))
        assert model.num_labels == len(labels)
    elif chinese:
        model = BertForMaskedLM(build_config(vocab_size, "BertForMaskedLM", hidden_act))
        assert model.bert.pooler is None, "BertForMaskedLM has no pooler"
    else:
        model = BertForPreTraining(build_config(vocab_size, hidden_act=hidden_act))
    model.eval()
    # Re-draw every bias and LayerNorm parameter. named_parameters() yields each
    # shared parameter once (cls.predictions.decoder.bias IS cls.predictions.bias),
    # in module registration order, so the draws are deterministic.
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif "LayerNorm.bias" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    if labels is not None:
        return model
    # The MLM decoder must share the word embeddings and cls.predictions.bias.
    dec = model.cls.predictions.decoder
    assert dec.weight is model.bert.embeddings.word_embeddings.weight, "decoder weight is not tied"
    assert dec.bias is model.cls.predictions.bias, "decoder bias is not tied to cls.predictions.bias"
    return model


def save(model: nn.Module, vocab: list[str], out_dir: str, chinese: bool = False) -> None:
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    with open(os.path.join(out_dir, "vocab.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(t + "\n" for t in vocab))
    if chinese:
        # tokenizer.json and tokenizer_config.json as transformers writes them for a cased
        # BertTokenizer (bert-base-chinese ships the same three files).
        tok = BertTokenizer(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=False,
                            tokenize_chinese_chars=True, strip_accents=None, model_max_length=64)
        tok.save_pretrained(out_dir)
        return
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


# What the Chinese tokenizer must give: cased, CJK split one per character, accents kept.
CHINESE_EXPECT = {
    "北京是中国的[MASK]都。":
        "[CLS] 北 京 是 中 国 的 [MASK] 都 。 [SEP]",
    "我爱北京天安门。Beijing is in China!":
        "[CLS] 我 爱 北 京 天 安 门 。 Beijing is in China ! [SEP]",
    "BERT和bert不一样，Café和café也不一样。":
        "[CLS] BE ##RT 和 bert 不 一 样 ， Café 和 café 也 不 一 样 。 [SEP]",
    "CAFÉ龘":
        "[CLS] [UNK] [UNK] [SEP]",
}


def check_tokenizer(out_dir: str, vocab: list[str], chinese: bool = False) -> None:
    """Load the tokenizer the way dump_reference.py does and check it uses our vocab."""
    tok = AutoTokenizer.from_pretrained(out_dir)
    want = {t: i for i, t in enumerate(vocab)}
    got = tok.get_vocab()
    assert got == want, "AutoTokenizer did not load vocab.txt (transformers 5 vocab_file trap?)"
    expect = CHINESE_EXPECT if chinese else {
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
    ap.add_argument("--chinese", action="store_true",
                    help="a cased Chinese-vocabulary BertForMaskedLM with tokenizer.json (like bert-base-chinese)")
    ap.add_argument("--hidden-act", default="gelu", metavar="NAME",
                    help="the config's hidden_act, e.g. gelu (default, exact erf form), gelu_new (tanh form), relu")
    ap.add_argument("--seed", type=int, default=SEED, help=f"seed of the random weights (default {SEED})")
    ap.add_argument("--classifier", metavar="NAMES",
                    help="a BertForSequenceClassification whose labels are these comma-separated names")
    ap.add_argument("out_dir")
    args = ap.parse_args()
    if args.hidden_act not in ACT2FN:
        ap.error(f"--hidden-act {args.hidden_act!r} is not an activation transformers knows: {sorted(ACT2FN)}")
    if args.seed < 0:
        ap.error("--seed must be >= 0")

    labels = args.classifier.split(",") if args.classifier else None
    if labels is not None and (args.chinese or len(labels) < 2 or len(set(labels)) != len(labels)):
        ap.error("--classifier takes two or more distinct names, and not with --chinese")
    vocab = build_chinese_vocab() if args.chinese else build_vocab()
    model = build_model(len(vocab), args.chinese, args.hidden_act, args.seed, labels)
    save(model, vocab, args.out_dir, args.chinese)
    st_path = os.path.join(args.out_dir, "model.safetensors")

    # Determinism: build and save a second time into a scratch dir and compare bytes.
    files = ["model.safetensors", "config.json", "vocab.txt", "tokenizer_config.json"]
    if args.chinese:
        files.append("tokenizer.json")
    with tempfile.TemporaryDirectory() as scratch:
        save(build_model(len(vocab), args.chinese, args.hidden_act, args.seed, labels), vocab, scratch, args.chinese)
        for name in files:
            a, b = sha256(os.path.join(args.out_dir, name)), sha256(os.path.join(scratch, name))
            assert a == b, f"{name} differs between two runs: not deterministic"

    print(f"hidden_act: {model.config.hidden_act}, seed {args.seed}")
    print(f"vocab: {len(vocab)} entries")
    print(f"model.safetensors: {os.path.getsize(st_path)} bytes, sha256 {sha256(st_path)} (rebuilt twice, identical)")
    print("safetensors tensors:")
    with safe_open(st_path, "pt") as f:
        for key in f.keys():
            sl = f.get_slice(key)
            print(f"  {key} {sl.get_dtype()} {list(sl.get_shape())}")
    print("tokenizer check:")
    check_tokenizer(args.out_dir, vocab, args.chinese)
    return 0


if __name__ == "__main__":
    sys.exit(main())
