//! Which model to trace: a directory given with `--model`, or the tiny random model built into
//! the binary (golden/tiny), so that `bert-trace "some text"` works from anywhere.

use std::path::Path;

use anyhow::Result;
use bert_core::model::TokenizerFiles;
use bert_core::weights::Storage;
use bert_core::BertModel;

use crate::cli::ModelArgs;

/// The name the built-in model goes by in messages and manifests.
pub const EMBEDDED_NAME: &str = "golden/tiny";

const CONFIG: &[u8] = include_bytes!("../../../golden/tiny/config.json");
const WEIGHTS: &[u8] = include_bytes!("../../../golden/tiny/model.safetensors");
const VOCAB: &[u8] = include_bytes!("../../../golden/tiny/vocab.txt");
const TOKENIZER_CONFIG: &[u8] = include_bytes!("../../../golden/tiny/tokenizer_config.json");

/// Loads the model the arguments name. The second value is true for the built-in model.
pub fn load(args: &ModelArgs) -> Result<(BertModel, bool)> {
    match &args.model {
        Some(dir) => Ok((BertModel::load(dir)?, false)),
        None => Ok((embedded()?, true)),
    }
}

/// The tiny random model from golden/tiny, read from the binary itself.
pub fn embedded() -> Result<BertModel> {
    Ok(BertModel::from_bytes(
        CONFIG,
        Storage::Static(WEIGHTS),
        TokenizerFiles::Vocab {
            vocab: VOCAB,
            config: Some(TOKENIZER_CONFIG),
        },
        Path::new(EMBEDDED_NAME),
    )?)
}

/// The one-line note printed when the built-in model is used.
pub fn embedded_note(model: &BertModel) -> String {
    format!(
        "note: using the tiny random model built into bert-trace ({} layers, hidden {}, vocab {}); \
         its predictions are meaningless. Pick a real one with --model DIR.",
        model.config.num_hidden_layers, model.config.hidden_size, model.config.vocab_size
    )
}
