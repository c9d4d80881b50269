//! `cls.seq_relationship`: next-sentence prediction, one dense layer on the pooled `[CLS]`
//! vector (chapter 10). The sequence classifier, the other head on that vector, is
//! `classifier.rs`.

use ndarray::Array2;

use super::gradients::{Grads, Record};
use super::linear::Linear;
use super::parameters::WeightAndBias;
use crate::error::Result;
use crate::io::config::BertConfig;
use crate::io::weights::WeightStore;
use crate::ops::Float;
use crate::pass::{Halt, Tracer};
use crate::stage::{Stage, StageKind::*};

/// `cls.seq_relationship`: H -> 2, index 0 = "B follows A", 1 = "B is random".
pub struct NspHead<F: Float = f32> {
    pub dense: Linear<F>,
}

impl<F: Float> NspHead<F> {
    /// The stages of the dense layer's weight and bias.
    pub fn params() -> WeightAndBias {
        WeightAndBias::read_by(Stage::new(NspLogits))
    }

    pub fn present(store: &WeightStore) -> bool {
        store.contains(&Self::params().weight.hf())
    }

    pub fn load(store: &WeightStore, config: &BertConfig) -> Result<NspHead<F>> {
        Ok(NspHead { dense: Linear::load(store, Self::params(), config.hidden_size, 2)? })
    }

    /// `[B,H]` -> `[B,2]`
    pub(crate) fn forward(&self, pooled: &Array2<F>, tracer: &mut Tracer) -> Result<Array2<F>, Halt> {
        let mut logits = self.dense.forward(pooled);
        tracer.float(Stage::new(NspLogits), &mut logits)?;
        Ok(logits)
    }

    /// `[B,2]` d loss / d logits -> `[B,H]` d loss / d pooler.output.
    pub(crate) fn backward(
        &self,
        record: &Record<F>,
        d_logits: &Array2<F>,
        grads: &mut Grads<F>,
        tracer: &mut Tracer,
    ) -> Result<Array2<F>, Halt> {
        let mut d_logits = d_logits.clone();
        tracer.float(Stage::new(NspLogits).grad(), &mut d_logits)?;
        let pooled = record.two(Stage::new(PoolerOutput));
        Ok(self.dense.backward(&pooled, &d_logits, grads))
    }
}
