#!/usr/bin/env python3
"""Build the Chinese pretraining corpus for the course's Chinese model (golden/chinese-small).

    PYTHON scripts/chinese_corpus.py

PYTHON has `opencc` (scripts/requirements.txt pins it). The script fetches the npm package
chinese-poetry 2.0.1 with `npm pack` (checked against its pinned sha256, cached under
``target/corpus/chinese/downloads/``), reads it in memory and writes, into
``target/corpus/chinese/``:

- ``train.txt`` and ``heldout.txt`` in the input format of Google's
  ``create_pretraining_data.py``: one poem or passage a line, a blank line between documents
  (a document is one author's poems in one collection, at most 20 of them, or one chapter of
  a classic), in Simplified characters (OpenCC's ``t2s``);
- ``recited.txt``, the text of the recipe's third phase, in the same format: the anthologies
  (twice over) and the classics a reader learns by heart (诗经, 楚辞, 论语, 大学, 中庸, 三字经,
  千字文, 弟子规), the training poems of ``train.txt`` that a reader recites;
- ``heldout-sample.txt``: the first poem of each of the first held-out documents, small
  enough to commit beside the model, so that the tests check its tokenizer without the corpus;
- ``SHA256SUMS`` for those four files.

What is taken, in this order (the first copy of a poem is the one kept):

1. the anthologies: 唐诗三百首, 千家诗, 宋词三百首, 水墨唐诗, 曹操诗集, 纳兰性德诗集, 花间集,
   南唐二主词;
2. the classics: 论语, 大学, 中庸, 孟子, 诗经, 楚辞, 古文观止, 三字经, 千字文, 弟子规, 增广贤文,
   幼学琼林, 声律启蒙, 朱子家训;
3. 全宋词 (songci/ci.song.*.json);
4. 全唐诗 (quantangshi/poet.tang.*.json), for held-out poems only.

The training text is the anthologies (four times over: they are what a reader reads again and
again, and what the course asks the model to complete), the classics and 全宋词: about 2.3M
characters, which golden/chinese-small's first two phases (2,000 steps of 64 sequences of at
most 64 characters, then 300 of 32 of at most 128) read about three times; its third phase
reads ``recited.txt`` (0.3M characters) about 34 times. Left out of training, for the budget:
全唐诗 (3.1M characters after cleaning), 全宋诗 (15M) and 元曲.

Cleaning: editors' notes in brackets ((一作…), [注]) are removed, as is whitespace inside a line;
a poem with a missing character (□) or a Latin letter is dropped. Duplicates and near
duplicates are dropped: a poem is split into clauses at its punctuation, and a poem half of
whose clauses of four or more characters were already seen is a variant of an earlier one
(全唐诗's 床前看月光 beside the anthologies' 床前明月光).

Held out, whole: every poem of the 全唐诗 and 全宋词 groups (author and title; for a ci, author
and tune) whose sha256 falls in the first 2%, unless the group shares a clause with the
anthologies or the classics (the famous lines stay in training). Then every training poem that
shares a clause of five or more characters with a held-out poem is dropped, so that no variant
of a held-out poem is trained on. Two runs give byte-identical files.
"""

import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import opencc

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "target" / "corpus" / "chinese"
PACKAGE = "chinese-poetry@2.0.1"
TARBALL = "chinese-poetry-2.0.1.tgz"
SHA256 = "25b549e46919c3a0569db6b68ddc96956b04a484ea4518ad2bbd4f137e307e86"
DIST = "package/dist/"
ANTHOLOGIES = [
    "mengxue/tangshisanbaishou.json", "mengxue/qianjiashi.json", "songci/宋词三百首.json",
    "shuimotangshi/shuimotangshi.json", "caocaoshiji/caocao.json", "nalanxingde/纳兰性德诗集.json",
    "wudaishici/huajianji/*", "wudaishici/nantang/poetrys.json",
]
CLASSICS = [
    "lunyu/lunyu.json", "sishuwujing/daxue.json", "sishuwujing/zhongyong.json",
    "sishuwujing/mengzi.json", "shijing/shijing.json", "chuci/chuci.json",
    "mengxue/guwenguanzhi.json", "mengxue/sanzijing-new.json", "mengxue/qianziwen.json",
    "mengxue/dizigui.json", "mengxue/zengguangxianwen.json", "mengxue/youxueqionglin.json",
    "mengxue/shenglvqimeng.json", "mengxue/zhuzijiaxun.json",
]
# The classics a reader learns by heart: the two roots of Chinese poetry and the short texts
# schoolchildren recite. With the anthologies (twice over, as train.txt has them four times)
# they are phase 3's text (recited.txt).
RECITED_ANTHOLOGY_REPEATS = 2
RECITED_CLASSICS = [
    "shijing/shijing.json", "chuci/chuci.json", "lunyu/lunyu.json", "sishuwujing/daxue.json",
    "sishuwujing/zhongyong.json", "mengxue/sanzijing-new.json", "mengxue/qianziwen.json",
    "mengxue/dizigui.json",
]
CI = "songci/ci.song.*.json"
TANG = "quantangshi/poet.tang.*.json"
HELD_OUT_PERCENT = 2
ANTHOLOGY_REPEATS = 4
POEMS_PER_DOCUMENT = 20
SAMPLE_DOCUMENTS = 300
BODY_KEYS = ("paragraphs", "para", "content")
NOTE = re.compile(r"（[^（）]*）|\([^()]*\)|\[[^\[\]]*\]|【[^【】]*】|〔[^〔〕]*〕")
CLAUSE = re.compile(r"[，。！？；：、,.!?;:“”‘’「」『』《》〈〉—…·\s]+")
T2S = opencc.OpenCC("t2s")


def fetch():
    """The package's tarball, from the download cache when it is there."""
    path = OUT / "downloads" / TARBALL
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "pack", PACKAGE, "--silent", "--pack-destination", str(path.parent)],
                       check=True, stdout=subprocess.DEVNULL)
    data = path.read_bytes()
    found = hashlib.sha256(data).hexdigest()
    if found != SHA256:
        sys.exit(f"error: {path}: sha256 {found}, expected {SHA256}")
    return data


def members(tar, pattern):
    """The JSON files of the package matching pattern (a `*` stands for any name part), in
    numeric order of the number in their names, so that 1000 comes after 900."""
    regex = re.compile("^" + re.escape(DIST + pattern).replace(r"\*", "[^/]*") + "$")
    names = [m for m in tar.getnames() if regex.match(m) and m.endswith(".json")]

    def key(name):
        number = re.findall(r"\d+", name.rsplit("/", 1)[1])
        return (int(number[0]) if number else -1, name)
    return sorted(names, key=key)


def items(node, author="", title=""):
    """Each poem or passage under node: (author, title, paragraphs). A dict whose body is a
    list of strings is one item; other dicts and lists are walked, handing their author and
    title down."""
    if isinstance(node, dict):
        author = node.get("author") or author
        title = node.get("title") or node.get("rhythmic") or node.get("chapter") or title
        for key in BODY_KEYS:
            body = node.get(key)
            if isinstance(body, list) and body and all(isinstance(p, str) for p in body):
                yield author, title, body
                return
        for key, value in node.items():
            if key not in ("notes", "abstract", "prologue", "preface"):
                yield from items(value, author, title)
    elif isinstance(node, list):
        for value in node:
            yield from items(value, author, title)


def clean(text):
    """Simplified characters, editors' notes and whitespace removed."""
    text = T2S.convert(text)
    while True:
        stripped = NOTE.sub("", text)
        if stripped == text:
            break
        text = stripped
    return re.sub(r"\s+", "", text)


def clauses(text, least):
    return [c for c in CLAUSE.split(text) if len(c) >= least]


class Poem:
    def __init__(self, source, author, title, text, kind):
        self.source, self.author, self.title, self.text, self.kind = source, author, title, text, kind


def read(tar, patterns, kind, per_paragraph):
    """The poems (or, with per_paragraph, the passages) of the files matching patterns."""
    out = []
    for pattern in patterns:
        for name in members(tar, pattern):
            data = json.loads(tar.extractfile(name).read())
            for author, title, body in items(data):
                author, title = clean(author), clean(title)
                texts = [clean(p) for p in body] if per_paragraph else [clean("".join(body))]
                for text in texts:
                    if not text or "□" in text or re.search(r"[A-Za-z]", text):
                        continue
                    out.append(Poem(name, author, title, text, kind))
    return out


def deduplicate(poems):
    """The poems that are not a copy or a variant of an earlier one."""
    seen, bodies, kept = set(), set(), []
    for poem in poems:
        parts = clauses(poem.text, 4)
        if poem.text in bodies:
            continue
        if parts and 2 * sum(part in seen for part in parts) >= len(parts):
            continue
        bodies.add(poem.text)
        seen.update(parts)
        kept.append(poem)
    return kept


def documents(poems):
    """Consecutive poems of one source and author (at most POEMS_PER_DOCUMENT), or one
    chapter of a classic, as documents."""
    docs = []
    for poem in poems:
        key = (poem.source, poem.author, poem.title if poem.kind == "classic" else "")
        if docs and docs[-1][0] == key and (poem.kind == "classic" or len(docs[-1][1]) < POEMS_PER_DOCUMENT):
            docs[-1][1].append(poem.text)
        else:
            docs.append((key, [poem.text]))
    return [lines for _, lines in docs]


def write(path, docs):
    text = "\n\n".join("\n".join(lines) for lines in docs) + "\n"
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    tar = tarfile.open(fileobj=io.BytesIO(fetch()), mode="r:gz")
    poems = (read(tar, ANTHOLOGIES, "anthology", False) + read(tar, CLASSICS, "classic", True)
             + read(tar, [CI], "ci", False) + read(tar, [TANG], "tang", False))
    poems = deduplicate(poems)
    famous = {c for p in poems if p.kind in ("anthology", "classic") for c in clauses(p.text, 4)}

    def group(poem):
        return hashlib.sha256(f"{poem.kind}\t{poem.author}\t{poem.title}".encode()).digest()

    chosen = {group(p) for p in poems
              if p.kind in ("ci", "tang") and int.from_bytes(group(p)[:4], "big") % 100 < HELD_OUT_PERCENT}
    # A group with a famous clause anywhere stays in training whole.
    for p in poems:
        if group(p) in chosen and any(c in famous for c in clauses(p.text, 4)):
            chosen.discard(group(p))
    held = [p for p in poems if group(p) in chosen]
    held_clauses = {c for p in held for c in clauses(p.text, 5)}
    train = [p for p in poems if p.kind != "tang" and group(p) not in chosen
             and not any(c in held_clauses for c in clauses(p.text, 5))]
    dropped = sum(1 for p in poems if p.kind != "tang" and group(p) not in chosen) - len(train)
    anthologies = documents([p for p in train if p.kind == "anthology"])
    train_docs = anthologies * (ANTHOLOGY_REPEATS - 1) + documents(train)

    recited = anthologies * (RECITED_ANTHOLOGY_REPEATS - 1) + documents(
        [p for p in train if p.kind == "anthology"
         or (p.kind == "classic" and p.source.removeprefix(DIST) in RECITED_CLASSICS)])

    held_docs = documents(held)
    sums = {
        "train.txt": write(OUT / "train.txt", train_docs),
        "recited.txt": write(OUT / "recited.txt", recited),
        "heldout.txt": write(OUT / "heldout.txt", held_docs),
        "heldout-sample.txt": write(OUT / "heldout-sample.txt", [d[:1] for d in held_docs[:SAMPLE_DOCUMENTS]]),
    }
    (OUT / "SHA256SUMS").write_text("".join(f"{s}  {n}\n" for n, s in sums.items()))
    print(f"recited: {sum(len(d) for d in recited):,} poems and passages, "
          f"{sum(len(t) for d in recited for t in d):,} characters", file=sys.stderr)
    for name, part in (("train", train), ("heldout", held)):
        kinds = {}
        for p in part:
            kinds.setdefault(p.kind, [0, 0])
            kinds[p.kind][0] += 1
            kinds[p.kind][1] += len(p.text)
        print(f"{name} (each once): " + ", ".join(f"{k} {n:,} poems {c:,} characters" for k, (n, c) in kinds.items()),
              file=sys.stderr)
    print(f"dropped from training for sharing a clause with a held-out poem: {dropped}", file=sys.stderr)


if __name__ == "__main__":
    main()
