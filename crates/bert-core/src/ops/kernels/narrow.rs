//! A dense layer with fewer outputs than the matrix kernel's narrowest tile: NSP's two logits, a
//! fine-tuning classifier's few labels. Each output is one dot product, summed in f64 and rounded
//! to f32 once.
//!
//! The packed kernel of `gemm.rs` earns its speed by reusing each panel of tokens for a tile of
//! six or more output features; with fewer, part of every tile is idle, and a plain dot product
//! per output costs about as little (two logits of a sequence: 1,536 products). Summed in f64,
//! whose products of two f32s are exact, each logit comes out as the f32 nearest to the exact
//! x · w + b, except within about 1e-13 of the sum of |x_k · w_k| of a halfway point. In f32, in
//! chains, NSP's own error was behind PyTorch's in 3 of 9 bert-base-sized texts (benchmarks/HISTORY.md,
//! "Narrow layers in f64"). Each output depends only on its own row of x and of W, so the result
//! is the same whatever the batch and the thread count.

use super::simd::{vectorized, LANES};
use super::threads::{self, PARALLEL_MIN_LEN};

/// Below this many outputs, [`linear`] is used instead of the packed kernel: the narrowest tile
/// of `gemm.rs` is six features wide.
pub(crate) const NARROW: usize = 6;

/// out `[M,N]` = x `[M,K]` · Wᵀ + bias, where `w` is W `[N,K]`; every slice contiguous and
/// row-major. The rows are shared between the threads when there are enough of them.
pub(crate) fn linear(x: &[f32], w: &[f32], bias: &[f32], (m, k, n): (usize, usize, usize), out: &mut [f32]) {
    assert_eq!(x.len(), m * k, "x is [M,K]");
    assert_eq!(w.len(), n * k, "W is [N,K]");
    assert_eq!(bias.len(), n, "bias is [N]");
    assert_eq!(out.len(), m * n, "out is [M,N]");
    if n == 0 {
        return;
    }
    let min_rows = PARALLEL_MIN_LEN.div_ceil((n * k).max(1));
    threads::for_each_part(out, n, min_rows, |first_row, rows| {
        for (i, out_row) in rows.chunks_exact_mut(n).enumerate() {
            let x_row = &x[(first_row + i) * k..][..k];
            for (j, (o, &b)) in out_row.iter_mut().zip(bias).enumerate() {
                *o = (dot(x_row, &w[j * k..][..k]) + f64::from(b)) as f32;
            }
        }
    });
}

vectorized! {
    /// Σ a_k · b_k in f64, with [`LANES`] partial sums added in a fixed order, so that every
    /// vector width gives the same bits.
    fn dot(a: &[f32], b: &[f32]) -> f64 {
        let mut partial = [0.0f64; LANES];
        let (chunks_a, chunks_b) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
        let tail: f64 = chunks_a.remainder().iter().zip(chunks_b.remainder()).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
        for (ca, cb) in chunks_a.zip(chunks_b) {
            for ((p, &x), &y) in partial.iter_mut().zip(ca).zip(cb) {
                *p += f64::from(x) * f64::from(y);
            }
        }
        partial.iter().sum::<f64>() + tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each output the f32 rounding of a number within 1e-13 of the sum of |x_k · w_k| and |b|
    /// from x · w + b: the kernel's f64 sum of at most 768 exact products is off by under 1e-14
    /// of that size, and this test's, added one by one, by under 9e-14. Row lengths around the
    /// vector width, BERT's 768, none at all (the bias alone), and enough rows to be shared
    /// between the threads.
    #[test]
    fn each_output_is_the_exact_sum_rounded_once() {
        for (m, k, n) in [(1, 1, 1), (3, 15, 2), (2, 17, 5), (2, 0, 3), (1, 768, 2), (100, 768, 3)] {
            let value = |i: usize, seed: usize| ((i * 7_919 + seed * 104_729) % 10_007) as f32 / 5_003.0 - 1.0;
            let x: Vec<f32> = (0..m * k).map(|i| value(i, 1)).collect();
            let w: Vec<f32> = (0..n * k).map(|i| value(i, 2) * 1e-3).collect();
            let bias: Vec<f32> = (0..n).map(|i| value(i, 3)).collect();
            let mut out = vec![f32::NAN; m * n];
            linear(&x, &w, &bias, (m, k, n), &mut out);
            for row in 0..m {
                for col in 0..n {
                    let terms = (0..k).map(|i| f64::from(x[row * k + i]) * f64::from(w[col * k + i]));
                    let exact = terms.clone().sum::<f64>() + f64::from(bias[col]);
                    let size = terms.map(f64::abs).sum::<f64>() + f64::from(bias[col]).abs();
                    let (low, high) = ((exact - 1e-13 * size) as f32, (exact + 1e-13 * size) as f32);
                    let got = out[row * n + col];
                    assert!(low <= got && got <= high, "[{m},{k},{n}] at ({row},{col}): {exact:e}, got {got:e}");
                }
            }
        }
    }

    /// A NaN or an infinity among the inputs reaches the output, as in PyTorch; a sum beyond
    /// f32's range becomes an infinity.
    #[test]
    fn non_finite_values_are_not_hidden() {
        let (x, w, bias) = ([1.0, f32::NAN, 2.0, 3.0], [1.0, 1.0], [0.0]);
        let mut out = [0.0f32; 2];
        linear(&x, &w, &bias, (2, 2, 1), &mut out);
        assert!(out[0].is_nan() && out[1] == 5.0, "{out:?}");
        let (x, w) = ([f32::INFINITY, 1.0, f32::MAX, f32::MAX], [1.0, -1.0]);
        linear(&x, &w, &bias, (2, 2, 1), &mut out);
        assert!(out[0] == f32::INFINITY && out[1] == 0.0, "{out:?}");
        let (x, w) = ([f32::MAX, f32::MAX], [1.0, 1.0]);
        let mut one = [0.0f32];
        linear(&x, &w, &bias, (1, 2, 1), &mut one);
        assert_eq!(one[0], f32::INFINITY);
    }
}
