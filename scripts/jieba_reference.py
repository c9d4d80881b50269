#!/usr/bin/env python3
"""Chinese words as Python's jieba cuts them, for the reference `bert-trace --words` is checked
against (crates/bert-core/tests/all/segmentation.rs).

    python scripts/jieba_reference.py VOCAB TEXT [TEXT ...] --lines N --out OUT.json

For the first N lines of each TEXT (blank lines aside): the runs of Chinese characters that BERT's tokenizer makes
one token each (the ranges of `BasicTokenizer._is_chinese_char`) and VOCAB has, each cut by
`jieba.cut(run)` (its HMM on, jieba's default). A character that is not in VOCAB becomes
`[UNK]` in the tokens, so it ends a run here as it does in bert-trace. Needs `jieba==0.42.1`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jieba


def is_chinese(c: str) -> bool:
    cp = ord(c)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def runs(line: str, vocab: set[str]) -> list[str]:
    out, run = [], ""
    for c in line:
        if is_chinese(c) and c in vocab:
            run += c
        else:
            if run:
                out.append(run)
            run = ""
    if run:
        out.append(run)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vocab", type=Path)
    parser.add_argument("texts", type=Path, nargs="+")
    parser.add_argument("--lines", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    jieba.setLogLevel(60)
    vocab = set(args.vocab.read_text(encoding="utf-8").split("\n"))
    lines = []
    for text in args.texts:
        # The blank lines between documents are not texts.
        for line in [l for l in text.read_text(encoding="utf-8").splitlines() if l][: args.lines]:
            words = [word for run in runs(line, vocab) for word in jieba.cut(run, HMM=True)]
            lines.append({"text": line, "words": words})
    report = {"segmenter": f"jieba {jieba.__version__}, jieba.cut(run, HMM=True)", "lines": lines}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # One line a text, so that a change of one segmentation is one line of a diff.
    rows = ",\n".join(" " + json.dumps(line, ensure_ascii=False) for line in lines)
    head = json.dumps(report["segmenter"], ensure_ascii=False)
    args.out.write_text(f'{{"segmenter": {head}, "lines": [\n{rows}\n]}}\n', encoding="utf-8")
    print(f"{args.out}: {len(lines)} lines, {sum(len(l['words']) for l in lines)} words")


if __name__ == "__main__":
    main()
