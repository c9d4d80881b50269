//! The machinery below the operations: a packed matrix product (`gemm.rs`, `pack.rs`, on the
//! strided matrices of `matrix.rs`), dot products in f64 for layers with few outputs
//! (`narrow.rs`), loops
//! compiled for the widest vector instructions the CPU has (`simd.rs`, `elementwise.rs`, and the
//! sums of a stage's statistics in `statistics.rs`), the thread pool they share (`threads.rs`),
//! the allocator's setting that keeps freed memory for the next pass (`memory.rs`), an
//! allocator that does the same for one library's own blocks, for a while (`recycling.rs`),
//! a large array's copy on every thread (`copy.rs`), dropout's masks drawn on every thread
//! (`dropout_mask.rs`), and a matrix's column sums on every thread (`column_sums.rs`).
//!
//! Nothing above `ops/` calls into this folder: an operation picks its kernel itself, and falls
//! back to its reference implementation where there is none (another CPU, another layout). Only
//! the thread and memory settings are public, through [`crate::ops`] (and the pool's
//! element-wise split, for the optimizer).

pub(crate) mod column_sums;
pub(crate) mod copy;
pub(crate) mod dropout_mask;
pub(crate) mod elementwise;
pub(crate) mod gemm;
mod matrix;
pub(crate) mod memory;
pub(crate) mod narrow;
mod pack;
pub(crate) mod recycling;
pub(crate) mod simd;
pub(crate) mod statistics;
pub(crate) mod threads;

/// The fast kernels this CPU runs, by name (for `--kernels` messages and the kernel tests).
pub fn available() -> Vec<&'static str> {
    let mut names = gemm::kernel_names();
    names.push(simd::vector_width());
    names
}

#[cfg(test)]
mod tests {
    /// Says which kernels this CPU runs (so a test log shows what the kernel tests exercised),
    /// and fails when one that `BERT_TRACE_EXPECT_KERNELS` names is missing: CI names the ones
    /// its machine has, so that tests which find no kernel cannot pass by testing nothing.
    #[test]
    fn the_kernels_this_machine_is_expected_to_have_are_there() {
        let available = super::available();
        println!("fast kernels on this CPU: {available:?}");
        let Ok(expected) = std::env::var("BERT_TRACE_EXPECT_KERNELS") else { return };
        let missing: Vec<&str> = expected
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty() && !available.iter().any(|k| k.contains(name)))
            .collect();
        assert!(
            missing.is_empty(),
            "BERT_TRACE_EXPECT_KERNELS names {missing:?}, which this CPU lacks; it has {available:?}"
        );
    }
}
