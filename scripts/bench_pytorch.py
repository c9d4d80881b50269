#!/usr/bin/env python3
"""Time PyTorch's BERT forward pass on the configurations bert-core's bench example runs.

Usage:

    python scripts/bench_pytorch.py --model DIR [--tokens 12,128,512] [--batch 1,8]
        [--trace off,on,rerun] [--threads 2] [--out DUMP_DIR] [--min-secs 3]

DIR is a BertModel checkpoint (scripts/make_bench_model.py makes a bert-base-sized one). The
model is transformers' BertModel, eager attention, float32, eval mode, under
torch.inference_mode(), with torch.set_num_threads(THREADS).

For each configuration it prints one JSON line: the median wall time over at least three runs
after one warm-up run (more runs until MIN_SECS have passed). The token ids are the same
deterministic pattern as crates/bert-core/examples/bench.rs: [CLS], a fixed walk through the
vocabulary, [SEP], no padding.

- trace off: ``model(input_ids, token_type_ids, attention_mask)``.
- trace on: the step-by-step pass of scripts/dump_reference.py (every bert-trace stage, computed
  by transformers' own submodules), each stage written with ``np.save`` to DUMP_DIR/<stage>.npy:
  what it costs PyTorch to produce the dump that bert-trace writes. The directory is empty at
  the start of each run.
- trace rerun: the same, into the directory that holds the previous run's files.

Before each timed run, outside the timing, the file system is synced (``os.sync()``), as
bench.rs does, so that no run pays for the previous run's write-back or deletion.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time

import numpy as np
import torch
from transformers import BertModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dump_reference import trace as trace_stages  # noqa: E402

CLS, SEP = 101, 102


def synthetic_inputs(batch: int, tokens: int) -> dict[str, torch.Tensor]:
    ids = torch.empty((batch, tokens), dtype=torch.int64)
    for b in range(batch):
        for t in range(tokens):
            if t == 0:
                ids[b, t] = CLS
            elif t == tokens - 1:
                ids[b, t] = SEP
            else:
                ids[b, t] = 1000 + ((b * tokens + t) * 7919) % 29000
    return {
        "input_ids": ids,
        "token_type_ids": torch.zeros_like(ids),
        "attention_mask": torch.ones_like(ids),
    }


def time_runs(min_secs: float, prepare, run) -> tuple[list[float], float]:
    """Seconds of each timed call of run(), each after an untimed call of prepare(), after one
    warm-up run, sorted; and the process's mean CPU time per call (all threads), which a busy
    machine changes much less than the wall time."""
    prepare()
    run()
    times: list[float] = []
    cpu = 0.0
    begun = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - begun < min_secs and len(times) < 50):
        prepare()
        cpu_before = time.process_time()
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
        cpu += time.process_time() - cpu_before
    return sorted(times), cpu / len(times)


def backward(args) -> None:
    """One forward pass with the MLM loss, then with loss.backward() too, then a training step
    (backward and torch.optim.AdamW, its single-tensor form, as bert-trace's), of a checkpoint with
    the MLM head: every 7th position labelled with its own id, as bench.rs's `backward` does.
    Dropout off (eval mode), as in bert-trace."""
    from transformers import BertForPreTraining

    model = BertForPreTraining.from_pretrained(args.model, attn_implementation="eager", dtype=torch.float32).eval()
    for batch in [int(b) for b in args.batch.split(",")]:
        for tokens in [int(t) for t in args.tokens.split(",")]:
            inputs = synthetic_inputs(batch, tokens)
            ids = inputs["input_ids"]
            positions = torch.arange(tokens)
            chosen = (positions % 7 == 3) & (positions + 1 < tokens)
            labels = torch.where(chosen.expand_as(ids), ids, torch.full_like(ids, -100))

            def loss() -> torch.Tensor:
                logits = model(**inputs).prediction_logits
                return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                         ignore_index=-100)

            def forward() -> None:
                with torch.no_grad():
                    loss()

            def forward_backward() -> None:
                model.zero_grad(set_to_none=True)
                loss().backward()

            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)

            def train_step() -> None:
                optimizer.zero_grad(set_to_none=True)
                loss().backward()
                optimizer.step()

            passes = [("forward", forward), ("forward+backward", forward_backward), ("train step", train_step)]
            for name, run in passes:
                times, _ = time_runs(args.min_secs, os.sync, run)
                print(json.dumps({"side": "pytorch", "pass": name, "batch": batch, "tokens": tokens,
                                  "threads": torch.get_num_threads(), "runs": len(times),
                                  "median_ms": statistics.median(times) * 1e3, "min_ms": times[0] * 1e3}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--tokens", default="12,128,512")
    parser.add_argument("--batch", default="1,8")
    parser.add_argument("--trace", default="off,on,rerun")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="target/bench-dumps-pytorch")
    parser.add_argument("--min-secs", type=float, default=3.0)
    parser.add_argument("--backward", action="store_true",
                        help="time BertForPreTraining's forward and forward + loss.backward() instead")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    if args.backward:
        backward(args)
        return
    model = BertModel.from_pretrained(args.model, attn_implementation="eager", dtype=torch.float32).eval()

    for batch in [int(b) for b in args.batch.split(",")]:
        for tokens in [int(t) for t in args.tokens.split(",")]:
            inputs = synthetic_inputs(batch, tokens)
            for traced in args.trace.split(","):
                out = os.path.join(args.out, f"b{batch}_t{tokens}")

                def prepare() -> None:
                    if traced == "on":
                        shutil.rmtree(out, ignore_errors=True)
                    os.sync()

                if traced in ("on", "rerun"):

                    def run() -> None:
                        os.makedirs(out, exist_ok=True)
                        with torch.inference_mode():
                            for stage in trace_stages(model, inputs):
                                np.save(os.path.join(out, stage.name + ".npy"), stage.tensor.contiguous().numpy())
                else:

                    def run() -> None:
                        with torch.inference_mode():
                            model(**inputs)

                times, cpu = time_runs(args.min_secs, prepare, run)
                print(json.dumps({
                    "side": "pytorch",
                    "batch": batch,
                    "tokens": tokens,
                    "trace": traced,
                    "threads": torch.get_num_threads(),
                    "runs": len(times),
                    "median_ms": statistics.median(times) * 1e3,
                    "min_ms": times[0] * 1e3,
                    "cpu_ms": cpu * 1e3,
                }), flush=True)


if __name__ == "__main__":
    main()
