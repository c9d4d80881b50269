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
    /// The output starts as the bias in every row and the product is added onto it, so the bias
    /// costs no extra pass over the output.
    pub fn forward(&self, x: ArrayView2<'_, f32>) -> Array2<f32> {
        let rows = x.nrows();
        let bias = self.bias.view1();
        let mut out = bias
            .broadcast((rows, self.out_features()))
            .expect("bias has out_features entries")
            .to_owned();
        general_mat_mul(1.0, &x, &self.weight.view2().t(), 1.0, &mut out);
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
