//! `nn.LayerNorm` over the hidden axis: (x - mean) / sqrt(var + eps) · weight + bias.
//!
//! BERT's eps is 1e-12 (from config.json), not PyTorch's default 1e-5; the variance is the
//! biased one (divided by H, not H - 1), as PyTorch computes it.

use ndarray::{ArrayViewMut2, Axis};

use crate::error::Result;
use crate::simd::{lane_sum, vectorized};
use crate::weights::{Param, WeightStore};

#[derive(Clone)]
pub struct LayerNorm {
    pub weight: Param,
    pub bias: Param,
    pub eps: f32,
}

impl LayerNorm {
    /// Loads `<prefix>.weight` / `.bias` (or `.gamma` / `.beta`), each `[H]`.
    pub fn load(store: &WeightStore, prefix: &str, hidden: usize, eps: f32) -> Result<LayerNorm> {
        Ok(LayerNorm {
            weight: store.get(&format!("{prefix}.weight"), &[hidden])?,
            bias: store.get(&format!("{prefix}.bias"), &[hidden])?,
            eps,
        })
    }

    /// `[B,T,H]` -> `[B,T,H]`, in place.
    pub fn forward_hidden(&self, x: &mut ndarray::Array3<f32>) {
        let (b, t, h) = x.dim();
        let rows = x.view_mut().into_shape_with_order((b * t, h)).expect("contiguous");
        self.forward_inplace(rows);
    }

    /// `[N,H]` -> `[N,H]`, in place: each row is normalised on its own.
    pub fn forward_inplace(&self, mut x: ArrayViewMut2<'_, f32>) {
        let weight = self.weight.as_slice();
        let bias = self.bias.as_slice();
        for mut row in x.axis_iter_mut(Axis(0)) {
            let row = row.as_slice_mut().expect("rows are contiguous");
            normalize_row(row, weight, bias, self.eps);
        }
    }
}

vectorized! {
    /// One row: the statistics, then (x - mean) · inv_std · weight + bias.
    fn normalize_row(row: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
        let (mean, var) = mean_var(row);
        let inv_std = 1.0 / (var + eps).sqrt();
        for ((v, w), b) in row.iter_mut().zip(weight).zip(bias) {
            *v = (*v - mean) * inv_std * w + b;
        }
    }
}

/// Mean and biased variance of one row, summed in f64 so long rows lose no precision, with
/// `simd::lane_sum`'s interleaved partial sums (which the compiler keeps in vector registers).
#[inline(always)]
pub fn mean_var(row: &[f32]) -> (f32, f32) {
    let n = row.len() as f64;
    let mean = lane_sum(row, |v| v as f64) / n;
    let var = lane_sum(row, |v| (v as f64 - mean) * (v as f64 - mean)) / n;
    (mean as f32, var as f32)
}
