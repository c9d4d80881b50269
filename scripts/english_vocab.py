"""The course model's vocabulary: WordPiece trained on the English corpus by `tokenizers`.

    python scripts/english_vocab.py TRAIN_TXT OUT_DIR [--size 8192]

TRAIN_TXT is `target/corpus/english/train.txt`, which `scripts/english_corpus.py` makes (the
held-out text is never read here). OUT_DIR receives `tokenizer.json`, `vocab.txt` and
`tokenizer_config.json`: bert-base-uncased's normaliser (clean the text, split CJK characters,
lowercase, strip accents) and pre-tokeniser (whitespace and punctuation), the five special
tokens first (`[PAD] [UNK] [CLS] [SEP] [MASK]`, ids 0 to 4), and the `[CLS] A [SEP] B [SEP]`
template. The trainer is the `tokenizers` crate's own WordPieceTrainer (its Python binding,
`tokenizers==0.23.3` as pinned in scripts/requirements.txt), so the vocabulary is what
Hugging Face's tools would make of the same text.
"""

import argparse
import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("train", help="the training text, one paragraph a line")
    parser.add_argument("out", help="the directory to write the tokenizer's files into")
    parser.add_argument("--size", type=int, default=8192, help="the vocabulary's size, special tokens included")
    parser.add_argument("--max-len", type=int, default=128, help="model_max_length in tokenizer_config.json")
    args = parser.parse_args()
    if not os.path.isfile(args.train):
        print(f"error: {args.train}: no such file (scripts/english_corpus.py makes it)", file=sys.stderr)
        return 2

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    # bert-base-uncased's: strip_accents=None follows lowercase, as BertNormalizer documents.
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(
        vocab_size=args.size,
        min_frequency=2,
        special_tokens=SPECIALS,
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tokenizer.train([args.train], trainer)
    # The trainer's order is not the same from run to run (it breaks ties between merges of equal
    # count, and orders its alphabet, by hash maps), so the ids are put in an order of their own:
    # the special tokens, then every other token by how often it occurs in the training text,
    # ties by the token itself. Runs that keep the same tokens then give them the same ids, and an
    # id says how common a token is. (Which tokens are kept could still change with a tie at the
    # trainer's last merges; scripts/make_english_small.sh checks the vocabulary's sha256.)
    with open(args.train, encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line]
    counts = {}
    for encoding in tokenizer.encode_batch(lines, add_special_tokens=False):
        for token in encoding.tokens:
            counts[token] = counts.get(token, 0) + 1
    others = sorted((t for t in tokenizer.get_vocab() if t not in SPECIALS), key=lambda t: (-counts.get(t, 0), t))
    ordered = {token: i for i, token in enumerate(SPECIALS + others)}
    trained = tokenizer
    tokenizer = Tokenizer(models.WordPiece(vocab=ordered, unk_token="[UNK]", continuing_subword_prefix="##"))
    tokenizer.normalizer = trained.normalizer
    tokenizer.pre_tokenizer = trained.pre_tokenizer
    tokenizer.decoder = trained.decoder
    tokenizer.add_special_tokens(SPECIALS)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )

    os.makedirs(args.out, exist_ok=True)
    tokenizer.save(os.path.join(args.out, "tokenizer.json"))
    # vocab.txt in id order: the file BertTokenizer and bert-trace read without tokenizer.json.
    vocab = tokenizer.get_vocab()
    by_id = sorted(vocab, key=vocab.get)
    assert [vocab[t] for t in by_id] == list(range(len(by_id))), "the ids run from 0 without gaps"
    with open(os.path.join(args.out, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(token + "\n" for token in by_id))
    config = {
        "do_lower_case": True,
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
        json.dump(config, f, indent=2)
        f.write("\n")
    print(f"{len(by_id)} tokens, specials {[vocab[t] for t in SPECIALS]}, written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
