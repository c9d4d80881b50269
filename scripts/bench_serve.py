#!/usr/bin/env python3
"""How fast `bert-trace view DUMP --serve` answers: an explanation of one element of every stage,
a step, and the page itself.

    python scripts/bench_serve.py --bin target/release/bert-trace --model /tmp/bertbase \
        [--tokens 128] [--repeats 5] [--dump DIR]

Traces a text of TOKENS tokens with MODEL into DIR (a temporary directory unless given), starts
the server on it, and asks it, over HTTP with the session's token, to explain the middle element
of every stage the dump holds but its inputs (REPEATS times each, after one untimed request that
reads the stage's files for the first time), to step to a stage in the middle of the pass, to set
one of its elements (the set reruns the pass to its end twice: with and without the change), and
for the page. It prints one JSON line: the seconds from the command's start to its URL (the
model loaded and the page made), the median time of each stage's explanation, the slowest
stage and its median, the step's and the set's time, and the page's bytes and time. Times are of
the whole request, as a browser on this machine sees them, in milliseconds; the model is loaded
once, before the first request.
"""

import argparse
import json
import statistics
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

# The words of scripts/make_bench_model.py's vocabulary, one token each.
WORDS = "the quick brown fox jumps over the lazy sleeping dog".split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dump")
    args = parser.parse_args()

    work = Path(args.dump) if args.dump else Path(tempfile.mkdtemp(prefix="bench-serve-"))
    dump = work / "dump"
    text = " ".join(WORDS[i % len(WORDS)] for i in range(args.tokens - 2))
    subprocess.run([args.bin, "--model", args.model, "--out", str(dump), "--force", text], check=True,
                   stdout=subprocess.DEVNULL)
    started = time.perf_counter()
    server = subprocess.Popen([args.bin, "view", str(dump), "--serve", "--model", args.model],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()
        start_s = time.perf_counter() - started
        url = line.split()[-1]
        base, token = url.split("?token=")
        base = base.rstrip("/")

        def ask(path: str, body: str | None = None) -> tuple[float, bytes]:
            request = urllib.request.Request(base + path, data=None if body is None else body.encode(),
                                             headers={"X-Bert-Trace-Token": token})
            start = time.perf_counter()
            with urllib.request.urlopen(request, timeout=600) as answer:
                data = answer.read()
            return (time.perf_counter() - start) * 1000, data

        manifest = json.loads((dump / "manifest.json").read_text())
        medians = {}
        for stage in manifest["stages"]:
            name = stage["name"]
            if name.startswith("input."):
                continue
            index = ",".join(str(n // 2) for n in stage["shape"])
            path = "/api/explain?target=" + urllib.parse.quote(f"{name}[{index}]")
            ask(path)
            medians[name] = statistics.median(ask(path)[0] for _ in range(args.repeats))
        slowest = max(medians, key=medians.get)
        middle = [s["name"] for s in manifest["stages"]][len(manifest["stages"]) // 2]
        step_ms, _ = ask("/api/step", f"goto {middle}")
        shape = next(s["shape"] for s in manifest["stages"] if s["name"] == middle)
        set_ms, _ = ask("/api/step", "set [" + ",".join(str(n // 2) for n in shape) + "] 0.5")
        page_ms, page = ask("/?token=" + token)
        print(json.dumps({
            "tokens": args.tokens,
            "start_s": round(start_s, 2),
            "stages": len(medians),
            "explain_ms": {k: round(v, 1) for k, v in medians.items()},
            "slowest": slowest,
            "slowest_ms": round(medians[slowest], 1),
            "median_of_stages_ms": round(statistics.median(medians.values()), 1),
            "goto_ms": round(step_ms, 1),
            "goto": middle,
            "set_ms": round(set_ms, 1),
            "page_bytes": len(page),
            "page_ms": round(page_ms, 1),
            "url": url,
        }))
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
