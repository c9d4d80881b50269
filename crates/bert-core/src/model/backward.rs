//! The backward pass: d loss / d every parameter, by the chain rule written out stage by stage,
//! in reverse: each module's `backward` sits beside its `forward`, and this file calls them from
//! the loss back to the embeddings. No autograd: the forward pass runs as usual with a
//! [`Record`] as its sink, which keeps the stages the backward reads.

use ndarray::{s, Array3};

use super::gradients::{Gradients, Grads, Record};
use super::{losses, BertModel, Pass};
use crate::error::{BertError, Result};
use crate::load::tokenize::Batch;
use crate::ops::Float;
use crate::trace::stage::{Stage, StageKind::*};

impl<F: Float> BertModel<F> {
    /// The loss of `batch`'s labels and d loss / d every parameter it reaches: the forward pass,
    /// then the backward, reading the forward's stages in reverse.
    pub fn gradients(&self, batch: &Batch) -> Result<Gradients<F>> {
        let (mlm_labels, nsp_labels) = (&batch.labels.mlm, &batch.labels.nsp);
        if mlm_labels.is_none() && nsp_labels.is_none() {
            return Err(BertError::Labels("a backward pass needs a loss: labels for the MLM or the NSP loss".into()));
        }
        let mut record = Record::new();
        let traced = self.trace_with(batch, &mut record, Pass::default())?;
        let loss = traced.outputs.loss.expect("labels give a loss");
        let mut grads = Grads::new();
        let n_layers = self.layers.len();
        let last = if n_layers == 0 { Stage::new(EmbLayerNorm) } else { Stage::layer(n_layers - 1, FfnLayerNorm) };
        let last_hidden = record.three(last).to_owned();
        // [B,T,H]: d loss / d the last hidden state, from each head the loss uses.
        let mut d_hidden = Array3::<F>::zeros(last_hidden.raw_dim());
        if let (Some(labels), Some(mlm)) = (mlm_labels, &self.mlm) {
            let d_logits = losses::mlm_loss_backward(record.three(Stage::new(MlmLogits)), labels);
            d_hidden += &mlm.backward(&last_hidden, &record, &d_logits, &mut grads);
        }
        if let (Some(labels), Some(nsp), Some(pooler)) = (nsp_labels, &self.nsp, &self.pooler) {
            let d_logits = losses::nsp_loss_backward(record.two(Stage::new(NspLogits)), labels);
            let d_pooled = nsp.backward(&record, &d_logits, &mut grads);
            let d_cls = pooler.backward(&last_hidden, &record, &d_pooled, &mut grads);
            // Only [CLS], position 0, feeds the pooler.
            let mut at_cls = d_hidden.slice_mut(s![.., 0, ..]);
            at_cls += &d_cls;
        }
        for (layer_idx, layer) in self.layers.iter().enumerate().rev() {
            let input =
                if layer_idx == 0 { Stage::new(EmbLayerNorm) } else { Stage::layer(layer_idx - 1, FfnLayerNorm) };
            let input = record.three(input).to_owned();
            d_hidden = layer.backward(layer_idx, &input, &record, &d_hidden, &mut grads);
        }
        self.embeddings.backward(batch, &record, &d_hidden, self.config.pad_token_id, &mut grads);
        Ok(Gradients { loss, params: grads })
    }
}
