//! `nn.Linear`: y = x Wᵀ + b, with W stored as PyTorch stores it, `[out,in]`.

use ndarray::{Array, ArrayBase, Data, Dimension};

use crate::error::Result;
use crate::load::weights::{Param, WeightStore};
use crate::ops::{self, Float};

/// A dense layer loaded from `<prefix>.weight` `[out,in]` and `<prefix>.bias` `[out]`.
#[derive(Clone)]
pub struct Linear<F: Float = f32> {
    pub weight: Param<F>,
    pub bias: Param<F>,
}

impl<F: Float> Linear<F> {
    /// Loads `<prefix>.weight` and `<prefix>.bias`, checking them against `in_features` → `out_features`.
    pub fn load(store: &WeightStore, prefix: &str, in_features: usize, out_features: usize) -> Result<Linear<F>> {
        Ok(Linear {
            weight: store.get(&format!("{prefix}.weight"), &[out_features, in_features])?,
            bias: store.get(&format!("{prefix}.bias"), &[out_features])?,
        })
    }

    /// Out features.
    pub fn out_features(&self) -> usize {
        self.weight.shape()[0]
    }

    /// `[..,in]` -> `[..,out]`: every vector along the last axis through the same layer.
    pub fn forward<S: Data<Elem = F>, D: Dimension>(&self, x: &ArrayBase<S, D>) -> Array<F, D> {
        ops::linear(x, self.weight.view2(), self.bias.view1())
    }
}
