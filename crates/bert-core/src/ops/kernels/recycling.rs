//! An allocator that keeps the large blocks one pass frees for the next pass, and gives them
//! back to the system once they have gone unused for a while.
//!
//! A pass that keeps every stage (the Python module's `trace()`) allocates hundreds of
//! megabytes of arrays: a bert-base-sized model at 512 tokens keeps about 700 MB. glibc's
//! allocator gives each large block fresh pages from the kernel (a mapping of its own, or the
//! top of a heap that it trims when the block is freed), and every fresh page is zeroed by the
//! kernel on its first touch: in a loop of traces that was a fifth of each trace's time.
//! [`keep_freed_memory`](super::memory::keep_freed_memory) removes that cost for the command by
//! changing glibc's settings for the whole process, which holds the process's largest footprint
//! until it exits: the right trade for a command, not for a notebook's interpreter, whose other
//! libraries it would change too.
//!
//! [`Recycling`] is the same idea kept to one library's own allocations, and bounded in time
//! and size, as jemalloc's decay of unused pages is: installed as a Rust library's global
//! allocator (the Python extension's), a freed block of at least [`LARGE`] bytes is kept, and an
//! allocation of the same size and alignment takes it back instead of asking the system. A kept
//! block goes back to the system once it has been unused for [`Recycling::set_idle`]'s time (2 s
//! unless set), when the kept blocks would pass [`HELD_AT_MOST`] bytes (the oldest first), or
//! when [`SLOTS`] blocks are already kept. Freeing happens in [`Recycling::release_idle`], which
//! a thread of [`Recycling::start_releasing`] calls every few hundred milliseconds, and in
//! `dealloc` for the oldest blocks when a new one does not fit.
//!
//! Blocks are matched by their exact size (rounded up to whole pages) and alignment: BERT's
//! layers are alike, so the arrays of one pass recur with the same shapes in the next pass of
//! the same text length, and within one pass from layer to layer. Anything smaller than
//! [`LARGE`], or aligned to more than a page, goes to the system allocator unchanged.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Blocks of at least this many bytes are kept when freed: glibc's allocator gives them fresh
/// pages at first (its threshold for a mapping of their own starts here), and below it, its own
/// heap already reuses freed memory.
pub const LARGE: usize = 128 << 10;

/// At most this many bytes are kept at once; past it the oldest kept blocks are freed.
pub const HELD_AT_MOST: usize = 4 << 30;

/// At most this many blocks are kept at once.
pub const SLOTS: usize = 1024;

const PAGE: usize = 4096;

/// A freed block, kept. The pointer is an address: the block belongs to no one until it is
/// handed out again.
#[derive(Clone, Copy)]
struct Kept {
    address: usize,
    layout: Layout,
    since: Instant,
}

struct Shelf {
    blocks: [Option<Kept>; SLOTS],
    bytes: usize,
}

/// A global allocator that keeps freed large blocks for a while (see the module documentation).
pub struct Recycling {
    kept: Mutex<Shelf>,
    idle_ms: AtomicU64,
    releasing: AtomicBool,
}

impl Default for Recycling {
    fn default() -> Self {
        Self::new()
    }
}

impl Recycling {
    pub const fn new() -> Recycling {
        Recycling {
            kept: Mutex::new(Shelf { blocks: [const { None }; SLOTS], bytes: 0 }),
            idle_ms: AtomicU64::new(2000),
            releasing: AtomicBool::new(false),
        }
    }

    /// How long a kept block may go unused before [`Recycling::release_idle`] frees it.
    pub fn set_idle(&self, idle: Duration) {
        self.idle_ms.store(idle.as_millis().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
    }

    /// How many bytes are kept now, in how many blocks.
    pub fn held(&self) -> (usize, usize) {
        let kept = self.lock();
        (kept.bytes, kept.blocks.iter().flatten().count())
    }

    /// Frees every kept block that has been unused for the idle time.
    pub fn release_idle(&self) {
        let idle = Duration::from_millis(self.idle_ms.load(Ordering::Relaxed));
        let now = Instant::now();
        let mut guard = self.lock();
        let kept = &mut *guard;
        for slot in kept.blocks.iter_mut() {
            if slot.is_some_and(|block| now.duration_since(block.since) >= idle) {
                let block = slot.take().expect("checked above");
                // SAFETY: a kept block was allocated by System with this layout and is no one's.
                unsafe { System.dealloc(block.address as *mut u8, block.layout) };
                kept.bytes -= block.layout.size();
            }
        }
    }

    /// Starts, once, a thread that calls [`Recycling::release_idle`] every quarter of the idle
    /// time (at least every 50 ms, at most every second) for as long as the process lives.
    ///
    /// It also makes `fork` safe: the lock is taken before the process forks and released after,
    /// in both processes, so that the child never starts with it held by a thread it does not
    /// have (Python's `multiprocessing` forks). The child has no releasing thread: its kept
    /// blocks are freed only as later ones push them out.
    pub fn start_releasing(&'static self) {
        if self.releasing.swap(true, Ordering::Relaxed) {
            return;
        }
        #[cfg(unix)]
        forking::register(self);
        let started = std::thread::Builder::new().name("bert-trace memory".into()).spawn(move || loop {
            let idle = self.idle_ms.load(Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis((idle / 4).clamp(50, 1000)));
            self.release_idle();
        });
        if started.is_err() {
            // Without the thread, kept blocks are freed only as later ones push them out.
            self.releasing.store(false, Ordering::Relaxed);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shelf> {
        // The lock is never held across anything that can panic, so it is never poisoned; if
        // it were, the blocks it holds are still consistent.
        self.kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A kept block of exactly `layout`, taken out of the cache.
    fn take(&self, layout: Layout) -> Option<*mut u8> {
        let mut guard = self.lock();
        let kept = &mut *guard;
        // The most recently freed of that size: its pages are the likeliest to be in cache.
        let slot = kept
            .blocks
            .iter_mut()
            .filter(|slot| slot.is_some_and(|block| block.layout == layout))
            .max_by_key(|slot| slot.expect("filtered").since)?;
        let block = slot.take().expect("filtered");
        kept.bytes -= layout.size();
        Some(block.address as *mut u8)
    }

    /// Keeps a freed block, freeing the oldest kept ones when it would not fit otherwise.
    ///
    /// # Safety
    /// `ptr` was allocated by System with `layout` and is no one's now.
    unsafe fn keep(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() > HELD_AT_MOST {
            return System.dealloc(ptr, layout);
        }
        let mut kept = self.lock();
        loop {
            let full = kept.blocks.iter().all(Option::is_some);
            if !full && kept.bytes + layout.size() <= HELD_AT_MOST {
                break;
            }
            let oldest =
                kept.blocks.iter_mut().filter(|slot| slot.is_some()).min_by_key(|slot| slot.expect("filtered").since);
            let block = oldest.expect("something is kept when the cache is full").take().expect("filtered");
            System.dealloc(block.address as *mut u8, block.layout);
            kept.bytes -= block.layout.size();
        }
        let free = kept.blocks.iter_mut().find(|slot| slot.is_none()).expect("made room above");
        *free = Some(Kept { address: ptr as usize, layout, since: Instant::now() });
        kept.bytes += layout.size();
    }
}

/// The lock held across `fork` (see [`Recycling::start_releasing`]).
#[cfg(unix)]
mod forking {
    use std::cell::RefCell;
    use std::sync::atomic::{AtomicPtr, Ordering};
    use std::sync::MutexGuard;

    use super::{Recycling, Shelf};

    /// The allocator whose lock the handlers take: the one `register` was first called with.
    static MEMORY: AtomicPtr<Recycling> = AtomicPtr::new(std::ptr::null_mut());

    thread_local! {
        /// The lock, held by the thread that forks from before the fork until after it.
        static HELD: RefCell<Option<MutexGuard<'static, Shelf>>> = const { RefCell::new(None) };
    }

    pub(super) fn register(memory: &'static Recycling) {
        let first = MEMORY.compare_exchange(
            std::ptr::null_mut(),
            memory as *const Recycling as *mut Recycling,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if first.is_ok() {
            // SAFETY: the handlers are plain functions that live as long as the process.
            unsafe { libc::pthread_atfork(Some(before), Some(after), Some(after)) };
        }
    }

    extern "C" fn before() {
        // SAFETY: MEMORY is set before the handlers are registered, to a `&'static`.
        let memory = unsafe { &*MEMORY.load(Ordering::Acquire) };
        // `try_with`: a thread whose locals are already gone (a fork from a thread-local's
        // destructor) forks without the lock rather than aborting the process.
        let _ = HELD.try_with(|held| *held.borrow_mut() = Some(memory.lock()));
    }

    extern "C" fn after() {
        let _ = HELD.try_with(|held| drop(held.borrow_mut().take()));
    }
}

/// The layout a large block is allocated with: whole pages, so that arrays whose sizes differ
/// by less than a page share blocks. None for a block left to the system as it is.
fn large(layout: Layout) -> Option<Layout> {
    if layout.size() < LARGE || layout.align() > PAGE {
        return None;
    }
    Layout::from_size_align(layout.size().checked_next_multiple_of(PAGE)?, layout.align()).ok()
}

// SAFETY: every block handed out is either System's (with the layout it was asked for, or that
// layout rounded up to whole pages, which is at least as large and as aligned), or a kept block
// of exactly the rounded layout, which no one else holds: it left the cache under the lock.
unsafe impl GlobalAlloc for Recycling {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match large(layout) {
            None => System.alloc(layout),
            Some(rounded) => self.take(rounded).unwrap_or_else(|| System.alloc(rounded)),
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match large(layout) {
            None => System.alloc_zeroed(layout),
            Some(rounded) => match self.take(rounded) {
                Some(ptr) => {
                    ptr.write_bytes(0, layout.size());
                    ptr
                }
                None => System.alloc_zeroed(rounded),
            },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match large(layout) {
            None => System.dealloc(ptr, layout),
            Some(rounded) => self.keep(ptr, rounded),
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        if large(layout).is_none() && large(new_layout).is_none() {
            return System.realloc(ptr, layout, new_size);
        }
        let new = self.alloc(new_layout);
        if !new.is_null() {
            std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
            self.dealloc(ptr, layout);
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 16).expect("a valid layout")
    }

    #[test]
    fn a_freed_large_block_serves_the_next_allocation_of_its_size_and_only_that() {
        let memory = Recycling::new();
        unsafe {
            let first = memory.alloc(layout(1 << 20));
            first.write_bytes(7, 1 << 20);
            memory.dealloc(first, layout(1 << 20));
            assert_eq!(memory.held(), (1 << 20, 1), "the freed block is kept");
            // A size in the same whole pages takes it back; another size does not.
            let other = memory.alloc(layout(2 << 20));
            assert_eq!(memory.held(), (1 << 20, 1), "a block of another size is not handed out");
            let again = memory.alloc(layout((1 << 20) - 100));
            assert_eq!(again, first, "the kept block is handed out again");
            assert_eq!(memory.held(), (0, 0));
            memory.dealloc(again, layout((1 << 20) - 100));
            // Zeroed memory is zero even when it is a kept block.
            let zeroed = memory.alloc_zeroed(layout(1 << 20));
            assert_eq!(zeroed, first);
            assert!(std::slice::from_raw_parts(zeroed, 1 << 20).iter().all(|&b| b == 0), "alloc_zeroed zeroes");
            memory.dealloc(zeroed, layout(1 << 20));
            memory.dealloc(other, layout(2 << 20));
            assert_eq!(memory.held(), (3 << 20, 2));
            // Small blocks and over-aligned ones are never kept.
            let small = memory.alloc(layout(LARGE - 1));
            memory.dealloc(small, layout(LARGE - 1));
            let aligned = Layout::from_size_align(1 << 20, 2 * PAGE).expect("valid");
            let over = memory.alloc(aligned);
            assert_eq!(over as usize % (2 * PAGE), 0);
            memory.dealloc(over, aligned);
            assert_eq!(memory.held(), (3 << 20, 2));
            memory.set_idle(Duration::ZERO);
            memory.release_idle();
            assert_eq!(memory.held(), (0, 0), "idle blocks are freed");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_process_forked_while_another_thread_holds_the_lock_finds_it_free() {
        static MEMORY: Recycling = Recycling::new();
        MEMORY.start_releasing();
        let (taken, holding) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let guard = MEMORY.lock();
            taken.send(()).expect("the test waits");
            std::thread::sleep(Duration::from_millis(200));
            drop(guard);
        });
        holding.recv().expect("the lock is held");
        // SAFETY: the child only allocates, frees and exits.
        let child = unsafe { libc::fork() };
        if child == 0 {
            unsafe {
                let block = MEMORY.alloc(layout(LARGE));
                MEMORY.dealloc(block, layout(LARGE));
                libc::_exit(0);
            }
        }
        assert!(child > 0, "fork failed");
        let begun = Instant::now();
        let mut status = 0;
        while unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) } == 0 {
            if begun.elapsed() > Duration::from_secs(10) {
                unsafe { libc::kill(child, libc::SIGKILL) };
                panic!("the child waited for a lock no thread of its own held");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child's status {status}");
        holder.join().expect("the holder finishes");
    }

    #[test]
    fn blocks_unused_for_less_than_the_idle_time_stay_and_the_oldest_go_first_when_full() {
        let memory = Recycling::new();
        memory.set_idle(Duration::from_secs(3600));
        unsafe {
            let blocks: Vec<*mut u8> = (0..SLOTS + 3).map(|_| memory.alloc(layout(LARGE))).collect();
            for &block in &blocks {
                memory.dealloc(block, layout(LARGE));
            }
            memory.release_idle();
            assert_eq!(memory.held(), (SLOTS * LARGE, SLOTS), "at most SLOTS blocks, none idle long enough to go");
            // The three freed first went to make room: the kept ones are the last SLOTS.
            let kept: Vec<usize> = memory.lock().blocks.iter().flatten().map(|b| b.address).collect();
            assert!(blocks[..3].iter().all(|b| !kept.contains(&(*b as usize))));
            // Growing a large block keeps its values.
            let grown = memory.alloc(layout(LARGE));
            grown.write_bytes(5, LARGE);
            let grown = memory.realloc(grown, layout(LARGE), 3 * LARGE);
            assert!(std::slice::from_raw_parts(grown, LARGE).iter().all(|&b| b == 5), "realloc copies");
            memory.dealloc(grown, layout(3 * LARGE));
            memory.set_idle(Duration::ZERO);
            memory.release_idle();
            assert_eq!(memory.held(), (0, 0));
        }
    }
}
