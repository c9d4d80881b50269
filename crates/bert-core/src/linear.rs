//! `nn.Linear`: y = x Wᵀ + b, with W stored as PyTorch stores it, [out, in].

use ndarray::linalg::general_mat_mul;
use ndarray::{Array2, ArrayView2};

use crate::error::Result;
use crate::gemm;
use crate::threads;
use crate::weights::{Param, WeightStore};

/// A dense layer loaded from `<prefix>.weight` `[out,in]` and `<prefix>.bias` `[out]`.
#[derive(Clone)]
pub struct Linear {
    pub weight: Param,
    pub bias: Param,
}

impl Linear {
    /// Loads `<prefix>.weight` and `<prefix>.bias`, checking them against `in_features` → `out_features`.
    pub fn load(store: &WeightStore, prefix: &str, in_features: usize, out_features: usize) -> Result<Linear> {
        Ok(Linear {
            weight: store.get(&format!("{prefix}.weight"), &[out_features, in_features])?,
            bias: store.get(&format!("{prefix}.bias"), &[out_features])?,
        })
    }

    /// Out features.
    pub fn out_features(&self) -> usize {
        self.weight.shape()[0]
    }

    /// `[N,in]` -> `[N,out]`
    ///
    /// Through [`gemm::linear`], which reads W in place from the checkpoint. Without its
    /// kernels (a CPU without AVX2, another architecture, or the `blas` feature), through
    /// ndarray's `general_mat_mul` ([`Linear::forward_general`]).
    pub fn forward(&self, x: ArrayView2<'_, f32>) -> Array2<f32> {
        // Every forward pass starts with a dense layer, so this fixes the thread count before
        // the first matrix product (a no-op after the first call).
        threads::threads();
        if cfg!(feature = "blas") {
            return self.forward_general(x);
        }
        let x = x.as_standard_layout();
        let (n, n_in) = x.dim();
        let mut out = Array2::<f32>::zeros((n, self.out_features()));
        let shape = (n, n_in, self.out_features());
        let x_values = x.as_slice().expect("a standard-layout array is contiguous");
        let out_values = out.as_slice_mut().expect("a new array is contiguous");
        if gemm::linear(x_values, self.weight.as_slice(), self.bias.as_slice(), shape, out_values) {
            out
        } else {
            self.forward_general(x.view())
        }
    }

    /// `[N,in]` -> `[N,out]` through ndarray's `general_mat_mul` (matrixmultiply, or a BLAS).
    ///
    /// The output starts as the bias in every row and the product is added onto it (β = 1), so
    /// the bias costs no extra pass over the output.
    ///
    /// The product is computed transposed, outᵀ `[out,N]` = W `[out,in]` · xᵀ `[in,N]`, with every
    /// operand a view (W read in place from the checkpoint, xᵀ and outᵀ transposed views), because
    /// of how matrixmultiply works: it first copies ("packs") blocks of both operands into the
    /// layout its kernel reads, and W, stored `[out,in]`, is a strided gather to pack whichever
    /// side it is on. The right-hand operand is packed by one thread before the threaded loop, the
    /// left-hand one inside it, by every thread for its own rows; W is the large operand (2.4
    /// million values for the feed-forward layers), so it goes on the left, where the threads
    /// share its packing.
    pub fn forward_general(&self, x: ArrayView2<'_, f32>) -> Array2<f32> {
        let bias = self.bias.as_slice();
        let mut out = Array2::<f32>::zeros((x.nrows(), self.out_features()));
        for mut row in out.rows_mut() {
            row.as_slice_mut().expect("a new array is contiguous").copy_from_slice(bias);
        }
        general_mat_mul(1.0, &self.weight.view2(), &x.t(), 1.0, &mut out.view_mut().reversed_axes());
        out
    }
}

/// `[B,T,H]` -> `[B*T,H]`: every token as one row, so a dense layer is one matrix product.
pub fn rows(x: &ndarray::Array3<f32>) -> ArrayView2<'_, f32> {
    let (b, t, h) = x.dim();
    x.view().into_shape_with_order((b * t, h)).expect("hidden states are contiguous")
}

/// `[B*T,n]` -> `[B,T,n]`: the inverse of [`rows`].
pub fn unrows(x: Array2<f32>, batch: usize, tokens: usize) -> ndarray::Array3<f32> {
    let n = x.ncols();
    x.into_shape_with_order((batch, tokens, n)).expect("B*T rows")
}

// With the `blas` feature, ndarray sends `general_mat_mul` to `cblas_sgemm`, which this links
// from the system's OpenBLAS, along with OpenBLAS's own thread setting.
#[cfg(feature = "blas")]
#[link(name = "openblas")]
extern "C" {
    fn openblas_set_num_threads(num_threads: std::os::raw::c_int);
}

/// Sets OpenBLAS's thread count (it ignores `MATMUL_NUM_THREADS`; see [`crate::threads`]).
#[cfg(feature = "blas")]
pub(crate) fn blas_threads(n: usize) {
    // SAFETY: a plain setter of OpenBLAS's global thread count, with a positive count.
    unsafe { openblas_set_num_threads(n as std::os::raw::c_int) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// y = x Wᵀ + b in f64, the obvious way.
    fn reference(x: &Array2<f32>, w: &Array2<f32>, b: &[f32]) -> Array2<f64> {
        Array2::from_shape_fn((x.nrows(), w.nrows()), |(n, o)| {
            b[o] as f64 + x.row(n).iter().zip(w.row(o)).map(|(&a, &c)| a as f64 * c as f64).sum::<f64>()
        })
    }

    #[test]
    fn both_paths_match_an_f64_reference() {
        // 45 inputs and 7 outputs (odd), for row counts on both sides of a 16- or 32-token panel.
        let (n_in, n_out) = (45, 7);
        let value = |i: usize| ((i * 7919) % 1000) as f32 / 500.0 - 1.0;
        let w = Array2::from_shape_fn((n_out, n_in), |(o, i)| value(o * n_in + i + 1));
        let b: Vec<f32> = (0..n_out).map(|o| value(o + 17)).collect();
        let linear = Linear {
            weight: Param::from_vec(w.iter().copied().collect(), vec![n_out, n_in]),
            bias: Param::from_vec(b.clone(), vec![n_out]),
        };
        for rows in [1, 3, 12, 16, 17, 32, 33, 70] {
            let x = Array2::from_shape_fn((rows, n_in), |(n, i)| value(n * 31 + i * 3 + 5));
            let want = reference(&x, &w, &b);
            for (path, got) in [("forward", linear.forward(x.view())), ("general", linear.forward_general(x.view()))] {
                for (g, w) in got.iter().zip(&want) {
                    assert!((*g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()), "{path}, {rows} rows: {g} vs {w}");
                }
            }
        }
    }
}
