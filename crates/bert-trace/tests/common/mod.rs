//! What the command-line tests share: the repository root, running the built binary there, and
//! writing a `.npy` header as numpy does.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root, where the tests run the binary (so `golden/...` paths resolve).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `bert-trace ARGS` from the repository root and returns what it did. No test reaches the
/// network: hub ids resolve offline.
#[allow(dead_code)]
pub fn bert_trace<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bert-trace"))
        .args(args)
        .current_dir(root())
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .expect("bert-trace runs")
}

/// The header of a `.npy` file (format 1.0, C order) of `descr` values of `shape`, as numpy
/// writes it: the values' bytes follow it.
#[allow(dead_code)]
pub fn npy_header(descr: &str, shape: &[usize]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}").into_bytes();
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(b' ');
    }
    header.push(b'\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header);
    bytes
}
