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
//!
//! The pool is the calling thread and [`threads`] − 1 helpers ([`run_parts`]): the caller runs
//! the first part of each split itself and hands one part to each helper. Between splits a
//! helper spins for [`SPIN`] before it sleeps, since a forward pass splits its work every few
//! tens of microseconds and waking a sleeping thread is a system call on each side. (A rayon
//! pool, which this replaced, woke its workers for every split and left the caller waiting:
//! 0.84 / 0.92 / 0.97 of its forward's time at 12 / 128 / 512 tokens, BENCHMARKS.md.)

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
    if parts == 1 || in_split() {
        return work(0, data);
    }
    let units_per_part = units.div_ceil(parts);
    // The last part takes the values past the last whole unit too: a part of their own would be
    // one part more than there are threads, and `run_parts` would run every part on this one.
    let mut chunks: Vec<std::sync::Mutex<Option<&mut [T]>>> = Vec::with_capacity(parts);
    let mut rest = data;
    while !rest.is_empty() {
        let take = if chunks.len() + 1 == parts { rest.len() } else { rest.len().min(units_per_part * unit) };
        let (chunk, after) = rest.split_at_mut(take);
        chunks.push(std::sync::Mutex::new(Some(chunk)));
        rest = after;
    }
    run_parts(chunks.len(), &|i| {
        let chunk = chunks[i].lock().expect("not poisoned").take().expect("each part runs once");
        work(i * units_per_part, chunk)
    });
}

/// [`for_each_part`] by rows of `width` values: `work(row, values)` for every row, the rows
/// shared between the threads, at least `min_rows` to a part. For loops whose rows are each a
/// computation of their own, so that how they are shared changes no bit.
pub(crate) fn for_each_row<T: Send>(
    data: &mut [T],
    width: usize,
    min_rows: usize,
    work: impl Fn(usize, &mut [T]) + Sync,
) {
    for_each_part(data, width, min_rows, |first, part| {
        for (i, row) in part.chunks_mut(width.max(1)).enumerate() {
            work(first + i, row);
        }
    });
}

/// Splits `0..count` into one contiguous range per thread and runs `work(range)` on all of them
/// at once, on the [`pool`].
pub(crate) fn for_each_range(count: usize, work: impl Fn(std::ops::Range<usize>) + Sync) {
    let parts = threads().min(count).max(1);
    if parts == 1 || in_split() {
        return work(0..count);
    }
    let per_part = count.div_ceil(parts);
    run_parts(count.div_ceil(per_part), &|i| work(i * per_part..count.min((i + 1) * per_part)));
}

/// Runs `work` on every item at once, the items shared between the threads in contiguous
/// runs, on the [`pool`]: for loops over several slices at once (an optimizer's parameter,
/// gradient and moments), cut by [`part_len`].
pub(crate) fn for_each_item<T: Send>(items: Vec<T>, work: impl Fn(T) + Sync) {
    let parts = threads().min(items.len()).max(1);
    if parts == 1 || in_split() {
        return items.into_iter().for_each(work);
    }
    let per_part = items.len().div_ceil(parts);
    let mut items = items.into_iter();
    let mut runs = Vec::new();
    loop {
        let run: Vec<T> = items.by_ref().take(per_part).collect();
        if run.is_empty() {
            break;
        }
        runs.push(std::sync::Mutex::new(Some(run)));
    }
    run_parts(runs.len(), &|i| {
        let run = runs[i].lock().expect("not poisoned").take().expect("each part runs once");
        run.into_iter().for_each(&work)
    });
}

/// `work` of every item, in the items' order, the items shared between the threads in runs of
/// `at_once`: for work whose result depends on its item alone (tokenizing a corpus's lines), so
/// that the results are the same whatever the thread count.
pub(crate) fn map_in_order<T: Sync, R: Send>(items: &[T], at_once: usize, work: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let mut done: Vec<Option<R>> = items.iter().map(|_| None).collect();
    let runs: Vec<_> = items.chunks(at_once.max(1)).zip(done.chunks_mut(at_once.max(1))).collect();
    for_each_item(runs, |(items, slots)| {
        for (item, slot) in items.iter().zip(slots) {
            *slot = Some(work(item));
        }
    });
    done.into_iter().map(|result| result.expect("every item is done")).collect()
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

thread_local! {
    /// Whether this thread is running a part of a split: a helper of the [`pool`] always, the
    /// calling thread while it runs its own part. Work it splits further runs on it alone (every
    /// thread is already busy with a part of the outer split).
    static IN_SPLIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn in_split() -> bool {
    IN_SPLIT.get()
}

/// Runs `work(0)`, ..., `work(parts - 1)` at once: part 0 on the calling thread, each other part
/// on a helper of the [`pool`], and returns when all are done. A panic in any part is raised
/// again here, once every part has finished. When another thread is using the pool, or there
/// are more parts than threads, the calling thread runs every part itself, in order: the same
/// results, since a part's work does not depend on the thread that does it.
fn run_parts(parts: usize, work: &(dyn Fn(usize) + Sync)) {
    let pool = pool();
    // A part that panicked leaves the lock poisoned; it guards nothing but the turn, so that is
    // no reason to stop sharing work.
    let dispatch = match pool.dispatch.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    };
    // A process forked from this one (Python's multiprocessing) has none of the helper threads.
    let forked = pool.process != std::process::id();
    if dispatch.is_none() || forked || parts > pool.helpers.len() + 1 {
        return (0..parts).for_each(|i| in_part(|| work(i)));
    }
    let remaining = std::sync::atomic::AtomicUsize::new(parts - 1);
    let panicked = std::sync::Mutex::new(None);
    let tasks: Vec<Task> =
        (1..parts).map(|part| Task { work: erase(work), part, remaining: &remaining, panicked: &panicked }).collect();
    for (helper, task) in pool.helpers.iter().zip(&tasks) {
        helper.give(task);
    }
    // Every helper must be done with its task before `tasks` and `work` go away, also when the
    // calling thread's own part panics: so the panic is caught, and raised after the wait.
    let own = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| in_part(|| work(0))));
    // A part whose helper has not taken it yet (another thread had the helper's core, such as
    // a dump's writing thread) is run here instead of waited for.
    for helper in &pool.helpers[..parts - 1] {
        let task = helper.task.swap(std::ptr::null_mut(), std::sync::atomic::Ordering::SeqCst);
        if !task.is_null() {
            // SAFETY: the task is one of `tasks`, alive until this function returns.
            in_part(|| unsafe { Task::run(task) });
        }
    }
    pool.wait_for(&remaining);
    if let Err(payload) = own {
        std::panic::resume_unwind(payload);
    }
    let helper_panic = panicked.lock().expect("not poisoned").take();
    if let Some(payload) = helper_panic {
        std::panic::resume_unwind(payload);
    }
}

/// Runs `f` marked as a part of a split (see [`IN_SPLIT`]).
fn in_part(f: impl FnOnce()) {
    /// Unmarks the thread also when `f` panics.
    struct Unmark(bool);
    impl Drop for Unmark {
        fn drop(&mut self) {
            IN_SPLIT.set(self.0);
        }
    }
    let _unmark = Unmark(IN_SPLIT.replace(true));
    f()
}

/// How long a waiting thread (a helper between splits, the caller for its helpers) spins before
/// it sleeps. A forward pass hands its parts out every few tens of microseconds; a thread that
/// slept in between had to be woken by a system call each time, about 9 µs of the waker's time
/// on this machine plus the sleeper's own start, which was a fifth of a 128-token MiniLM pass's
/// samples.
const SPIN: std::time::Duration = std::time::Duration::from_micros(100);

/// A thread's wait for something another thread does: [`Spin::again`] is true (after a pause
/// of a few cycles) until [`SPIN`] has passed. Every 64 turns the waiting thread also offers its
/// core to any other thread ready to run, such as a dump's writing thread.
struct Spin {
    start: std::time::Instant,
    turns: u32,
}

impl Spin {
    fn new() -> Spin {
        Spin { start: std::time::Instant::now(), turns: 0 }
    }

    /// Whether to go on spinning; the clock is read every 64 turns.
    fn again(&mut self) -> bool {
        self.turns = self.turns.wrapping_add(1);
        if !self.turns.is_multiple_of(64) {
            std::hint::spin_loop();
            return true;
        }
        if self.start.elapsed() < SPIN {
            std::thread::yield_now();
            return true;
        }
        false
    }
}

/// One part of a split, handed to a helper: everything on the calling thread's stack, which
/// outlives the part (`run_parts` waits for it).
struct Task<'a> {
    /// `work`, with its lifetime erased (see [`erase`]).
    work: *const (dyn Fn(usize) + Sync + 'static),
    part: usize,
    remaining: &'a std::sync::atomic::AtomicUsize,
    panicked: &'a std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

impl Task<'_> {
    /// Runs the part, keeps its panic if it panics, and counts it done. Whoever took the task
    /// from its helper's slot runs it, once.
    ///
    /// The task may be gone as soon as it is counted, while this function is still running, so
    /// it takes a pointer rather than a reference (a reference argument must stay valid for the
    /// whole call) and copies out what it needs first; the counters it keeps references to are
    /// atomics and a mutex, whose references may outlive their use.
    ///
    /// # Safety
    /// `task` must point to a task of a split under way in `run_parts`, taken from its helper's
    /// slot by the caller of this function.
    unsafe fn run(task: *const Task<'_>) {
        let Task { work, part, remaining, panicked } = *task;
        // SAFETY: `run_parts` keeps `work` alive until every task is counted done.
        let work = &*work;
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(part))) {
            panicked.lock().expect("not poisoned").get_or_insert(payload);
        }
        let last = remaining.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1;
        // The task may be gone now; the pool, which says whether its caller sleeps, is not.
        if last {
            pool().wake_caller();
        }
    }
}

/// `work` as a pointer that a helper thread can hold: it lives on the calling thread's stack,
/// and `run_parts` does not return before every helper is done with it.
fn erase(work: &(dyn Fn(usize) + Sync)) -> *const (dyn Fn(usize) + Sync + 'static) {
    let work: *const (dyn Fn(usize) + Sync + '_) = work;
    // SAFETY: only the pointer's lifetime changes; `run_parts` keeps the pointee alive for as
    // long as any helper reads it.
    unsafe { std::mem::transmute(work) }
}

/// One helper thread of the [`pool`]: `task` is the part it is to run next (null when none), and
/// `sleeping` says whether it has gone to sleep waiting for one, and needs waking.
struct Helper {
    task: std::sync::atomic::AtomicPtr<Task<'static>>,
    sleeping: std::sync::atomic::AtomicBool,
    thread: OnceLock<std::thread::Thread>,
}

impl Helper {
    /// Hands `task` to this helper, which must have none; wakes it if it sleeps.
    fn give(&self, task: &Task<'_>) {
        use std::sync::atomic::Ordering::SeqCst;
        let task = task as *const Task<'_> as *mut Task<'static>;
        let previous = self.task.swap(task, SeqCst);
        assert!(previous.is_null(), "a helper runs one part at a time");
        // With both sides SeqCst, either the helper sees the task before it sleeps, or this
        // sees it sleeping and wakes it (a wake before its sleep makes the sleep return at once).
        if self.sleeping.load(SeqCst) {
            self.thread.get().expect("the helper has started").unpark();
        }
    }

    /// The helper's life: wait for a task, run it, say it is done; forever.
    fn serve(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        IN_SPLIT.set(true);
        loop {
            let mut spin = Spin::new();
            let task = loop {
                let task = self.task.swap(std::ptr::null_mut(), SeqCst);
                if !task.is_null() {
                    break task;
                }
                if spin.again() {
                    continue;
                }
                self.sleeping.store(true, SeqCst);
                if self.task.load(SeqCst).is_null() {
                    std::thread::park();
                }
                self.sleeping.store(false, SeqCst);
            };
            // SAFETY: the caller of `give` waits in `run_parts` until `remaining` says this task
            // is done, so the task, its `work` and the counters it points to are alive until
            // `run` counts it; nothing of them is touched after that.
            unsafe { Task::run(task) };
        }
    }
}

/// The [`threads`] − 1 helpers our own loops run on beside the calling thread, started at the
/// first split and living as long as the process (starting a thread per call would cost about
/// 50 µs each time). `dispatch` is held by the one thread handing parts out at a time.
struct Pool {
    helpers: Vec<&'static Helper>,
    dispatch: std::sync::Mutex<()>,
    /// The thread waiting for the parts of the split under way, and whether it sleeps.
    caller: std::sync::Mutex<Option<std::thread::Thread>>,
    caller_sleeping: std::sync::atomic::AtomicBool,
    /// The process that started the helpers.
    process: u32,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let helpers: Vec<&'static Helper> = (1..threads())
            .map(|i| {
                let helper: &'static Helper = Box::leak(Box::new(Helper {
                    task: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()),
                    sleeping: std::sync::atomic::AtomicBool::new(false),
                    thread: OnceLock::new(),
                }));
                let handle = std::thread::Builder::new()
                    .name(format!("bert-core-{i}"))
                    .spawn(move || helper.serve())
                    .expect("a helper thread starts");
                helper.thread.set(handle.thread().clone()).expect("set once");
                helper
            })
            .collect();
        Pool {
            helpers,
            dispatch: std::sync::Mutex::new(()),
            caller: std::sync::Mutex::new(None),
            caller_sleeping: std::sync::atomic::AtomicBool::new(false),
            process: std::process::id(),
        }
    })
}

impl Pool {
    /// Waits until `remaining` is 0: spins for [`SPIN`], then sleeps until the helper that
    /// finishes the last part wakes it. Sleeping rather than spinning on matters when another
    /// thread (a dump's writing thread) has taken a helper's core: the caller's core is then
    /// idle, and the system moves the helper there.
    fn wait_for(&self, remaining: &std::sync::atomic::AtomicUsize) {
        use std::sync::atomic::Ordering::SeqCst;
        let mut spin = Spin::new();
        while remaining.load(SeqCst) != 0 {
            if spin.again() {
                continue;
            }
            *self.caller.lock().expect("not poisoned") = Some(std::thread::current());
            // With both sides SeqCst, either the last helper sees the caller sleeping, or the
            // caller sees the count at 0 before it sleeps (see `Helper::give`).
            self.caller_sleeping.store(true, SeqCst);
            if remaining.load(SeqCst) != 0 {
                std::thread::park();
            }
            self.caller_sleeping.store(false, SeqCst);
        }
    }

    /// Wakes the thread waiting in [`Pool::wait_for`], if it sleeps. A wake that comes late,
    /// when that thread has moved on, only makes one of its later sleeps return early, and every
    /// sleep is in a loop that checks what it waits for.
    fn wake_caller(&self) {
        if self.caller_sleeping.load(std::sync::atomic::Ordering::SeqCst) {
            if let Some(caller) = self.caller.lock().expect("not poisoned").as_ref() {
                caller.unpark();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values past the last whole unit go with the last part: there are never more parts than
    /// threads, which would run every part on the calling thread.
    #[test]
    fn a_split_has_at_most_one_part_per_thread_whatever_the_length() {
        for len in [0, 1, 15, 16, 17, 2 * 16 * 4096, 2 * 16 * 4096 + 3, 3 * 16 * 4096 + 5, 200_001] {
            let mut data = vec![0u8; len];
            let parts = std::sync::Mutex::new(Vec::new());
            for_each_part(&mut data, 16, 1024, |first, part| {
                part.fill(1);
                parts.lock().unwrap().push((first, part.len()));
            });
            let mut parts = parts.into_inner().unwrap();
            parts.sort();
            assert!(parts.len() <= threads().max(1), "{len} values: {} parts for {} threads", parts.len(), threads());
            assert!(data.iter().all(|&v| v == 1), "{len} values: every value in a part");
            let mut next = 0;
            for (first, part_len) in parts {
                assert_eq!(first * 16, next, "{len} values: each part starts where the last ended");
                next += part_len;
            }
            assert_eq!(next, len, "{len} values: the parts cover them");
        }
    }

    #[test]
    fn every_part_runs_once_also_when_splits_nest_panic_or_come_from_several_threads() {
        // Each value is written by the part that owns it; a value missed or written twice shows.
        let fill = |data: &mut [u32]| {
            for_each_part(data, 1, 1, |first, part| {
                for (i, v) in part.iter_mut().enumerate() {
                    *v += (first + i) as u32;
                }
            })
        };
        let want: Vec<u32> = (0..1000).collect();
        let mut data = vec![0u32; 1000];
        fill(&mut data);
        assert_eq!(data, want, "one split");

        // A split inside a part runs on that part's thread alone.
        let mut nested = vec![vec![0u32; 1000]; 4];
        for_each_item(nested.iter_mut().collect(), |inner| fill(inner));
        assert!(nested.iter().all(|inner| *inner == want), "splits inside a split");

        // A panic in any part reaches the caller once every part has finished; the pool goes on.
        for panicking in 0..threads() {
            let caught = std::panic::catch_unwind(|| {
                for_each_range(threads(), |range| assert!(!range.contains(&panicking), "part {panicking}"))
            });
            assert!(caught.is_err(), "the panic of part {panicking} is raised in the caller");
        }
        let mut data = vec![0u32; 1000];
        fill(&mut data);
        assert_eq!(data, want, "a split after the panics");

        // Several threads at once: one shares its work, the others run theirs alone.
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..50 {
                        let mut data = vec![0u32; 1000];
                        fill(&mut data);
                        assert_eq!(data, want, "a split beside others");
                    }
                });
            }
        });
    }
}
