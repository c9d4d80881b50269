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

    python scripts/bench_command.py --model DIR --pytorch [--batch 1] [--words 126,510] ...

With --pytorch, each round also times PyTorch's forward alone on the same token ids, in this
(warm) process, right after each command: transformers' BertForPreTraining (the MLM and NSP
logits, as the command computes them; DIR must have both heads, which
`scripts/make_bench_model.py --pretraining` gives), eager attention, float32, eval mode, torch.inference_mode(),
torch.set_num_threads(THREADS); the median of three forwards per round. The table then gives each
command against it (issue 40's "whole command" target). With --batch N the command gets N copies
of the text, a batch of N sequences, and PyTorch the same [N, T] ids.
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
    parser.add_argument("--pytorch", action="store_true", help="also time PyTorch's forward, in process")
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    if args.batch < 1:
        parser.error(f"--batch {args.batch}: must be at least 1")
    if any(not 0 <= int(w) <= 510 for w in args.words.split(",")):
        parser.error(f"--words {args.words}: each must be 0 to 510 (512 tokens with [CLS] and [SEP])")
    if args.pytorch and not has_pretraining_heads(args.model):
        parser.error(f"--pytorch: {args.model} has no MLM and NSP heads (cls.*), which the command would then "
                     "skip and BertForPreTraining would add at random; make one with make_bench_model.py --pretraining")
    env = dict(os.environ, BERT_TRACE_THREADS=str(args.threads))
    words = "the quick brown fox jumps over the lazy dog".split()
    runs = {"floor": [args.bench, "floor", "--model", args.model]}
    texts = {}
    for count in [int(w) for w in args.words.split(",")]:
        text = " ".join(words[i % len(words)] for i in range(count))
        name = f"{count + 2} tokens" if args.batch == 1 else f"{args.batch} x {count + 2} tokens"
        runs[name] = [args.bert_trace, "--model", args.model, "--no-dump", *([text] * args.batch)]
        texts[name] = text
    forward = pytorch_forward(args, texts) if args.pytorch else {}
    times: dict[str, list[float]] = {name: [] for name in runs}
    theirs: dict[str, list[float]] = {name: [] for name in forward}
    for command in runs.values():
        timed(command, env)
    for _ in range(args.rounds):
        for name, command in runs.items():
            times[name].append(timed(command, env))
            if name in forward:
                theirs[name].append(statistics.median(forward[name]() for _ in range(3)))
    floor = statistics.median(times["floor"])
    print(f"{'run':>18}  {'median ms':>10}  {'/ floor':>8}   per round")
    for name, values in times.items():
        median = statistics.median(values)
        rounds = " ".join(f"{v:.1f}" for v in values)
        print(f"{name:>18}  {median:10.1f}  {median / floor:8.2f}   {rounds}")
    if forward:
        print(f"\n{'run':>18}  {'command':>8}  {'PyTorch':>8}  {'command / PyTorch':>17}   PyTorch per round")
        for name, values in theirs.items():
            ours, pytorch = statistics.median(times[name]), statistics.median(values)
            rounds = " ".join(f"{v:.1f}" for v in values)
            print(f"{name:>18}  {ours:8.1f}  {pytorch:8.1f}  {ours / pytorch:17.2f}   {rounds}")


def has_pretraining_heads(model: str) -> bool:
    """Whether the checkpoint has both of BertForPreTraining's heads."""
    from safetensors import safe_open

    with safe_open(os.path.join(model, "model.safetensors"), framework="numpy") as f:
        names = list(f.keys())
    return any(n.startswith("cls.predictions.") for n in names) and any(
        n.startswith("cls.seq_relationship.") for n in names
    )


def pytorch_forward(args: argparse.Namespace, texts: dict[str, str]) -> dict:
    """For each run's text, a function that times one forward of BertForPreTraining on its token
    ids (a batch of --batch copies), in ms, after one warm-up."""
    import torch
    from transformers import BertForPreTraining, BertTokenizer

    torch.set_num_threads(args.threads)
    tokenizer = BertTokenizer.from_pretrained(args.model)
    model = BertForPreTraining.from_pretrained(args.model, attn_implementation="eager", dtype=torch.float32).eval()
    forward = {}
    for name, text in texts.items():
        encoded = tokenizer([text] * args.batch, return_tensors="pt")
        # One token per word of the text, as the command's tokenizer gives on this vocabulary.
        tokens = len(text.split()) + 2
        assert tuple(encoded["input_ids"].shape) == (args.batch, tokens), (name, encoded["input_ids"].shape)

        def run(encoded=encoded) -> float:
            with torch.inference_mode():
                started = time.perf_counter()
                model(**encoded)
                return (time.perf_counter() - started) * 1e3

        run()
        forward[name] = run
    return forward


if __name__ == "__main__":
    main()
