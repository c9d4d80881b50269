//! Where a model comes from: a directory (`model=` names it), a Hugging Face model id (from the
//! HF cache, or downloaded into it: `hub.rs`, `download.rs`, `cache.rs`, `id.rs`), or a model
//! built into bert-trace (`builtin.rs`: english-small, the default, and tiny); and where a
//! training run starts (`start.rs`). The commands (bert-commands) load every model through here.

mod builtin;
mod cache;
mod download;
pub mod error;
mod hub;
pub mod hub_error;
mod id;
pub mod start;

use std::path::{Path, PathBuf};

use bert_core::ops::Float;
use bert_core::training::save::ModelFiles;
use bert_core::words::Opt;
use bert_core::BertModel;

pub use self::builtin::{Builtin, CHINESE_SMALL, ENGLISH_SMALL, TINY};
pub use self::cache::{process_env, Env, HubCache};
pub use self::download::DEFAULT_ENDPOINT;
pub use self::hub_error::{HubError, HubFailure};
pub use self::id::{is_commit_hash, HubId};
use crate::error::Within;
pub use crate::error::{Error, Result};

/// The option that names a model.
pub const MODEL: Opt = Opt("model");

/// A loaded model, what manifests call it, and what its loading has to say.
pub struct Loaded<F: Float = f32> {
    pub model: BertModel<F>,
    /// The directory as given, `org/name@commit` for a hub model, or a built-in model's directory.
    pub name: String,
    /// Whether it is a model built into bert-trace.
    pub embedded: bool,
    /// Notes for the caller to show once (the default model; the tokenizer's).
    pub notes: Vec<String>,
}

/// Loads the model `spec` names (None: the default built-in model, english-small).
pub fn load(spec: Option<&Path>) -> Result<Loaded> {
    load_as(spec)
}

/// [`load`] for a pass in `F` (f32, or f64 for `precision="f64"`).
pub fn load_as<F: Float>(spec: Option<&Path>) -> Result<Loaded<F>> {
    if let Some(builtin) = Builtin::resolve(spec) {
        let model = builtin.load_as()?;
        // Only the default is announced: a model named by the caller needs no introduction.
        let notes = if spec.is_none() { vec![builtin.note(&model)] } else { Vec::new() };
        return Ok(Loaded { model, name: builtin.dir.into(), embedded: true, notes });
    }
    let spec = spec.expect("no spec resolves to the default built-in model");
    let mut notes = Vec::new();
    let dir = model_dir(spec, &mut notes)?;
    let model: BertModel<F> = match hub_id(spec) {
        Some(id) => BertModel::load_as(&dir).within(|| id.to_string())?,
        None => BertModel::load_as(&dir)?,
    };
    notes.extend(model.tokenizer.notes().iter().map(|note| format!("note: {note}")));
    let name = match (hub_id(spec), model.source.file_name()) {
        (Some(id), Some(commit)) => format!("{}@{}", id.repo, commit.to_string_lossy()),
        _ => spec.display().to_string(),
    };
    Ok(Loaded { model, name, embedded: false, notes })
}

/// A hub id, when `spec` has the shape of one and names no path here (as in transformers,
/// a local directory wins).
fn hub_id(spec: &Path) -> Option<HubId> {
    let id = HubId::parse(spec.to_str()?)?;
    (!spec.exists()).then_some(id)
}

/// The directory `spec` names: the path itself, or a hub id's snapshot in the cache.
fn model_dir(spec: &Path, notes: &mut Vec<String>) -> Result<PathBuf> {
    match hub_id(spec) {
        // Said first, since a path typed from the wrong directory looks like a hub id too.
        Some(id) => hub::snapshot_dir(&id, &process_env, notes).within(|| {
            format!(
                "{}: no directory of that name here, so it was tried as a Hugging Face model id",
                MODEL.with(spec.display())
            )
        }),
        None => Ok(spec.to_path_buf()),
    }
}

/// The files a checkpoint saved from this model carries beside its weights: its config.json and
/// its tokenizer's files, read from its directory (or a built-in model's, from the binary).
pub fn files<F: Float>(spec: Option<&Path>, model: &BertModel<F>) -> Result<ModelFiles> {
    match Builtin::resolve(spec) {
        Some(builtin) => Ok(builtin.files()),
        None => files_of_dir(&model.source),
    }
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
