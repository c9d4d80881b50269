//! The machinery below the operations: a packed matrix product (`gemm.rs`, `pack.rs`), loops
//! compiled for the widest vector instructions the CPU has (`simd.rs`, `elementwise.rs`), and
//! the thread pool they share (`threads.rs`).
//!
//! Nothing above `ops/` calls into this folder: an operation picks its kernel itself, and falls
//! back to its reference implementation where there is none (another CPU, another layout). Only
//! the thread setting is public, through [`crate::ops`].

pub(crate) mod elementwise;
pub(crate) mod gemm;
mod pack;
pub(crate) mod simd;
pub(crate) mod threads;

/// The fast kernels this CPU runs, by name (for `--kernels` messages and the kernel tests).
pub fn available() -> Vec<&'static str> {
    let mut names = gemm::kernel_names();
    names.push(simd::vector_width());
    names
}
