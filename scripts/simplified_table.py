#!/usr/bin/env python3
"""Write the table of Traditional characters and their Simplified forms that bert-trace names
when a model of Simplified characters reads a Traditional one as [UNK]
(``crates/bert-core/src/io/simplified.tsv``).

    PYTHON scripts/simplified_table.py

PYTHON has ``opencc`` (scripts/requirements.txt pins 1.4.2), the converter the Chinese corpus
was made with (scripts/chinese_corpus.py): each character of the CJK blocks (Unified Ideographs,
Extension A, Compatibility Ideographs) is converted alone with OpenCC's ``t2s``, and every one
that becomes another single character is a line ``TRADITIONAL<TAB>SIMPLIFIED``, in code point
order. Two runs give byte-identical files.
"""

from pathlib import Path

import opencc

OUT = Path(__file__).resolve().parent.parent / "crates" / "bert-core" / "src" / "io" / "simplified.tsv"
BLOCKS = [(0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF)]


def main():
    t2s = opencc.OpenCC("t2s")
    lines = []
    for low, high in BLOCKS:
        for code in range(low, high + 1):
            character = chr(code)
            simplified = t2s.convert(character)
            if simplified != character and len(simplified) == 1:
                lines.append(f"{character}\t{simplified}\n")
    OUT.write_text("".join(lines), encoding="utf-8")
    print(f"{OUT}: {len(lines)} characters")


if __name__ == "__main__":
    main()
