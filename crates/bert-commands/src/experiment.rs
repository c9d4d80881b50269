//! What `ablate`, `lens` and `attribute` share: the request's text with its one `[MASK]`, the
//! model (which must have an MLM head), the target word's id, and the report they print.

use std::path::PathBuf;

use bert_core::experiments::readout::the_mask;
use bert_core::io::tokenizer::MASK;
use bert_core::words::Opt;
use bert_core::{Batch, BertError, BertModel};

use crate::error::Result;
use crate::refuse;
use crate::settings::PassSettings;
use crate::source;

pub const TARGET: Opt = Opt("target");

/// What every experiment reads: a text with one `[MASK]`, the model, and how to run the passes.
#[derive(Clone, Debug, Default)]
pub struct ExperimentRequest {
    pub text: String,
    pub model: Option<PathBuf>,
    pub settings: PassSettings,
}

/// A loaded model and one tokenized text.
pub struct Experiment {
    pub model: BertModel,
    pub model_name: String,
    pub batch: Batch,
    /// What loading the model had to say.
    pub notes: Vec<String>,
}

impl Experiment {
    /// Loads the model and tokenizes the text; refuses a model without an MLM head.
    pub fn load(input: &ExperimentRequest) -> Result<Experiment> {
        let experiment = Experiment::encode(input)?;
        if experiment.model.mlm.is_none() {
            refuse!(
                "{}: the model has no MLM head (cls.predictions.*), so it predicts no [MASK]; the experiments need \
                 a checkpoint with one (BertForMaskedLM or BertForPreTraining)",
                experiment.model.source.display()
            );
        }
        Ok(experiment)
    }

    /// Loads the model, whatever heads it has, and tokenizes the text.
    pub fn encode(input: &ExperimentRequest) -> Result<Experiment> {
        let (_, kernels) = input.settings.apply()?;
        let loaded = source::load(input.model.as_deref())?;
        let (mut model, notes) = (loaded.model, loaded.notes);
        model.kernels = kernels;
        let batch = model.encode(std::slice::from_ref(&input.text), None, false)?;
        Ok(Experiment { model, model_name: loaded.name, batch, notes })
    }

    /// (sequence, position) of the text's one `[MASK]`.
    pub fn mask(&self) -> Result<(usize, usize)> {
        Ok(the_mask(self.model.tokenizer.token_to_id(MASK), &self.batch)?)
    }

    /// The id of `word`, which must be one token of the vocabulary.
    pub fn target(&self, word: &str) -> Result<u32> {
        Ok(self.model.tokenizer.single_token(word).map_err(BertError::Labels)?)
    }

    /// A token's text, as printed.
    pub fn token(&self, id: u32) -> String {
        crate::render::text_table::visible(&self.model.tokenizer.id_to_token(id).unwrap_or_default())
    }
}
