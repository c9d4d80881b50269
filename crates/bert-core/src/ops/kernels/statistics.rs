//! The sums behind a stage table's statistics (`pass/summary.rs`): Σv, min and max of f32 values,
//! and Σ(v - mean)², all in f64 so that long sums keep their digits. Each block of values is one
//! task for the threads, summed in `LANES` interleaved partial sums that the compiler keeps in
//! vector registers; the blocks' results are combined in block order, so the numbers do not
//! depend on the thread count.

use super::simd::{lane_sum, vectorized, LANES};
use super::threads::{self, PARALLEL_MIN_LEN};

/// Values per block: each block's sums are one task for the threads.
const BLOCK: usize = PARALLEL_MIN_LEN;

/// (Σ v in f64, min v, max v) of `values`, in block order. A NaN makes the sum NaN; min and max
/// skip it as `f32::min` does, so the caller decides what NaN means.
pub fn sum_min_max(values: &[f32]) -> (f64, f32, f32) {
    let blocks = per_block(values, block_sum_min_max);
    let sum = blocks.iter().map(|p| p.0).sum();
    let min = blocks.iter().map(|p| p.1).fold(f32::INFINITY, f32::min);
    let max = blocks.iter().map(|p| p.2).fold(f32::NEG_INFINITY, f32::max);
    (sum, min, max)
}

/// Σ (v - mean)² of `values` in f64, in block order.
pub fn sum_squared_deviations(values: &[f32], mean: f64) -> f64 {
    per_block(values, |block| block_squared_deviations(block, mean)).iter().sum()
}

/// `f` of each [`BLOCK`] of `values`, in block order, the blocks shared between the threads.
fn per_block<R: Copy + Default + Send>(values: &[f32], f: impl Fn(&[f32]) -> R + Sync) -> Vec<R> {
    let mut results = vec![R::default(); values.len().div_ceil(BLOCK)];
    threads::for_each_part(&mut results, 1, 1, |first, part| {
        for (i, result) in part.iter_mut().enumerate() {
            let start = (first + i) * BLOCK;
            *result = f(&values[start..values.len().min(start + BLOCK)]);
        }
    });
    results
}

vectorized! {
    /// (Σ v in f64, min v, max v) of one block.
    fn block_sum_min_max(values: &[f32]) -> (f64, f32, f32) {
        let mut min = [f32::INFINITY; LANES];
        let mut max = [f32::NEG_INFINITY; LANES];
        let chunks = values.chunks_exact(LANES);
        let tail = chunks.remainder();
        // A comparison and a choice, which compile to the vector min and max instructions;
        // `f32::min` compiled to one value at a time, and took five times as long as the
        // sum. A NaN is skipped either way (every comparison with it is false).
        for chunk in chunks {
            for i in 0..LANES {
                min[i] = if chunk[i] < min[i] { chunk[i] } else { min[i] };
                max[i] = if chunk[i] > max[i] { chunk[i] } else { max[i] };
            }
        }
        let min = min.iter().chain(tail).copied().fold(f32::INFINITY, f32::min);
        let max = max.iter().chain(tail).copied().fold(f32::NEG_INFINITY, f32::max);
        (lane_sum(values, |v| v as f64), min, max)
    }
}

vectorized! {
    /// Σ (v - mean)² of one block, in f64.
    fn block_squared_deviations(values: &[f32], mean: f64) -> f64 {
        lane_sum(values, |v| (v as f64 - mean) * (v as f64 - mean))
    }
}
