//! `BertLayer`: one encoder layer, attention then the feed-forward block.

use ndarray::{Array3, Array4};

use super::attention::BertAttention;
use super::dropout::Dropout;
use super::feed_forward::FeedForward;
use super::gradients::{Grads, Record};
use crate::error::Result;
use crate::io::config::BertConfig;
use crate::io::weights::WeightStore;
use crate::ops::Float;
use crate::pass::{Halt, Tracer};
use crate::stage::{
    Stage,
    StageKind::{AttnLayerNorm, FfnLayerNorm},
};

/// `bert.encoder.layer.{i}`
pub struct BertLayer<F: Float = f32> {
    pub attention: BertAttention<F>,
    pub feed_forward: FeedForward<F>,
}

impl<F: Float> BertLayer<F> {
    pub fn load(store: &WeightStore, config: &BertConfig, layer_idx: usize) -> Result<BertLayer<F>> {
        Ok(BertLayer {
            attention: BertAttention::load(store, config, layer_idx)?,
            feed_forward: FeedForward::load(store, config, layer_idx)?,
        })
    }

    /// `[B,T,H]` -> `[B,T,H]`: tokens look at each other, then each is transformed on its own.
    pub(crate) fn forward(
        &self,
        layer_idx: usize,
        x: &Array3<F>,
        additive_mask: Option<&Array4<F>>,
        dropout: Option<&Dropout>,
        tracer: &mut Tracer,
    ) -> Result<Array3<F>, Halt> {
        let hidden = self.attention.forward(layer_idx, x, additive_mask, dropout, tracer)?;
        self.feed_forward.forward(layer_idx, &hidden, dropout, tracer)
    }

    /// The backward: d loss / d the layer's output -> d loss / d its input `x`, the feed-forward
    /// block first, then attention.
    pub(crate) fn backward(
        &self,
        layer_idx: usize,
        x: &Array3<F>,
        record: &Record<F>,
        d_hidden: &Array3<F>,
        grads: &mut Grads<F>,
        tracer: &mut Tracer,
    ) -> Result<Array3<F>, Halt> {
        let mut d_hidden = d_hidden.clone();
        tracer.float(Stage::layer(layer_idx, FfnLayerNorm).grad(), &mut d_hidden)?;
        let attended = record.three(Stage::layer(layer_idx, AttnLayerNorm)).to_owned();
        let mut d_attended = self.feed_forward.backward(layer_idx, &attended, record, &d_hidden, grads, tracer)?;
        tracer.float(Stage::layer(layer_idx, AttnLayerNorm).grad(), &mut d_attended)?;
        self.attention.backward(layer_idx, x, record, &d_attended, grads, tracer)
    }
}
