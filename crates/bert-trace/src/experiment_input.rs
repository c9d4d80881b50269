//! What `ablate`, `lens` and `attribute` share: the model (which must have an MLM head), the
//! text with its one `[MASK]`, and the target word's id.

use anyhow::{bail, Result};
use bert_core::experiments::readout::the_mask;
use bert_core::io::tokenizer::MASK;
use bert_core::{Batch, BertModel};

use crate::cli::ExperimentInput;
use crate::model_source;
use crate::trace_cmd::pass_settings;

/// A loaded model and one tokenized text.
pub struct Experiment {
    pub model: BertModel,
    pub model_name: String,
    pub batch: Batch,
}

impl Experiment {
    /// Loads the model and tokenizes the text; refuses a model without an MLM head.
    pub fn load(input: &ExperimentInput) -> Result<Experiment> {
        let (_, kernels) = pass_settings(input.threads, input.kernels.as_deref())?;
        let (mut model, embedded) = model_source::load(&input.model)?;
        if embedded {
            eprintln!("{}", model_source::embedded_note(&model));
        }
        model.kernels = kernels;
        if model.mlm.is_none() {
            bail!(
                "{}: the model has no MLM head (cls.predictions.*), so it predicts no [MASK]; the experiments need \
                 a checkpoint with one (BertForMaskedLM or BertForPreTraining)",
                model.source.display()
            );
        }
        let batch = model.encode(std::slice::from_ref(&input.text), None, false)?;
        let model_name = model_source::name(&input.model, &model);
        Ok(Experiment { model, model_name, batch })
    }

    /// (sequence, position) of the text's one `[MASK]`.
    pub fn mask(&self) -> Result<(usize, usize)> {
        Ok(the_mask(self.model.tokenizer.token_to_id(MASK), &self.batch)?)
    }

    /// The id of `word`, which must be one token of the vocabulary.
    pub fn target(&self, word: &str) -> Result<u32> {
        self.model.tokenizer.single_token(word).map_err(anyhow::Error::msg)
    }

    /// A token's text, as printed.
    pub fn token(&self, id: u32) -> String {
        crate::table::visible(&self.model.tokenizer.id_to_token(id).unwrap_or_default())
    }
}
