//! What is checked before a forward pass, so that a run that cannot succeed is refused before
//! any work is done or any file written: the stage a run stops at, the ids against the model's
//! tables, the memory the activations need, and the heads the labels need.

use super::BertModel;
use crate::error::{BertError, Result};
use crate::io::tokenizer::Batch;
use crate::io::{files, memory};
use crate::ops::Float;
use crate::stage::{self, Objectives, OutputHeads, Part, Stage};

impl<F: Float> BertModel<F> {
    /// The last stage of `name`, which is a stage or a group on a dot boundary
    /// (`layer0.attention`, `layer3`, `embeddings`), for an input with these objectives.
    pub fn resolve_stop(&self, name: &str, objectives: Objectives) -> Result<Stage> {
        let plan = self.plan(objectives);
        if let Some(stage) = plan.iter().rev().find(|s| stage::in_group(&s.name(), name)) {
            return Ok(*stage);
        }
        // A name that some BERT computes, but not this one, deserves to be told why. The plans
        // searched have more layers than any checkpoint (a thousand more than this one), so
        // that `layer40.attention` is recognised as a layer this model does not have.
        let every_head = OutputHeads { pooler: true, mlm: true, nsp: true, classifier: true, sentence: true };
        let n_layers = self.config.num_hidden_layers;
        let find = |heads, objectives| {
            stage::plan(n_layers + 1000, heads, objectives).into_iter().find(|s| stage::in_group(&s.name(), name))
        };
        let reason = match (find(self.output_heads(), Objectives::ALL), find(every_head, Objectives::ALL)) {
            (Some(stage), _) if stage.info().part == Part::Lens && stage.layer.is_none_or(|l| l < n_layers) => {
                "it is computed only for the logit lens (‹lens!›)".into()
            }
            (Some(stage), _) if stage.layer.is_some() => {
                format!("it has {n_layers} layers, layer0 to layer{}", n_layers - 1)
            }
            (Some(_), _) => {
                "it is computed only with labels (‹mask_prob›, ‹mlm_target›, ‹nsp_label› or ‹label›)".into()
            }
            (None, Some(stage)) => format!("its checkpoint has no {} weights", stage.info().part.weights()),
            (None, None) => {
                return Err(BertError::UnknownStage { name: name.into(), suggestions: stage::suggestions(name, &plan) })
            }
        };
        Err(BertError::AbsentStage { name: name.into(), reason })
    }

    /// Checks that every id of `batch` indexes its table and that the model has the heads its
    /// labels need, before any work is done.
    pub fn check(&self, batch: &Batch) -> Result<()> {
        self.check_ids(batch)?;
        self.check_memory(batch)?;
        let missing = |what: &str, weights: &str| BertError::MissingHead {
            path: self.source.clone(),
            wanted: what.into(),
            weights: weights.into(),
        };
        if batch.labels.mlm.is_some() && self.mlm.is_none() {
            return Err(missing("an MLM loss", "cls.predictions.*"));
        }
        if batch.labels.nsp.is_some() && self.nsp.is_none() {
            return Err(missing("an NSP loss", "cls.seq_relationship.*"));
        }
        if batch.labels.class.is_some() && (self.classifier.is_none() || self.pooler.is_none()) {
            return Err(missing("a classifier's loss", "bert.pooler.* and classifier.*"));
        }
        Ok(())
    }

    /// Checks that every id indexes its table, and every mask value and label is one the pass
    /// can read: also after a hook changed the inputs.
    pub(crate) fn check_ids(&self, batch: &Batch) -> Result<()> {
        let (_, tokens) = batch.dims();
        let max_positions = self.config.max_position_embeddings;
        if tokens > max_positions {
            return Err(BertError::Input {
                index: 0,
                problem: format!("{tokens} tokens, more than the {max_positions} positions the model has"),
            });
        }
        let tables = [
            (&batch.ids, self.config.vocab_size, "token id", "vocab_size"),
            (&batch.token_type_ids, self.config.type_vocab_size, "token type id", "type_vocab_size"),
        ];
        for (ids, rows, what, field) in tables {
            if let Some(((index, _), id)) = ids.indexed_iter().find(|(_, &id)| id < 0 || id as usize >= rows) {
                return Err(BertError::Input {
                    index,
                    problem: format!("{what} {id} is outside the table of {field} = {rows} rows"),
                });
            }
        }
        // The mask and the labels come from the tokenizer and the masking, which make them right;
        // a hook may have changed them, so they are checked like the ids.
        let vocab = self.config.vocab_size as i64;
        let mask = batch.attention_mask.indexed_iter().map(|((seq, _), &v)| (seq, v));
        refuse_outside(mask, |v| v == 0 || v == 1, "attention mask value", "0 or 1")?;
        if let Some(labels) = &batch.labels.mlm {
            let labels = labels.indexed_iter().map(|((seq, _), &v)| (seq, v));
            refuse_outside(labels, |v| v == -100 || (0..vocab).contains(&v), "MLM label", "-100 or a token id")?;
        }
        if let Some(labels) = &batch.labels.nsp {
            let labels = labels.indexed_iter().map(|(seq, &v)| (seq, v));
            refuse_outside(labels, |v| v == 0 || v == 1, "next-sentence label", "0 or 1")?;
        }
        if let (Some(labels), Some(classifier)) = (&batch.labels.class, &self.classifier) {
            let classes = classifier.labels.len() as i64;
            let labels = labels.indexed_iter().map(|(seq, &v)| (seq, v));
            let expected = format!("a class from 0 to {}", classes - 1);
            refuse_outside(labels, |v| (0..classes).contains(&v), "class label", &expected)?;
        }
        Ok(())
    }

    /// Refuses a batch whose activations cannot fit in this machine's memory. The estimate
    /// counts the largest tensors the pass holds at once: a few `[B,T,H]`, the scores and
    /// probabilities `[B,nh,T,T]`, the feed-forward's `[B,T,I]`, the MLM logits `[B,T,V]`, and
    /// what a dump writer may hold queued.
    fn check_memory(&self, batch: &Batch) -> Result<()> {
        let (needed, scores) = self.activation_bytes(batch);
        let (b, t) = batch.dims();
        memory::check(
            needed,
            &format!(
                "for the activations of {b} × {t} tokens (the attention scores alone, [B,nh,T,T], take {})",
                files::bytes(scores)
            ),
        )
    }

    /// The bytes a forward pass over `batch` holds at its largest, and those of its attention
    /// scores alone: in the pass's own element type, 4 bytes a value in f32 and 8 in f64.
    pub(crate) fn activation_bytes(&self, batch: &Batch) -> (u64, u64) {
        let (b, t) = batch.dims();
        let d = self.dims(b, t);
        let [b, t, h, nh, i, v] = [d.batch, d.tokens, d.hidden, d.n_heads, d.intermediate, d.vocab].map(|n| n as u64);
        // 4 bytes a value in an f32 pass, 8 in an f64 one.
        let size = std::mem::size_of::<F>() as u64;
        let scores = b.saturating_mul(nh).saturating_mul(t).saturating_mul(t).saturating_mul(size);
        let logits = if self.mlm.is_some() { b * t * v * 2 * size } else { 0 };
        let needed = [10 * b * t * h * size, 2 * scores, 3 * b * t * i * size, logits, 128 << 20]
            .into_iter()
            .fold(0u64, u64::saturating_add);
        (needed, scores)
    }
}

impl<F: Float> BertModel<F> {
    /// Refuses a backward pass that cannot fit in this machine's memory: on top of a forward
    /// pass's working set, it keeps every float stage the backward reads (all but the scores),
    /// holds a gradient the size of the largest stage a few times over, and a gradient for every
    /// parameter.
    pub(crate) fn check_backward_memory(&self, batch: &Batch) -> Result<()> {
        let (b, t) = batch.dims();
        let dims = self.dims(b, t);
        let size = std::mem::size_of::<F>() as u64;
        let stage_bytes = |stage: &Stage| stage.shape(&dims).iter().fold(size, |n, &d| n.saturating_mul(d as u64));
        let forward = self.plan(batch.objectives());
        let kept = forward
            .iter()
            .filter(|s| s.info().dtype != stage::DType::I64 && s.kind != stage::StageKind::AttnScores)
            .map(stage_bytes)
            .fold(0u64, u64::saturating_add);
        let largest = forward.iter().map(stage_bytes).max().unwrap_or(0);
        let parameters = stage::parameters(self.layers.len(), self.output_heads())
            .iter()
            .map(stage_bytes)
            .fold(0u64, u64::saturating_add);
        let needed =
            [kept, largest.saturating_mul(4), parameters, 128 << 20].into_iter().fold(0u64, u64::saturating_add);
        memory::check(
            needed,
            &format!(
                "for a backward pass over {b} × {t} tokens: it keeps the forward's stages ({}) and a gradient for \
                 every parameter ({})",
                files::bytes(kept),
                files::bytes(parameters)
            ),
        )
    }
}

/// The first value (with its sequence) that `allowed` refuses, as an input error.
fn refuse_outside(
    mut values: impl Iterator<Item = (usize, i64)>,
    allowed: impl Fn(i64) -> bool,
    what: &str,
    expected: &str,
) -> Result<()> {
    match values.find(|&(_, v)| !allowed(v)) {
        Some((index, value)) => Err(BertError::Input { index, problem: format!("{what} {value} is not {expected}") }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use crate::BertModel;

    /// An f64 pass holds twice the bytes of an f32 one (the fixed allowance for the rest aside):
    /// an estimate at 4 bytes a value would let a pass that cannot fit go on.
    #[test]
    fn an_f64_pass_is_counted_at_8_bytes_a_value() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../golden/tiny");
        let (single, double) = (BertModel::<f32>::load_as(&dir).unwrap(), BertModel::<f64>::load_as(&dir).unwrap());
        let batch = single.encode(&["When in Rome, do as the [MASK] do.".repeat(3)], None, true).unwrap();
        let (f32_bytes, f32_scores) = single.activation_bytes(&batch);
        let (f64_bytes, f64_scores) = double.activation_bytes(&batch);
        assert_eq!(f64_scores, 2 * f32_scores);
        assert_eq!(f64_bytes - (128 << 20), 2 * (f32_bytes - (128 << 20)));
    }
}
