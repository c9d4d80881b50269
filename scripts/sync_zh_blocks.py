"""Brings the Chinese course's fenced blocks up to the English ones, after the English changed.

    python3 scripts/sync_zh_blocks.py [CHAPTER.md ...]

Every fenced block of a zh chapter (commands, outputs, Python, excerpts) must be the English
chapter's, byte for byte and in the same order (crates/bert-trace/tests/all/translation.rs): the
English blocks are the ones the tests execute. This replaces each zh chapter's blocks, in order,
with the English chapter's, and records the English chapter's sha256 in the zh chapter's first
line. The prose is left alone: a zh chapter whose count of blocks differs from the English one
is refused, naming it, since its prose must be brought up to date by hand first.
"""

import hashlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WALKTHROUGH = os.path.join(ROOT, "walkthrough")


def blocks(lines):
    """The fenced blocks of `lines`: (first line index, last line index) of each, fences included."""
    found, start = [], None
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            if start is None:
                start = i
            else:
                found.append((start, i))
                start = None
    return found


def sync(name: str) -> bool:
    english_path = os.path.join(WALKTHROUGH, name)
    zh_path = os.path.join(WALKTHROUGH, "zh", name)
    with open(english_path, encoding="utf-8") as f:
        english_text = f.read()
    with open(zh_path, encoding="utf-8") as f:
        zh_lines = f.read().split("\n")
    english_lines = english_text.split("\n")
    theirs, ours = blocks(english_lines), blocks(zh_lines)
    if len(theirs) != len(ours):
        print(f"error: walkthrough/zh/{name}: {len(ours)} fenced blocks, the English has {len(theirs)}: "
              "bring its prose up to date first", file=sys.stderr)
        return False
    # From the last to the first, so that the earlier blocks' line numbers hold.
    for (e_start, e_end), (z_start, z_end) in reversed(list(zip(theirs, ours))):
        zh_lines[z_start:z_end + 1] = english_lines[e_start:e_end + 1]
    digest = hashlib.sha256(english_text.encode("utf-8")).hexdigest()
    zh_lines[0] = f"<!-- translation-of: ../{name} sha256:{digest} -->"
    with open(zh_path, "w", encoding="utf-8") as f:
        f.write("\n".join(zh_lines))
    return True


def main() -> int:
    names = sys.argv[1:] or sorted(n for n in os.listdir(WALKTHROUGH) if n.endswith(".md"))
    ok = all([sync(os.path.basename(n)) for n in names])
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
