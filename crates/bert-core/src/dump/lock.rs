//! One run at a time per output directory.
//!
//! Two runs writing one directory at once would each take the other's files for stale ones,
//! trade the carriers of one for those of the other, and leave a manifest that lists files the
//! other run removed or is still writing. So a writer holds an exclusive advisory lock (`flock`)
//! on its directory, a [`DirLock`], from its start ([`crate::dump::DumpWriter::create`], or
//! `bert-trace --npz`) until it is dropped, and a second run is refused at once instead of
//! waiting. The kernel releases the lock when the process ends, however it ends, so a killed run
//! never leaves the directory locked.
//!
//! Where a directory cannot be locked (a system without `flock`, or a file system that refuses
//! it), the run goes on without the lock: it is a guard against a mistake, not a condition for
//! writing at all.

use std::fs::File;
use std::path::Path;

use crate::error::{BertError, Result};

/// A directory's lock, held until this is dropped.
#[derive(Debug)]
pub struct DirLock {
    _directory: File,
}

/// Takes the lock on the directory `dir` (which must exist): None where the directory cannot be
/// locked; an error naming `dir` when another run holds it.
#[cfg(unix)]
pub fn lock(dir: &Path) -> Result<Option<DirLock>> {
    use std::os::fd::AsRawFd;
    let Ok(file) = File::open(dir) else { return Ok(None) };
    // SAFETY: flock only reads the descriptor, which `file` owns and keeps open.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(Some(DirLock { _directory: file }));
    }
    if std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock {
        return Err(BertError::Dump {
            path: dir.into(),
            problem: "another run is writing a dump into this directory; wait for it to finish or choose another --out"
                .into(),
        });
    }
    Ok(None)
}

/// Takes the lock on the directory `dir`: never possible on this system, so None.
#[cfg(not(unix))]
pub fn lock(_dir: &Path) -> Result<Option<DirLock>> {
    Ok(None)
}
