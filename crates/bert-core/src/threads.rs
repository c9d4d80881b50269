//! How many threads the forward pass uses, and how to choose it.
//!
//! Nearly all of BERT's arithmetic is matrix products. The dense layers (Q, K, V, the attention
//! output and the feed-forward pair: over 90% of the work) and attention's per-head products go
//! through our own product in [`crate::gemm`], which splits its output between the threads of
//! our pool (`for_each_range`, `for_each_part`); so do softmax, the activation and the
//! statistics of [`crate::summary`] on large tensors.
//!
//! The count is, in order of precedence:
//!
//! - a call to [`set_threads`] (the `bert-trace --threads N` option);
//! - the environment variable `BERT_TRACE_THREADS`, read by [`init_from_env`] or, failing that,
//!   at the first forward pass (a value that is not a whole number from 1 to [`MAX_THREADS`]
//!   is an error from [`init_from_env`], and ignored by the forward pass);
//! - otherwise, the number of physical cores (`num_cpus::get_physical`: hyper-threads share one
//!   core's vector units, so they add little to matrix products).
//!
//! It is fixed at the first forward pass (or the first call of [`set_threads`]) for the life of
//! the process.
//!
//! Two other pools can take part. On CPUs without AVX2 (where [`crate::gemm`] has no kernel),
//! the products go to ndarray's `general_mat_mul`, which calls the `matrixmultiply` crate;
//! with ndarray's `matrixmultiply-threading` feature it keeps a pool of its own, sized once, at
//! its first product, from the environment variable `MATMUL_NUM_THREADS` (else the physical
//! cores), and never more than [`MAX_MATMUL_THREADS`]. With the `blas` feature, OpenBLAS takes
//! the products, with its own thread setting. [`set_threads`] and [`init_from_env`] pass the
//! count on to both, which is why they belong at the start of `main`, before other threads
//! exist: setting `MATMUL_NUM_THREADS` races with any thread reading the environment.
//!
//! Whatever the count, every output element is computed by one thread, with its sum in a fixed
//! order, so results do not depend on it (tested to the bit).

use std::sync::OnceLock;

/// bert-core's environment variable for the thread count.
pub const ENV_VAR: &str = "BERT_TRACE_THREADS";

/// The variable matrixmultiply reads at its first product.
pub const MATMUL_ENV_VAR: &str = "MATMUL_NUM_THREADS";

/// The most threads bert-core starts. More would only contend for the cores of any machine it
/// runs on today, and a count far beyond it (a typo) would fail to start the threads at all.
pub const MAX_THREADS: usize = 1024;

/// The most threads matrixmultiply can use; it clamps larger requests to this.
pub const MAX_MATMUL_THREADS: usize = 4;

/// Element-wise loops over fewer values than this run on the calling thread alone: below it,
/// handing work to the pool (a few microseconds) costs more than the second thread saves.
pub(crate) const PARALLEL_MIN_LEN: usize = 1 << 15;

/// The thread count, fixed by [`set_threads`] or at the first call of [`threads`].
static CHOSEN: OnceLock<usize> = OnceLock::new();

/// Why a thread count was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ThreadsError {
    #[error("{setting} is `{value}`, expected a whole number of threads from 1 to {MAX_THREADS}")]
    OutOfRange { setting: &'static str, value: String },
    #[error("the thread count is already fixed at {fixed} (by the first forward pass or an earlier setting), so {wanted} cannot take effect")]
    TooLate { fixed: usize, wanted: usize },
}

/// Uses `n` threads (1 to [`MAX_THREADS`]) for this process's forward passes and returns the
/// number that will be used.
///
/// Call it at the start of `main`, before other threads exist: it also sets
/// `MATMUL_NUM_THREADS` for matrixmultiply (see the module documentation). After the first
/// forward pass the count is fixed; asking for another number then is
/// [`ThreadsError::TooLate`].
pub fn set_threads(n: usize) -> Result<usize, ThreadsError> {
    if !(1..=MAX_THREADS).contains(&n) {
        return Err(ThreadsError::OutOfRange { setting: "the thread count", value: n.to_string() });
    }
    let fixed = *CHOSEN.get_or_init(|| {
        // Setting a variable races with threads that read the environment at the same moment,
        // which is why this belongs at the start of `main`.
        std::env::set_var(MATMUL_ENV_VAR, n.min(MAX_MATMUL_THREADS).to_string());
        apply_to_blas(n)
    });
    if fixed == n {
        Ok(n)
    } else {
        Err(ThreadsError::TooLate { fixed, wanted: n })
    }
}

/// Applies `BERT_TRACE_THREADS` when it is set (see [`set_threads`]) and returns the thread
/// count the forward pass will use.
pub fn init_from_env() -> Result<usize, ThreadsError> {
    match from_env() {
        Some(Ok(n)) => set_threads(n),
        Some(Err(e)) => Err(e),
        None => Ok(threads()),
    }
}

/// `BERT_TRACE_THREADS`, when it is set and not blank.
fn from_env() -> Option<Result<usize, ThreadsError>> {
    let value = std::env::var(ENV_VAR).ok().filter(|v| !v.trim().is_empty())?;
    Some(match value.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
        _ => Err(ThreadsError::OutOfRange { setting: ENV_VAR, value }),
    })
}

/// The number of threads the forward pass uses. The first call fixes it, if [`set_threads`]
/// has not: to `BERT_TRACE_THREADS`, or else the number of physical cores (at most
/// [`MAX_THREADS`]).
pub fn threads() -> usize {
    *CHOSEN.get_or_init(|| {
        let n = match from_env() {
            Some(Ok(n)) => n,
            _ => num_cpus::get_physical().clamp(1, MAX_THREADS),
        };
        apply_to_blas(n)
    })
}

/// With the `blas` feature, gives OpenBLAS the same count (it would otherwise use every logical
/// CPU, or `OPENBLAS_NUM_THREADS`). Returns `n`.
fn apply_to_blas(n: usize) -> usize {
    #[cfg(feature = "blas")]
    crate::linear::blas_threads(n);
    n
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

/// Runs `job` on the [`pool`] once one of its threads has nothing else to do.
pub(crate) fn spawn(job: impl FnOnce() + Send + 'static) {
    pool().spawn(job)
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
