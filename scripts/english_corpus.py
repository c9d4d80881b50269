#!/usr/bin/env python3
"""Build the English pretraining corpus for the course model.

Run from anywhere, with nothing but Python 3.11's standard library:

    python3 scripts/english_corpus.py

It downloads two pinned Debian packages (checked against their sha256 and cached under
``target/corpus/english/downloads/``), reads them in memory and writes, into
``target/corpus/english/``:

- ``train.txt`` and ``heldout.txt`` in the input format of Google's
  ``create_pretraining_data.py``: one paragraph (or Bible verse) per line and a blank line
  between documents, UTF-8 (NFC);
- ``heldout-sample.txt``: the first three paragraphs of each held-out document, in the
  same format (about 6,300 words): small enough to commit beside the course model, so that
  the tests evaluate it and check its tokenizer without the corpus;
- ``SHA256SUMS`` for those three files.

Sources: Jane Austen's six novels (r-cran-janeaustenr, Project Gutenberg texts), one
document per chapter; and the World English Bible with the Deuterocanon (sword-text-web,
SWORD module engWEB2015eb), one document per chapter. Held out, as whole documents: the
last three chapters of each novel, and the books Ruth, Jonah, Philippians and 3 John.
Everything else is training data, in order: the novels alphabetically, then the Bible in
the module's order. Two runs give byte-identical files.
"""

import gzip
import hashlib
import html
import io
import re
import struct
import sys
import tarfile
import unicodedata
import urllib.request
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "target" / "corpus" / "english"
POOL = "http://deb.debian.org/debian/pool/main/"
AUSTEN_DEB = (POOL + "r/r-cran-janeaustenr/r-cran-janeaustenr_1.0.0-1_all.deb",
              "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95")
WEB_DEB = (POOL + "s/sword-text-web/sword-text-web_426.0-1_all.deb",
           "930b23670b352f0829a306501de4bebb5e654a2df02cde2cbe86b802177868e1")
AUSTEN_DIR = "usr/lib/R/site-library/janeaustenr/data/"
WEB_DIR = "usr/share/sword/modules/texts/ztext/engWEB2015eb/"
HELD_OUT_CHAPTERS = 3  # per novel, taken from the end
HELD_OUT_BOOKS = {"Ruth", "Jonah", "Phil", "3John"}


# ---------------------------------------------------------------- Debian packages

def fetch(url, sha256):
    """Return the bytes of url, from the download cache when it is there."""
    path = OUT / "downloads" / url.rsplit("/", 1)[1]
    if path.exists():
        data = path.read_bytes()
    else:
        try:
            with urllib.request.urlopen(url, timeout=120) as response:
                data = response.read()
        except OSError as error:  # URLError and timeouts are OSErrors
            sys.exit(f"cannot download {url}: {error}")
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        # A wrong file is never used or cached; the user decides what to do about it.
        where = f"cached file {path} (delete it to download again)" if path.exists() else url
        print(f"sha256 mismatch for {where}: expected {sha256}, got {actual}", file=sys.stderr)
        sys.exit(2)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write then rename, so that an interrupted run never leaves a truncated cache file.
        part = path.with_name(path.name + ".part")
        part.write_bytes(data)
        part.rename(path)
    return data


def deb_files(deb, prefix):
    """Return {path: bytes} for the files under prefix in a .deb's data.tar.*."""
    # A .deb is an `ar` archive: an 8-byte magic, then members with 60-byte headers
    # (name 16, mtime 12, uid 6, gid 6, mode 8, size 10, magic 2), padded to even sizes.
    assert deb[:8] == b"!<arch>\n", "not a Debian package"
    pos = 8
    while pos < len(deb):
        name = deb[pos:pos + 16].decode().strip().rstrip("/")
        size = int(deb[pos + 48:pos + 58])
        body = deb[pos + 60:pos + 60 + size]
        pos += 60 + size + size % 2
        if name.startswith("data.tar"):
            files = {}
            with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tar:
                for member in tar:
                    path = member.name.removeprefix("./")
                    if member.isfile() and path.startswith(prefix):
                        files[path[len(prefix):]] = tar.extractfile(member).read()
            return files
    raise ValueError("no data.tar member in the Debian package")


# ---------------------------------------------------------------- R data (Jane Austen)

class RVector(list):
    """An R vector (or list) with its attributes, such as names."""
    attrs = {}


class RReader:
    """A minimal reader for R's XDR serialisation format (versions 2 and 3).

    It knows the types that hold data sets of strings: NULL, symbols, pairlists (which carry
    attributes), character, logical, integer, double and generic vectors, and references.
    """

    def __init__(self, data):
        assert data[:2] == b"X\n", "not an XDR-serialised R object"
        self.data, self.pos, self.refs = data, 2, []
        version = self.int()
        self.pos += 8  # R versions of the writer and of the minimal reader
        if version == 3:
            self.pos += 4 + self.int()  # the native encoding's name

    def int(self):
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return value

    def read(self):
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind == 254:  # NILVALUE_SXP
            return None
        if kind == 255:  # REFSXP: an index into the symbols read so far
            return self.refs[(flags >> 8 or self.int()) - 1]
        if kind == 1:  # SYMSXP: its name is a CHARSXP
            symbol = self.read()
            self.refs.append(symbol)
            return symbol
        if kind == 2:  # LISTSXP (a pairlist), read as an ordered {tag: value}
            if has_attr:
                self.read()  # a pairlist node's own attributes are not needed here
            tag = self.read() if has_tag else None
            head = {tag: self.read()}
            tail = self.read()
            return head | (tail or {})
        if kind == 9:  # CHARSXP: length (-1 for NA), then the bytes; LATIN1 is levels bit 2
            n = self.int()
            if n == -1:
                return None
            raw = self.data[self.pos:self.pos + n]
            self.pos += n
            return raw.decode("latin-1" if flags >> 12 & 4 else "utf-8")
        if kind in (10, 13, 14, 16, 19):  # LGLSXP, INTSXP, REALSXP, STRSXP, VECSXP
            n = self.int()
            if kind in (16, 19):
                vector = RVector(self.read() for _ in range(n))
            else:
                code = "d" if kind == 14 else "i"
                vector = RVector(struct.unpack_from(f">{n}{code}", self.data, self.pos))
                self.pos += n * struct.calcsize(code)
            if has_attr:
                vector.attrs = self.read()
            return vector
        raise ValueError(f"unsupported R type {kind}")


def named(vector):
    """Return an R vector with names as a {name: element} dict."""
    return dict(zip(vector.attrs["names"], vector))


def austen_novels(files):
    """Return {name: lines} for the novels in the package's lazy-load database."""
    # Rdata.rdx is a gzip'd serialised list; its "variables" map each object's name to an
    # (offset, length) record in Rdata.rdb: a 4-byte big-endian length, then a zlib stream.
    index = named(RReader(gzip.decompress(files["Rdata.rdx"])).read())
    assert list(index["compressed"]) == [1], "only zlib-compressed databases are supported"
    rdb, novels = files["Rdata.rdb"], {}
    for name, (offset, length) in sorted(named(index["variables"]).items()):
        (size,) = struct.unpack_from(">I", rdb, offset)
        data = zlib.decompress(rdb[offset + 4:offset + length])
        assert len(data) == size, name
        novels[name] = RReader(data).read()
    return novels


CHAPTER = re.compile(r"(CHAPTER|Chapter) ([IVXLC]+|[0-9]+)")
VOLUME = re.compile(r"VOLUME [IVX]+")
THE_END = {"THE END", "FINIS", "A NOTE ON THE TEXT"}  # the last one starts an editor's note
# Scene breaks (* * *), the one footnote (Northanger Abbey's, printed after the last
# chapter) and the editors' notes on where a volume ended in other editions.
NOT_TEXT = re.compile(r"\*.*|\[.*edition.*\]")


def novel_chapters(lines):
    """Split a novel's hard-wrapped lines into chapters, each a list of paragraphs."""
    chapters, paragraph = [], []
    for line in list(lines) + [""]:
        line = (line or "").strip()
        if line.upper() in THE_END:
            break
        if CHAPTER.fullmatch(line):
            chapters.append([])
        elif VOLUME.fullmatch(line):
            pass
        elif line:
            paragraph.append(line)
            continue
        # A heading or an empty line ends the paragraph. Text before the first chapter is
        # the title page and front matter.
        text = clean(" ".join(paragraph).replace("_", ""))  # _word_ is Gutenberg's italics
        if chapters and text and not NOT_TEXT.fullmatch(text):
            chapters[-1].append(text)
        paragraph = []
    return chapters


# ---------------------------------------------------------------- SWORD zText (the Bible)

# The NRSVA versification (SWORD's canon_nrsva.h), which the module's .conf names: each
# book's OSIS id followed by its chapters' verse counts, in the module's book order.
# bible_chapters checks it against the module: the number of entries in each testament,
# and the osisID of every chapter's start marker.
NRSVA = {"ot": """
Gen 31 25 24 26 32 22 24 22 29 32 32 20 18 24 21 16 27 33 38 18 34 24 20 67 34 35 46 22 35 43 55 32
20 31 29 43 36 30 23 23 57 38 34 34 28 34 31 22 33 26 Exod 22 25 22 31 23 30 25 32 35 29 10 51 22
31 27 36 16 27 25 26 36 31 33 18 40 37 21 43 46 38 18 35 23 35 35 38 29 31 43 38 Lev 17 16 17 35 19
30 38 36 24 20 47 8 59 57 33 34 16 30 37 27 24 33 44 23 55 46 34 Num 54 34 51 49 31 27 89 26 23 36
35 16 33 45 41 50 13 32 22 29 35 41 30 25 18 65 23 31 40 16 54 42 56 29 34 13 Deut 46 37 29 49 33
25 26 20 29 22 32 32 18 29 23 22 20 22 21 20 23 30 25 22 19 19 26 68 29 20 30 52 29 12 Josh 18 24
17 24 15 27 26 35 27 43 23 24 33 15 63 10 18 28 51 9 45 34 16 33 Judg 36 23 31 24 31 40 25 35 57 18
40 15 25 20 20 31 13 31 30 48 25 Ruth 22 23 18 22 1Sam 28 36 21 22 12 21 17 22 27 27 15 25 23 52 35
23 58 30 24 42 15 23 29 22 44 25 12 25 11 31 13 2Sam 27 32 39 12 25 23 29 18 13 19 27 31 39 33 37
23 29 33 43 26 22 51 39 25 1Kgs 53 46 28 34 18 38 51 66 28 29 43 33 34 31 34 34 24 46 21 43 29 53
2Kgs 18 25 27 44 27 33 20 29 37 36 21 21 25 29 38 20 41 37 37 21 26 20 37 20 30 1Chr 54 55 24 43 26
81 40 40 44 14 47 40 14 17 29 43 27 17 19 8 30 19 32 31 31 32 34 21 30 2Chr 17 18 17 22 14 42 22 18
31 19 23 16 22 15 19 14 19 34 11 37 20 12 21 27 28 23 9 27 36 27 21 33 25 33 27 23 Ezra 11 70 13 24
17 22 28 36 15 44 Neh 11 20 32 23 19 19 73 18 38 39 36 47 31 Esth 22 23 15 17 14 14 10 17 32 3 Job
22 13 26 21 27 30 21 22 35 22 20 25 28 22 35 22 16 21 29 29 34 30 17 25 6 14 23 28 25 31 40 22 33
37 16 33 24 41 30 24 34 17 Ps 6 12 8 8 12 10 17 9 20 18 7 8 6 7 5 11 15 50 14 9 13 31 6 10 22 12 14
9 11 12 24 11 22 22 28 12 40 22 13 17 13 11 5 26 17 11 9 14 20 23 19 9 6 7 23 13 11 11 17 12 8 12
11 10 13 20 7 35 36 5 24 20 28 23 10 12 20 72 13 19 16 8 18 12 13 17 7 18 52 17 16 15 5 23 11 13 12
9 9 5 8 28 22 35 45 48 43 13 31 7 10 10 9 8 18 19 2 29 176 7 8 9 4 8 5 6 5 6 8 8 3 18 3 3 21 26 9 8
24 13 10 7 12 15 21 10 20 14 9 6 Prov 33 22 35 27 23 35 27 36 18 32 31 28 25 35 33 33 28 24 29 30
31 29 35 34 28 28 27 28 27 33 31 Eccl 18 26 22 16 20 12 29 17 18 20 10 14 Song 17 17 11 16 16 13 13
14 Isa 31 22 26 6 30 13 25 22 21 34 16 6 22 32 9 14 14 7 25 6 17 25 18 23 12 21 13 29 24 33 9 20 24
17 10 22 38 22 8 31 29 25 28 28 25 13 15 22 26 11 23 15 12 17 13 12 21 14 21 22 11 12 19 12 25 24
Jer 19 37 25 31 31 30 34 22 26 25 23 17 27 22 21 21 27 23 15 18 14 30 40 10 38 24 22 17 32 24 40 44
26 22 19 32 21 28 18 16 18 22 13 30 5 28 7 47 39 46 64 34 Lam 22 22 66 22 22 Ezek 28 10 27 17 17 14
27 18 11 22 25 28 23 23 8 63 24 32 14 49 32 31 49 27 17 21 36 26 21 26 18 32 33 31 15 38 28 23 29
49 26 20 27 31 25 24 23 35 Dan 21 49 30 37 31 28 28 27 27 21 45 13 Hos 11 23 5 19 15 11 16 14 17 15
12 14 16 9 Joel 20 32 21 Amos 15 16 15 13 27 14 17 14 15 Obad 21 Jonah 17 10 10 11 Mic 16 13 12 13
15 16 20 Nah 15 13 19 Hab 17 20 19 Zeph 18 15 20 Hag 15 23 Zech 21 13 10 14 11 15 14 23 17 12 17 14
9 21 Mal 14 17 18 6 Tob 22 14 17 21 22 18 16 21 6 13 18 22 17 15 Jdt 16 28 10 15 24 21 32 36 14 23
23 20 20 19 14 25 EsthGr 22 23 15 17 14 14 10 17 32 13 12 6 18 19 16 24 Wis 16 24 19 20 23 25 30 21
18 21 26 27 19 31 19 29 21 25 22 Sir 30 18 31 31 15 37 36 19 18 31 34 18 26 27 20 30 32 33 30 31 28
27 27 34 26 29 30 26 28 25 31 24 33 31 26 31 31 34 35 30 22 25 33 23 26 20 25 25 16 29 30 Bar 22 35
37 37 9 73 PrAzar 68 Sus 64 Bel 42 1Macc 64 70 60 61 68 63 50 32 73 89 74 53 53 49 41 24 2Macc 36
32 40 50 27 31 42 36 29 38 38 45 26 46 39 1Esd 58 30 24 63 73 34 15 96 55 PrMan 15 AddPs 7 3Macc 29
33 30 21 51 41 23 2Esd 40 48 36 52 56 59 140 63 47 59 46 51 58 48 63 78 4Macc 35 24 21 26 38 35 23
29 32 21 27 19 27 20 32 25 24 24
""", "nt": """
Matt 25 23 17 25 48 34 29 34 38 42 30 50 58 36 39 28 27 35 30 34 46 46 39 51 46 75 66 20 Mark 45 28
35 41 43 56 37 38 50 52 33 44 37 72 47 20 Luke 80 52 38 44 39 49 50 56 62 42 54 59 35 35 32 31 37
43 48 47 38 71 56 53 John 51 25 36 54 47 71 53 59 41 42 57 50 38 31 27 33 26 40 42 31 25 Acts 26 47
26 37 42 15 60 40 43 48 30 25 52 28 41 40 34 28 41 38 40 30 35 27 27 32 44 31 Rom 32 29 31 25 21 23
25 39 33 21 36 21 14 23 33 27 1Cor 31 16 23 21 13 20 40 13 27 33 34 31 13 40 58 24 2Cor 24 17 18 18
21 18 16 24 15 18 33 21 14 Gal 24 21 29 31 26 18 Eph 23 22 21 32 33 24 Phil 30 30 21 23 Col 29 23
25 18 1Thess 10 20 13 18 28 2Thess 12 17 18 1Tim 20 15 16 16 25 21 2Tim 18 26 17 22 Titus 16 15 15
Phlm 25 Heb 14 18 19 16 14 20 28 13 28 39 40 29 25 Jas 27 26 18 17 20 1Pet 25 25 22 19 14 2Pet 21
22 18 1John 10 29 24 21 21 2John 13 3John 15 Jude 25 Rev 20 29 22 11 14 17 17 13 21 11 19 18 18 20
8 21 18 24 21 15 27 21
"""}


def versification(table):
    """Parse a testament's table into [(book, [verses in chapter 1, ...]), ...]."""
    books = []
    for token in table.split():
        if token.isdigit():
            books[-1][1].append(int(token))
        else:
            books.append((token, []))
    return books


def sword_entries(files, testament):
    """Return a testament's entries (OSIS XML strings) in versification order."""
    bzs, bzz, bzv = (files[f"{testament}.{ext}"] for ext in ("bzs", "bzz", "bzv"))
    blocks = []
    for offset, size, usize in struct.iter_unpack("<III", bzs):
        block = zlib.decompress(bzz[offset:offset + size]) if size else b""
        assert len(block) == usize
        blocks.append(block)
    return [blocks[block][start:start + size].decode("utf-8")
            for block, start, size in struct.iter_unpack("<IIH", bzv)]


# Notes and the red-letter <q> elements sometimes stand between two words or quotations
# with no space around them ("God<note/>created", "me.”</q><w>Then"); a GAP marks where
# they were, and becomes a space where the text on both sides needs one.
GAP = "\x00"
SPACED_GAP = re.compile(rf"(?<=[\w.,;:!?”’)]){GAP}+(?=[\w“‘(])")


def osis_text(osis):
    """Return the plain text of an OSIS fragment: words only, no notes, titles or labels."""
    # The last verse of a book can run on into back matter (the glossary after Rev 22:21)
    # after the book's end marker; keep only what precedes it.
    osis = re.split(r'<div\b[^>]*\btype="book"', osis)[0]
    osis = re.sub(r"<note\b.*?</note>|</?q\b[^>]*>", GAP, osis, flags=re.S)
    osis = re.sub(r"<(title|speaker)\b.*?</\1>", "", osis, flags=re.S)
    text = html.unescape(re.sub(r"<[^>]*>", "", osis))
    return clean(SPACED_GAP.sub(" ", text).replace(GAP, ""))


def bible_chapters(files):
    """Return [(book, chapter, [verse text, ...]), ...] for the whole module, in order."""
    # SWORD's layout per testament: entry 0 is empty, 1 is the testament's heading, then
    # each book has an introduction entry and each chapter an introduction entry followed
    # by its verses. Book introductions hold front matter (the preface before Genesis, and
    # a stray "Daniel with Greek portions" before Hosea); chapter ones hold headings.
    chapters = []
    for testament in ("ot", "nt"):
        entries, i = sword_entries(files, testament), 2
        books = versification(NRSVA[testament])
        assert len(entries) == 2 + sum(1 + len(v) + sum(v) for _, v in books), testament
        for book, verse_counts in books:
            i += 1  # the book's introduction
            for chapter, count in enumerate(verse_counts, 1):
                intro, verses = entries[i], entries[i + 1:i + 1 + count]
                i += 1 + count
                start = re.search(r"<chapter\b[^>]*\bsID=\"([^\"]+)\"", intro)
                # Verify the versification table against the chapter markers.
                assert not start or start[1] == f"{book}.{chapter}", (start[1], book, chapter)
                # Text before a chapter's start marker belongs to the previous chapter (the
                # module has some in Greek Esther); keep it as the last line of that chapter.
                # Before a book's first chapter there are only the book's titles.
                tail = osis_text(intro[:start.start()] if start else intro)
                if tail and chapter > 1:
                    chapters[-1][2].append(tail)
                chapters.append((book, chapter, [t for t in map(osis_text, verses) if t]))
    return [c for c in chapters if c[2]]  # some books are empty in this module (Susanna, Bel)


# ---------------------------------------------------------------- output

def clean(text):
    """NFC, control characters replaced by spaces, whitespace collapsed."""
    text = unicodedata.normalize("NFC", text)
    text = "".join(" " if unicodedata.category(c) == "Cc" else c for c in text)
    return " ".join(text.split())


# The paragraphs of each held-out document that heldout-sample.txt keeps.
SAMPLE_PARAGRAPHS = 3


def write(path, documents):
    """Write documents (lists of lines), a blank line between them; return stats."""
    text = "\n\n".join("\n".join(doc) for doc in documents) + "\n"
    data = text.encode("utf-8")
    path.write_bytes(data)
    lines = sum(len(doc) for doc in documents)
    return len(text.split()), lines, len(documents), hashlib.sha256(data).hexdigest()


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    austen = deb_files(fetch(*AUSTEN_DEB), AUSTEN_DIR)
    web = deb_files(fetch(*WEB_DEB), WEB_DIR)
    train, heldout = [], []
    austen_words = web_words = 0
    for name, lines in austen_novels(austen).items():  # alphabetical
        chapters = novel_chapters(lines)
        train += chapters[:-HELD_OUT_CHAPTERS]
        heldout += chapters[-HELD_OUT_CHAPTERS:]
        austen_words += sum(len(p.split()) for c in chapters for p in c)
        print(f"{name}: {len(chapters)} chapters")
    for book, _, verses in bible_chapters(web):
        (heldout if book in HELD_OUT_BOOKS else train).append(verses)
        web_words += sum(len(v.split()) for v in verses)
    print(f"words: Austen {austen_words}, World English Bible {web_words}")
    sums = []
    sample = [doc[:SAMPLE_PARAGRAPHS] for doc in heldout]
    for name, documents in (("train.txt", train), ("heldout.txt", heldout), ("heldout-sample.txt", sample)):
        words, lines, docs, digest = write(OUT / name, documents)
        print(f"{name}: {words} words, {lines} lines, {docs} documents")
        sums.append(f"{digest}  {name}\n")
    (OUT / "SHA256SUMS").write_text("".join(sums))
    print("".join(sums), end="")


if __name__ == "__main__":
    main()
