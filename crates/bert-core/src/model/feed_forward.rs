//! The feed-forward block of a layer: `intermediate` (H -> I, then the activation) and `output`
//! (I -> H, the residual, LayerNorm), applied to every token on its own.

use ndarray::Array3;

use super::activation::Activation;
use super::attention::residual;
use super::dropout::{self, Dropout};
use super::gradients::{Grads, Record};
use super::layer_norm::LayerNorm;
use super::linear::Linear;
use super::parameters::WeightAndBias;
use crate::error::Result;
use crate::io::config::BertConfig;
use crate::io::weights::WeightStore;
use crate::ops::Float;
use crate::pass::{Halt, Tracer};
use crate::stage::{Stage, StageKind::*};

/// `bert.encoder.layer.{i}.intermediate` and `.output`
pub struct FeedForward<F: Float = f32> {
    /// `intermediate.dense`, H -> I
    pub intermediate: Linear<F>,
    pub activation: Activation,
    /// `output.dense`, I -> H
    pub output: Linear<F>,
    /// `output.LayerNorm`
    pub layer_norm: LayerNorm<F>,
}

impl<F: Float> FeedForward<F> {
    /// Layer `layer_idx`'s feed-forward block, its parameters named by the stage table.
    pub fn load(store: &WeightStore, config: &BertConfig, layer_idx: usize) -> Result<FeedForward<F>> {
        let (h, i) = (config.hidden_size, config.intermediate_size);
        let params = |kind| WeightAndBias::read_by(Stage::layer(layer_idx, kind));
        let eps = F::of(config.layer_norm_eps);
        Ok(FeedForward {
            intermediate: Linear::load(store, params(FfnIntermediate), h, i)?,
            activation: config.activation(),
            output: Linear::load(store, params(FfnOutput), i, h)?,
            layer_norm: LayerNorm::load(store, params(FfnLayerNorm), h, eps)?,
        })
    }

    /// `[B,T,H]` -> `[B,T,H]`
    pub(crate) fn forward(
        &self,
        layer_idx: usize,
        x: &Array3<F>,
        dropout: Option<&Dropout>,
        tracer: &mut Tracer,
    ) -> Result<Array3<F>, Halt> {
        let stage = |kind| Stage::layer(layer_idx, kind);
        // [B,T,H] -> [B,T,I]: each token widened to I features (4H in BERT-base and MiniLM).
        let mut intermediate = self.intermediate.forward(x);
        tracer.float(stage(FfnIntermediate), &mut intermediate)?;
        // [B,T,I]: the only element-wise non-linearity in a layer.
        let mut activation = self.activation.forward(intermediate);
        tracer.float(stage(FfnActivation), &mut activation)?;
        // [B,T,I] -> [B,T,H]: back to the hidden width.
        let mut output = self.output.forward(&activation);
        tracer.float(stage(FfnOutput), &mut output)?;
        let output = dropout::apply(dropout, stage(FfnOutputDropout), output, tracer)?;
        // [B,T,H]: add the block's input back (the residual), then LayerNorm (post-norm).
        let mut residual = residual(output, x);
        tracer.float(stage(FfnResidual), &mut residual)?;
        let mut hidden = self.layer_norm.forward(residual);
        tracer.float(stage(FfnLayerNorm), &mut hidden)?;
        Ok(hidden)
    }

    /// The backward: `[B,T,H]` d loss / d ffn.layernorm -> `[B,T,H]` d loss / d the block's input
    /// `x` (attention.layernorm).
    pub(crate) fn backward(
        &self,
        layer_idx: usize,
        x: &Array3<F>,
        record: &Record<F>,
        d_hidden: &Array3<F>,
        grads: &mut Grads<F>,
        tracer: &mut Tracer,
    ) -> Result<Array3<F>, Halt> {
        let stage = |kind| Stage::layer(layer_idx, kind);
        let at = |kind| record.three(stage(kind));
        // hidden = LayerNorm(residual); residual = output + x, so both get d residual.
        let mut d_residual = self.layer_norm.backward(at(FfnResidual), d_hidden.view(), grads);
        tracer.float(stage(FfnResidual).grad(), &mut d_residual)?;
        let mut d_output = dropout::backward(record, stage(FfnOutputDropout), d_residual.clone(), tracer)?;
        tracer.float(stage(FfnOutput).grad(), &mut d_output)?;
        // output = activation · W2ᵀ + b2
        let mut d_activation = self.output.backward(&at(FfnActivation), &d_output, grads);
        tracer.float(stage(FfnActivation).grad(), &mut d_activation)?;
        // activation = act(intermediate)
        let mut d_intermediate = self.activation.backward(at(FfnIntermediate), d_activation.view());
        tracer.float(stage(FfnIntermediate).grad(), &mut d_intermediate)?;
        Ok(self.input_backward(x, &d_intermediate, &d_residual, grads))
    }

    /// d loss / d the block's input `x` (attention.layernorm) `[B,T,H]`, from d intermediate and
    /// d residual; the intermediate layer's parameter gradients are added to `grads`.
    pub(crate) fn input_backward(
        &self,
        x: &Array3<F>,
        d_intermediate: &Array3<F>,
        d_residual: &Array3<F>,
        grads: &mut Grads<F>,
    ) -> Array3<F> {
        // intermediate = x · W1ᵀ + b1, plus the residual's share.
        let d_x = self.intermediate.backward(x, d_intermediate, grads);
        d_x + d_residual
    }
}
