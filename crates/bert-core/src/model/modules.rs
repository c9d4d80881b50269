//! The model's dense layers and LayerNorms, found by the stage they compute: the module whose
//! weight and bias are the ones the stage's row of the table names, in the stage's layer. What
//! recomputes a stage by its operation (`recompute.rs`) asks here for the module to run.

use super::layer_norm::LayerNorm;
use super::linear::Linear;
use super::parameters::WeightAndBias;
use super::BertModel;
use crate::ops::Float;
use crate::stage::{Of, Stage};

impl<F: Float> BertModel<F> {
    /// Every dense layer of the model, the heads' included.
    fn linears(&self) -> impl Iterator<Item = &Linear<F>> {
        let layers = self.layers.iter().flat_map(|layer| {
            let attention = &layer.attention;
            let ffn = &layer.feed_forward;
            [
                &attention.self_attention.query,
                &attention.self_attention.key,
                &attention.self_attention.value,
                &attention.output.dense,
                &ffn.intermediate,
                &ffn.output,
            ]
        });
        let mlm = self.mlm.iter().flat_map(|mlm| [&mlm.transform, &mlm.decoder]);
        let heads = self.pooler.iter().map(|p| &p.dense).chain(self.nsp.iter().map(|n| &n.dense));
        layers.chain(mlm).chain(heads).chain(self.classifier.iter().map(|c| &c.dense))
    }

    /// The weight of every dense layer, as its stage (`param.*`): the MLM decoder's is the word
    /// embedding table's, to which it is tied.
    pub(crate) fn dense_weights(&self) -> Vec<Stage> {
        self.linears().map(|linear| linear.params.weight).collect()
    }

    /// Every LayerNorm of the model.
    fn layer_norms(&self) -> impl Iterator<Item = &LayerNorm<F>> {
        let layers =
            self.layers.iter().flat_map(|layer| [&layer.attention.output.layer_norm, &layer.feed_forward.layer_norm]);
        std::iter::once(&self.embeddings.layer_norm).chain(layers).chain(self.mlm.iter().map(|mlm| &mlm.layer_norm))
    }

    /// The dense layer that computes `stage` (its value); None when the stage's row names no
    /// weight and bias, or the model lacks the module (a head it has not, a layer past its last).
    pub fn linear_of(&self, stage: Stage) -> Option<&Linear<F>> {
        let wanted = reads(stage)?;
        self.linears().find(|linear| linear.params == wanted)
    }

    /// The LayerNorm that computes `stage` (its value); None as for [`BertModel::linear_of`].
    pub fn layer_norm_of(&self, stage: Stage) -> Option<&LayerNorm<F>> {
        let wanted = reads(stage)?;
        self.layer_norms().find(|layer_norm| layer_norm.params == wanted)
    }
}

/// The weight and bias the value of `stage` reads, when its row names them.
fn reads(stage: Stage) -> Option<WeightAndBias> {
    stage.info().params?;
    Some(WeightAndBias::read_by(Stage { of: Of::Value, ..stage }))
}
