//! The model a `train` or `finetune` run starts from, when it does not resume one: the weights
//! `model=` names (a built-in model when none), or, with `from_config=`, new weights drawn for
//! the config.json in that directory.

use std::path::Path;

use bert_core::training::options::SEED;
use bert_core::training::run::Progress;
use bert_core::training::save::ModelFiles;
use bert_core::words::Opt;
use bert_core::BertModel;

use super::{files, files_of_dir, load, Builtin, MODEL};
use crate::error::refuse;
use crate::error::Result;

/// The option that asks for new weights.
pub const FROM_CONFIG: Opt = Opt("from_config");

/// The refusals of `from_config` with the options around it, made before anything is read.
pub fn check(model: Option<&Path>, from_config: bool, resume: bool) -> Result<()> {
    if from_config && resume {
        refuse!("{FROM_CONFIG} starts a run from new weights: it cannot be used with {}", Opt("resume"));
    }
    if from_config && model.is_none() {
        refuse!("{FROM_CONFIG} draws new weights for a config.json: give the directory that holds it with {MODEL}");
    }
    Ok(())
}

/// The model and the files its checkpoints carry; the notes it has are pushed to `notes` (for
/// new weights, said once every check has passed) or handed to `progress` (a loaded model's).
pub fn model(
    model: Option<&Path>,
    from_config: bool,
    seed: u64,
    progress: &mut dyn Progress,
    notes: &mut Vec<String>,
) -> Result<(BertModel, ModelFiles)> {
    if from_config {
        let dir = model.expect("check() refuses from_config without a model");
        // A built-in model's name (`tiny`) that names no directory here: its config, new weights.
        let builtin = Builtin::resolve(Some(dir));
        let (new, files) = match builtin {
            Some(builtin) => (builtin.new_weights(seed)?, builtin.files()),
            None => (BertModel::from_config(dir, seed)?, files_of_dir(dir)?),
        };
        let unread = builtin.is_none() && dir.join("model.safetensors").exists();
        notes.push(format!(
            "note: new weights for {} drawn from {} as transformers initialises them (weights from N(0, {}²), \
             the padding row, biases 0, LayerNorm 1 and 0, the MLM decoder tied to the word embeddings){}",
            match builtin {
                Some(builtin) => format!("{}'s config.json", builtin.name),
                None => dir.join("config.json").display().to_string(),
            },
            SEED.with(seed),
            new.config.initializer_range,
            if unread { "; its model.safetensors is not read" } else { "" }
        ));
        return Ok((new, files));
    }
    // A directory with a config and no weights is a model to be made, which is asked for.
    if let Some(dir) = model.filter(|d| d.join("config.json").is_file()) {
        if !dir.join("model.safetensors").exists() && !dir.join("pytorch_model.bin").exists() {
            refuse!(
                "{}: there is no model.safetensors in it; give {FROM_CONFIG} to train new weights for its config.json",
                dir.display()
            );
        }
    }
    let loaded = load(model)?;
    for note in &loaded.notes {
        progress.note(note);
    }
    let files = files(model, &loaded.model)?;
    Ok((loaded.model, files))
}
