//! Which model to trace: a directory given with `--model`, a Hugging Face model id given with
//! `--model` (from the HF cache, or downloaded into it), or the tiny random model built into the
//! binary (golden/tiny), so that `bert-trace "some text"` works from anywhere.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use bert_core::io::weights::Storage;
use bert_core::model::load::TokenizerFiles;
use bert_core::ops::Float;
use bert_core::train::save::ModelFiles;
use bert_core::BertModel;

use crate::cli::ModelArgs;
use crate::hub_cache::process_env;
use crate::hub_id::HubId;
use crate::hub_model;

/// The name the built-in model goes by in messages and manifests.
pub const EMBEDDED_NAME: &str = "golden/tiny";

const CONFIG: &[u8] = include_bytes!("../../../golden/tiny/config.json");
const WEIGHTS: &[u8] = include_bytes!("../../../golden/tiny/model.safetensors");
const VOCAB: &[u8] = include_bytes!("../../../golden/tiny/vocab.txt");
const TOKENIZER_CONFIG: &[u8] = include_bytes!("../../../golden/tiny/tokenizer_config.json");

/// Loads the model the arguments name. The second value is true for the built-in model.
pub fn load(args: &ModelArgs) -> Result<(BertModel, bool)> {
    load_as(args)
}

/// [`load`] for a pass in `F` (f32, or f64 for `--precision f64`).
pub fn load_as<F: Float>(args: &ModelArgs) -> Result<(BertModel<F>, bool)> {
    let Some(spec) = &args.model else {
        return Ok((embedded_as()?, true));
    };
    let dir = model_dir(spec)?;
    let model = match hub_id(spec) {
        Some(id) => BertModel::load_as(&dir).with_context(|| id.to_string())?,
        None => BertModel::load_as(&dir)?,
    };
    for note in model.tokenizer.notes() {
        eprintln!("note: {note}");
    }
    Ok((model, false))
}

/// A hub id, when `--model` has the shape of one and names no path here (as in transformers,
/// a local directory wins).
fn hub_id(spec: &Path) -> Option<HubId> {
    let id = HubId::parse(spec.to_str()?)?;
    (!spec.exists()).then_some(id)
}

/// The directory `--model` names: the path itself, or a hub id's snapshot in the cache.
fn model_dir(spec: &Path) -> Result<PathBuf> {
    match hub_id(spec) {
        // Said first, since a path typed from the wrong directory looks like a hub id too.
        Some(id) => hub_model::snapshot_dir(&id, &process_env).with_context(|| {
            format!(
                "{}: no directory of that name here, so it was tried as a Hugging Face model id",
                bert_core::words::Opt("model").with(spec.display())
            )
        }),
        None => Ok(spec.to_path_buf()),
    }
}

/// The model's name in manifests: the directory as given, or `org/name@commit` for a hub model.
pub fn name<F: Float>(args: &ModelArgs, model: &BertModel<F>) -> String {
    match &args.model {
        None => EMBEDDED_NAME.to_string(),
        Some(spec) => match (hub_id(spec), model.source.file_name()) {
            (Some(id), Some(commit)) => format!("{}@{}", id.repo, commit.to_string_lossy()),
            _ => spec.display().to_string(),
        },
    }
}

/// The tiny random model from golden/tiny, read from the binary itself.
pub fn embedded() -> Result<BertModel> {
    embedded_as()
}

/// [`embedded`] for a pass in `F`.
pub fn embedded_as<F: Float>() -> Result<BertModel<F>> {
    Ok(BertModel::from_bytes_as(
        CONFIG,
        Storage::Static(WEIGHTS),
        TokenizerFiles::Vocab { vocab: VOCAB, config: Some(TOKENIZER_CONFIG) },
        Path::new(EMBEDDED_NAME),
    )?)
}

/// The one-line note printed when the built-in model is used.
pub fn embedded_note<F: Float>(model: &BertModel<F>) -> String {
    format!(
        "note: using the tiny random model built into bert-trace ({} layers, hidden {}, vocab {}); \
         its predictions are meaningless. Pick a real one with --model DIR or a hub id.",
        model.config.num_hidden_layers, model.config.hidden_size, model.config.vocab_size
    )
}

/// The files a checkpoint saved from this model carries beside its weights: its config.json and
/// its tokenizer's files, read from its directory (or the built-in model's, from the binary).
pub fn files<F: Float>(args: &ModelArgs, model: &BertModel<F>) -> Result<ModelFiles> {
    if args.model.is_none() {
        return Ok(ModelFiles {
            config_json: CONFIG.to_vec(),
            tokenizer: vec![
                ("vocab.txt".into(), VOCAB.to_vec()),
                ("tokenizer_config.json".into(), TOKENIZER_CONFIG.to_vec()),
            ],
        });
    }
    files_of_dir(&model.source)
}

/// [`files`] of a model directory.
pub fn files_of_dir(dir: &Path) -> Result<ModelFiles> {
    const MAX: u64 = 256 << 20;
    let config_json = bert_core::io::files::read(&dir.join("config.json"), MAX)?;
    let mut tokenizer = Vec::new();
    for name in ["vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"] {
        if let Some(bytes) = bert_core::io::files::read_optional(&dir.join(name), MAX)? {
            tokenizer.push((name.to_string(), bytes));
        }
    }
    Ok(ModelFiles { config_json, tokenizer })
}
