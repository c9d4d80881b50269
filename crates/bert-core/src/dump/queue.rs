//! The stages waiting to be written, and who writes them while the forward pass computes the
//! next ones.
//!
//! Each queued stage is handed to the forward pass's thread pool as a job that its threads take
//! when they have no arithmetic to do: between two parallel loops, or when one thread has
//! finished its part of a loop before the other. A thread of our own for the writes, as we had
//! before, is a third thread on cores that the pass keeps busy: whenever it runs, it displaces
//! one of the pass's threads, and the whole parallel loop then waits for that thread's part. On
//! the 2-core machine of BENCHMARKS.md, a 12-token rerun takes 0.71 of the time with the writes
//! on the pool instead.
//!
//! The forward pass's own thread helps whenever it would otherwise wait: when the queue is full
//! and at the end, when the last stages are still queued. For a short input the files, not the
//! arithmetic, take most of the time (each new file costs the file system tens to hundreds of
//! µs), so more threads writing at the end finish sooner than one.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use ndarray::{ArrayD, ArrayViewD, Axis, Slice};
use ndarray_npy::npy::header::{Header, Layout};
use ndarray_npy::WritableElement;

use super::carrier::Carriers;
use crate::error::{BertError, Result};
use crate::threads::{self, PARALLEL_MIN_LEN};
use crate::trace::{Tensor, TensorView};

/// How many bytes of copied stages may wait to be written. When the disk is slower than the
/// forward pass, `send` waits (helping) rather than letting the copies fill memory. A stage
/// larger than this is written at once, from the forward pass's own buffer, without a copy.
const QUEUE_BYTES: usize = 64 << 20;

/// How many bytes of written stages' buffers are kept for the copies of later stages. A new
/// buffer is fresh memory from the kernel, which faults in one 4 KiB page at a time on its
/// first write; in a 512-token trace that cost more than the copying itself. The stages of one
/// layer recur in the next, so a few layers' worth of buffers serves them all. (Counting them
/// against [`QUEUE_BYTES`] instead made a 512-token trace 5% slower.)
const SPARE_BYTES: usize = QUEUE_BYTES;

/// One stage to write.
struct Job {
    path: PathBuf,
    /// Whether `path` is the previous run's file, to be written over.
    reuse: bool,
    tensor: Tensor,
}

/// The queue of stages to write.
pub(super) struct Writer {
    shared: Arc<Shared>,
}

struct Shared {
    /// The dump directory, for messages.
    dir: PathBuf,
    queue: Mutex<Queue>,
    /// Signalled when a stage has been written.
    changed: Condvar,
    /// Set by the first write that fails; nothing is written after it.
    failed: AtomicBool,
    /// That write's error, until it is reported.
    error: Mutex<Option<BertError>>,
    /// Buffers of stages already written, for the copies of the next ones (emptied, at most
    /// [`SPARE_BYTES`] in all).
    spares: Mutex<Vec<Vec<f32>>>,
    /// The files that carry stages into place.
    carriers: Carriers,
}

struct Queue {
    jobs: VecDeque<Job>,
    /// Bytes of the stages queued or being written.
    bytes: usize,
    /// Stages queued or being written.
    pending: usize,
}

impl Writer {
    pub fn start(dir: &Path) -> Writer {
        let shared = Arc::new(Shared {
            dir: dir.into(),
            queue: Mutex::new(Queue { jobs: VecDeque::new(), bytes: 0, pending: 0 }),
            changed: Condvar::new(),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            spares: Mutex::new(Vec::new()),
            carriers: Carriers::new(dir),
        });
        Writer { shared }
    }

    /// Writes one stage to `path`: a copy queued for the pool's threads or, for a stage larger
    /// than [`QUEUE_BYTES`] (the scores of a batch of long sequences), at once on this thread,
    /// straight from the view.
    pub fn write(&self, path: PathBuf, reuse: bool, tensor: TensorView<'_>) -> Result<()> {
        self.shared.check()?;
        let tensor = match tensor {
            TensorView::F32(a) => match a.as_slice() {
                Some(values) if values.len() * 4 > QUEUE_BYTES => {
                    return write_npy(&self.shared.carriers, &path, reuse, a.shape(), values)
                }
                _ => Tensor::F32(self.copy(&a)),
            },
            TensorView::I64(a) => Tensor::I64(a.as_standard_layout().into_owned()),
        };
        self.send(Job { path, reuse, tensor })
    }

    /// `a` in C order (the order of a `.npy` file's values), copied into a spare buffer when
    /// one is large enough.
    fn copy(&self, a: &ArrayViewD<'_, f32>) -> ArrayD<f32> {
        let mut buffer = self.shared.spare(a.len());
        copy_c_order_in_parallel(a, &mut buffer);
        ArrayD::from_shape_vec(a.raw_dim(), buffer).expect("the copy holds every value of the view")
    }

    /// Makes the previous run's file `donor` an idle carrier (see `carrier.rs`); false if it
    /// cannot be one.
    ///
    /// This happens at once, on the calling thread, not in the queue: the donor's own stage,
    /// queued later, may then be written by another thread before this stage is, and must find
    /// the donor's name already free rather than see its new file taken for a carrier.
    pub fn adopt(&self, donor: &Path) -> bool {
        self.shared.carriers.adopt(donor)
    }

    /// Queues a stage once the queue has room for it, writing queued stages on this thread
    /// while it waits.
    fn send(&self, job: Job) -> Result<()> {
        let bytes = byte_size(&job.tensor);
        let mut queue = self.shared.lock();
        while queue.bytes > 0 && queue.bytes + bytes > QUEUE_BYTES {
            queue = match queue.jobs.pop_front() {
                Some(waiting) => {
                    drop(queue);
                    self.shared.write(waiting);
                    self.shared.lock()
                }
                None => self.shared.changed.wait(queue).expect("not poisoned"),
            };
        }
        queue.bytes += bytes;
        queue.pending += 1;
        queue.jobs.push_back(job);
        drop(queue);
        // The job writes whichever stage is first in the queue by then, if the forward pass's
        // thread has not written them all; one job per stage queued is enough for all of them.
        let shared = Arc::clone(&self.shared);
        threads::spawn(move || {
            // The lock is released at the end of this statement, before the write.
            let job = shared.lock().jobs.pop_front();
            if let Some(job) = job {
                shared.write(job);
            }
        });
        Ok(())
    }

    /// Writes every queued stage, with this thread's help, and waits for those that the pool's
    /// threads are writing.
    pub fn finish(self) -> Result<()> {
        let Writer { shared } = self;
        loop {
            // The lock is released at the end of this statement, before the write.
            let job = shared.lock().jobs.pop_front();
            let Some(job) = job else { break };
            shared.write(job);
        }
        let mut queue = shared.lock();
        while queue.pending > 0 {
            queue = shared.changed.wait(queue).expect("not poisoned");
        }
        drop(queue);
        shared.carriers.remove_idle();
        shared.check()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().expect("not poisoned")
    }

    /// Writes one stage (unless an earlier one failed), then keeps its buffer for a later copy.
    fn write(&self, job: Job) {
        let Job { path, reuse, tensor } = job;
        if !self.failed.load(Ordering::Acquire) {
            let carriers = &self.carriers;
            let result = match &tensor {
                Tensor::F32(a) => {
                    write_npy(carriers, &path, reuse, a.shape(), a.as_slice().expect("copies are in C order"))
                }
                Tensor::I64(a) => {
                    write_npy(carriers, &path, reuse, a.shape(), a.as_slice().expect("copies are in C order"))
                }
            };
            if let Err(e) = result {
                *self.error.lock().expect("not poisoned") = Some(e);
                self.failed.store(true, Ordering::Release);
            }
        }
        let mut queue = self.lock();
        queue.bytes -= byte_size(&tensor);
        queue.pending -= 1;
        drop(queue);
        self.changed.notify_all();
        if let Tensor::F32(array) = tensor {
            self.keep_spare(array.into_raw_vec_and_offset().0);
        }
    }

    /// A buffer of `len` values: the smallest spare one that is large enough, or else a new
    /// one. Its values are whatever the buffer held before, to be written over.
    fn spare(&self, len: usize) -> Vec<f32> {
        let mut spares = self.spares.lock().expect("not poisoned");
        let best = (0..spares.len()).filter(|&i| spares[i].capacity() >= len).min_by_key(|&i| spares[i].capacity());
        match best {
            Some(i) => {
                let mut buffer = spares.swap_remove(i);
                // A spare usually served a stage of the same size, so this rarely fills anything.
                buffer.resize(len, 0.0);
                buffer
            }
            // Zeroed memory comes from the kernel as pages that fault in on the first write:
            // that write is the copy, which the pool's threads share.
            None => vec![0.0; len],
        }
    }

    /// Keeps a written stage's buffer for a later copy, unless the spares already hold enough.
    fn keep_spare(&self, buffer: Vec<f32>) {
        let mut spares = self.spares.lock().expect("not poisoned");
        let kept: usize = spares.iter().map(Vec::capacity).sum();
        if (kept + buffer.capacity()) * 4 <= SPARE_BYTES {
            spares.push(buffer);
        }
    }

    /// The failure of an earlier write, if any.
    fn check(&self) -> Result<()> {
        if !self.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        // The error itself is handed out once; later checks still fail, so that a manifest is
        // never written after a lost file.
        Err(self.error.lock().expect("not poisoned").take().unwrap_or_else(|| BertError::Dump {
            path: self.dir.clone(),
            problem: "an earlier stage could not be written".into(),
        }))
    }
}

/// Copies the values of `a` into `out`, as long as `a`, in C order. A large stage is split
/// between the pool's threads, which would otherwise wait while this thread copies it alone.
fn copy_c_order_in_parallel(a: &ArrayViewD<'_, f32>, out: &mut [f32]) {
    // The parts of the view along its first axis longer than 1 are contiguous runs of the
    // C-order copy, whatever the view's strides.
    let Some(axis) = a.shape().iter().position(|&n| n > 1) else { return copy_c_order(a, out) };
    let unit: usize = a.shape()[axis + 1..].iter().product();
    if unit == 0 {
        return;
    }
    threads::for_each_part(out, unit, PARALLEL_MIN_LEN.div_ceil(unit), |first, part| {
        let count = part.len() / unit;
        copy_c_order(&a.slice_axis(Axis(axis), Slice::from(first..first + count)), part);
    });
}

/// Copies the values of `a` into `out`, as long as `a`, in C order, on this thread.
fn copy_c_order(a: &ArrayViewD<'_, f32>, out: &mut [f32]) {
    if let Some(values) = a.as_slice() {
        return out.copy_from_slice(values);
    }
    // A transposed view, such as the heads-first [B,nh,T,hs] view of Q, K and V: its last axis
    // is still contiguous in every layout the forward pass emits.
    let row_len = a.shape().last().copied().unwrap_or(1).max(1);
    for (row, out) in a.rows().into_iter().zip(out.chunks_exact_mut(row_len)) {
        match row.as_slice() {
            Some(values) => out.copy_from_slice(values),
            None => out.iter_mut().zip(row).for_each(|(out, value)| *out = *value),
        }
    }
}

/// Writes an array of `shape` whose values, in C order, are `values` as a `.npy` file, byte for
/// byte as ndarray-npy's `write_npy` would: its header, whose type descriptor names this CPU's
/// byte order, then the values as they lie in memory.
fn write_npy<A: WritableElement + bytemuck::Pod>(
    carriers: &Carriers,
    path: &Path,
    reuse: bool,
    shape: &[usize],
    values: &[A],
) -> Result<()> {
    let header = npy_header::<A>(shape)
        .map_err(|e| BertError::Dump { path: path.into(), problem: format!("cannot write: {e}") })?;
    carriers.write(path, reuse, &[&header, bytemuck::cast_slice(values)])
}

/// The `.npy` header of an array of `A` of `shape`, in C order.
fn npy_header<A: WritableElement>(
    shape: &[usize],
) -> std::result::Result<Vec<u8>, ndarray_npy::npy::header::FormatHeaderError> {
    Header { type_descriptor: A::type_descriptor(), layout: Layout::Standard, shape: shape.to_vec() }.to_bytes()
}

/// How long the `.npy` file of an array of `shape` is, with `dtype` as a manifest names it
/// (`float32` or `int64`); None for another dtype or a shape no header can hold.
pub(super) fn npy_file_len(shape: &[usize], dtype: &str) -> Option<u64> {
    let (header, element) = match dtype {
        "float32" => (npy_header::<f32>(shape), 4),
        "int64" => (npy_header::<i64>(shape), 8),
        _ => return None,
    };
    let values = shape.iter().try_fold(element, |bytes: u64, &dim| bytes.checked_mul(dim as u64))?;
    values.checked_add(header.ok()?.len() as u64)
}

fn byte_size(tensor: &Tensor) -> usize {
    match tensor {
        Tensor::F32(a) => a.len() * 4,
        Tensor::I64(a) => a.len() * 8,
    }
}
