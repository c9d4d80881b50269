//! What the command-line tests share: the repository root, and running the built binary there.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root, where the tests run the binary (so `golden/...` paths resolve).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `bert-trace ARGS` from the repository root and returns what it did.
#[allow(dead_code)]
pub fn bert_trace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bert-trace")).args(args).current_dir(root()).output().expect("bert-trace runs")
}
