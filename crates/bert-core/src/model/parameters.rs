//! The model's parameters by name, as transformers' `BertForPreTraining.named_parameters()`
//! lists them: for what reads or changes them all (the optimizer, the checkpoint writer, the
//! dump of a training step). The names and their order are the stage table's `param.*` rows.

use super::BertModel;
use crate::io::weights::Param;
use crate::ops::Float;
use crate::stage::{self, Stage, StageKind::*};

/// Where each `param.*` row of the stage table lives in the model: one table, for
/// [`BertModel::parameter`] (`&`) and `parameter_mut` (`&mut`). `$get` and `$as` are the
/// borrowing methods of that kind (`get`/`as_ref`, `get_mut`/`as_mut`).
macro_rules! parameter_of {
    ($model:expr, $stage:expr, $get:ident, $as:ident $(, $mut:tt)?) => {{
        let model = $model;
        let layer = match $stage.layer {
            Some(i) => Some(model.layers.$get(i)?),
            None => None,
        };
        let (attention, ffn) = match layer {
            Some(l) => (Some(&$($mut)? l.attention), Some(&$($mut)? l.feed_forward)),
            None => (None, None),
        };
        let (emb, mlm) = (&$($mut)? model.embeddings, model.mlm.$as());
        Some(match $stage.kind {
            ParamWordEmbeddings => &$($mut)? emb.word_embeddings,
            ParamPositionEmbeddings => &$($mut)? emb.position_embeddings,
            ParamTokenTypeEmbeddings => &$($mut)? emb.token_type_embeddings,
            ParamEmbLayerNormWeight => &$($mut)? emb.layer_norm.weight,
            ParamEmbLayerNormBias => &$($mut)? emb.layer_norm.bias,
            ParamQueryWeight => &$($mut)? attention?.self_attention.query.weight,
            ParamQueryBias => &$($mut)? attention?.self_attention.query.bias,
            ParamKeyWeight => &$($mut)? attention?.self_attention.key.weight,
            ParamKeyBias => &$($mut)? attention?.self_attention.key.bias,
            ParamValueWeight => &$($mut)? attention?.self_attention.value.weight,
            ParamValueBias => &$($mut)? attention?.self_attention.value.bias,
            ParamAttnOutputWeight => &$($mut)? attention?.output.dense.weight,
            ParamAttnOutputBias => &$($mut)? attention?.output.dense.bias,
            ParamAttnLayerNormWeight => &$($mut)? attention?.output.layer_norm.weight,
            ParamAttnLayerNormBias => &$($mut)? attention?.output.layer_norm.bias,
            ParamIntermediateWeight => &$($mut)? ffn?.intermediate.weight,
            ParamIntermediateBias => &$($mut)? ffn?.intermediate.bias,
            ParamFfnOutputWeight => &$($mut)? ffn?.output.weight,
            ParamFfnOutputBias => &$($mut)? ffn?.output.bias,
            ParamFfnLayerNormWeight => &$($mut)? ffn?.layer_norm.weight,
            ParamFfnLayerNormBias => &$($mut)? ffn?.layer_norm.bias,
            ParamPoolerWeight => &$($mut)? model.pooler.$as()?.dense.weight,
            ParamPoolerBias => &$($mut)? model.pooler.$as()?.dense.bias,
            ParamMlmBias => &$($mut)? mlm?.decoder.bias,
            ParamMlmTransformWeight => &$($mut)? mlm?.transform.weight,
            ParamMlmTransformBias => &$($mut)? mlm?.transform.bias,
            ParamMlmLayerNormWeight => &$($mut)? mlm?.layer_norm.weight,
            ParamMlmLayerNormBias => &$($mut)? mlm?.layer_norm.bias,
            ParamNspWeight => &$($mut)? model.nsp.$as()?.dense.weight,
            ParamNspBias => &$($mut)? model.nsp.$as()?.dense.bias,
            _ => return None,
        })
    }};
}

impl<F: Float> BertModel<F> {
    /// Every parameter with its stage (`param.<name>`), in the order of `named_parameters()`.
    /// The MLM decoder's weight is the word embedding table: it is listed once, as that table.
    pub fn parameters(&self) -> Vec<(Stage, &Param<F>)> {
        stage::parameters(self.layers.len(), self.heads())
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
        for stage in stage::parameters(self.layers.len(), self.heads()) {
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
