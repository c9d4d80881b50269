//! One run at a time per output directory.
//!
//! Two runs writing one directory at once would each take the other's files for stale ones and
//! leave a manifest that lists files the other run removed or is still writing. So a writer
//! holds an exclusive lock on its directory, a [`DirLock`], from its start until it is dropped,
//! and a second run is refused at once instead of waiting. The system releases the lock when
//! the process ends, however it ends, so a killed run never leaves the directory locked.
//!
//! Where a directory cannot be opened or locked (a system that cannot open directories as
//! files, a file system without locks), the run goes on without the lock: it is a guard against
//! a mistake, not a condition for writing at all.

use std::fs::{File, TryLockError};
use std::path::Path;

use crate::error::{BertError, Result};

/// A directory's lock, held until this is dropped.
#[derive(Debug)]
pub struct DirLock {
    _directory: File,
}

/// Takes the lock on the directory `dir` (which must exist): None where the directory cannot be
/// locked; an error naming `dir` when another run holds it.
pub fn lock(dir: &Path) -> Result<Option<DirLock>> {
    let Ok(directory) = File::open(dir) else { return Ok(None) };
    // A lock this process has just let go of can look held for a moment: a thread that forks
    // meanwhile gives its child a copy of the descriptor until the child's exec closes it. So a
    // held lock is tried a few times over a fifth of a second before the run is refused.
    let mut result = directory.try_lock();
    for _ in 0..20 {
        if !matches!(result, Err(TryLockError::WouldBlock)) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        result = directory.try_lock();
    }
    match result {
        Ok(()) => Ok(Some(DirLock { _directory: directory })),
        Err(TryLockError::WouldBlock) => Err(BertError::Dump {
            path: dir.into(),
            problem: "another run is writing a dump into this directory; wait for it to finish, or write elsewhere"
                .into(),
        }),
        Err(TryLockError::Error(_)) => Ok(None),
    }
}
