#!/usr/bin/env python3
"""How close is bert-trace's float32 to the exact result, against PyTorch's float32?
(issue 40; a benchmark, not a test: its results and commands are in BENCHMARKS.md.)

    python scripts/accuracy.py --model DIR --work DIR [--bert-trace BIN] [--kernels fast|reference]
        [--sizes 12,128,512] [--texts 3]

For each size (tokens, [CLS] and [SEP] included) and each of `--texts` texts of that length
(words of walkthrough/texts/reviews.tsv, each text starting at another review), it makes three
dumps of the same input: transformers in float64 (the truth: `dump_reference.py --dtype
float64`), transformers in float32 (`dump_reference.py`), and bert-trace's trace. Then, per
float stage the three share, it prints

    ours = max |bert-trace - truth|,  theirs = max |PyTorch - truth|,  ours / theirs,

and counts the stages where ours > theirs + one float32 ulp of the stage's largest |truth|
(the issue's target: none). The dumps are kept in --work; a dump already there is reused.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def words() -> list[str]:
    out = []
    with open(os.path.join(ROOT, "walkthrough/texts/reviews.tsv"), encoding="utf-8") as f:
        for line in f:
            out.append(line.rstrip("\n").split("\t")[-1])
    return out


def text_of(tokenizer, reviews: list[str], start: int, tokens: int) -> str:
    """Whole reviews from `start` on, then words, until the text is `tokens` tokens long."""
    pieces: list[str] = []
    i = start
    while True:
        for word in reviews[i % len(reviews)].split():
            candidate = " ".join(pieces + [word])
            if len(tokenizer(candidate)["input_ids"]) > tokens:
                return " ".join(pieces)
            pieces.append(word)
        i += 1


def stages(dump: str) -> dict[str, dict]:
    with open(os.path.join(dump, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    return {s["name"]: s for s in manifest["stages"] if s["dtype"].startswith("float")}


def load(dump: str, entry: dict) -> np.ndarray:
    return np.load(os.path.join(dump, entry["file"])).astype(np.float64)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--bert-trace", default=os.path.join(ROOT, "target/release/bert-trace"))
    ap.add_argument("--kernels", default="fast")
    ap.add_argument("--sizes", default="12,128,512")
    ap.add_argument("--texts", type=int, default=3)
    ap.add_argument("--only-ours", action="store_true", help="remake only bert-trace's dumps")
    args = ap.parse_args()

    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    reviews = words()
    python = sys.executable
    total = behind = 0
    ratios = []
    worst = (0.0, "")
    for size in [int(s) for s in args.sizes.split(",")]:
        for t in range(args.texts):
            text = text_of(tokenizer, reviews, 37 * t + size, size)
            case = os.path.join(args.work, f"{size}-{t}")
            os.makedirs(case, exist_ok=True)
            dumps = {name: os.path.join(case, name) for name in ("truth", "ref", f"trace-{args.kernels}")}
            for name, dtype in (("truth", "float64"), ("ref", "float32")):
                if not os.path.exists(os.path.join(dumps[name], "manifest.json")):
                    subprocess.run([python, os.path.join(ROOT, "scripts/dump_reference.py"), "--model", args.model,
                                    "--out", dumps[name], "--dtype", dtype, text], check=True,
                                   stderr=subprocess.DEVNULL)
            trace = dumps[f"trace-{args.kernels}"]
            if args.only_ours or not os.path.exists(os.path.join(trace, "manifest.json")):
                subprocess.run([args.bert_trace, "--model", args.model, "--out", trace, "--kernels", args.kernels,
                                "--threads", "2", text], check=True, stdout=subprocess.DEVNULL)
            truth, ref, ours = stages(dumps["truth"]), stages(dumps["ref"]), stages(trace)
            n_tokens = len(tokenizer(text)["input_ids"])
            case_behind = []
            for name in truth:
                if name not in ref or name not in ours:
                    continue
                exact = load(dumps["truth"], truth[name])
                theirs = np.abs(load(dumps["ref"], ref[name]) - exact).max()
                mine = np.abs(load(trace, ours[name]) - exact).max()
                ulp = float(np.spacing(np.float32(np.abs(exact).max())))
                total += 1
                ratios.append(mine / theirs if theirs > 0 else (1.0 if mine == 0 else np.inf))
                if mine > theirs + ulp:
                    behind += 1
                    case_behind.append((mine / max(theirs, 1e-30), name, mine, theirs))
                    worst = max(worst, (mine / max(theirs, 1e-30), f"{name} at {size} tokens: {mine:.2e} against {theirs:.2e}"))
            case_behind.sort(reverse=True)
            shown = ", ".join(f"{n} {m:.1e}/{r:.1e}" for _, n, m, r in case_behind[:4])
            print(f"{size:4d} tokens (text {t}, {n_tokens} tokens): {len(case_behind)} of {len(truth)} stages behind PyTorch"
                  f"{': ' + shown if shown else ''}")
    ratios = np.array(ratios)
    print(f"\n{args.kernels} kernels: {behind} of {total} stages farther from the truth than PyTorch by more than one "
          f"float32 ulp; ours / PyTorch's error: median {np.median(ratios):.2f}, largest {ratios.max():.2f}")
    if worst[1]:
        print(f"farthest behind: {worst[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
