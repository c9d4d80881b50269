//! Writing the files of a dump: each `.npy` whole under a temporary name, then renamed into
//! place, on one background thread so that the file system takes a stage while the forward pass
//! computes the next.
//!
//! A rerun writes each stage into the previous run's file of that name, renamed to the temporary
//! name first, rather than into a new file: on the file systems this was measured on, creating a
//! file and freeing the old one costs far more than writing over pages already there (a
//! 128-token rerun of a bert-base-sized model took 2.7 times the untraced pass with new files,
//! see BENCHMARKS.md). A file with another name linked to it (`cp -al trace kept`) is never
//! written over: it keeps the previous values and a new file takes the stage's name.
//!
//! Only new files go through the background thread: creating a file waits on the file system,
//! which the thread overlaps with the pass's arithmetic. Writing over a previous run's file is
//! a copy into pages already cached, which costs about what copying the stage for the queue
//! would; it is done at once, from the pass's own buffer, since a third thread on a machine whose
//! cores the pass keeps busy only slows the pass down (a 128-token rerun took 1.9 times the
//! untraced pass through the queue, 1.5 times written at once; a first run, the other way round:
//! see BENCHMARKS.md).
//!
//! The queue is bounded by bytes: when the disk is slower than the pass, [`Writer::write`]
//! waits rather than letting the copies fill memory. A stage larger than the whole queue (the
//! scores of a batch of long sequences) is written at once too.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use ndarray_npy::npy::header::{Header, Layout};
use ndarray_npy::WritableElement;

use crate::error::{BertError, Result};
use crate::pass::{Tensor, TensorView};

/// How many bytes of copied stages may wait to be written.
const QUEUE_BYTES: usize = 64 << 20;

/// One stage to write: its path, whether the previous run's file there may be written over,
/// and its values in C order.
struct Job {
    path: PathBuf,
    reuse: bool,
    tensor: Tensor,
}

/// The bytes queued, and the first error of the writing thread.
#[derive(Default)]
struct State {
    queued: usize,
    error: Option<BertError>,
}

/// The background writer of one dump.
pub(super) struct Writer {
    jobs: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    state: Arc<(Mutex<State>, Condvar)>,
}

impl Writer {
    pub fn start() -> Writer {
        // Unbounded as a channel: `State::queued` bounds it, in bytes.
        let (jobs, receiver) = channel::<Job>();
        let state = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let shared = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("bert-trace-dump".into())
            .spawn(move || write_jobs(receiver, &shared))
            .expect("the writing thread starts");
        Writer { jobs: Some(jobs), thread: Some(thread), state }
    }

    /// Writes `tensor` to `path` (over the previous run's file there when `reuse`): a copy
    /// queued for the writing thread, or at once for a stage larger than the queue. The view is
    /// only valid during the call.
    pub fn write(&self, path: PathBuf, reuse: bool, tensor: TensorView<'_>) -> Result<()> {
        self.check()?;
        let bytes = tensor.shape().iter().product::<usize>() * tensor.dtype().size();
        if reuse || bytes > QUEUE_BYTES {
            return match tensor {
                TensorView::F32(a) if a.is_standard_layout() => {
                    write_values(&path, reuse, a.shape(), a.as_slice().expect("standard layout"))
                }
                tensor => write_npy(&path, reuse, &tensor.to_owned_c_order()),
            };
        }
        let (lock, changed) = &*self.state;
        let mut state = lock.lock().expect("not poisoned");
        while state.queued > 0 && state.queued + bytes > QUEUE_BYTES && state.error.is_none() {
            state = changed.wait(state).expect("not poisoned");
        }
        state.queued += bytes;
        drop(state);
        let job = Job { path, reuse, tensor: tensor.to_owned_c_order() };
        self.jobs.as_ref().expect("not finished").send(job).expect("the writing thread runs until finish");
        Ok(())
    }

    /// The first error of the writing thread, if any.
    fn check(&self) -> Result<()> {
        match self.state.0.lock().expect("not poisoned").error.take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Waits until every queued stage is written, and reports the first error.
    pub fn finish(mut self) -> Result<()> {
        self.stop();
        self.check()
    }

    fn stop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the writing thread does not panic");
        }
    }
}

impl Drop for Writer {
    /// Without [`Writer::finish`] (the trace failed), the queued stages are still written, so
    /// that no write outlives the run and no temporary file is left behind.
    fn drop(&mut self) {
        self.stop();
    }
}

/// The writing thread: every job in order; after an error, the rest are dropped unwritten.
fn write_jobs(jobs: Receiver<Job>, state: &(Mutex<State>, Condvar)) {
    let (lock, changed) = state;
    let mut failed = false;
    for Job { path, reuse, tensor } in jobs {
        let bytes = tensor.shape().iter().product::<usize>() * tensor.dtype().size();
        let result = if failed { Ok(()) } else { write_npy(&path, reuse, &tensor) };
        let mut state = lock.lock().expect("not poisoned");
        state.queued -= bytes;
        if let Err(error) = result {
            failed = true;
            state.error.get_or_insert(error);
        }
        drop(state);
        changed.notify_all();
    }
}

/// Writes `tensor` as a `.npy` file at `path`, byte for byte as numpy's `np.save` would.
pub(super) fn write_npy(path: &Path, reuse: bool, tensor: &Tensor) -> Result<()> {
    match tensor {
        Tensor::F32(a) => write_values(path, reuse, a.shape(), a.as_slice().expect("C order")),
        Tensor::F64(a) => write_values(path, reuse, a.shape(), a.as_slice().expect("C order")),
        Tensor::I64(a) => write_values(path, reuse, a.shape(), a.as_slice().expect("C order")),
    }
}

/// Writes the `.npy` file of an array of `shape` whose values, in C order, are `values`.
fn write_values<A: WritableElement + bytemuck::Pod>(
    path: &Path,
    reuse: bool,
    shape: &[usize],
    values: &[A],
) -> Result<()> {
    write_whole(path, reuse, &[&npy_header::<A>(shape), bytemuck::cast_slice(values)])
}

/// The `.npy` header of an array of `A` of `shape`, in C order.
pub(super) fn npy_header<A: WritableElement>(shape: &[usize]) -> Vec<u8> {
    let header = Header { type_descriptor: A::type_descriptor(), layout: Layout::Standard, shape: shape.to_vec() };
    header.to_bytes().expect("a shape of a few dimensions always has a header")
}

/// Writes `parts` one after the other to `.<name>.tmp` beside `path`, then renames that to
/// `path`: the file under its real name is always whole. With `reuse`, the previous run's file
/// at `path` is what is written, under the temporary name (see the module documentation).
pub(crate) fn write_whole(path: &Path, reuse: bool, parts: &[&[u8]]) -> Result<()> {
    let temp = temporary(path);
    let failed = |e: std::io::Error| {
        let _ = std::fs::remove_file(&temp);
        BertError::Dump { path: path.into(), problem: format!("cannot write: {e}") }
    };
    // A leftover of a killed run is ours (it has our name in our directory).
    let _ = std::fs::remove_file(&temp);
    let reused = if reuse { previous_file(path, &temp) } else { None };
    let mut file: File = match reused {
        Some(file) => file,
        // `create_new` never follows a symbolic link planted under the name.
        None => OpenOptions::new().write(true).create_new(true).open(&temp).map_err(failed)?,
    };
    let mut written = 0;
    for part in parts {
        file.write_all(part).map_err(failed)?;
        written += part.len() as u64;
    }
    // A reused file may be longer than what was just written: its old tail goes.
    if file.metadata().map_err(failed)?.len() > written {
        file.set_len(written).map_err(failed)?;
    }
    drop(file);
    std::fs::rename(&temp, path).map_err(failed)
}

/// The previous run's file at `path`, renamed to `temp` and opened for writing: None when there
/// is none, or when it is not a plain file of one name (another name linked to it keeps it,
/// values and all; our temporary name for it is then removed).
fn previous_file(path: &Path, temp: &Path) -> Option<File> {
    std::fs::rename(path, temp).ok()?;
    let plain = std::fs::symlink_metadata(temp).is_ok_and(|m| m.is_file() && single_link(&m));
    let file = if plain { OpenOptions::new().write(true).open(temp).ok() } else { None };
    if file.is_none() {
        let _ = std::fs::remove_file(temp);
    }
    file
}

#[cfg(unix)]
fn single_link(metadata: &std::fs::Metadata) -> bool {
    std::os::unix::fs::MetadataExt::nlink(metadata) == 1
}

/// Where links cannot be counted, no file is written over.
#[cfg(not(unix))]
fn single_link(_: &std::fs::Metadata) -> bool {
    false
}

/// `.<name>.tmp` beside `path`.
pub(crate) fn temporary(path: &Path) -> PathBuf {
    let name = path.file_name().expect("a file path").to_string_lossy();
    path.with_file_name(format!(".{name}.tmp"))
}
