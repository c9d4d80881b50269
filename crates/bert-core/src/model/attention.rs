//! `BertAttention`: multi-head self-attention, then the output projection, the residual and
//! LayerNorm (BERT normalises after adding the residual: post-norm).

use ndarray::{Array3, Array4};

use super::layer_norm::LayerNorm;
use super::linear::Linear;
use crate::error::Result;
use crate::load::config::BertConfig;
use crate::load::weights::WeightStore;
use crate::ops::{self, Float};
use crate::trace::stage::{Stage, StageKind::*};
use crate::trace::{Halt, Tracer};

/// `attention.self`: the query, key and value projections, `[H]` -> `[H]` each.
pub struct BertSelfAttention<F: Float = f32> {
    pub query: Linear<F>,
    pub key: Linear<F>,
    pub value: Linear<F>,
    pub n_heads: usize,
}

/// `attention.output`: the projection back to H and the LayerNorm after the residual.
pub struct BertSelfOutput<F: Float = f32> {
    pub dense: Linear<F>,
    pub layer_norm: LayerNorm<F>,
}

/// `bert.encoder.layer.{i}.attention`
pub struct BertAttention<F: Float = f32> {
    pub self_attention: BertSelfAttention<F>,
    pub output: BertSelfOutput<F>,
}

impl<F: Float> BertAttention<F> {
    pub fn load(store: &WeightStore, config: &BertConfig, prefix: &str) -> Result<BertAttention<F>> {
        let h = config.hidden_size;
        let linear = |name: &str| Linear::load(store, &format!("{prefix}.{name}"), h, h);
        Ok(BertAttention {
            self_attention: BertSelfAttention {
                query: linear("self.query")?,
                key: linear("self.key")?,
                value: linear("self.value")?,
                n_heads: config.num_attention_heads,
            },
            output: BertSelfOutput {
                dense: linear("output.dense")?,
                layer_norm: LayerNorm::load(
                    store,
                    &format!("{prefix}.output.LayerNorm"),
                    h,
                    F::of(config.layer_norm_eps),
                )?,
            },
        })
    }

    /// `[B,T,H]` -> `[B,T,H]`
    ///
    /// `additive_mask` `[B,1,1,T]` is 0 for a real key and f32::MIN for padding, or None when no token is
    /// padding (HF then adds nothing).
    pub(crate) fn forward(
        &self,
        layer_idx: usize,
        x: &Array3<F>,
        additive_mask: Option<&Array4<F>>,
        tracer: &mut Tracer,
    ) -> Result<Array3<F>, Halt> {
        let stage = |kind| Stage::layer(layer_idx, kind);
        let self_attn = &self.self_attention;
        let (nh, hs) = (self_attn.n_heads, x.dim().2 / self_attn.n_heads);

        // [B,T,H] -> [B,nh,T,hs]: every token's query, key and value, each head with its own hs features.
        let mut q = ops::split_heads(self_attn.query.forward(x), nh);
        tracer.float(stage(AttnQuery), &mut q)?;
        let mut k = ops::split_heads(self_attn.key.forward(x), nh);
        tracer.float(stage(AttnKey), &mut k)?;
        let mut v = ops::split_heads(self_attn.value.forward(x), nh);
        tracer.float(stage(AttnValue), &mut v)?;

        // [B,nh,T,hs] · [B,nh,hs,T] -> [B,nh,T,T]: every query against every key, scaled by
        // 1/√hs, which keeps the dot products of hs-long vectors near unit variance so that
        // softmax does not saturate. HF's `self.scaling = hs ** -0.5`, computed in f64 as Python does.
        let scale = F::of((hs as f64).powf(-0.5));
        let mut scores = ops::scaled_matmul(q.view(), ops::transpose(k.view()), scale);
        // + [B,1,1,T], broadcast over heads and queries: padding keys get f32::MIN.
        if let Some(additive_mask) = additive_mask {
            scores += additive_mask;
        }
        tracer.float(stage(AttnScores), &mut scores)?;
        // [B,nh,T,T]: each query's row becomes a distribution over the keys.
        let mut probs = ops::softmax_rows(scores);
        tracer.float(stage(AttnProbs), &mut probs)?;

        // [B,nh,T,T] · [B,nh,T,hs] -> [B,nh,T,hs] -> [B,T,H]: each head's weighted sum of the
        // values, the heads then side by side again.
        let mut context = ops::merge_heads(ops::matmul(probs.view(), v.view()));
        tracer.float(stage(AttnContext), &mut context)?;

        // [B,T,H]: the output projection mixes the heads; then the residual and LayerNorm.
        let mut output = self.output.dense.forward(&context);
        tracer.float(stage(AttnOutput), &mut output)?;
        let mut residual = output + x;
        tracer.float(stage(AttnResidual), &mut residual)?;
        let mut hidden = self.output.layer_norm.forward(residual);
        tracer.float(stage(AttnLayerNorm), &mut hidden)?;
        Ok(hidden)
    }
}
