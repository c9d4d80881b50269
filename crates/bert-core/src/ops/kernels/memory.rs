//! Memory freed by one pass, kept for the next.
//!
//! A forward and backward pass allocates and frees hundreds of arrays, many of them megabytes
//! (a dense layer's weight gradient, the MLM logits and their gradient). glibc's allocator gives
//! an allocation above its threshold (128 KiB at first, rising to at most 32 MiB as large blocks
//! are freed) its own fresh mapping and returns it to the system when it is freed, and it
//! returns the top of its heap too, once more than 128 KiB of it is free. Every such array is
//! then new pages again, each zeroed by the kernel on its first touch: on a bert-base-sized
//! model at 128 tokens this was a fifth of the time of a forward and backward pass, in system
//! time (BENCHMARKS.md).
//!
//! [`keep_freed_memory`] makes every allocation come from the heap (none gets a mapping of its
//! own; glibc still maps one too large for a helper thread's arena, about 64 MiB, but the
//! command's pass allocates its arrays on the main thread, from the main heap) and never gives
//! the heap back. The largest resident size of a bench run of forward and backward passes did
//! not change; each array after the first of its size is memory the process already has. A process then holds its largest footprint until it exits, which is
//! the right trade for a command, but not always for a notebook's interpreter, where the memory
//! would stay held after the trace; so the command calls it, and the Python module leaves it to
//! its caller (`bert_trace.keep_freed_memory()`).

/// Keeps freed memory in the process for later allocations (see the module documentation).
/// Returns whether the allocator took the settings: true with glibc, false elsewhere, where
/// nothing changes. It applies to allocations made after the call, so it belongs at the start
/// of `main`, before the first large allocation (or, in Python, once, early).
pub fn keep_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes the allocator's parameters, under its own lock.
        unsafe {
            // No allocation gets its own mapping: the MLM logits of 512 tokens (62.5 MB) were
            // above the largest threshold glibc accepts (32 MiB), and their fresh pages took the
            // decoder's product from 89% to 65% of the FMA peak.
            let no_mappings = libc::mallopt(libc::M_MMAP_MAX, 0) == 1;
            // -1 (as size_t, the largest) turns trimming off, as mallopt(3) documents; c_int::MAX
            // would still trim once 2 GiB at the heap's top were free.
            let no_trimming = libc::mallopt(libc::M_TRIM_THRESHOLD, -1) == 1;
            no_mappings && no_trimming
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
