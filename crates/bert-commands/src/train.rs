//! `train`: pretraining on a text file. The run, its checks and everything it computes are
//! `bert_core::training`; this turns a request into the run (the model from where the request
//! names it, the text, the options) and hands the run's lines to the caller's [`Progress`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use bert_core::training::corpus::Corpus;
use bert_core::training::options::{self, SEED};
use bert_core::training::run::{self, Outputs, Progress};
use bert_core::training::save::{read_state, ModelFiles, TrainerState, Unobserved};
use bert_core::training::{TrainSettings, Trainer};
use bert_core::words::Opt;
use bert_core::BertModel;

use crate::error::Result;
use crate::refuse;
use crate::settings::PassSettings;
use crate::source;

pub const FILE: Opt = Opt("file");
pub const EVAL_FILE: Opt = Opt("eval_file");
pub use crate::source::start::FROM_CONFIG;

/// A training run as a caller asks for it; each field is the option of that name.
#[derive(Clone, Debug, Default)]
pub struct TrainRequest {
    /// The text to train on; None: the resumed run's.
    pub file: Option<PathBuf>,
    /// Held-out text whose MLM loss is measured as the run goes (`eval_split` in the settings
    /// holds out lines of `file` instead).
    pub eval_file: Option<PathBuf>,
    pub eval_every: Option<usize>,
    /// The model to start from; None: the built-in english-small (or the resumed run's).
    pub model: Option<PathBuf>,
    /// Start from new weights drawn for `model`'s config.json (`BertForPreTraining(config)`)
    /// rather than from its weights.
    pub from_config: bool,
    pub settings: TrainSettings,
    pub save: Option<PathBuf>,
    pub save_every: Option<usize>,
    pub resume: Option<PathBuf>,
    /// The steps to dump, each `K` or a range `A-B`.
    pub dump_steps: Vec<String>,
    pub log_every: usize,
    pub pass: PassSettings,
}

/// Trains as `request` says, telling `progress` as it goes; returns the run as it ended. Every
/// check is made before anything is written (`bert_core::training::run::prepare`).
pub fn train(request: &TrainRequest, progress: &mut dyn Progress) -> Result<Trainer> {
    let args = request;
    check_start(args.model.as_deref(), args.from_config, args.resume.as_deref())?;
    let (threads, kernels) = args.pass.apply()?;
    let saved = args.resume.as_deref().map(|dir| read_state(dir).map(|state| (dir, state))).transpose()?;
    let file = file_of(
        args.file.as_deref(),
        saved.as_ref(),
        ("text", "the text to train on, one example (or tab-separated pair) per line"),
    )?;
    if args.eval_file.is_some() && args.settings.eval_split.is_some() {
        refuse!("{} and {} both give held-out text: give one", EVAL_FILE, options::EVAL_SPLIT);
    }
    no_file_beside_a_saved_split(args.eval_file.as_deref(), saved.as_ref().map(|(dir, state)| (*dir, state)))?;
    // A resumed run evaluates as it did, unless told otherwise.
    let eval_file = args.eval_file.clone().or_else(|| saved.as_ref().and_then(|(_, state)| state.eval_file.clone()));
    let eval_every = args.eval_every.or_else(|| saved.as_ref().and_then(|(_, state)| state.eval_every));
    let split = args.settings.eval_split.or_else(|| saved.as_ref().and_then(|(_, state)| state.options.eval_split));
    if eval_every.is_some() && eval_file.is_none() && split.is_none() {
        refuse!("{} measures held-out text: give {} or {} too", run::EVAL_EVERY, EVAL_FILE, options::EVAL_SPLIT);
    }
    // One example a line is read now, so that a bad line is named before the model loads;
    // documents are packed once the model's tokenizer and the run's options are known.
    let documents =
        args.settings.documents.or_else(|| saved.as_ref().map(|(_, state)| state.options.batching.documents));
    let lines = match documents.unwrap_or(false) {
        true => None,
        false => Some((Corpus::read(&file)?, eval_file.as_deref().map(Corpus::read).transpose()?)),
    };
    // What the run made or left out is said once every check has passed.
    let mut notes = Vec::new();
    let (mut model, files) = match &saved {
        Some((dir, _)) => (BertModel::load(dir)?, source::files_of_dir(dir)?),
        None => source::start::model(
            args.model.as_deref(),
            args.from_config,
            args.settings.seed.unwrap_or(0),
            progress,
            &mut notes,
        )?,
    };
    model.kernels = kernels;
    let settings = &args.settings;
    let saved_options = saved.as_ref().map(|(dir, state)| (*dir, &state.options));
    let options = settings.resolve(saved_options, &model.config, options::PRETRAINING)?;
    let (corpus, held_out) = match lines {
        Some(read) => read,
        None => {
            let pack = |path: &std::path::Path| Corpus::read_documents(path, &model.tokenizer, &options.batching);
            (pack(&file)?, eval_file.as_deref().map(pack).transpose()?)
        }
    };
    let (corpus, held_out) = match split.filter(|p| *p > 0.0 && *p < 1.0) {
        Some(share) => {
            let (train, held) = corpus.split(share, options.batching.seed)?;
            (train, Some(held))
        }
        None => (corpus, held_out),
    };
    let dump_steps = dump_steps(&args.dump_steps)?;
    let trainer = match saved {
        Some((dir, state)) => Trainer::resume(model, corpus, state, dir)?,
        None => {
            // Pretraining has no classifier: one the checkpoint has is left out, as
            // `BertForPreTraining` has none.
            if model.classifier.take().is_some() {
                notes.push(format!(
                    "note: {}'s classifier (classifier.*) is not part of pretraining: it is left out",
                    model.source.display()
                ));
            }
            let fresh = model.add_pretraining_heads(corpus.pairs.is_some(), options.batching.seed);
            if !fresh.is_empty() {
                notes.push(format!(
                    "note: {} has no {}: made new from {} as transformers initialises them (weights from \
                     N(0, {}²), biases 0, the MLM decoder tied to the word embeddings)",
                    model.source.display(),
                    fresh.join(", "),
                    SEED.with(options.batching.seed),
                    model.config.initializer_range
                ));
            }
            let mut trainer = Trainer::new(model, corpus, options)?;
            trainer.fresh_heads = fresh.iter().map(|s| s.to_string()).collect();
            trainer
        }
    };
    let outputs = Outputs {
        save: args.save.clone(),
        save_every: args.save_every,
        dump_steps,
        log_every: args.log_every,
        eval: held_out,
        eval_every,
    };
    run_to_end(trainer, files, outputs, crate::trace::producer(threads, kernels), &notes, progress)
}

/// Refuses a start that names two: a saved run to continue (`resume`) continues from its own
/// model, and a model comes from `model` or from its config alone (`from_config`), as
/// `source::start` checks.
pub(crate) fn check_start(model: Option<&Path>, from_config: bool, resume: Option<&Path>) -> Result<()> {
    if resume.is_some() && model.is_some() {
        refuse!(
            "{} continues the run saved there, from its model: it cannot be used with {}",
            Opt("resume"),
            source::MODEL
        );
    }
    source::start::check(model, from_config, resume.is_some())
}

/// The file a run trains on: `file`, else the one the saved run was trained on (which must still
/// be there). `what` names it in messages: (what it holds, what the option is for).
pub(crate) fn file_of(
    file: Option<&Path>,
    saved: Option<&(&Path, TrainerState)>,
    (holds, wanted): (&str, &str),
) -> Result<PathBuf> {
    match (file, saved) {
        (Some(file), _) => Ok(file.to_path_buf()),
        (None, Some((dir, state))) => {
            if !state.file.exists() {
                refuse!(
                    "{}: the {holds} the run in {} was trained on is not there (from here); give it with {FILE}",
                    state.file.display(),
                    dir.display()
                );
            }
            Ok(state.file.clone())
        }
        (None, None) => refuse!("{FILE} is required: {wanted}"),
    }
}

/// Every step the `dump_step` values name.
pub(crate) fn dump_steps(specs: &[String]) -> Result<BTreeSet<usize>> {
    let mut steps = BTreeSet::new();
    for spec in specs {
        steps.extend(run::parse_steps(spec)?);
    }
    Ok(steps)
}

/// The end of a training command, `train` and `finetune` alike: the run prepared with its
/// outputs (every check before anything is written), what the run made or left out said, then
/// the run. `producer` is who the run's dumps say made them.
pub(crate) fn run_to_end(
    trainer: Trainer,
    files: ModelFiles,
    outputs: Outputs,
    producer: serde_json::Value,
    notes: &[String],
    progress: &mut dyn Progress,
) -> Result<Trainer> {
    let run = run::prepare(trainer, files, outputs, producer)?;
    for note in notes {
        progress.note(note);
    }
    Ok(run.go(progress, &mut Unobserved)?)
}

/// Held-out examples come from a file of their own or a split of the training file, not both: a
/// resumed run that split its file goes on splitting it, and `eval_file` is refused.
pub(crate) fn no_file_beside_a_saved_split(
    eval_file: Option<&std::path::Path>,
    saved: Option<(&std::path::Path, &bert_core::training::save::TrainerState)>,
) -> Result<()> {
    if let (Some(_), Some((dir, Some(share)))) = (eval_file, saved.map(|(dir, state)| (dir, state.options.eval_split)))
    {
        refuse!(
            "{EVAL_FILE}: the run saved in {} holds out a split of its file ({}); leave {EVAL_FILE} out to continue it",
            dir.display(),
            options::EVAL_SPLIT.with(share)
        );
    }
    Ok(())
}
