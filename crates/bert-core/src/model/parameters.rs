//! The model's parameters by name, as transformers' `BertForPreTraining.named_parameters()`
//! lists them: for what reads or changes them all (the optimizer, the checkpoint writer, the
//! dump of a training step). The names and their order are the stage table's `param.*` rows.

use super::BertModel;
use crate::io::weights::Param;
use crate::ops::Float;
use crate::stage::{self, ParamKind, ParamKind::*, Stage, StageKind};

/// The stages of one module's weight and bias (`param.<name>.weight` and `.bias`), by their
/// kinds in the stage table: the names the module is loaded under (the table's Hugging Face
/// names, the one place a parameter's name is written) and the keys its gradients are added
/// under. A kind misspelt does not compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightAndBias {
    pub weight: Stage,
    pub bias: Stage,
}

/// The stage of a parameter outside the encoder layers (`param.<name>`): the name it is loaded
/// under and the key of its gradient.
pub fn param(kind: ParamKind) -> Stage {
    Stage::new(StageKind::Param(kind))
}

impl WeightAndBias {
    /// The weight and bias `stage` reads, as its row in the stage table names them, in its
    /// layer: the parameters of the module that computes it (`layer0.attention.query`'s are
    /// `param.bert.encoder.layer.0.attention.self.query.weight` and `.bias`).
    pub fn read_by(stage: Stage) -> WeightAndBias {
        let kinds = stage.info().params.unwrap_or_else(|| panic!("the stage table gives {stage} no weight and bias"));
        let at = |kind| Stage { kind: StageKind::Param(kind), ..stage };
        WeightAndBias { weight: at(kinds.weight), bias: at(kinds.bias) }
    }
}

/// Where each `param.*` row of the stage table lives in the model: one table, for
/// [`BertModel::parameter`] (`&`) and `parameter_mut` (`&mut`). `$get` and `$as` are the
/// borrowing methods of that kind (`get`/`as_ref`, `get_mut`/`as_mut`).
macro_rules! parameter_of {
    ($model:expr, $stage:expr, $get:ident, $as:ident $(, $mut:tt)?) => {{
        let model = $model;
        let StageKind::Param(param) = $stage.kind else { return None };
        let layer = match $stage.layer {
            Some(i) => Some(model.layers.$get(i)?),
            None => None,
        };
        let (attention, ffn) = match layer {
            Some(l) => (Some(&$($mut)? l.attention), Some(&$($mut)? l.feed_forward)),
            None => (None, None),
        };
        let (emb, mlm) = (&$($mut)? model.embeddings, model.mlm.$as());
        Some(match param {
            WordEmbeddings => &$($mut)? emb.word_embeddings,
            PositionEmbeddings => &$($mut)? emb.position_embeddings,
            TokenTypeEmbeddings => &$($mut)? emb.token_type_embeddings,
            EmbLayerNormWeight => &$($mut)? emb.layer_norm.weight,
            EmbLayerNormBias => &$($mut)? emb.layer_norm.bias,
            QueryWeight => &$($mut)? attention?.self_attention.query.weight,
            QueryBias => &$($mut)? attention?.self_attention.query.bias,
            KeyWeight => &$($mut)? attention?.self_attention.key.weight,
            KeyBias => &$($mut)? attention?.self_attention.key.bias,
            ValueWeight => &$($mut)? attention?.self_attention.value.weight,
            ValueBias => &$($mut)? attention?.self_attention.value.bias,
            AttnOutputWeight => &$($mut)? attention?.output.dense.weight,
            AttnOutputBias => &$($mut)? attention?.output.dense.bias,
            AttnLayerNormWeight => &$($mut)? attention?.output.layer_norm.weight,
            AttnLayerNormBias => &$($mut)? attention?.output.layer_norm.bias,
            IntermediateWeight => &$($mut)? ffn?.intermediate.weight,
            IntermediateBias => &$($mut)? ffn?.intermediate.bias,
            FfnOutputWeight => &$($mut)? ffn?.output.weight,
            FfnOutputBias => &$($mut)? ffn?.output.bias,
            FfnLayerNormWeight => &$($mut)? ffn?.layer_norm.weight,
            FfnLayerNormBias => &$($mut)? ffn?.layer_norm.bias,
            PoolerWeight => &$($mut)? model.pooler.$as()?.dense.weight,
            PoolerBias => &$($mut)? model.pooler.$as()?.dense.bias,
            MlmBias => &$($mut)? mlm?.decoder.bias,
            MlmTransformWeight => &$($mut)? mlm?.transform.weight,
            MlmTransformBias => &$($mut)? mlm?.transform.bias,
            MlmLayerNormWeight => &$($mut)? mlm?.layer_norm.weight,
            MlmLayerNormBias => &$($mut)? mlm?.layer_norm.bias,
            NspWeight => &$($mut)? model.nsp.$as()?.dense.weight,
            NspBias => &$($mut)? model.nsp.$as()?.dense.bias,
            ClassifierWeight => &$($mut)? model.classifier.$as()?.dense.weight,
            ClassifierBias => &$($mut)? model.classifier.$as()?.dense.bias,
        })
    }};
}

impl<F: Float> BertModel<F> {
    /// Every parameter with its stage (`param.<name>`), in the order of `named_parameters()`.
    /// The MLM decoder's weight is the word embedding table: it is listed once, as that table.
    pub fn parameters(&self) -> Vec<(Stage, &Param<F>)> {
        stage::parameters(self.layers.len(), self.output_heads())
            .into_iter()
            .map(|stage| (stage, self.parameter(stage).expect("the table lists only the model's parameters")))
            .collect()
    }

    /// Changes every parameter in place, in the order of [`BertModel::parameters`]:
    /// `update(stage, values)`, up to the first that fails. The MLM decoder stays tied to the
    /// word embeddings, whether or not every update succeeded.
    pub fn update_parameters<E>(
        &mut self,
        mut update: impl FnMut(Stage, &mut [F]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        // The decoder's handle on the word embedding table is let go first, so that the table is
        // changed where it is rather than copied; the decoder takes the changed table after.
        if let Some(mlm) = &mut self.mlm {
            mlm.decoder.weight = Param::from_vec(Vec::new(), vec![0, 0]);
        }
        let mut result = Ok(());
        for stage in stage::parameters(self.layers.len(), self.output_heads()) {
            let param = self.parameter_mut(stage).expect("the table lists only the model's parameters");
            result = update(stage, param.values_mut());
            if result.is_err() {
                break;
            }
        }
        if let Some(mlm) = &mut self.mlm {
            mlm.decoder.weight = self.embeddings.word_embeddings.clone();
        }
        result
    }

    /// Refuses a model with a parameter that holds NaN or an infinity: a run must not start from
    /// it. `path` names the weights' file in the message.
    pub fn check_finite(&self, path: &std::path::Path) -> crate::error::Result<()> {
        for (stage, param) in self.parameters() {
            if let Some((index, &value)) = param.as_slice().iter().enumerate().find(|(_, v)| !v.is_finite()) {
                return Err(crate::error::BertError::NonFinite {
                    path: path.into(),
                    tensor: stage.hf(),
                    index,
                    value: value.to_f32().unwrap_or(f32::NAN),
                });
            }
        }
        Ok(())
    }

    /// The parameter a `param.*` stage names, if the model has it.
    pub fn parameter(&self, stage: Stage) -> Option<&Param<F>> {
        parameter_of!(self, stage, get, as_ref)
    }

    /// [`BertModel::parameter`], to change.
    fn parameter_mut(&mut self, stage: Stage) -> Option<&mut Param<F>> {
        parameter_of!(self, stage, get_mut, as_mut, mut)
    }
}
