//! Writing one file so that it is either absent or whole under its name: the content goes to a
//! temporary name in the same directory, which is then renamed into place. On Linux a new file
//! has no name at all until it is whole (`O_TMPFILE`), and is then linked into place.
//!
//! A dump writes about 190 files, so the system calls per file count: a new file is opened,
//! written with one vectored write and linked or renamed into place; a reused one costs a
//! rename, an open, an fstat, the write and the rename back. (`carrier.rs` saves one of those
//! renames on a rerun.)
//!
//! Why a new file has no name while it is written: a name, even a temporary one, is an entry
//! in the directory, and every entry added or removed takes the directory's lock. Creating
//! `.<name>.tmp` and renaming it costs two turns of that lock per file, a link one; when the
//! pool's two threads both write new files, the one waiting for the lock spins on a core the
//! forward pass needs. Where the system has no unnamed files, or `/proc/self/fd` is not there to
//! link one from, the first failure turns them off for the rest of the process and every file
//! goes through its temporary name.

use std::fs::File;
use std::io::{IoSlice, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{BertError, Result};

/// Writes `parts`, one after the other, to `path` through `.<name>.tmp` in the same directory,
/// then renames that into place.
///
/// With `reuse`, the existing file at `path` (the previous run's) is written over rather than a
/// new one created, unless another name links to it: it is renamed to the temporary name,
/// written from its start and cut to the new length, then renamed back. A new file costs the
/// file system far more than an old one reused: a new inode, and new pages for its contents.
/// Without `reuse`, the new file is written with no name where the system allows it, and linked
/// into place once whole (see the module documentation).
pub(super) fn write_atomically(path: &Path, reuse: bool, parts: &[&[u8]]) -> Result<()> {
    let name = path.file_name().expect("a file path").to_string_lossy();
    let temp = path.with_file_name(format!(".{name}.tmp"));
    let failed = |problem: String| {
        let _ = std::fs::remove_file(&temp);
        BertError::Dump { path: path.into(), problem }
    };
    if !reuse {
        if let Some(mut file) = unnamed_file(path) {
            write_all_vectored(&mut file, parts).map_err(|e| failed(format!("cannot write: {e}")))?;
            match link_into_place(&file, path) {
                Ok(()) => return Ok(()),
                // Something not of the previous run has the name (with `--force`, say, a
                // symbolic link): the new file takes the name by a rename, which replaces that
                // entry atomically and never writes through it.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let _ = std::fs::remove_file(&temp);
                    link_into_place(&file, &temp).map_err(|e| failed(format!("cannot write: {e}")))?;
                    return std::fs::rename(&temp, path).map_err(|e| failed(format!("cannot rename into place: {e}")));
                }
                // No `/proc/self/fd`, or a file system that refuses the link: this file and all
                // later ones go through a temporary name.
                Err(_) => UNNAMED_FILES_WORK.store(false, Ordering::Relaxed),
            }
        }
    }
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

/// Cleared by the first unnamed file that cannot be made or linked into place.
static UNNAMED_FILES_WORK: AtomicBool = AtomicBool::new(cfg!(target_os = "linux"));

/// A new file with no name, in the directory of `path`, open for writing; None where the system
/// or the file system has none (or they have been turned off).
#[cfg(target_os = "linux")]
fn unnamed_file(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    if !UNNAMED_FILES_WORK.load(Ordering::Relaxed) {
        return None;
    }
    // The same mode as `File::create`: 0o666 less the umask.
    let opened = std::fs::OpenOptions::new().write(true).mode(0o666).custom_flags(libc::O_TMPFILE).open(path.parent()?);
    if opened.is_err() {
        UNNAMED_FILES_WORK.store(false, Ordering::Relaxed);
    }
    opened.ok()
}

#[cfg(not(target_os = "linux"))]
fn unnamed_file(_: &Path) -> Option<File> {
    None
}

/// Gives the unnamed `file` the name `path`; fails with `AlreadyExists` if the name is taken.
#[cfg(target_os = "linux")]
fn link_into_place(file: &File, path: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // `linkat` with `AT_EMPTY_PATH` would link the descriptor itself, but needs a capability
    // that users do not have; the descriptor's entry in /proc is open to its own process.
    let from = format!("/proc/self/fd/{}", file.as_raw_fd());
    // SAFETY: both are valid NUL-terminated paths; linkat reads nothing else of ours.
    with_two_paths(Path::new(&from), path, |from, to| unsafe {
        libc::linkat(libc::AT_FDCWD, from, libc::AT_FDCWD, to, libc::AT_SYMLINK_FOLLOW)
    })
}

/// Runs a system call that takes two paths (`a` and `b` as C strings) and returns 0 on success,
/// and turns its status into a `Result`.
#[cfg(target_os = "linux")]
pub(super) fn with_two_paths(
    a: &Path,
    b: &Path,
    call: impl FnOnce(*const libc::c_char, *const libc::c_char) -> libc::c_int,
) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let a = CString::new(a.as_os_str().as_bytes())?;
    let b = CString::new(b.as_os_str().as_bytes())?;
    if call(a.as_ptr(), b.as_ptr()) == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn link_into_place(_: &File, _: &Path) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What is at the stage's name before the write.
    #[derive(Debug, Clone, Copy)]
    enum Before {
        Nothing,
        AFile,
        AFileLinkedElsewhere,
    }

    /// A new file (no `reuse`) written into each situation, with unnamed files on and off: the
    /// name holds exactly the new contents, no temporary name is left, and a file linked
    /// elsewhere keeps its old contents under its other name.
    #[test]
    fn a_new_file_is_whole_under_its_name_by_either_route() {
        let routes: &[bool] = if cfg!(target_os = "linux") { &[true, false] } else { &[false] };
        for &unnamed in routes {
            for before in [Before::Nothing, Before::AFile, Before::AFileLinkedElsewhere] {
                let case = format!("unnamed files {}, {before:?} before", if unnamed { "on" } else { "off" });
                let temp = tempfile::tempdir().unwrap();
                let path = temp.path().join("stage.npy");
                let kept = temp.path().join("kept");
                match before {
                    Before::Nothing => {}
                    Before::AFile => std::fs::write(&path, b"old contents, longer than the new").unwrap(),
                    Before::AFileLinkedElsewhere => {
                        std::fs::write(&path, b"old contents, longer than the new").unwrap();
                        std::fs::hard_link(&path, &kept).unwrap();
                    }
                }
                // Other tests in this binary may write files meanwhile; either route suits them.
                UNNAMED_FILES_WORK.store(unnamed, Ordering::Relaxed);
                write_atomically(&path, false, &[b"new ", b"contents"]).unwrap_or_else(|e| panic!("{case}: {e}"));

                // The unnamed route must have worked, not fallen back to a temporary name.
                assert_eq!(UNNAMED_FILES_WORK.load(Ordering::Relaxed), unnamed, "{case}: unnamed files still on");
                let got = std::fs::read(&path).unwrap();
                assert_eq!(
                    got,
                    b"new contents",
                    "{case}: expected the new contents, got {:?}",
                    String::from_utf8_lossy(&got)
                );
                let mut names: Vec<String> = std::fs::read_dir(temp.path())
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                let expected: &[&str] = match before {
                    Before::AFileLinkedElsewhere => &["kept", "stage.npy"],
                    _ => &["stage.npy"],
                };
                assert_eq!(names, expected, "{case}: the directory");
                if let Before::AFileLinkedElsewhere = before {
                    assert_eq!(
                        std::fs::read(&kept).unwrap(),
                        b"old contents, longer than the new",
                        "{case}: the other link"
                    );
                }
            }
        }
        UNNAMED_FILES_WORK.store(cfg!(target_os = "linux"), Ordering::Relaxed);
    }
}
