//! `nn.LayerNorm` over the hidden axis, with its learned scale (`weight`) and shift (`bias`).

use ndarray::{Array, ArrayView, Dimension};

use super::gradients::Grads;
use super::parameters::WeightAndBias;

use crate::error::Result;
use crate::io::weights::{Param, WeightStore};
use crate::ops::{self, Float};

#[derive(Clone)]
pub struct LayerNorm<F: Float = f32> {
    pub weight: Param<F>,
    pub bias: Param<F>,
    /// From config.json's `layer_norm_eps`: 1e-12 for BERT, not PyTorch's default 1e-5.
    pub eps: F,
    /// The stages of the weight and the bias: the names they were loaded under and the keys of
    /// their gradients.
    pub params: WeightAndBias,
}

impl<F: Float> LayerNorm<F> {
    /// Loads the weight and the bias `params` name, each `[H]` (`WeightStore::get` also finds
    /// them under the older TensorFlow names `.gamma` and `.beta`).
    pub fn load(store: &WeightStore, params: WeightAndBias, hidden: usize, eps: F) -> Result<LayerNorm<F>> {
        Ok(LayerNorm {
            weight: store.get(&params.weight.hf(), &[hidden])?,
            bias: store.get(&params.bias.hf(), &[hidden])?,
            eps,
            params,
        })
    }

    /// `[..,H]` -> `[..,H]`: (x - mean) / sqrt(var + eps) · weight + bias, each vector on its own.
    pub fn forward<D: Dimension>(&self, x: Array<F, D>) -> Array<F, D> {
        ops::layer_norm_rows(x, self.weight.view1(), self.bias.view1(), self.eps)
    }

    /// The backward: the input `x` `[..,H]` and d loss / d out -> d loss / d x; the weight's and
    /// bias's gradients are added to `grads` under their own stages.
    pub(crate) fn backward<D: Dimension>(
        &self,
        x: ArrayView<'_, F, D>,
        d_out: ArrayView<'_, F, D>,
        grads: &mut Grads<F>,
    ) -> Array<F, D> {
        let (dx, dw, db) = ops::layer_norm_rows_backward(x, self.weight.view1(), self.eps, d_out);
        grads.add(self.params.weight, dw.into_dyn());
        grads.add(self.params.bias, db.into_dyn());
        dx
    }
}
