"""The Chinese course model's vocabulary: one token a character, as bert-base-chinese reads text.

    python scripts/chinese_vocab.py TRAIN_TXT OUT_DIR [--min-count 5]

TRAIN_TXT is `target/corpus/chinese/train.txt`, which `scripts/chinese_corpus.py` makes (the
held-out text is never read here). OUT_DIR receives `tokenizer.json`, `vocab.txt` and
`tokenizer_config.json`: bert-base-chinese's normaliser (clean the text, a space around every
CJK character, no lowercasing, no accent stripping) and pre-tokeniser (whitespace and
punctuation), so that each Chinese character and each punctuation mark is one word. The
vocabulary is the five special tokens (`[PAD] [UNK] [CLS] [SEP] [MASK]`, ids 0 to 4), then
every one-character word seen at least --min-count times in the training text, by how often it
occurs (ties by the character). A rarer character, and any word of several characters (a run of
digits, say), is `[UNK]`: there are no `##` pieces, as there is nothing to piece together in
this text. Written with `tokenizers==0.23.3` (scripts/requirements.txt), so the files are the
ones Hugging Face's `BertTokenizerFast` reads.
"""

import argparse
import json
import os
import sys
from collections import Counter

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("train", help="the training text, one poem a line")
    parser.add_argument("out", help="the directory to write the tokenizer's files into")
    parser.add_argument("--min-count", type=int, default=5, help="the fewest times a character must occur")
    parser.add_argument("--max-len", type=int, default=128, help="model_max_length in tokenizer_config.json")
    args = parser.parse_args()
    if not os.path.isfile(args.train):
        print(f"error: {args.train}: no such file (scripts/chinese_corpus.py makes it)", file=sys.stderr)
        return 2

    # strip_accents=None follows lowercase (no stripping here), as tokenizer_config.json says.
    normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=False
    )
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    counts = Counter()
    with open(args.train, encoding="utf-8") as f:
        for line in f:
            words = pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(line))
            counts.update(word for word, _ in words)
    chars = sorted((w for w, n in counts.items() if len(w) == 1 and n >= args.min_count), key=lambda w: (-counts[w], w))
    vocab = {token: i for i, token in enumerate(SPECIALS + chars)}

    tokenizer = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]", continuing_subword_prefix="##"))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    tokenizer.add_special_tokens(SPECIALS)
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    os.makedirs(args.out, exist_ok=True)
    tokenizer.save(os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(token + "\n" for token in vocab))
    config = {
        "do_lower_case": False,
        "tokenize_chinese_chars": True,
        "strip_accents": None,
        "model_max_length": args.max_len,
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "mask_token": "[MASK]",
        "tokenizer_class": "BertTokenizer",
    }
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")
    unknown = sum(n for w, n in counts.items() if w not in vocab)
    total = sum(counts.values())
    print(f"{len(vocab)} tokens; {unknown:,} of the training text's {total:,} words are [UNK] "
          f"({100 * unknown / total:.3f}%); written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
