//! `nn.Linear`: y = x Wᵀ + b, with W stored as PyTorch stores it, `[out,in]`.

use ndarray::{Array, ArrayBase, Axis, Data, Dimension};

use super::gradients::Grads;
use super::parameters::WeightAndBias;

use crate::error::Result;
use crate::io::weights::{Param, WeightStore};
use crate::ops::{self, Float};

/// A dense layer: its weight `[out,in]` and bias `[out]`, and their stages in the stage table.
#[derive(Clone)]
pub struct Linear<F: Float = f32> {
    pub weight: Param<F>,
    pub bias: Param<F>,
    /// The stages of the weight and the bias: the names they were loaded under and the keys of
    /// their gradients.
    pub params: WeightAndBias,
}

impl<F: Float> Linear<F> {
    /// Loads the weight and the bias `params` name, checking them against `in_features` →
    /// `out_features`.
    pub fn load(
        store: &WeightStore,
        params: WeightAndBias,
        in_features: usize,
        out_features: usize,
    ) -> Result<Linear<F>> {
        Ok(Linear {
            weight: store.get(&params.weight.hf(), &[out_features, in_features])?,
            bias: store.get(&params.bias.hf(), &[out_features])?,
            params,
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

    /// The backward: the input `x` `[..,in]` and d loss / d y `[..,out]` -> d loss / d x
    /// `[..,in]`; d loss / d W and d loss / d b are added to `grads` under the layer's own
    /// parameter stages.
    pub(crate) fn backward<S: Data<Elem = F>, D: Dimension>(
        &self,
        x: &ArrayBase<S, D>,
        d_out: &Array<F, D>,
        grads: &mut Grads<F>,
    ) -> Array<F, D> {
        // Every token one row, as in the forward: a view of the values where they are in
        // standard layout already (as the pass leaves them), a copy only where they are not.
        let (x_values, d_values) = (x.as_standard_layout(), d_out.as_standard_layout());
        fn rows<'a, F, D: Dimension>(a: &'a ndarray::CowArray<'_, F, D>) -> ndarray::ArrayView2<'a, F> {
            let width = a.len_of(Axis(a.ndim() - 1));
            a.view().into_shape_with_order((a.len() / width.max(1), width)).expect("a standard layout")
        }
        let (dx, dw, db) = ops::linear_backward(rows(&x_values), self.weight.view2(), rows(&d_values));
        grads.add(self.params.weight, dw.into_dyn());
        grads.add(self.params.bias, db.into_dyn());
        dx.into_shape_with_order(x.raw_dim()).expect("[N,in] holds every token's input")
    }
}
