//! `BertPooler`: the `[CLS]` token's final hidden state through a dense layer and tanh.
//!
//! Only the NSP and classification heads read it; the MLM head and sentence embeddings
//! (mean pooling) do not.

use ndarray::{Array2, Array3, ArrayView2, Axis};

use super::gradients::{Grads, Record};
use super::linear::Linear;
use super::parameters::WeightAndBias;
use crate::error::Result;
use crate::io::config::BertConfig;
use crate::io::weights::WeightStore;
use crate::ops::{self, Float};
use crate::pass::{Halt, Tracer};
use crate::stage::{Stage, StageKind::*};

/// `bert.pooler`
pub struct BertPooler<F: Float = f32> {
    pub dense: Linear<F>,
}

impl<F: Float> BertPooler<F> {
    pub fn load(store: &WeightStore, config: &BertConfig) -> Result<BertPooler<F>> {
        let h = config.hidden_size;
        Ok(BertPooler { dense: Linear::load(store, Self::params(), h, h)? })
    }

    /// The stages of the dense layer's weight and bias.
    pub fn params() -> WeightAndBias {
        WeightAndBias::read_by(Stage::new(PoolerDense))
    }

    /// Whether the checkpoint has a pooler.
    pub fn present(store: &WeightStore) -> bool {
        store.contains(&Self::params().weight.hf())
    }

    /// `[B,T,H]` -> `[B,H]`
    pub(crate) fn forward(&self, hidden: &Array3<F>, tracer: &mut Tracer) -> Result<Array2<F>, Halt> {
        let mut dense = self.dense_of(hidden);
        tracer.float(Stage::new(PoolerDense), &mut dense)?;
        let mut pooled = output(dense);
        tracer.float(Stage::new(PoolerOutput), &mut pooled)?;
        Ok(pooled)
    }

    /// `pooler.dense`: `[B,T,H]` -> `[B,H]`, the dense layer on position 0 of every sequence,
    /// which is always `[CLS]`.
    pub fn dense_of(&self, hidden: &Array3<F>) -> Array2<F> {
        self.dense.forward(&hidden.index_axis(Axis(1), 0))
    }

    /// `[B,H]` d loss / d pooler.output -> `[B,H]` d loss / d the last hidden state at `[CLS]`.
    pub(crate) fn backward(
        &self,
        hidden: &Array3<F>,
        record: &Record<F>,
        d_pooled: &Array2<F>,
        grads: &mut Grads<F>,
        tracer: &mut Tracer,
    ) -> Result<Array2<F>, Halt> {
        let mut d_pooled = d_pooled.clone();
        tracer.float(Stage::new(PoolerOutput).grad(), &mut d_pooled)?;
        let mut d_dense = output_backward(record.two(Stage::new(PoolerOutput)), d_pooled.view());
        tracer.float(Stage::new(PoolerDense).grad(), &mut d_dense)?;
        Ok(self.dense.backward(&hidden.index_axis(Axis(1), 0), &d_dense, grads))
    }
}

/// `pooler.output`: `[B,H]`, tanh of the dense layer's output.
pub fn output<F: Float>(dense: Array2<F>) -> Array2<F> {
    ops::tanh(dense)
}

/// The backward of [`output`]: d pooler.output -> d pooler.dense `[B,H]`; tanh' = 1 - tanh²,
/// from the output.
pub fn output_backward<F: Float>(pooled: ArrayView2<'_, F>, d_pooled: ArrayView2<'_, F>) -> Array2<F> {
    ops::tanh_backward(pooled, d_pooled)
}
