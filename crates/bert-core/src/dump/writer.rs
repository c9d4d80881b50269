//! Writing the files of a dump: each `.npy` whole under a temporary name, then renamed into
//! place, on one background thread so that the file system takes a stage while the forward pass
//! computes the next.
//!
//! The queue is bounded by bytes: when the disk is slower than the pass, [`Writer::write`]
//! waits rather than letting the copies fill memory. A stage larger than the whole queue (the
//! scores of a batch of long sequences) is written at once, from the pass's own buffer.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use ndarray_npy::npy::header::{Header, Layout};
use ndarray_npy::WritableElement;

use crate::error::{BertError, Result};
use crate::trace::{Tensor, TensorView};

/// How many bytes of copied stages may wait to be written.
const QUEUE_BYTES: usize = 64 << 20;

/// One stage to write: its path and its values in C order.
struct Job {
    path: PathBuf,
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

    /// Writes `tensor` to `path`: a copy queued for the writing thread, or at once for a stage
    /// larger than the queue. The view is only valid during the call.
    pub fn write(&self, path: PathBuf, tensor: TensorView<'_>) -> Result<()> {
        self.check()?;
        let bytes = tensor.shape().iter().product::<usize>() * tensor.dtype().size();
        if bytes > QUEUE_BYTES {
            return write_npy(&path, &tensor.to_owned_c_order());
        }
        let (lock, changed) = &*self.state;
        let mut state = lock.lock().expect("not poisoned");
        while state.queued > 0 && state.queued + bytes > QUEUE_BYTES && state.error.is_none() {
            state = changed.wait(state).expect("not poisoned");
        }
        state.queued += bytes;
        drop(state);
        let job = Job { path, tensor: tensor.to_owned_c_order() };
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
    for Job { path, tensor } in jobs {
        let bytes = tensor.shape().iter().product::<usize>() * tensor.dtype().size();
        let result = if failed { Ok(()) } else { write_npy(&path, &tensor) };
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
pub(super) fn write_npy(path: &Path, tensor: &Tensor) -> Result<()> {
    let (header, values): (_, &[u8]) = match tensor {
        Tensor::F32(a) => (npy_header::<f32>(a.shape()), bytemuck::cast_slice(a.as_slice().expect("C order"))),
        Tensor::I64(a) => (npy_header::<i64>(a.shape()), bytemuck::cast_slice(a.as_slice().expect("C order"))),
    };
    write_whole(path, &[&header, values])
}

/// The `.npy` header of an array of `A` of `shape`, in C order.
pub(super) fn npy_header<A: WritableElement>(shape: &[usize]) -> Vec<u8> {
    let header = Header { type_descriptor: A::type_descriptor(), layout: Layout::Standard, shape: shape.to_vec() };
    header.to_bytes().expect("a shape of a few dimensions always has a header")
}

/// Writes `parts` one after the other to `.<name>.tmp` beside `path`, then renames that to
/// `path`: the file under its real name is always whole. A new file every time, so a file the
/// user hard-linked elsewhere, or mapped into memory, keeps the previous run's values.
pub(super) fn write_whole(path: &Path, parts: &[&[u8]]) -> Result<()> {
    let temp = temporary(path);
    let failed = |e: std::io::Error| {
        let _ = std::fs::remove_file(&temp);
        BertError::Dump { path: path.into(), problem: format!("cannot write: {e}") }
    };
    // A leftover of a killed run is ours (it has our name in our directory); `create_new` then
    // never follows a symbolic link planted under the name.
    let _ = std::fs::remove_file(&temp);
    let mut file: File = OpenOptions::new().write(true).create_new(true).open(&temp).map_err(failed)?;
    for part in parts {
        file.write_all(part).map_err(failed)?;
    }
    drop(file);
    std::fs::rename(&temp, path).map_err(failed)
}

/// `.<name>.tmp` beside `path`.
pub(super) fn temporary(path: &Path) -> PathBuf {
    let name = path.file_name().expect("a file path").to_string_lossy();
    path.with_file_name(format!(".{name}.tmp"))
}
