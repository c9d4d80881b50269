//! Carriers: files that hold no stage, each waiting to carry the next stage of its size into
//! place with a single rename.
//!
//! A rerun writes every stage over the previous run's file of the same name. Done through a
//! temporary name (see [`write_atomically`]), that costs two renames per file, and renames are
//! most of what a small dump costs the file system. With a carrier it costs one: the new
//! contents are written into a carrier of the same size, which then trades places with the
//! stage's old file in one atomic step (Linux's `renameat2` with `RENAME_EXCHANGE`). The stage's
//! name never shows a half-written file, as before. The old file, now under the carrier's name,
//! carries the next stage of its size: in BERT, the same stage of the next layer.
//!
//! The first stage of each size has no carrier yet. It borrows the previous run's file of the
//! last stage of that size (the *donor*, chosen by [`crate::dump::DumpWriter`]), which is moved
//! to a carrier's name. When the donor's own stage comes, the carrier left by the stage before
//! it takes the donor's name back with a plain rename. A chain of twelve same-sized stages thus
//! costs thirteen renames instead of twenty-four, and no file is created or deleted. A size with
//! many stages gets one donor, and so one chain, per thread that writes, so that two threads
//! writing stages of one size at once both find a carrier. Whichever thread writes whichever
//! stage, a carrier is only ever renamed to the name of the stage written into it, so a plan
//! upset by the order of writes costs renames, never a file.
//!
//! Whenever there is no carrier of the right size (the first run into a directory, a stage
//! whose shape changed), a stage is written as before. So is a stage with an old file of its own
//! when the carrier of its size is being written by another thread (the pool's threads write
//! stages side by side, and the forward pass's thread helps); a stage without one, such as a
//! donor's, waits for it instead.
//! Where `RENAME_EXCHANGE` is missing (other systems; file systems that refuse it), no carrier is
//! kept and every stage is written as before.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use super::atomic::{open_if_ours_alone, reusable, write_all_vectored, write_atomically};
use crate::error::{BertError, Result};

/// A file under a temporary name, open for writing from its start.
struct Carrier {
    file: File,
    path: PathBuf,
    /// Its length, so that a stage of the same size needs neither new blocks nor a cut.
    len: u64,
}

/// The carriers of one dump directory.
pub(super) struct Carriers {
    dir: PathBuf,
    pool: Mutex<Pool>,
    /// Signalled when a carrier in use is done with.
    returned: Condvar,
    /// For the carriers' names, unique within the run.
    next_id: AtomicUsize,
    /// Cleared when the file system cannot exchange two names; no carrier is kept after that.
    exchange_works: AtomicBool,
}

#[derive(Default)]
struct Pool {
    idle: Vec<Carrier>,
    /// The lengths of the carriers being written by a thread now.
    in_use: Vec<u64>,
}

impl Carriers {
    pub fn new(dir: &Path) -> Carriers {
        Carriers {
            dir: dir.into(),
            pool: Mutex::new(Pool::default()),
            returned: Condvar::new(),
            next_id: AtomicUsize::new(0),
            exchange_works: AtomicBool::new(cfg!(target_os = "linux")),
        }
    }

    /// Writes `parts`, one after the other, as the file `path`, atomically: through an idle
    /// carrier of their size when there is one, otherwise through a temporary name, as
    /// [`write_atomically`] does. `reuse` says that `path` is the previous run's file, which
    /// then becomes the next carrier.
    pub fn write(&self, path: &Path, reuse: bool, parts: &[&[u8]]) -> Result<()> {
        let len = parts.iter().map(|part| part.len() as u64).sum();
        // A stage with no old file of its own would need a new one, which costs far more than
        // waiting for the thread that writes the stage before it in the chain.
        let Some(carrier) = self.take(len, !reuse) else {
            return write_atomically(path, reuse, parts);
        };
        let result = self.deliver(carrier, path, reuse, parts, len);
        let mut pool = self.lock();
        let done = pool.in_use.iter().position(|&used| used == len).expect("taken by this thread");
        pool.in_use.swap_remove(done);
        let result = result.map(|next| pool.idle.extend(next));
        drop(pool);
        self.returned.notify_all();
        result
    }

    /// Removes the carriers left idle (a chain whose donor's stage never came: a run stopped
    /// early, or shapes that changed since the previous run).
    pub fn remove_idle(&self) {
        for carrier in self.lock().idle.drain(..) {
            let _ = std::fs::remove_file(&carrier.path);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().expect("not poisoned")
    }

    /// An idle carrier exactly `len` bytes long, marked in use; with `wait`, waits for one that
    /// another thread is using.
    fn take(&self, len: u64, wait: bool) -> Option<Carrier> {
        let mut pool = self.lock();
        loop {
            if let Some(found) = pool.idle.iter().position(|carrier| carrier.len == len) {
                pool.in_use.push(len);
                return Some(pool.idle.swap_remove(found));
            }
            if !wait || !pool.in_use.contains(&len) {
                return None;
            }
            pool = self.returned.wait(pool).expect("not poisoned");
        }
    }

    /// Moves the previous run's file `donor` to a new carrier's name and makes it idle; false
    /// when it cannot be moved or is not ours alone (then only our name for it goes: the other
    /// link keeps it).
    pub fn adopt(&self, donor: &Path) -> bool {
        if !self.exchange_works.load(Ordering::Relaxed) {
            return false;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!(".bert-trace-carrier-{id}.tmp"));
        let Some((file, len)) = reusable(donor, &path) else {
            return false;
        };
        self.lock().idle.push(Carrier { file, path, len });
        true
    }

    /// Writes the stage into `carrier` and puts it in place at `path`. Returns the previous
    /// run's file there, under the carrier's name, when it is ours alone: the next carrier.
    fn deliver(
        &self,
        mut carrier: Carrier,
        path: &Path,
        reuse: bool,
        parts: &[&[u8]],
        len: u64,
    ) -> Result<Option<Carrier>> {
        let failed = |carrier: &Carrier, problem: String| {
            let _ = std::fs::remove_file(&carrier.path);
            BertError::Dump { path: path.into(), problem }
        };
        if let Err(e) = write_all_vectored(&mut carrier.file, parts) {
            return Err(failed(&carrier, format!("cannot write: {e}")));
        }
        // A carrier longer than the stage keeps the old tail until it is cut off.
        if carrier.len > len {
            if let Err(e) = carrier.file.set_len(len) {
                return Err(failed(&carrier, format!("cannot write: {e}")));
            }
        }
        // Opened before the exchange, so that afterwards, under the carrier's name, it is ready
        // to be written without another lookup.
        let old = if reuse && self.exchange_works.load(Ordering::Relaxed) { open_if_ours_alone(path) } else { None };
        if let Some((file, old_len)) = old {
            match exchange(&carrier.path, path) {
                Ok(()) => return Ok(Some(Carrier { file, path: carrier.path, len: old_len })),
                // The file system cannot exchange names: from now on every stage is written
                // through a temporary name, and this one is renamed as one.
                Err(e) if exchange_unsupported(&e) => self.exchange_works.store(false, Ordering::Relaxed),
                Err(e) => return Err(failed(&carrier, format!("cannot rename into place: {e}"))),
            }
        }
        match std::fs::rename(&carrier.path, path) {
            Ok(()) => Ok(None),
            Err(e) => Err(failed(&carrier, format!("cannot rename into place: {e}"))),
        }
    }
}

/// Swaps the files named `a` and `b`, both in one directory, in one atomic step.
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    // SAFETY: both are valid NUL-terminated paths; renameat2 reads nothing else of ours.
    super::atomic::with_two_paths(a, b, |a, b| unsafe {
        libc::renameat2(libc::AT_FDCWD, a, libc::AT_FDCWD, b, libc::RENAME_EXCHANGE)
    })
}

#[cfg(not(target_os = "linux"))]
fn exchange(_: &Path, _: &Path) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// Whether `e` says that the system or the file system has no `RENAME_EXCHANGE`.
fn exchange_unsupported(e: &std::io::Error) -> bool {
    #[cfg(target_os = "linux")]
    if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)) {
        return true;
    }
    e.kind() == std::io::ErrorKind::Unsupported
}
