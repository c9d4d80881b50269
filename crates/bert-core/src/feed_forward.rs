//! The feed-forward block: `intermediate` (H -> I, activation) and `output` (I -> H, residual,
//! LayerNorm), applied to every token on its own.

use ndarray::Array3;

use crate::activation::Activation;
use crate::config::BertConfig;
use crate::error::Result;
use crate::layer_norm::LayerNorm;
use crate::linear::{rows, unrows, Linear};
use crate::stage::{Stage, StageKind};
use crate::trace::{Halt, Tracer};
use crate::weights::WeightStore;

/// `bert.encoder.layer.{i}.intermediate` and `.output`
pub struct FeedForward {
    /// `intermediate.dense`, H -> I
    pub intermediate: Linear,
    pub activation: Activation,
    /// `output.dense`, I -> H
    pub output: Linear,
    /// `output.LayerNorm`
    pub layer_norm: LayerNorm,
}

impl FeedForward {
    pub fn load(store: &WeightStore, config: &BertConfig, prefix: &str) -> Result<FeedForward> {
        let (h, i) = (config.hidden_size, config.intermediate_size);
        Ok(FeedForward {
            intermediate: Linear::load(store, &format!("{prefix}.intermediate.dense"), h, i)?,
            activation: config.activation(),
            output: Linear::load(store, &format!("{prefix}.output.dense"), i, h)?,
            layer_norm: LayerNorm::load(store, &format!("{prefix}.output.LayerNorm"), h, config.eps())?,
        })
    }

    /// `[B,T,H]` -> `[B,T,H]`
    pub(crate) fn forward(&self, layer_idx: usize, x: &Array3<f32>, tracer: &mut Tracer) -> Result<Array3<f32>, Halt> {
        let stage = |kind| Stage::layer(layer_idx, kind);
        let (b, t, _) = x.dim();
        // [B,T,I]
        let mut intermediate = unrows(self.intermediate.forward(rows(x)), b, t);
        tracer.f32(stage(StageKind::FfnIntermediate), intermediate.view())?;
        // The activation is applied in place: the intermediate values are not needed again.
        self.activation.apply_inplace(intermediate.view_mut());
        let activation = intermediate;
        tracer.f32(stage(StageKind::FfnActivation), activation.view())?;
        let output = unrows(self.output.forward(rows(&activation)), b, t);
        tracer.f32(stage(StageKind::FfnOutput), output.view())?;
        // The residual is added in place: the output buffer becomes the residual.
        let mut hidden = output;
        hidden += x;
        tracer.f32(stage(StageKind::FfnResidual), hidden.view())?;
        self.layer_norm.forward_hidden(&mut hidden);
        tracer.f32(stage(StageKind::FfnLayerNorm), hidden.view())?;
        Ok(hidden)
    }
}
