#!/usr/bin/env bash
# The project's checks beyond its tests, which CI runs after scripts/test.sh (.ci/run) and a change
# must pass to land; scripts/test.sh has built what they read.
# 1. Builds the API documentation, private items included, and fails on any rustdoc warning (a
#    shape such as [B,T,H] outside backticks is read as a broken link).
# 2. Runs clippy on every crate, test and example, and fails on any warning. The fuzz targets
#    (fuzz/, a workspace member outside the default members) are linted under CI (CI=true) or
#    with FUZZ=1, so that they cannot rot unseen: checking them builds libFuzzer's C++ sources,
#    which a local run need not wait for.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

phase() { echo "== $1 ($SECONDS s)" >&2; }

# PyO3 reads its interpreter's configuration from the venv scripts/test.sh made, as there (another
# interpreter would rebuild pyo3 and everything above it).
export PYO3_PYTHON="$root/target/py-venv/bin/python"
if [ ! -x "$PYO3_PYTHON" ]; then
  echo "error: $PYO3_PYTHON is missing: run scripts/test.sh first" >&2
  exit 1
fi

phase "cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --locked --no-deps --document-private-items --quiet

phase "cargo clippy"
lint=(--workspace --exclude bert-core-fuzz)
if [ "${CI:-}" = true ] || [ "${FUZZ:-}" = 1 ]; then
  lint=(--workspace)
fi
cargo clippy "${lint[@]}" --all-targets --locked --quiet -- -D warnings
phase "done"
