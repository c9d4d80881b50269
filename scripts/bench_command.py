#!/usr/bin/env python3
"""The whole `bert-trace` command against its floor, each a new process, in alternating rounds
(issue 40; a benchmark, not a test: results and commands in BENCHMARKS.md).

    python scripts/bench_command.py --model DIR [--bert-trace target/release/bert-trace]
        [--bench target/release/examples/bench] [--words 10,126,510] [--rounds 10] [--threads 2]

The floor is the bench example's `floor`: a process that maps DIR/model.safetensors, reads every
byte of it once with THREADS threads, and exits; no run of the command can take less. The
command is `bert-trace --model DIR --no-dump TEXT`, TEXT WORDS words of "the quick brown fox jumps
over the lazy dog" repeated (12, 128 and 512 tokens with [CLS] and [SEP]). The checkpoint is in
the page cache (a run of each before the rounds). Each round runs the floor and each size once,
in turn; the table gives each one's median over the rounds, in ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - started) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--bert-trace", default="target/release/bert-trace")
    parser.add_argument("--bench", default="target/release/examples/bench")
    parser.add_argument("--words", default="10,126,510")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    env = dict(os.environ, BERT_TRACE_THREADS=str(args.threads))
    words = "the quick brown fox jumps over the lazy dog".split()
    runs = {"floor": [args.bench, "floor", "--model", args.model]}
    for count in [int(w) for w in args.words.split(",")]:
        text = " ".join(words[i % len(words)] for i in range(count))
        runs[f"{count + 2} tokens"] = [args.bert_trace, "--model", args.model, "--no-dump", text]
    times: dict[str, list[float]] = {name: [] for name in runs}
    for command in runs.values():
        timed(command, env)
    for _ in range(args.rounds):
        for name, command in runs.items():
            times[name].append(timed(command, env))
    floor = statistics.median(times["floor"])
    print(f"{'run':>12}  {'median ms':>10}  {'/ floor':>8}   per round")
    for name, values in times.items():
        median = statistics.median(values)
        rounds = " ".join(f"{v:.1f}" for v in values)
        print(f"{name:>12}  {median:10.1f}  {median / floor:8.2f}   {rounds}")


if __name__ == "__main__":
    main()
