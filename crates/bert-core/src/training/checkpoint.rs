//! A training run's checkpoint directory: what transformers' `from_pretrained` loads
//! (`config.json`, `model.safetensors`, the tokenizer's files) and what a resumed run needs
//! (`optimizer.safetensors`, `trainer_state.json`).
//!
//! It is written by the rules dumps follow (see [`crate::dump`]):
//!
//! - **Nothing of the user's.** A directory is ours when it is new, empty, or carries our marker
//!   file [`MARKER`]; only files with the names below are ever replaced in it, and the
//!   subdirectories a run writes (`step-K/` dumps, `checkpoint-K/` checkpoints) follow their own
//!   rules. Anything else in it, or a directory of someone else's, is refused before the run
//!   starts.
//! - **Whole or visibly incomplete.** Each file is written under a temporary name and renamed
//!   into place. `trainer_state.json` goes first and is written last, so a directory that has one
//!   is a complete checkpoint; `--resume` refuses one that has none.
//! - **One run at a time** per directory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::adamw::Moments;
use super::corpus::Corpus;
use super::{StepLog, TrainOptions, Trainer};
use crate::dump::{self, temporary, write_whole, DirLock};
use crate::error::{BertError, Result};
use crate::load::weights::{Storage, WeightStore};
use crate::model::BertModel;

/// The file that marks a directory as a checkpoint bert-trace writes.
pub const MARKER: &str = ".bert-trace-checkpoint";
const MARKER_TEXT: &str = "bert-trace train writes checkpoints here; the files it writes are replaced on every save\n";
/// The run's step, options and losses; written last.
pub const STATE: &str = "trainer_state.json";
/// The version of `trainer_state.json`'s layout.
pub const FORMAT: &str = "bert-trace-train/1";
/// The names of the files a checkpoint may hold besides the marker.
const FILES: [&str; 8] = [
    "config.json",
    "model.safetensors",
    "optimizer.safetensors",
    STATE,
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
];

/// The files that go with a model's weights: its config.json and its tokenizer's files.
#[derive(Clone, Debug)]
pub struct ModelFiles {
    pub config_json: Vec<u8>,
    /// (file name, bytes), among `vocab.txt`, `tokenizer.json`, `tokenizer_config.json` and
    /// `special_tokens_map.json`.
    pub tokenizer: Vec<(String, Vec<u8>)>,
}

/// `trainer_state.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainerState {
    pub format: String,
    /// How many steps are done.
    pub step: usize,
    pub options: TrainOptions,
    /// The training text as the run was given it, and the SHA-256 of its bytes.
    pub file: PathBuf,
    pub file_sha256: String,
    /// The heads the run made new (a checkpoint that lacked them).
    pub fresh_heads: Vec<String>,
    /// Every step's report, from step 1.
    pub log_history: Vec<StepLog>,
}

/// A directory a run saves checkpoints into, prepared and locked.
#[derive(Debug)]
pub struct CheckpointDir {
    dir: PathBuf,
    _lock: Option<DirLock>,
}

/// Whether `name` in `dir` is one a checkpoint directory holds: its files, their temporary
/// names, and the subdirectories of a run (`step-K/` dumps and `checkpoint-K/` checkpoints, each
/// empty or carrying its own marker, so that a run never stops halfway at a directory of the
/// user's that happens to have such a name).
fn is_ours(dir: &Path, name: &str, is_dir: bool) -> bool {
    let numbered = |prefix: &str| {
        name.strip_prefix(prefix).is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
    };
    if is_dir {
        let marked_or_empty = |marker: &str| {
            let sub = dir.join(name);
            std::fs::symlink_metadata(sub.join(marker)).is_ok_and(|m| m.is_file())
                || std::fs::read_dir(&sub).is_ok_and(|mut entries| entries.next().is_none())
        };
        return (numbered("step-") && marked_or_empty(dump::MARKER))
            || (numbered("checkpoint-") && marked_or_empty(MARKER));
    }
    let inner = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")).unwrap_or(name);
    name == MARKER || FILES.contains(&inner)
}

impl CheckpointDir {
    /// Creates `dir`, or checks that what it holds is ours to replace (see the module
    /// documentation). Nothing in it is changed but the marker, on a directory that had none.
    pub fn create(dir: &Path) -> Result<CheckpointDir> {
        let bad = |problem: String| BertError::Checkpoint { path: dir.into(), problem };
        if dir.exists() && !dir.is_dir() {
            return Err(bad("exists and is not a directory".into()));
        }
        std::fs::create_dir_all(dir).map_err(|e| BertError::io(dir, e))?;
        let lock = dump::lock(dir).map_err(|_| bad("another run is saving into this directory".into()))?;
        let marked = std::fs::symlink_metadata(dir.join(MARKER)).is_ok_and(|m| m.is_file());
        let mut foreign = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| BertError::io(dir, e))? {
            let entry = entry.map_err(|e| BertError::io(dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // The type as the listing gives it: a symbolic link is never ours.
            let kind = entry.file_type().map_err(|e| BertError::io(dir, e))?;
            if !(marked && !kind.is_symlink() && is_ours(dir, &name, kind.is_dir())) {
                foreign.push(name);
            }
        }
        if !foreign.is_empty() {
            foreign.sort();
            let shown: Vec<&str> = foreign.iter().take(3).map(String::as_str).collect();
            let more = if foreign.len() > 3 { format!(" and {} more", foreign.len() - 3) } else { String::new() };
            return Err(bad(format!(
                "holds files that are not a bert-trace checkpoint ({}{more}), which a save never replaces; choose an empty or new directory",
                shown.join(", ")
            )));
        }
        if !marked {
            write_whole(&dir.join(MARKER), false, &[MARKER_TEXT.as_bytes()])?;
        }
        Ok(CheckpointDir { dir: dir.into(), _lock: lock })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Writes the checkpoint of `trainer`: the model as `BertForPreTraining`, `files` beside it,
    /// the optimizer's state and the run's state.
    pub fn save(&self, trainer: &Trainer, files: &ModelFiles) -> Result<()> {
        let write = |name: &str, bytes: &[u8]| write_whole(&self.dir.join(name), false, &[bytes]);
        // The run's state goes first: until it is back, the directory is visibly incomplete.
        remove_if_present(&self.dir.join(STATE))?;
        write("config.json", &pretraining_config(&files.config_json, &self.dir)?)?;
        let weights: Vec<(String, Vec<usize>, &[f32])> = trainer
            .model
            .parameters()
            .into_iter()
            .map(|(stage, param)| (stage.hf(), param.shape().to_vec(), param.as_slice()))
            .collect();
        write("model.safetensors", &safetensors_bytes(&weights, &self.dir)?)?;
        write("optimizer.safetensors", &safetensors_bytes(&trainer.optimizer_state(), &self.dir)?)?;
        for (name, bytes) in &files.tokenizer {
            if !FILES.contains(&name.as_str()) {
                return Err(BertError::Checkpoint {
                    path: self.dir.join(name),
                    problem: "not a tokenizer file a checkpoint holds".into(),
                });
            }
            write(name, bytes)?;
        }
        let state = TrainerState {
            format: FORMAT.into(),
            step: trainer.step,
            options: trainer.options.clone(),
            file: trainer.corpus.path.clone(),
            file_sha256: trainer.corpus.sha256.clone(),
            fresh_heads: trainer.fresh_heads.clone(),
            log_history: trainer.log.clone(),
        };
        let text = serde_json::to_string_pretty(&state).expect("the state always serialises");
        write(STATE, format!("{text}\n").as_bytes())?;
        // A temporary file left by a killed save is ours.
        for name in FILES {
            remove_if_present(&temporary(&self.dir.join(name)))?;
        }
        Ok(())
    }
}

/// The checkpoint's config.json: the model's own, saying it is a `BertForPreTraining` (it now
/// has both pretraining heads, or the MLM head alone for a text without pairs).
fn pretraining_config(config_json: &[u8], dir: &Path) -> Result<Vec<u8>> {
    let mut config: serde_json::Value = serde_json::from_slice(config_json)
        .map_err(|e| BertError::Config { path: dir.join("config.json"), problem: format!("not JSON: {e}") })?;
    let object = config
        .as_object_mut()
        .ok_or_else(|| BertError::Config { path: dir.join("config.json"), problem: "not a JSON object".into() })?;
    object.insert("architectures".into(), serde_json::json!(["BertForPreTraining"]));
    let mut text = serde_json::to_string_pretty(&config).expect("JSON always serialises");
    text.push('\n');
    Ok(text.into_bytes())
}

/// A safetensors file of f32 tensors, as transformers writes them (`format: pt`).
fn safetensors_bytes(tensors: &[(String, Vec<usize>, &[f32])], dir: &Path) -> Result<Vec<u8>> {
    let views = tensors
        .iter()
        .map(|(name, shape, values)| {
            let view = safetensors::tensor::TensorView::new(
                safetensors::Dtype::F32,
                shape.clone(),
                bytemuck::cast_slice(values),
            )
            .expect("a parameter's bytes fill its shape");
            (name.clone(), view)
        })
        .collect::<Vec<_>>();
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::tensor::serialize(views, Some(metadata))
        .map_err(|e| BertError::Checkpoint { path: dir.into(), problem: format!("cannot serialise the weights: {e}") })
}

fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(BertError::io(path, e)),
        _ => Ok(()),
    }
}

/// Reads `dir/trainer_state.json`: the step, options and losses of the run saved there.
pub fn read_state(dir: &Path) -> Result<TrainerState> {
    let path = dir.join(STATE);
    let bad = |problem: String| BertError::Checkpoint { path: dir.into(), problem };
    if !dir.is_dir() {
        return Err(bad("not a directory; give a checkpoint directory that `bert-trace train --save` wrote".into()));
    }
    if !path.is_file() {
        return Err(bad(format!(
            "has no {STATE}: it is not a complete checkpoint of `bert-trace train` (a save that did not finish, or another program's model)"
        )));
    }
    let text = crate::load::files::read(&path, 64 << 20)?;
    let state: TrainerState = serde_json::from_slice(&text)
        .map_err(|e| BertError::Checkpoint { path: path.clone(), problem: format!("not a trainer state: {e}") })?;
    if state.format != FORMAT {
        return Err(BertError::Checkpoint {
            path,
            problem: format!("format {}, expected {FORMAT}; written by another version of bert-trace", state.format),
        });
    }
    if state.log_history.len() != state.step {
        return Err(BertError::Checkpoint {
            path,
            problem: format!("step {} but {} steps logged", state.step, state.log_history.len()),
        });
    }
    Ok(state)
}

impl Trainer {
    /// Continues the run saved in `dir` at the step it reached: `model` is `dir`'s model, loaded,
    /// `state` its [`read_state`], `corpus` the same text (checked by its SHA-256).
    pub fn resume(model: BertModel, corpus: Corpus, state: TrainerState, dir: &Path) -> Result<Trainer> {
        if corpus.sha256 != state.file_sha256 {
            return Err(BertError::Training(format!(
                "{}: not the text the run in {} was trained on ({}: its SHA-256 differs)",
                corpus.path.display(),
                dir.display(),
                state.file.display()
            )));
        }
        let path = dir.join("optimizer.safetensors");
        let store = WeightStore::new(&path, Storage::map(&path)?)?;
        let mut moments = Vec::new();
        for (stage, param) in model.parameters() {
            let read = |kind: &str| -> Result<Vec<f32>> {
                Ok(store.get::<f32>(&format!("{kind}.{}", stage.hf()), param.shape())?.as_slice().to_vec())
            };
            moments.push(Moments { exp_avg: read("exp_avg")?, exp_avg_sq: read("exp_avg_sq")? });
        }
        let mut trainer = Trainer::with_state(model, corpus, state.options, moments, state.step, state.log_history)?;
        trainer.fresh_heads = state.fresh_heads;
        Ok(trainer)
    }
}
