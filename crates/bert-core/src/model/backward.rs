//! The backward pass: d loss / d every parameter, by the chain rule written out stage by stage,
//! in reverse: each module's `backward` sits beside its `forward`, and this file calls them from
//! the loss back to the embeddings. No autograd: the forward pass runs as usual with a
//! [`Record`] as its sink, which keeps the stages the backward reads.

use ndarray::{arr0, s, Array2, Array3};

use super::gradients::{Gradients, Grads, Record};
use super::{labelled_rows, losses, BertModel, Pass};
use crate::error::Result;
use crate::io::tokenizer::Batch;
use crate::ops::Float;
use crate::pass::{Discard, Halt, Tracer};
use crate::stage::{self, Stage, StageKind::*};

impl<F: Float> BertModel<F> {
    /// The loss of `batch`'s labels and d loss / d every parameter it reaches: the forward pass,
    /// then the backward. [`BertModel::trace_with`] with `backward` does the same and also hands
    /// every gradient stage to a sink.
    pub fn gradients(&self, batch: &Batch) -> Result<Gradients<F>> {
        let traced = self.trace_with(batch, &mut Discard, Pass { backward: true, ..Pass::default() })?;
        let loss = traced.outputs.loss.expect("a backward pass has a loss");
        Ok(Gradients { loss, params: traced.gradients.expect("a backward pass has gradients") })
    }

    /// The backward pass, from the loss back to the embeddings, reading the forward's stages from
    /// `record` and handing each gradient stage to `tracer` as it is computed: `grad.<stage>`
    /// in reverse order, then `grad.param.<name>` in the order of the parameters. With
    /// `labelled_only`, the forward ran the MLM head at the labelled positions only.
    pub(crate) fn backward(
        &self,
        batch: &Batch,
        record: &Record<F>,
        labelled_only: bool,
        tracer: &mut Tracer,
    ) -> Result<Grads<F>, Halt> {
        let (mlm_labels, nsp_labels, class_labels) = (&batch.labels.mlm, &batch.labels.nsp, &batch.labels.class);
        let mut grads = Grads::new();
        let n_layers = self.layers.len();
        let last = if n_layers == 0 { Stage::new(EmbLayerNorm) } else { Stage::layer(n_layers - 1, FfnLayerNorm) };
        let last_hidden = record.three(last).to_owned();
        // d loss / d loss = 1; loss = mlm.loss + nsp.loss + classifier.loss passes it to each.
        tracer.float(Stage::new(Loss).grad(), &mut arr0(F::one()))?;
        let (mut from_mlm, mut from_cls) = (None, None);
        if let (Some(labels), Some(mlm)) = (mlm_labels, &self.mlm) {
            // The head ran on the rows it saw: all of them, or the labelled ones gathered.
            let gathered = labelled_only.then(|| labelled_rows::gather(last_hidden.view(), labels));
            let (rows, row_labels) = match &gathered {
                Some((rows, row_labels)) => (rows, row_labels),
                None => (&last_hidden, labels),
            };
            tracer.float(Stage::new(MlmLoss).grad(), &mut arr0(F::one()))?;
            tracer.float(Stage::new(MlmLosses).grad(), &mut losses::mean_backward::<F, _>(row_labels))?;
            let d_logits = losses::mlm_loss_backward(record.three(Stage::new(MlmLogits)), row_labels);
            let d_rows = mlm.backward(rows, record, &d_logits, &mut grads, tracer)?;
            from_mlm = Some(match labelled_only {
                true => labelled_rows::scatter(d_rows.view(), labels),
                false => d_rows,
            });
        }
        // The pooler's output gets a share from each head on it that has a loss.
        let mut d_pooled: Option<Array2<F>> = None;
        let mut add = |share: Array2<F>| match &mut d_pooled {
            Some(sum) => *sum += &share,
            None => d_pooled = Some(share),
        };
        if let (Some(labels), Some(nsp), Some(_)) = (nsp_labels, &self.nsp, &self.pooler) {
            tracer.float(Stage::new(NspLoss).grad(), &mut arr0(F::one()))?;
            tracer.float(Stage::new(NspLosses).grad(), &mut losses::mean_backward::<F, _>(labels))?;
            let d_logits = losses::sequence_loss_backward(record.two(Stage::new(NspLogits)), labels);
            add(nsp.backward(record, &d_logits, &mut grads, tracer)?);
        }
        if let (Some(labels), Some(classifier), Some(_)) = (class_labels, &self.classifier, &self.pooler) {
            tracer.float(Stage::new(ClassifierLoss).grad(), &mut arr0(F::one()))?;
            tracer.float(Stage::new(ClassifierLosses).grad(), &mut losses::mean_backward::<F, _>(labels))?;
            let d_logits = losses::sequence_loss_backward(record.two(Stage::new(ClassifierLogits)), labels);
            add(classifier.backward(record, &d_logits, &mut grads, tracer)?);
        }
        if let (Some(d_pooled), Some(pooler)) = (d_pooled, &self.pooler) {
            from_cls = Some(pooler.backward(&last_hidden, record, &d_pooled, &mut grads, tracer)?);
        }
        let mut d_hidden = hidden_backward(last_hidden.raw_dim(), from_mlm, from_cls);
        // Layer 0 reads the embeddings as dropout left them, in training.
        let embedded = record.of_dim(Stage::new(EmbDropout)).unwrap_or(record.three(Stage::new(EmbLayerNorm)));
        for (layer_idx, layer) in self.layers.iter().enumerate().rev() {
            let input = match layer_idx {
                0 => embedded.to_owned(),
                _ => record.three(Stage::layer(layer_idx - 1, FfnLayerNorm)).to_owned(),
            };
            d_hidden = layer.backward(layer_idx, &input, record, &d_hidden, &mut grads, tracer)?;
        }
        self.embeddings.backward(batch, record, &d_hidden, self.config.pad_token_id, &mut grads, tracer)?;
        self.trace_parameter_gradients(&mut grads, tracer)?;
        Ok(grads)
    }

    /// `grad.param.<name>` for every parameter the loss reached, in the order of
    /// `named_parameters()`; the model's parameters it did not reach (the pooler and the NSP
    /// head under an MLM-only loss) are named to the sink, as PyTorch leaves their `.grad` None.
    fn trace_parameter_gradients(&self, grads: &mut Grads<F>, tracer: &mut Tracer) -> Result<(), Halt> {
        let mut unreached = Vec::new();
        for stage in stage::parameters(self.layers.len(), self.output_heads()) {
            match grads.get_mut(stage) {
                Some(grad) => tracer.float(stage.grad(), grad)?,
                None => unreached.push(stage.hf()),
            }
        }
        tracer.unreached(&unreached)?;
        Ok(())
    }
}

/// `[B,T,H]` d loss / d the last hidden state, from each head the loss uses: the MLM head's share
/// `from_mlm` at every token, and the pooler's `from_cls` `[B,H]` at `[CLS]`, position 0, the only
/// token that feeds the pooler.
pub(crate) fn hidden_backward<F: Float>(
    dim: ndarray::Ix3,
    from_mlm: Option<Array3<F>>,
    from_cls: Option<ndarray::Array2<F>>,
) -> Array3<F> {
    let mut d_hidden = from_mlm.unwrap_or_else(|| Array3::zeros(dim));
    if let Some(d_cls) = from_cls {
        let mut at_cls = d_hidden.slice_mut(s![.., 0, ..]);
        at_cls += &d_cls;
    }
    d_hidden
}
