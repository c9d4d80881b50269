//! `BertOnlyMLMHead` (`cls.predictions`): a transform of every token's final hidden state, then
//! the decoder back to vocabulary logits. The decoder's weight is the word embedding table (tied),
//! so checkpoints usually do not store it; only its bias is its own.

use ndarray::{Array3, ArrayView3};

use super::activation::Activation;
use super::gradients::{Grads, Record};
use super::layer_norm::LayerNorm;
use super::linear::Linear;
use super::parameters::WeightAndBias;
use crate::error::Result;
use crate::io::config::BertConfig;
use crate::io::weights::{Param, WeightStore};
use crate::ops::{self, Float};
use crate::pass::{Discard, Halt, Tracer};
use crate::stage::{Stage, StageKind::*};

/// `cls.predictions`
pub struct MlmHead<F: Float = f32> {
    /// `transform.dense`, H -> H
    pub transform: Linear<F>,
    pub activation: Activation,
    /// `transform.LayerNorm`
    pub layer_norm: LayerNorm<F>,
    /// H -> V: weight `[V,H]` shared with `embeddings.word_embeddings`, bias `cls.predictions.bias`.
    pub decoder: Linear<F>,
}

impl<F: Float> MlmHead<F> {
    /// Whether the checkpoint has an MLM head.
    pub fn present(store: &WeightStore) -> bool {
        store.contains(&Self::transform_params().weight.hf())
    }

    /// The stages of `transform.dense`'s weight and bias.
    fn transform_params() -> WeightAndBias {
        WeightAndBias::read_by(Stage::new(MlmTransform))
    }

    pub fn load(store: &WeightStore, config: &BertConfig, word_embeddings: &Param<F>) -> Result<MlmHead<F>> {
        let (h, v) = (config.hidden_size, config.vocab_size);
        let layer_norm = WeightAndBias::read_by(Stage::new(MlmLayerNorm));
        // The decoder's weight is the word embedding table (the table's row of mlm.logits says
        // so), and its gradient that table's.
        let decoder = WeightAndBias::read_by(Stage::new(MlmLogits));
        Ok(MlmHead {
            transform: Linear::load(store, Self::transform_params(), h, h)?,
            activation: config.activation(),
            layer_norm: LayerNorm::load(store, layer_norm, h, F::of(config.layer_norm_eps))?,
            // HF ties the decoder to the input embeddings when it loads the model, even if the
            // file stores a decoder weight; the input embeddings win, so they do here too. A
            // `Param` is reference-counted: the clone shares the V×H table, it does not copy it.
            // The bias is found under either of the names HF saves it as
            // (`cls.predictions.bias`, `cls.predictions.decoder.bias`).
            decoder: Linear {
                weight: word_embeddings.clone(),
                bias: store.get(&decoder.bias.hf(), &[v])?,
                params: decoder,
            },
        })
    }

    /// `[B,T,H]` -> `[B,T,V]`
    pub(crate) fn forward(&self, hidden: &Array3<F>, tracer: &mut Tracer) -> Result<Array3<F>, Halt> {
        // [B,T,H]: one more dense layer, activation and LayerNorm for every token.
        let mut transform = self.transform.forward(hidden);
        tracer.float(Stage::new(MlmTransform), &mut transform)?;
        let mut activation = self.activation.forward(transform);
        tracer.float(Stage::new(MlmActivation), &mut activation)?;
        let mut normed = self.layer_norm.forward(activation);
        tracer.float(Stage::new(MlmLayerNorm), &mut normed)?;
        // [B,T,H] -> [B,T,V]: a score for every word of the vocabulary, against the same table
        // that embedded the input (the decoder is tied to the word embeddings).
        let mut logits = self.decoder.forward(&normed);
        tracer.float(Stage::new(MlmLogits), &mut logits)?;
        Ok(logits)
    }

    /// `lens.*`: `[B,T,H]` -> `[B,T,V]`, the whole head on any hidden state, its stages untraced.
    pub fn logits_of(&self, hidden: &Array3<F>) -> Array3<F> {
        match self.forward(hidden, &mut Tracer::new(&mut Discard, None, None)) {
            Ok(logits) => logits,
            Err(_) => unreachable!("a pass that traces nothing neither stops nor fails"),
        }
    }

    /// `[B,T,V]` d loss / d logits -> `[B,T,H]` d loss / d the last hidden state, in reverse.
    pub(crate) fn backward(
        &self,
        hidden: &Array3<F>,
        record: &Record<F>,
        d_logits: &Array3<F>,
        grads: &mut Grads<F>,
        tracer: &mut Tracer,
    ) -> Result<Array3<F>, Halt> {
        let mut d_logits = d_logits.clone();
        tracer.float(Stage::new(MlmLogits).grad(), &mut d_logits)?;
        let at = |kind| record.three(Stage::new(kind));
        let mut d_normed = self.decoder_backward(at(MlmLayerNorm), &d_logits, grads);
        tracer.float(Stage::new(MlmLayerNorm).grad(), &mut d_normed)?;
        // normed = LayerNorm(activation), activation = act(transform), transform = hidden · Wtᵀ + bt.
        let mut d_activation = self.layer_norm.backward(at(MlmActivation), d_normed.view(), grads);
        tracer.float(Stage::new(MlmActivation).grad(), &mut d_activation)?;
        let mut d_transform = self.activation.backward(at(MlmTransform), d_activation.view());
        tracer.float(Stage::new(MlmTransform).grad(), &mut d_transform)?;
        Ok(self.transform.backward(hidden, &d_transform, grads))
    }

    /// The decoder's backward: `[B,T,V]` d logits -> `[B,T,H]` d mlm.layernorm, from the
    /// layernorm's output `normed`; the table's and the bias's gradients are added to `grads`.
    pub(crate) fn decoder_backward(
        &self,
        normed: ArrayView3<'_, F>,
        d_logits: &Array3<F>,
        grads: &mut Grads<F>,
    ) -> Array3<F> {
        // logits = layernorm · Eᵀ + bias: the decoder's weight is the word embeddings', so its
        // gradient is added into theirs; its bias is `cls.predictions.bias`.
        let (b, t, v) = d_logits.dim();
        let h = normed.dim().2;
        let normed = normed.as_standard_layout().into_owned().into_shape_with_order((b * t, h)).expect("rows");
        let d_rows = d_logits.view().into_shape_with_order((b * t, v)).expect("rows");
        let (d_normed, d_table, d_bias) = ops::linear_backward(normed.view(), self.decoder.weight.view2(), d_rows);
        grads.add(self.decoder.params.weight, d_table.into_dyn());
        grads.add(self.decoder.params.bias, d_bias.into_dyn());
        d_normed.into_shape_with_order((b, t, h)).expect("[B,T,H]")
    }
}
