#!/usr/bin/env python3
"""The simulated precisions' cost (issue 55; a benchmark, not a test: results and commands in
BENCHMARKS.md).

    python scripts/bench_precision.py --model DIR [--bert-trace target/release/bert-trace]
        [--before OLD_BINARY] [--words 126] [--rounds 10] [--threads 2]

Each round runs, each a new process, `bert-trace --model DIR --no-dump TEXT` in float32, with
`--precision bf16`, `--precision f16` and `--weights int8`, and with `--before`'s binary (a build
without the simulation) in float32, in turn; TEXT is WORDS words of "the quick brown fox jumps
over the lazy dog" repeated (128 tokens with [CLS] and [SEP] for 126). The table gives each
one's median over the rounds, in ms, and its ratio to this build's float32 run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - started) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--bert-trace", default="target/release/bert-trace")
    parser.add_argument("--before", help="a bert-trace binary built before the simulation, run in float32")
    parser.add_argument("--words", type=int, default=126)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    env = dict(os.environ, BERT_TRACE_THREADS=str(args.threads))
    words = "the quick brown fox jumps over the lazy dog".split()
    text = " ".join(words[i % len(words)] for i in range(args.words))
    base = ["--model", args.model, "--no-dump", text]
    runs = {
        "f32": [args.bert_trace, *base],
        "bf16": [args.bert_trace, *base, "--precision", "bf16"],
        "f16": [args.bert_trace, *base, "--precision", "f16"],
        "int8 weights": [args.bert_trace, *base, "--weights", "int8"],
    }
    if args.before:
        runs["f32, before"] = [args.before, *base]
    for command in runs.values():
        timed(command, env)  # the checkpoint into the page cache, and each binary
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, command in runs.items():
            times[name].append(timed(command, env))
    f32 = statistics.median(times["f32"])
    print(f"{'run':14} {'median ms':>10} {'/ f32':>7}")
    for name, measured in times.items():
        median = statistics.median(measured)
        print(f"{name:14} {median:10.0f} {median / f32:7.2f}")


if __name__ == "__main__":
    main()
