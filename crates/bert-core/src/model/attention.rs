//! `BertAttention`: multi-head self-attention, then the output projection, the residual and
//! LayerNorm (BERT normalises after adding the residual: post-norm).

use ndarray::{Array3, Array4, ArrayView4};

use super::dropout::{self, Dropout};
use super::gradients::{Grads, Record};
use super::layer_norm::LayerNorm;
use super::linear::Linear;
use super::parameters::WeightAndBias;
use crate::error::Result;
use crate::io::config::BertConfig;
use crate::io::weights::WeightStore;
use crate::ops::{self, Float};
use crate::pass::{Halt, Tracer};
use crate::stage::{Stage, StageKind, StageKind::*};

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

impl<F: Float> BertSelfAttention<F> {
    /// The dense layer of `attention.query`, `.key` or `.value` (any other kind: the value's).
    pub fn projection(&self, kind: StageKind) -> &Linear<F> {
        match kind {
            AttnQuery => &self.query,
            AttnKey => &self.key,
            _ => &self.value,
        }
    }

    /// `attention.query`, `.key` or `.value`: `[B,T,H]` -> `[B,nh,T,hs]`, every token's
    /// projection, each head with its own hs features.
    pub fn project(&self, kind: StageKind, x: &Array3<F>) -> Array4<F> {
        ops::split_heads(self.projection(kind).forward(x), self.n_heads)
    }
}

impl<F: Float> BertAttention<F> {
    /// Layer `layer_idx`'s attention, its parameters named by the stage table.
    pub fn load(store: &WeightStore, config: &BertConfig, layer_idx: usize) -> Result<BertAttention<F>> {
        let h = config.hidden_size;
        let params = |kind| WeightAndBias::read_by(Stage::layer(layer_idx, kind));
        let linear = |kind| Linear::load(store, params(kind), h, h);
        let eps = F::of(config.layer_norm_eps);
        Ok(BertAttention {
            self_attention: BertSelfAttention {
                query: linear(AttnQuery)?,
                key: linear(AttnKey)?,
                value: linear(AttnValue)?,
                n_heads: config.num_attention_heads,
            },
            output: BertSelfOutput {
                dense: linear(AttnOutput)?,
                layer_norm: LayerNorm::load(store, params(AttnLayerNorm), h, eps)?,
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
        dropout: Option<&Dropout>,
        tracer: &mut Tracer,
    ) -> Result<Array3<F>, Halt> {
        let stage = |kind| Stage::layer(layer_idx, kind);
        let self_attn = &self.self_attention;
        let mut q = self_attn.project(AttnQuery, x);
        tracer.float(stage(AttnQuery), &mut q)?;
        let mut k = self_attn.project(AttnKey, x);
        tracer.float(stage(AttnKey), &mut k)?;
        let mut v = self_attn.project(AttnValue, x);
        tracer.float(stage(AttnValue), &mut v)?;
        let mut scores = scores(q.view(), k.view(), additive_mask);
        tracer.float(stage(AttnScores), &mut scores)?;
        let mut probs = probs(scores);
        tracer.float(stage(AttnProbs), &mut probs)?;
        // In training some probabilities are dropped; `attention.probs` stays softmax's.
        let used = dropout::apply(dropout, stage(AttnProbsDropout), probs, tracer)?;
        let mut context = context(used.view(), v.view());
        tracer.float(stage(AttnContext), &mut context)?;
        // [B,T,H]: the output projection mixes the heads; then the residual and LayerNorm.
        let mut output = self.output.dense.forward(&context);
        tracer.float(stage(AttnOutput), &mut output)?;
        let output = dropout::apply(dropout, stage(AttnOutputDropout), output, tracer)?;
        let mut residual = residual(output, x);
        tracer.float(stage(AttnResidual), &mut residual)?;
        let mut hidden = self.output.layer_norm.forward(residual);
        tracer.float(stage(AttnLayerNorm), &mut hidden)?;
        Ok(hidden)
    }

    /// The backward: `[B,T,H]` d loss / d attention.layernorm -> `[B,T,H]` d loss / d the layer
    /// input `x`, the forward read in reverse.
    pub(crate) fn backward(
        &self,
        layer_idx: usize,
        x: &Array3<F>,
        record: &Record<F>,
        d_hidden: &Array3<F>,
        grads: &mut Grads<F>,
        tracer: &mut Tracer,
    ) -> Result<Array3<F>, Halt> {
        let at = |kind| Stage::layer(layer_idx, kind);
        let self_attn = &self.self_attention;

        // hidden = LayerNorm(residual); residual = output + x, so both get d residual.
        let d_residual = self.output.layer_norm.backward(record.three(at(AttnResidual)), d_hidden.view(), grads);
        let mut d_residual = d_residual;
        tracer.float(at(AttnResidual).grad(), &mut d_residual)?;
        let d_x = d_residual.clone();
        let mut d_output = dropout::backward(record, at(AttnOutputDropout), d_residual, tracer)?;
        tracer.float(at(AttnOutput).grad(), &mut d_output)?;
        // output = context · Woᵀ + bo
        let context = record.three(at(AttnContext));
        let mut d_context = self.output.dense.backward(&context, &d_output, grads);
        tracer.float(at(AttnContext).grad(), &mut d_context)?;
        // The context read the probabilities dropout left, in training.
        let used = record.of_dim(at(AttnProbsDropout)).unwrap_or(record.four(at(AttnProbs)));
        let (probs, v) = (record.four(at(AttnProbs)), record.four(at(AttnValue)));
        let (d_used, mut d_v) = context_backward(used, v, d_context);
        let mut d_probs = dropout::backward(record, at(AttnProbsDropout), d_used, tracer)?;
        tracer.float(at(AttnProbs).grad(), &mut d_probs)?;
        let mut d_scores = probs_backward(probs, d_probs.view());
        tracer.float(at(AttnScores).grad(), &mut d_scores)?;
        let (q, k) = (record.four(at(AttnQuery)), record.four(at(AttnKey)));
        let (mut d_q, mut d_k) = scores_backward(q, k, d_scores.view());
        tracer.float(at(AttnValue).grad(), &mut d_v)?;
        tracer.float(at(AttnKey).grad(), &mut d_k)?;
        tracer.float(at(AttnQuery).grad(), &mut d_q)?;
        Ok(self_attn.input_backward(x, d_x, [d_q, d_k, d_v], grads))
    }
}

impl<F: Float> BertSelfAttention<F> {
    /// d loss / d the layer's input `x` `[B,T,H]`: the residual's share `d_residual` plus each
    /// projection's, from d query, d key and d value `[B,nh,T,hs]` (in that order); the
    /// projections' parameter gradients are added to `grads`.
    pub(crate) fn input_backward(
        &self,
        x: &Array3<F>,
        d_residual: Array3<F>,
        d_projections: [Array4<F>; 3],
        grads: &mut Grads<F>,
    ) -> Array3<F> {
        let mut d_x = d_residual;
        // Each projection of x: its heads merged back, then the dense layer's backward.
        let [d_q, d_k, d_v] = d_projections;
        for (linear, d_proj) in [(&self.query, d_q), (&self.key, d_k), (&self.value, d_v)] {
            let d_proj = ops::merge_heads(d_proj);
            d_x += &linear.backward(x, &d_proj, grads);
        }
        d_x
    }
}

/// The backward of [`context`]: `[B,T,H]` d context -> d probs `[B,nh,T,T]` and d value
/// `[B,nh,T,hs]`.
pub fn context_backward<F: Float>(
    probs: ArrayView4<'_, F>,
    v: ArrayView4<'_, F>,
    d_context: Array3<F>,
) -> (Array4<F>, Array4<F>) {
    // [B,T,H] -> [B,nh,T,hs]: merging the heads is undone by splitting the gradient.
    let d_heads = ops::split_heads(d_context, probs.dim().1);
    // context = probs · v, for each head.
    ops::scaled_matmul_backward(probs, v, d_heads.view(), F::one())
}

/// The backward of [`probs`]: d probs -> d scores `[B,nh,T,T]`, softmax's. A padded key has
/// probability 0, so its score gets no gradient.
pub fn probs_backward<F: Float>(probs: ArrayView4<'_, F>, d_probs: ArrayView4<'_, F>) -> Array4<F> {
    ops::softmax_rows_backward(probs, d_probs)
}

/// The backward of [`scores`]: d scores -> d query and d key `[B,nh,T,hs]`; scores = q · kᵀ ·
/// hs^-0.5 (+ the mask, a constant).
pub fn scores_backward<F: Float>(
    q: ArrayView4<'_, F>,
    k: ArrayView4<'_, F>,
    d_scores: ArrayView4<'_, F>,
) -> (Array4<F>, Array4<F>) {
    let (d_q, d_k_t) = ops::scaled_matmul_backward(q, ops::transpose(k), d_scores, scale(q.dim().3));
    (d_q, d_k_t.permuted_axes([0, 1, 3, 2]))
}

/// `attention.scores`: `[B,nh,T,hs]` · `[B,nh,hs,T]` -> `[B,nh,T,T]`, every query against every
/// key, scaled by 1/√hs, which keeps the dot products of hs-long vectors near unit variance so
/// that softmax does not saturate (HF's `self.scaling = hs ** -0.5`, computed in f64 as Python
/// does). `additive_mask` `[B,1,1,T]`, broadcast over heads and queries, gives padding keys the
/// most negative float; None when no token is padding (HF then adds nothing).
pub fn scores<F: Float>(q: ArrayView4<'_, F>, k: ArrayView4<'_, F>, additive_mask: Option<&Array4<F>>) -> Array4<F> {
    let scale = scale(q.dim().3);
    let mut scores = ops::scaled_matmul(q, ops::transpose(k), scale);
    // + [B,1,1,T], broadcast over heads and queries: padding keys get f32::MIN.
    if let Some(additive_mask) = additive_mask {
        scores += additive_mask;
    }
    scores
}

/// 1/√hs, the scale of the scores, in f64 then rounded to F (Python computes `hs ** -0.5` in f64).
pub fn scale<F: Float>(hs: usize) -> F {
    F::of((hs as f64).powf(-0.5))
}

/// `attention.probs`: `[B,nh,T,T]`, each query's row of scores made a distribution over the keys.
pub fn probs<F: Float>(scores: Array4<F>) -> Array4<F> {
    ops::softmax_rows(scores)
}

/// `attention.context`: `[B,nh,T,T]` · `[B,nh,T,hs]` -> `[B,nh,T,hs]` -> `[B,T,H]`, each head's
/// weighted sum of the values, the heads then side by side again.
pub fn context<F: Float>(probs: ArrayView4<'_, F>, v: ArrayView4<'_, F>) -> Array3<F> {
    ops::merge_heads(ops::matmul(probs, v))
}

/// `attention.residual` and `ffn.residual`: `[B,T,H]`, a block's output with its input added
/// back, which LayerNorm then normalises (post-norm).
pub fn residual<F: Float>(output: Array3<F>, input: &Array3<F>) -> Array3<F> {
    output + input
}
