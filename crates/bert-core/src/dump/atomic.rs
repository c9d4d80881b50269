//! Writing one file so that it is either absent or whole under its name: the content goes to a
//! temporary name in the same directory, which is then renamed into place.
//!
//! A dump writes about 190 files, so the system calls per file count: a new file is opened,
//! written with one vectored write and renamed; a reused one costs a rename, an open, an fstat,
//! the write and the rename back. (`carrier.rs` saves one of those renames on a rerun.)

use std::fs::File;
use std::io::{IoSlice, Write};
use std::path::Path;

use crate::error::{BertError, Result};

/// Writes `parts`, one after the other, to `path` through `.<name>.tmp` in the same directory,
/// then renames that into place.
///
/// With `reuse`, the existing file at `path` (the previous run's) is written over rather than a
/// new one created, unless another name links to it: it is renamed to the temporary name,
/// written from its start and cut to the new length, then renamed back. A new file costs the
/// file system far more than an old one reused: a new inode, and new pages for its contents.
pub(super) fn write_atomically(path: &Path, reuse: bool, parts: &[&[u8]]) -> Result<()> {
    let name = path.file_name().expect("a file path").to_string_lossy();
    let temp = path.with_file_name(format!(".{name}.tmp"));
    let failed = |problem: String| {
        let _ = std::fs::remove_file(&temp);
        BertError::Dump {
            path: path.into(),
            problem,
        }
    };
    let (mut file, old_len) = match reuse.then(|| reusable(path, &temp)).flatten() {
        Some(reused) => reused,
        None => (File::create(&temp).map_err(|e| failed(format!("cannot write: {e}")))?, 0),
    };
    write_all_vectored(&mut file, parts).map_err(|e| failed(format!("cannot write: {e}")))?;
    // A reused file may be longer than what was just written: cut the old tail off.
    let written: usize = parts.iter().map(|part| part.len()).sum();
    if old_len > written as u64 {
        file.set_len(written as u64).map_err(|e| failed(format!("cannot write: {e}")))?;
    }
    std::fs::rename(&temp, path).map_err(|e| failed(format!("cannot rename into place: {e}")))
}

/// Writes every part, in as few system calls as the kernel allows.
pub(super) fn write_all_vectored(file: &mut File, parts: &[&[u8]]) -> std::io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|part| IoSlice::new(part)).collect();
    let mut remaining = &mut slices[..];
    while !remaining.is_empty() {
        match file.write_vectored(remaining) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut remaining, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The previous run's file at `path`, moved to `temp` and opened for writing from its start,
/// with its length; None when it is not there, cannot be moved or opened, is a symbolic link or
/// has another link (then nothing of it is touched but the name `path`, which the new file
/// takes).
pub(super) fn reusable(path: &Path, temp: &Path) -> Option<(File, u64)> {
    std::fs::rename(path, temp).ok()?;
    let reopened = open_if_ours_alone(temp);
    if reopened.is_none() {
        // The other link keeps the contents; only our name for them goes.
        let _ = std::fs::remove_file(temp);
    }
    reopened
}

/// The file at `path` opened for writing from its start, with its length, if it may be written
/// over: a regular file (not reached through a symbolic link) that no other name links to.
pub(super) fn open_if_ours_alone(path: &Path) -> Option<(File, u64)> {
    let file = open_no_follow(path).ok()?;
    let metadata = file.metadata().ok()?;
    (metadata.is_file() && has_one_link(&metadata)).then_some((file, metadata.len()))
}

/// Opens `path` for writing, failing if it is a symbolic link: writing through one would change
/// a file outside the dump.
#[cfg(unix)]
fn open_no_follow(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NOFOLLOW).open(path)
}

/// Elsewhere no file is written over (see [`has_one_link`]), so following links cannot happen.
#[cfg(not(unix))]
fn open_no_follow(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new().write(true).open(path)
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
