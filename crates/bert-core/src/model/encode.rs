//! From the texts and the pretraining options a run was given (the manifest's `inputs`) to the
//! batch the forward pass reads: tokenized, with the labels the options ask for.

use super::BertModel;
use crate::error::{BertError, Result};
use crate::io::dump::manifest::Inputs;
use crate::io::tokenizer::Batch;
use crate::objectives::{mask_tokens, set_class_labels, set_mlm_targets, set_nsp_labels};
use crate::ops::Float;

impl<F: Float> BertModel<F> {
    /// Tokenizes `inputs` and gives the batch the labels they ask for: the typed `[MASK]`s'
    /// targets, then BERT's random masking, then the next-sentence labels, then the classes of a
    /// classifier's loss. A manifest's inputs
    /// give the same batch again.
    pub fn encode_inputs(&self, inputs: &Inputs, truncate: bool) -> Result<Batch> {
        let mut batch = self.encode(&inputs.texts, inputs.pair.as_deref(), truncate)?;
        if let Some(targets) = &inputs.mlm_targets {
            set_mlm_targets(&mut batch, &self.tokenizer, targets)?;
        }
        match (inputs.mask_prob, inputs.seed) {
            (Some(probability), Some(seed)) => mask_tokens(&mut batch, &self.tokenizer, probability, seed)?,
            (None, None) => {}
            _ => return Err(BertError::Labels("random masking needs both a probability and a seed".into())),
        }
        if let Some(labels) = &inputs.nsp_label {
            set_nsp_labels(&mut batch, labels)?;
        }
        if let Some(labels) = &inputs.label {
            let classifier = self.classifier.as_ref().ok_or_else(|| BertError::MissingHead {
                path: self.source.clone(),
                wanted: "a classifier's loss (‹label›)".into(),
                weights: "classifier.*".into(),
            })?;
            set_class_labels(&mut batch, &classifier.labels, labels)?;
        }
        Ok(batch)
    }

    /// The tokens the model sees, as the vocabulary names them (`#ID` for an id it lacks), per
    /// sequence of `batch`: what a manifest records as its inputs' tokens.
    pub fn tokens_of(&self, batch: &Batch) -> Vec<Vec<String>> {
        batch
            .ids
            .outer_iter()
            .map(|row| {
                row.iter()
                    .map(|&id| self.tokenizer.id_to_token(id as u32).unwrap_or_else(|| format!("#{id}")))
                    .collect()
            })
            .collect()
    }
}
