//! Reading the files a user names, safely: only regular files, never more than a size that
//! makes sense for the file.
//!
//! Opening a FIFO for reading blocks until something writes to it, and a device such as
//! `/dev/zero` never ends, so either would hang a run that takes it for a config or a manifest.
//! So every path is checked to be a regular file (after following symbolic links) before it is
//! opened, and read through a cap.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::error::{BertError, Result};

/// The most bytes a JSON config (config.json, tokenizer_config.json, a pooling config) may have.
pub const MAX_CONFIG: u64 = 1 << 20;
/// The most bytes a tokenizer file (tokenizer.json, vocab.txt) or a manifest may have.
pub const MAX_TABLE: u64 = 256 << 20;

/// What kind of thing is at `path`, in words, when it is not a regular file.
fn not_regular(metadata: &std::fs::Metadata) -> Option<&'static str> {
    let kind = metadata.file_type();
    if kind.is_file() {
        return None;
    }
    if kind.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return Some("a FIFO (named pipe)");
        }
        if kind.is_char_device() || kind.is_block_device() {
            return Some("a device");
        }
        if kind.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a regular file")
}

/// Opens `path` for reading if it is a regular file; its length comes with it.
pub fn open_regular(path: &Path) -> Result<(File, u64)> {
    let metadata = std::fs::metadata(path).map_err(|e| BertError::io(path, e))?;
    if let Some(kind) = not_regular(&metadata) {
        return Err(BertError::File { path: path.into(), problem: format!("is {kind}, not a regular file") });
    }
    let file = File::open(path).map_err(|e| BertError::io(path, e))?;
    // The name may have changed between the check and the open: check what was opened.
    let metadata = file.metadata().map_err(|e| BertError::io(path, e))?;
    if let Some(kind) = not_regular(&metadata) {
        return Err(BertError::File { path: path.into(), problem: format!("is {kind}, not a regular file") });
    }
    Ok((file, metadata.len()))
}

/// Reads the regular file `path`, refusing one longer than `max` bytes.
pub fn read(path: &Path, max: u64) -> Result<Vec<u8>> {
    let (file, len) = open_regular(path)?;
    let too_long = || BertError::File {
        path: path.into(),
        problem: format!("is more than {} long, far more than such a file holds", bytes(max)),
    };
    if len > max {
        return Err(too_long());
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // The file may grow while it is read: the cap holds whatever the length said.
    file.take(max + 1).read_to_end(&mut bytes).map_err(|e| BertError::io(path, e))?;
    if bytes.len() as u64 > max {
        return Err(too_long());
    }
    Ok(bytes)
}

/// Like [`read`], but None when nothing is at `path` (an optional file).
pub fn read_optional(path: &Path, max: u64) -> Result<Option<Vec<u8>>> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        _ => read(path, max).map(Some),
    }
}

/// A byte count the way a person reads it: `512 B`, `1.5 MiB`, `64.0 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
