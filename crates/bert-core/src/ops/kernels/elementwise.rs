//! The fast kernels of the row-wise and element-wise operations: softmax over a row, LayerNorm
//! of a row, and the two GELUs. Each is a plain loop over a slice that the compiler vectorizes
//! (see `simd.rs`), run on the pool's threads when there is enough of it.
//!
//! They compute the same formulas as the reference operations in `ops/`, with these differences
//! of method, each a few ulp at most: `exp`, `erf` and `tanh` are branch-free polynomial
//! approximations rather than calls into a maths library, LayerNorm's mean and variance are
//! summed in f64, and softmax multiplies by 1 / Σ instead of dividing by Σ.

use super::simd::{self, lane_sum, vectorized, LANES};
use super::threads::{self, PARALLEL_MIN_LEN};

/// Softmax of every `row_len`-long row of `values`, in place; the rows are shared between the
/// threads once there are enough of them.
pub(crate) fn softmax_rows(values: &mut [f32], row_len: usize) {
    let min_rows = PARALLEL_MIN_LEN.div_ceil(row_len.max(1));
    threads::for_each_part(values, row_len, min_rows, |_, rows| {
        for row in rows.chunks_exact_mut(row_len) {
            softmax_row(row);
        }
    });
}

vectorized! {
    /// softmax(x)_j = exp(x_j - max x) / Σ_k exp(x_k - max x); subtracting the max avoids
    /// overflow and makes the padded keys' f32::MIN scores come out as exactly 0.
    fn softmax_row(row: &mut [f32]) {
        let mut max = [f32::NEG_INFINITY; LANES];
        let mut chunks = row.chunks_exact(LANES);
        for chunk in &mut chunks {
            for (m, &v) in max.iter_mut().zip(chunk) {
                *m = m.max(v);
            }
        }
        let max = chunks.remainder().iter().chain(&max).copied().fold(f32::NEG_INFINITY, f32::max);

        let mut sum = [0.0f32; LANES];
        let mut chunks = row.chunks_exact_mut(LANES);
        for chunk in &mut chunks {
            for (s, v) in sum.iter_mut().zip(chunk) {
                *v = simd::exp(*v - max);
                *s += *v;
            }
        }
        let mut tail = 0.0;
        for v in chunks.into_remainder() {
            *v = simd::exp(*v - max);
            tail += *v;
        }
        let inv_sum = 1.0 / (sum.iter().sum::<f32>() + tail);
        for v in row.iter_mut() {
            *v *= inv_sum;
        }
    }
}

/// LayerNorm of every `weight.len()`-long row of `values`, in place.
pub(crate) fn layer_norm_rows(values: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
    for row in values.chunks_exact_mut(weight.len()) {
        layer_norm_row(row, weight, bias, eps);
    }
}

vectorized! {
    /// One row: the statistics, then (x - mean) · inv_std · weight + bias.
    fn layer_norm_row(row: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
        let (mean, var) = mean_var(row);
        let inv_std = 1.0 / (var + eps).sqrt();
        for ((v, w), b) in row.iter_mut().zip(weight).zip(bias) {
            *v = (*v - mean) * inv_std * w + b;
        }
    }
}

/// Mean and biased variance of one row, summed in f64 so long rows lose no precision, with
/// `lane_sum`'s interleaved partial sums (which the compiler keeps in vector registers).
#[inline(always)]
fn mean_var(row: &[f32]) -> (f32, f32) {
    let n = row.len() as f64;
    let mean = lane_sum(row, |v| v as f64) / n;
    let var = lane_sum(row, |v| (v as f64 - mean) * (v as f64 - mean)) / n;
    (mean as f32, var as f32)
}

/// Exact GELU of every value, in place, the values shared between the threads.
pub(crate) fn gelu(values: &mut [f32]) {
    threads::for_each_part(values, LANES, PARALLEL_MIN_LEN / LANES, |_, part| gelu_slice(part));
}

/// Tanh GELU of every value, in place, the values shared between the threads.
pub(crate) fn gelu_tanh(values: &mut [f32]) {
    threads::for_each_part(values, LANES, PARALLEL_MIN_LEN / LANES, |_, part| gelu_tanh_slice(part));
}

vectorized! {
    fn gelu_slice(values: &mut [f32]) {
        for v in values {
            *v = 0.5 * *v * (1.0 + erf(*v * std::f32::consts::FRAC_1_SQRT_2));
        }
    }
}

vectorized! {
    fn gelu_tanh_slice(values: &mut [f32]) {
        const SQRT_2_OVER_PI: f32 = 0.797_884_6;
        for v in values {
            let x = *v;
            *v = 0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)));
        }
    }
}

/// erf(x) for f32, within a few ulp, as a ratio of two polynomials in x² (the approximation
/// Eigen and XLA use). Outside [-4, 4], erf is ±1 to f32 precision, so x is clamped there.
// The coefficients are written as Eigen publishes them, so that a reader can check them against
// its source; one has more digits than an f32 holds, which rounds to the same f32.
#[allow(clippy::excessive_precision)]
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    // The numerator is odd in x, the denominator even.
    let p = -2.726_142_3e-10f32;
    let p = p * x2 + 2.770_681_4e-8;
    let p = p * x2 - 2.101_024e-6;
    let p = p * x2 - 5.692_506_4e-5;
    let p = p * x2 - 7.349_906_3e-4;
    let p = p * x2 - 2.954_599_8e-3;
    let p = p * x2 - 1.609_603_3e-2;
    let q = -1.456_607_2e-5f32;
    let q = q * x2 - 2.133_740_6e-4;
    let q = q * x2 - 1.682_827e-3;
    let q = q * x2 - 7.373_329_2e-3;
    let q = q * x2 - 1.426_473_9e-2;
    x * p / q
}

/// tanh(x) = 1 - 2 / (e^{2x} + 1), with the branch-free [`simd::exp`]; e^{2x} overflowing to
/// +inf gives exactly 1, and underflowing to 0 gives exactly -1.
#[inline(always)]
pub(crate) fn tanh(x: f32) -> f32 {
    1.0 - 2.0 / (simd::exp(2.0 * x) + 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest |approximation - reference| over [-10, 10].
    fn worst(approx: impl Fn(f32) -> f32, reference: impl Fn(f32) -> f32) -> f32 {
        (-10_000..=10_000).map(|i| i as f32 * 1e-3).map(|x| (approx(x) - reference(x)).abs()).fold(0.0, f32::max)
    }

    #[test]
    fn erf_and_tanh_are_close_to_libm() {
        assert!(worst(erf, libm::erff) < 5e-7, "erf {}", worst(erf, libm::erff));
        assert!(worst(tanh, f32::tanh) < 5e-7, "tanh {}", worst(tanh, f32::tanh));
    }
}
