//! Writing one file so that it is either absent or whole under its name: the content goes to a
//! temporary name in the same directory, which is then renamed into place.

use std::fs::File;
use std::io::{BufWriter, Seek};
use std::path::Path;

use crate::error::{BertError, Result};

/// Writes `path` through `.<name>.tmp` in the same directory, then renames it into place.
///
/// With `reuse`, the existing file at `path` (the previous run's) is written over rather than a
/// new one created, unless another name links to it: it is renamed to the temporary name,
/// written from its start and cut to the new length, then renamed back. A new file costs the
/// file system far more than an old one reused: a new inode, and new pages for its contents.
pub(super) fn write_atomically<E: std::fmt::Display>(
    path: &Path,
    reuse: bool,
    write: impl FnOnce(&mut BufWriter<File>) -> std::result::Result<(), E>,
) -> Result<()> {
    let name = path.file_name().expect("a file path").to_string_lossy();
    let temp = path.with_file_name(format!(".{name}.tmp"));
    let failed = |problem: String| {
        let _ = std::fs::remove_file(&temp);
        BertError::Dump {
            path: path.into(),
            problem,
        }
    };
    let file = match reuse.then(|| reusable(path, &temp)).flatten() {
        Some(file) => file,
        None => File::create(&temp).map_err(|e| failed(format!("cannot write: {e}")))?,
    };
    let mut writer = BufWriter::new(file);
    write(&mut writer).map_err(|e| failed(format!("cannot write: {e}")))?;
    let mut file = writer
        .into_inner()
        .map_err(|e| failed(format!("cannot write: {}", e.error())))?;
    // A reused file may be longer than what was just written: cut the old tail off.
    let written = file.stream_position().map_err(|e| failed(format!("cannot write: {e}")))?;
    if file.metadata().is_ok_and(|m| m.len() > written) {
        file.set_len(written).map_err(|e| failed(format!("cannot write: {e}")))?;
    }
    std::fs::rename(&temp, path).map_err(|e| failed(format!("cannot rename into place: {e}")))
}

/// The previous run's file at `path`, moved to `temp` and opened for writing from its start;
/// None when it is not a plain file with a single link, or cannot be moved or opened.
fn reusable(path: &Path, temp: &Path) -> Option<File> {
    let metadata = std::fs::symlink_metadata(path).ok()?;
    if !metadata.is_file() || !has_one_link(&metadata) {
        return None;
    }
    std::fs::rename(path, temp).ok()?;
    std::fs::OpenOptions::new().write(true).open(temp).ok()
}

/// Whether no other name links to the file: a copy the user kept with `cp -l` must not change.
#[cfg(unix)]
fn has_one_link(metadata: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    metadata.nlink() == 1
}

/// Where the link count cannot be read, no file is written over.
#[cfg(not(unix))]
fn has_one_link(_: &std::fs::Metadata) -> bool {
    false
}
