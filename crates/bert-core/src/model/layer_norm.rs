//! `nn.LayerNorm` over the hidden axis, with its learned scale (`weight`) and shift (`bias`).

use ndarray::{Array, Dimension};

use crate::error::Result;
use crate::load::weights::{Param, WeightStore};
use crate::ops;

#[derive(Clone)]
pub struct LayerNorm {
    pub weight: Param,
    pub bias: Param,
    /// From config.json's `layer_norm_eps`: 1e-12 for BERT, not PyTorch's default 1e-5.
    pub eps: f32,
}

impl LayerNorm {
    /// Loads `<prefix>.weight` and `.bias`, each `[H]` (`WeightStore::get` also finds them under
    /// the older TensorFlow names `.gamma` and `.beta`).
    pub fn load(store: &WeightStore, prefix: &str, hidden: usize, eps: f32) -> Result<LayerNorm> {
        Ok(LayerNorm {
            weight: store.get(&format!("{prefix}.weight"), &[hidden])?,
            bias: store.get(&format!("{prefix}.bias"), &[hidden])?,
            eps,
        })
    }

    /// `[..,H]` -> `[..,H]`: (x - mean) / sqrt(var + eps) · weight + bias, each vector on its own.
    pub fn forward<D: Dimension>(&self, x: Array<f32, D>) -> Array<f32, D> {
        ops::layer_norm_rows(x, self.weight.view1(), self.bias.view1(), self.eps)
    }
}
