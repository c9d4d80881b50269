//! `BertOnlyMLMHead` (`cls.predictions`): a transform of every token's final hidden state, then
//! the decoder back to vocabulary logits. The decoder's weight is the word embedding table (tied),
//! so checkpoints usually do not store it; only its bias is its own.

use ndarray::Array3;

use crate::activation::Activation;
use crate::config::BertConfig;
use crate::error::Result;
use crate::layer_norm::LayerNorm;
use crate::linear::{rows, unrows, Linear};
use crate::stage::{Stage, StageKind};
use crate::trace::{Halt, Tracer};
use crate::weights::{Param, WeightStore};

/// `cls.predictions`
pub struct MlmHead {
    /// `transform.dense`, H -> H
    pub transform: Linear,
    pub activation: Activation,
    /// `transform.LayerNorm`
    pub layer_norm: LayerNorm,
    /// H -> V: weight `[V,H]` shared with `embeddings.word_embeddings`, bias `cls.predictions.bias`.
    pub decoder: Linear,
}

impl MlmHead {
    /// Whether the checkpoint has an MLM head.
    pub fn present(store: &WeightStore) -> bool {
        store.contains("cls.predictions.transform.dense.weight")
    }

    pub fn load(store: &WeightStore, config: &BertConfig, word_embeddings: &Param) -> Result<MlmHead> {
        let (h, v) = (config.hidden_size, config.vocab_size);
        // HF ties the decoder to the input embeddings when it loads the model, even if the file
        // stores a decoder weight; the input embeddings win, so they do here too.
        let bias_name = if store.contains("cls.predictions.bias") {
            "cls.predictions.bias"
        } else {
            "cls.predictions.decoder.bias"
        };
        Ok(MlmHead {
            transform: Linear::load(store, "cls.predictions.transform.dense", h, h)?,
            activation: config.activation(),
            layer_norm: LayerNorm::load(store, "cls.predictions.transform.LayerNorm", h, config.eps())?,
            decoder: Linear { weight: word_embeddings.clone(), bias: store.get(bias_name, &[v])? },
        })
    }

    /// `[B,T,H]` -> `[B,T,V]`
    pub(crate) fn forward(&self, hidden: &Array3<f32>, tracer: &mut Tracer) -> Result<Array3<f32>, Halt> {
        let (b, t, _) = hidden.dim();
        let mut x = unrows(self.transform.forward(rows(hidden)), b, t);
        tracer.f32(Stage::new(StageKind::MlmTransform), x.view())?;
        self.activation.apply_inplace(x.view_mut());
        tracer.f32(Stage::new(StageKind::MlmActivation), x.view())?;
        self.layer_norm.forward_hidden(&mut x);
        tracer.f32(Stage::new(StageKind::MlmLayerNorm), x.view())?;
        let logits = unrows(self.decoder.forward(rows(&x)), b, t);
        tracer.f32(Stage::new(StageKind::MlmLogits), logits.view())?;
        Ok(logits)
    }
}
