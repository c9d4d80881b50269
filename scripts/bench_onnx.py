#!/usr/bin/env python3
"""The forward pass side by side: bert-trace, PyTorch and ONNX Runtime, in alternating rounds
(issue 40; a benchmark, not a test: results and commands in BENCHMARKS.md).

    python scripts/bench_onnx.py --model DIR [--tokens 12,128,512] [--rounds 10] [--threads 2]
        [--bench target/release/examples/bench] [--onnx /tmp/bert.onnx]

DIR holds a BertForPreTraining checkpoint (`scripts/make_bench_model.py --pretraining DIR`). Every
side computes the same outputs, the MLM and NSP logits, from token ids (tokenization excluded),
float32, with THREADS threads, the checkpoint in the page cache:

- bert-trace: the bench example's `forward --trace off` (bert-core in process, no stage kept);
- PyTorch: transformers' `BertForPreTraining`, eager attention, under `torch.inference_mode()`;
- ONNX Runtime: the same model exported with `torch.onnx.export` (opset 17, dynamic batch and
  sequence axes), `ORT_ENABLE_ALL`, THREADS intra-op threads, 1 inter-op, no
  transformers-specific fusion (onnxruntime.transformers' optimizer is not run).

Each round runs every side once per size, each for at least MIN_SECS, and takes its median; the
table gives each side's median over the rounds, and the ratios bert-trace / PyTorch and
bert-trace / ONNX Runtime.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def median_ms(run, min_secs: float) -> float:
    run()
    times = []
    begun = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - begun < min_secs and len(times) < 200):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", default="12,128,512")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-secs", type=float, default=1.0)
    ap.add_argument("--bench", default="target/release/examples/bench")
    ap.add_argument("--onnx", default="/tmp/bert-trace-bench.onnx")
    args = ap.parse_args()
    sizes = [int(t) for t in args.tokens.split(",")]

    import onnxruntime
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    model = transformers.BertForPreTraining.from_pretrained(args.model, attn_implementation="eager").eval()
    vocab = model.config.vocab_size

    def ids_of(tokens: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(tokens)
        ids = rng.integers(1000, vocab, size=(1, tokens), dtype=np.int64)
        ids[0, 0], ids[0, -1] = 101, 102
        return {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": np.ones_like(ids)}

    if not os.path.exists(args.onnx):
        example = {k: torch.from_numpy(v) for k, v in ids_of(12).items()}
        axes = {0: "batch", 1: "tokens"}
        torch.onnx.export(model, (example["input_ids"], example["attention_mask"], example["token_type_ids"]),
                          args.onnx, input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["prediction_logits", "seq_relationship_logits"],
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes},
                          opset_version=17, dynamo=False)
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(args.onnx, options, providers=["CPUExecutionProvider"])

    results: dict[tuple[str, int], list[float]] = {}
    env = dict(os.environ, BERT_TRACE_THREADS=str(args.threads))
    for round_ in range(args.rounds):
        for tokens in sizes:
            feeds = ids_of(tokens)
            torch_feeds = {k: torch.from_numpy(v) for k, v in feeds.items()}
            with torch.inference_mode():
                pytorch = median_ms(lambda: model(**torch_feeds), args.min_secs)
            ort = median_ms(lambda: session.run(None, feeds), args.min_secs)
            line = subprocess.run([args.bench, "forward", "--model", args.model, "--tokens", str(tokens), "--batch", "1",
                                   "--trace", "off", "--min-secs", str(args.min_secs)],
                                  capture_output=True, text=True, check=True, env=env).stdout.strip().splitlines()[-1]
            ours = json.loads(line)["median_ms"]
            for side, ms in (("bert-trace", ours), ("PyTorch", pytorch), ("ONNX Runtime", ort)):
                results.setdefault((side, tokens), []).append(ms)
        print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)

    print(f"{args.threads} threads, median over {args.rounds} rounds of each round's median, ms")
    print("tokens  bert-trace  PyTorch  ONNX Runtime  bert-trace/PyTorch  bert-trace/ORT")
    for tokens in sizes:
        m = {side: statistics.median(results[(side, tokens)]) for side in ("bert-trace", "PyTorch", "ONNX Runtime")}
        print(f"{tokens:6d}  {m['bert-trace']:10.1f}  {m['PyTorch']:7.1f}  {m['ONNX Runtime']:12.1f}  "
              f"{m['bert-trace'] / m['PyTorch']:18.2f}  {m['bert-trace'] / m['ONNX Runtime']:14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
