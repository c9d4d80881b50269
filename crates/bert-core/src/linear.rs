//! `nn.Linear`: y = x Wᵀ + b, with W stored as PyTorch stores it, [out, in].

use ndarray::linalg::general_mat_mul;
use ndarray::{Array2, ArrayView2};

use crate::error::Result;
use crate::weights::{Param, WeightStore};

/// A dense layer loaded from `<prefix>.weight` [out,in] and `<prefix>.bias` [out].
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

    /// [N,in] -> [N,out]
    ///
    /// The output starts as the bias in every row and the product is added onto it (β = 1), so
    /// the bias costs no extra pass over the output.
    ///
    /// The product is computed transposed, outᵀ [out,N] = W [out,in] · xᵀ [in,N], with every
    /// operand a view (W read in place from the checkpoint, xᵀ and outᵀ transposed views), because
    /// of how matrixmultiply works: it first copies ("packs") blocks of both operands into the
    /// layout its kernel reads, and W, stored [out,in], is a strided gather to pack whichever
    /// side it is on. The right-hand operand is packed by one thread before the threaded loop, the
    /// left-hand one inside it, by every thread for its own rows; W is the large operand (2.4
    /// million values for the feed-forward layers), so it goes on the left, where the threads
    /// share its packing.
    pub fn forward(&self, x: ArrayView2<'_, f32>) -> Array2<f32> {
        // Every forward pass starts with a dense layer, so this fixes the thread count before
        // the first matrix product (a no-op after the first call).
        crate::threads::threads();
        let bias = self.bias.as_slice();
        let mut out = Array2::<f32>::zeros((x.nrows(), self.out_features()));
        for mut row in out.rows_mut() {
            row.as_slice_mut().expect("a new array is contiguous").copy_from_slice(bias);
        }
        general_mat_mul(1.0, &self.weight.view2(), &x.t(), 1.0, &mut out.view_mut().reversed_axes());
        out
    }
}

/// [B,T,H] -> [B*T,H]: every token as one row, so a dense layer is one matrix product.
pub fn rows(x: &ndarray::Array3<f32>) -> ArrayView2<'_, f32> {
    let (b, t, h) = x.dim();
    x.view()
        .into_shape_with_order((b * t, h))
        .expect("hidden states are contiguous")
}

/// [B*T,n] -> [B,T,n]: the inverse of [`rows`].
pub fn unrows(x: Array2<f32>, batch: usize, tokens: usize) -> ndarray::Array3<f32> {
    let n = x.ncols();
    x.into_shape_with_order((batch, tokens, n))
        .expect("B*T rows")
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
