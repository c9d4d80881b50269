//! How many threads the fast kernels use, and the pool they run on.
//!
//! Nearly all of BERT's arithmetic is matrix products. The dense layers and attention's per-head
//! products go through `gemm.rs`, which splits its output between the threads of our pool
//! ([`for_each_part`], [`for_each_range`]); so do softmax, the activations and the statistics of
//! `pass/summary.rs` on large tensors.
//!
//! The count is a call to [`set_threads`] (the caller's choice: `bert-trace --threads N`,
//! `BERT_TRACE_THREADS`, Python's `threads=`), or otherwise the number of physical cores
//! (`num_cpus::get_physical`: hyper-threads share one core's vector units, so they add little to
//! matrix products). It is fixed at the first forward pass (or the first call of
//! [`set_threads`]) for the life of the process. The library reads no environment variable.
//!
//! The reference operations multiply matrices with ndarray, which calls the `matrixmultiply`
//! crate; with ndarray's `matrixmultiply-threading` feature that keeps a pool of its own, sized
//! once, at its first product, from the environment variable [`MATMUL_ENV_VAR`] (else the
//! physical cores), never more than [`MAX_MATMUL_THREADS`]. The library never sets it: the
//! binary's `main` and the Python module's initialisation do, before any thread starts, since
//! setting a variable races with any thread reading the environment.
//!
//! Whatever the count, every output element is computed by one thread, with its sum in a fixed
//! order, so results do not depend on it (tested to the bit).

use std::sync::OnceLock;

/// The variable matrixmultiply reads at its first product (see the module documentation).
pub const MATMUL_ENV_VAR: &str = "MATMUL_NUM_THREADS";

/// The most threads matrixmultiply can use; it clamps larger requests to this.
pub const MAX_MATMUL_THREADS: usize = 4;

/// Element-wise loops over fewer values than this run on the calling thread alone: below it,
/// handing work to the pool (a few microseconds) costs more than the second thread saves.
pub(crate) const PARALLEL_MIN_LEN: usize = 1 << 15;

/// The most threads bert-core starts: 64, or the machine's logical CPUs if it has more. More
/// threads than CPUs only take turns on them, and a count far beyond (a typo such as 1024)
/// spends seconds starting threads that then wait.
pub fn max_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).max(64)
}

/// The thread count, fixed by [`set_threads`] or at the first call of [`threads`].
static CHOSEN: OnceLock<usize> = OnceLock::new();

/// Why a thread count was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ThreadsError {
    #[error("{setting} is `{value}`, expected a whole number of threads from 1 to {max}")]
    OutOfRange { setting: &'static str, value: String, max: usize },
    #[error("the thread count is already fixed at {fixed} (by the first forward pass or an earlier setting), so {wanted} cannot take effect")]
    TooLate { fixed: usize, wanted: usize },
}

/// Uses `n` threads (1 to [`max_threads`]) for this process's forward passes and returns the
/// number that will be used. After the first forward pass the count is fixed; asking for
/// another number then is [`ThreadsError::TooLate`].
pub fn set_threads(n: usize) -> Result<usize, ThreadsError> {
    check(n, "the thread count", &n.to_string())?;
    let fixed = *CHOSEN.get_or_init(|| n);
    if fixed == n {
        Ok(n)
    } else {
        Err(ThreadsError::TooLate { fixed, wanted: n })
    }
}

/// Checks a thread count from `setting` (written `value` there).
pub fn check(n: usize, setting: &'static str, value: &str) -> Result<usize, ThreadsError> {
    let max = max_threads();
    if (1..=max).contains(&n) {
        Ok(n)
    } else {
        Err(ThreadsError::OutOfRange { setting, value: value.to_string(), max })
    }
}

/// The number of threads the forward pass uses. The first call fixes it, if [`set_threads`]
/// has not: to the number of physical cores.
pub fn threads() -> usize {
    *CHOSEN.get_or_init(|| num_cpus::get_physical().clamp(1, max_threads()))
}

/// Splits `data` into one part per thread, each a whole number of `unit`s and at least
/// `min_units` of them, and runs `work(first_unit, part)` on all parts at once, on the [`pool`].
/// When there is only enough for one part, or when called from a part of an outer split, it is
/// a plain call.
pub(crate) fn for_each_part<T: Send>(
    data: &mut [T],
    unit: usize,
    min_units: usize,
    work: impl Fn(usize, &mut [T]) + Sync,
) {
    let units = data.len() / unit.max(1);
    let parts = threads().min(units / min_units.max(1)).max(1);
    if parts == 1 || in_pool() {
        return work(0, data);
    }
    let units_per_part = units.div_ceil(parts);
    pool().scope(|scope| {
        for (i, chunk) in data.chunks_mut(units_per_part * unit).enumerate() {
            let work = &work;
            scope.spawn(move |_| work(i * units_per_part, chunk));
        }
    });
}

/// Splits `0..count` into one contiguous range per thread and runs `work(range)` on all of them
/// at once, on the [`pool`].
pub(crate) fn for_each_range(count: usize, work: impl Fn(std::ops::Range<usize>) + Sync) {
    let parts = threads().min(count).max(1);
    if parts == 1 || in_pool() {
        return work(0..count);
    }
    let per_part = count.div_ceil(parts);
    pool().scope(|scope| {
        for start in (0..count).step_by(per_part) {
            let work = &work;
            scope.spawn(move |_| work(start..count.min(start + per_part)));
        }
    });
}

/// Runs `work` on every item at once, the items shared between the threads in contiguous
/// runs, on the [`pool`]: for loops over several slices at once (an optimizer's parameter,
/// gradient and moments), cut by [`part_len`].
pub(crate) fn for_each_item<T: Send>(items: Vec<T>, work: impl Fn(T) + Sync) {
    let parts = threads().min(items.len()).max(1);
    if parts == 1 || in_pool() {
        return items.into_iter().for_each(work);
    }
    let per_part = items.len().div_ceil(parts);
    let mut items = items.into_iter();
    pool().scope(|scope| loop {
        let run: Vec<T> = items.by_ref().take(per_part).collect();
        if run.is_empty() {
            break;
        }
        let work = &work;
        scope.spawn(move |_| run.into_iter().for_each(work));
    });
}

/// The length of each thread's part of `len` element-wise values: all of them when they are
/// too few to be worth sharing ([`PARALLEL_MIN_LEN`]).
pub(crate) fn part_len(len: usize) -> usize {
    if len < PARALLEL_MIN_LEN {
        len.max(1)
    } else {
        len.div_ceil(threads())
    }
}

/// Whether this thread is one of the pool's: work it splits further runs on it alone (all the
/// pool's threads are already busy with parts of the outer loop).
fn in_pool() -> bool {
    pool().current_thread_index().is_some()
}

/// The pool of [`threads`] threads our own loops run on. It lives as long as the process:
/// starting a thread per call would cost about 50 µs each time.
fn pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads())
            .thread_name(|i| format!("bert-core-{i}"))
            .build()
            .expect("the thread pool starts")
    })
}
