#!/usr/bin/env bash
# Compares the forward pass of two revisions of bert-core on this machine, in the same minutes.
#
# Usage: scripts/bench_ab.sh OLD_REV [NEW_REV] [MODEL_DIR]
#
# NEW_REV defaults to the working tree (uncommitted changes included); MODEL_DIR to
# target/bench-model (scripts/bench.sh makes it). Each revision's bench example is built in a
# git worktree under target/ab/, with a target directory of its own (cargo gives a workspace
# member the same artifact names whatever its path, so a shared one would hand both sides the
# same binary); the working tree builds in target/. Then the two binaries run `bench forward` in
# turn, ROUNDS times, and the table gives each side's median of its per-round medians and the
# ratio new/old.
#
# With WHAT=cli it times the whole `bert-trace` command instead (a new process each time, the
# checkpoint in the page cache): 12, 122 and 502 tokens of "the quick brown fox jumps over the
# lazy sleeping dog" repeated, with --no-dump, into an empty directory (fresh) and into the
# previous run's dump (rerun); the file system is synced before each run.
#
# A machine shared with other tenants drifts by 10-40% from one minute to the next (see
# BENCHMARKS.md), so a change of a few percent is only visible this way: both sides alternating,
# each round short. Settings, from the environment:
#   WHAT=forward  ROUNDS=10  THREADS=2
#   for forward: TOKENS=12,128,512  BATCH=1  TRACE=off  MIN_SECS=1
#   DUMPS=target/ab/dumps: where traced runs write (a directory on tmpfs, such as
#   /dev/shm/bert-trace-ab, leaves out the disk's file system and measures bert-core's own part)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
old_rev="${1:?usage: scripts/bench_ab.sh OLD_REV [NEW_REV] [MODEL_DIR]}"
new_rev="${2:-}"
model="${3:-$root/target/bench-model}"
rounds="${ROUNDS:-10}"
[ -f "$model/model.safetensors" ] || { echo "no checkpoint in $model (scripts/bench.sh makes one)" >&2; exit 2; }

ab="$root/target/ab"
mkdir -p "$ab"
what="${WHAT:-forward}"
threads="${THREADS:-2}"
# Builds revision $1's (empty: the working tree's) bench example, or bert-trace for WHAT=cli,
# and copies it to $2.
build() {
  local rev="$1" binary="$2" tree="$root" target="$root/target"
  if [ -n "$rev" ]; then
    tree="$ab/tree-$(git rev-parse --short "$rev")"
    target="$tree/target"
    [ -d "$tree" ] || git worktree add --quiet --detach "$tree" "$rev"
  fi
  if [ "$what" = cli ]; then
    (cd "$tree" && cargo build --quiet --release -p bert-trace --target-dir "$target")
    cp "$target/release/bert-trace" "$binary"
  else
    (cd "$tree" && cargo build --quiet --release -p bert-core --example bench --target-dir "$target")
    cp "$target/release/examples/bench" "$binary"
  fi
}
echo "building $old_rev and ${new_rev:-the working tree}..." >&2
build "$old_rev" "$ab/bin-old"
build "$new_rev" "$ab/bin-new"

sentence="the quick brown fox jumps over the lazy sleeping dog"
# Named by their length in tokens: 10 words a sentence, with [CLS] and [SEP].
for sentences in 1 12 50; do
  for _ in $(seq "$sentences"); do printf '%s ' "$sentence"; done > "$ab/input-$((sentences * 10 + 2)).txt"
done
# One timed run of the whole command: side $1, input file $2, mode $3; one JSON line.
cli_run() {
  local side="$1" input="$2" mode="$3" out="$ab/dump-$1"
  local args=(--model "$model" --file "$input" --out "$out")
  [ "$mode" = nodump ] && args=(--model "$model" --file "$input" --no-dump)
  [ "$mode" = fresh ] && rm -rf "$out"
  sync
  local begun ended
  begun=$(date +%s%N)
  BERT_TRACE_THREADS="$threads" "$ab/bin-$side" "${args[@]}" > /dev/null
  ended=$(date +%s%N)
  echo "{\"side\":\"$side\",\"batch\":1,\"tokens\":$(basename "$input" .txt | cut -d- -f2),\"trace\":\"$mode\",\"median_ms\":$(((ended - begun) / 1000))e-3}"
}

: > "$ab/results.jsonl"
for round in $(seq "$rounds"); do
  # Which side goes first alternates, so that a drift within a round favours neither.
  sides="old new"
  [ $((round % 2)) = 0 ] && sides="new old"
  for side in $sides; do
    if [ "$what" = cli ]; then
      for input in "$ab"/input-*.txt; do
        for mode in nodump fresh rerun; do cli_run "$side" "$input" "$mode" >> "$ab/results.jsonl"; done
      done
    else
      BERT_TRACE_THREADS="$threads" "$ab/bin-$side" forward --model "$model" --tokens "${TOKENS:-12,128,512}" \
        --batch "${BATCH:-1}" --trace "${TRACE:-off}" --min-secs "${MIN_SECS:-1}" --out "${DUMPS:-$ab/dumps}" \
        | sed "s/\"side\":\"bert-core\"/\"side\":\"$side\"/" >> "$ab/results.jsonl"
    fi
  done
  echo "round $round/$rounds done" >&2
done

python3 - "$ab/results.jsonl" "$old_rev" "${new_rev:-working tree}" <<'EOF'
import json, statistics, sys
path, old_name, new_name = sys.argv[1:4]
medians = {}
for line in open(path):
    r = json.loads(line)
    medians.setdefault((r["batch"], r["tokens"], r["trace"], r["side"]), []).append(r["median_ms"])
configs = sorted({k[:3] for k in medians})
print(f"\nold: {old_name}, new: {new_name}; median over rounds of each round's median, ms\n")
print(f"{'batch':>5} {'tokens':>8} {'trace':>6} {'old':>9} {'new':>9} {'new/old':>8}   per round (old / new)")
for b, t, tr in configs:
    old, new = medians[(b, t, tr, "old")], medians[(b, t, tr, "new")]
    rounds = "  ".join(f"{o:.1f}/{n:.1f}" for o, n in zip(old, new))
    print(f"{b:>5} {t:>8} {tr:>6} {statistics.median(old):>9.1f} {statistics.median(new):>9.1f} "
          f"{statistics.median(new) / statistics.median(old):>8.3f}   {rounds}")
EOF
