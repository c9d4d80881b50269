//! The model's parameters by name, as transformers' `BertForPreTraining.named_parameters()`
//! lists them: for what reads or changes them all (the optimizer, the checkpoint writer, the
//! dump of a training step). The names and their order are the stage table's `param.*` rows.

use super::BertModel;
use crate::load::weights::Param;
use crate::ops::Float;
use crate::trace::stage::{self, Stage, StageKind::*};

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
    /// `update(stage, values)`. The MLM decoder stays tied to the word embeddings.
    pub fn update_parameters(&mut self, mut update: impl FnMut(Stage, &mut [F])) {
        // The decoder's handle on the word embedding table is let go first, so that the table is
        // changed where it is rather than copied; the decoder takes the changed table after.
        if let Some(mlm) = &mut self.mlm {
            mlm.decoder.weight = Param::from_vec(Vec::new(), vec![0, 0]);
        }
        for stage in stage::parameters(self.layers.len(), self.heads()) {
            let param = self.parameter_mut(stage).expect("the table lists only the model's parameters");
            update(stage, param.values_mut());
        }
        if let Some(mlm) = &mut self.mlm {
            mlm.decoder.weight = self.embeddings.word_embeddings.clone();
        }
    }

    /// The parameter a `param.*` stage names, if the model has it.
    pub fn parameter(&self, stage: Stage) -> Option<&Param<F>> {
        let layer = stage.layer.and_then(|i| self.layers.get(i));
        let attention = layer.map(|l| &l.attention);
        let ffn = layer.map(|l| &l.feed_forward);
        let (emb, mlm) = (&self.embeddings, self.mlm.as_ref());
        Some(match stage.kind {
            ParamWordEmbeddings => &emb.word_embeddings,
            ParamPositionEmbeddings => &emb.position_embeddings,
            ParamTokenTypeEmbeddings => &emb.token_type_embeddings,
            ParamEmbLayerNormWeight => &emb.layer_norm.weight,
            ParamEmbLayerNormBias => &emb.layer_norm.bias,
            ParamQueryWeight => &attention?.self_attention.query.weight,
            ParamQueryBias => &attention?.self_attention.query.bias,
            ParamKeyWeight => &attention?.self_attention.key.weight,
            ParamKeyBias => &attention?.self_attention.key.bias,
            ParamValueWeight => &attention?.self_attention.value.weight,
            ParamValueBias => &attention?.self_attention.value.bias,
            ParamAttnOutputWeight => &attention?.output.dense.weight,
            ParamAttnOutputBias => &attention?.output.dense.bias,
            ParamAttnLayerNormWeight => &attention?.output.layer_norm.weight,
            ParamAttnLayerNormBias => &attention?.output.layer_norm.bias,
            ParamIntermediateWeight => &ffn?.intermediate.weight,
            ParamIntermediateBias => &ffn?.intermediate.bias,
            ParamFfnOutputWeight => &ffn?.output.weight,
            ParamFfnOutputBias => &ffn?.output.bias,
            ParamFfnLayerNormWeight => &ffn?.layer_norm.weight,
            ParamFfnLayerNormBias => &ffn?.layer_norm.bias,
            ParamPoolerWeight => &self.pooler.as_ref()?.dense.weight,
            ParamPoolerBias => &self.pooler.as_ref()?.dense.bias,
            ParamMlmBias => &mlm?.decoder.bias,
            ParamMlmTransformWeight => &mlm?.transform.weight,
            ParamMlmTransformBias => &mlm?.transform.bias,
            ParamMlmLayerNormWeight => &mlm?.layer_norm.weight,
            ParamMlmLayerNormBias => &mlm?.layer_norm.bias,
            ParamNspWeight => &self.nsp.as_ref()?.dense.weight,
            ParamNspBias => &self.nsp.as_ref()?.dense.bias,
            _ => return None,
        })
    }

    /// [`BertModel::parameter`], to change.
    fn parameter_mut(&mut self, stage: Stage) -> Option<&mut Param<F>> {
        let layer = match stage.layer {
            Some(i) => Some(self.layers.get_mut(i)?),
            None => None,
        };
        let (attention, ffn) = match layer {
            Some(l) => (Some(&mut l.attention), Some(&mut l.feed_forward)),
            None => (None, None),
        };
        let (emb, mlm) = (&mut self.embeddings, self.mlm.as_mut());
        Some(match stage.kind {
            ParamWordEmbeddings => &mut emb.word_embeddings,
            ParamPositionEmbeddings => &mut emb.position_embeddings,
            ParamTokenTypeEmbeddings => &mut emb.token_type_embeddings,
            ParamEmbLayerNormWeight => &mut emb.layer_norm.weight,
            ParamEmbLayerNormBias => &mut emb.layer_norm.bias,
            ParamQueryWeight => &mut attention?.self_attention.query.weight,
            ParamQueryBias => &mut attention?.self_attention.query.bias,
            ParamKeyWeight => &mut attention?.self_attention.key.weight,
            ParamKeyBias => &mut attention?.self_attention.key.bias,
            ParamValueWeight => &mut attention?.self_attention.value.weight,
            ParamValueBias => &mut attention?.self_attention.value.bias,
            ParamAttnOutputWeight => &mut attention?.output.dense.weight,
            ParamAttnOutputBias => &mut attention?.output.dense.bias,
            ParamAttnLayerNormWeight => &mut attention?.output.layer_norm.weight,
            ParamAttnLayerNormBias => &mut attention?.output.layer_norm.bias,
            ParamIntermediateWeight => &mut ffn?.intermediate.weight,
            ParamIntermediateBias => &mut ffn?.intermediate.bias,
            ParamFfnOutputWeight => &mut ffn?.output.weight,
            ParamFfnOutputBias => &mut ffn?.output.bias,
            ParamFfnLayerNormWeight => &mut ffn?.layer_norm.weight,
            ParamFfnLayerNormBias => &mut ffn?.layer_norm.bias,
            ParamPoolerWeight => &mut self.pooler.as_mut()?.dense.weight,
            ParamPoolerBias => &mut self.pooler.as_mut()?.dense.bias,
            ParamMlmBias => &mut mlm?.decoder.bias,
            ParamMlmTransformWeight => &mut mlm?.transform.weight,
            ParamMlmTransformBias => &mut mlm?.transform.bias,
            ParamMlmLayerNormWeight => &mut mlm?.layer_norm.weight,
            ParamMlmLayerNormBias => &mut mlm?.layer_norm.bias,
            ParamNspWeight => &mut self.nsp.as_mut()?.dense.weight,
            ParamNspBias => &mut self.nsp.as_mut()?.dense.bias,
            _ => return None,
        })
    }
}
