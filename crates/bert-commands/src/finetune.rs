//! `finetune`: a classifier trained on a labelled file, as `BertForSequenceClassification`
//! computes it. The steps, the checks and the saves are `bert_core::training`'s, as for `train`;
//! this reads the labelled data, numbers its classes, gives the model a classifier (and a pooler)
//! where it has none, holds examples out for evaluation, and hands the run's lines to the
//! caller's [`Progress`].

use std::path::PathBuf;

use bert_core::training::held_out::Evaluation;
use bert_core::training::labelled::Labelled;
use bert_core::training::options::{self, EVAL_SPLIT, SEED, STEPS};
use bert_core::training::run::{self, Outputs, Progress};
use bert_core::training::save::read_state;
use bert_core::training::{StepLog, TrainSettings, Trainer};
use bert_core::words::Opt;
use bert_core::BertModel;

use crate::error::Result;
use crate::refuse;
use crate::settings::PassSettings;
use crate::source;
use crate::train::{check_start, dump_steps, file_of, no_file_beside_a_saved_split, run_to_end};

pub const FILE: Opt = Opt("file");
pub const EVAL_FILE: Opt = Opt("eval_file");
pub const EPOCHS: Opt = Opt("epochs");
/// BERT's fine-tuning recipe runs 2 to 4 epochs; transformers' Trainer defaults to 3.
pub const DEFAULT_EPOCHS: usize = 3;

/// A fine-tuning run as a caller asks for it; each field is the option of that name.
#[derive(Clone, Debug, Default)]
pub struct FinetuneRequest {
    /// The labelled examples to train on; None: the resumed run's.
    pub file: Option<PathBuf>,
    /// Held-out examples to evaluate on.
    pub eval_file: Option<PathBuf>,
    /// The model to start from; None: the built-in english-small (or the resumed run's).
    pub model: Option<PathBuf>,
    /// Start from new weights drawn for `model`'s config.json rather than from its weights: what
    /// the same fine-tuning makes of a model that was never pretrained.
    pub from_config: bool,
    pub settings: TrainSettings,
    /// The run's length in passes over the data, instead of `steps`.
    pub epochs: Option<usize>,
    pub save: Option<PathBuf>,
    pub save_every: Option<usize>,
    pub resume: Option<PathBuf>,
    /// The steps to dump, each `K` or a range `A-B`.
    pub dump_steps: Vec<String>,
    pub log_every: usize,
    pub eval_every: Option<usize>,
    pub pass: PassSettings,
}

/// What a run reports: every step's, and every evaluation's.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FinetuneReport {
    pub steps: Vec<StepLog>,
    pub evaluations: Vec<Evaluation>,
    /// The classes, in the order of their ids.
    pub classes: Vec<String>,
}

/// Fine-tunes as `request` says, telling `progress` as it goes. Every check is made before
/// anything is written (`bert_core::training::run::prepare`).
pub fn finetune(request: &FinetuneRequest, progress: &mut dyn Progress) -> Result<FinetuneReport> {
    let args = request;
    check_start(args.model.as_deref(), args.from_config, args.resume.as_deref())?;
    if args.epochs.is_some() && args.settings.steps.is_some() {
        refuse!("{EPOCHS} and {STEPS} both say how long the run is: give one");
    }
    if args.epochs == Some(0) {
        refuse!("{}: a run needs at least one epoch", EPOCHS.with(0));
    }
    if args.eval_file.is_some() && args.settings.eval_split.is_some() {
        refuse!("{EVAL_FILE} and {EVAL_SPLIT} both give held-out examples: give one");
    }
    let (threads, kernels) = args.pass.apply()?;
    let saved = args.resume.as_deref().map(|dir| read_state(dir).map(|state| (dir, state))).transpose()?;
    let file =
        file_of(args.file.as_deref(), saved.as_ref(), ("data", "labelled examples, label<TAB>text on each line"))?;
    no_file_beside_a_saved_split(args.eval_file.as_deref(), saved.as_ref().map(|(dir, state)| (*dir, state)))?;
    // A resumed run evaluates as it did, unless told otherwise.
    let saved_eval = saved.as_ref().map(|(_, state)| (state.eval_file.clone(), state.eval_every));
    let eval_file = args.eval_file.clone().or_else(|| saved_eval.as_ref().and_then(|(file, _)| file.clone()));
    let eval_every = args.eval_every.or_else(|| saved_eval.as_ref().and_then(|(_, every)| *every));
    if eval_every.is_some() && eval_file.is_none() && args.settings.eval_split.is_none() && saved.is_none() {
        refuse!("{} evaluates held-out examples: give {EVAL_FILE} or {EVAL_SPLIT} too", run::EVAL_EVERY);
    }
    let data = Labelled::read(&file)?;
    let eval_data = eval_file.as_deref().map(Labelled::read).transpose()?;
    // New weights are said once every check has passed, with the other notes.
    let mut new_weights = Vec::new();
    let (mut model, files) = match &saved {
        Some((dir, _)) => (BertModel::load(dir)?, source::files_of_dir(dir)?),
        None => source::start::model(
            args.model.as_deref(),
            args.from_config,
            args.settings.seed.unwrap_or(0),
            progress,
            &mut new_weights,
        )?,
    };
    model.kernels = kernels;
    let existing = model.classifier.as_ref().map(|c| c.labels.clone());
    let names = data.classes(existing.as_deref())?;
    // The columns a GLUE header has besides the label and the texts are read past, and said so.
    let read_past: Vec<String> = [Some(&data), eval_data.as_ref()]
        .into_iter()
        .flatten()
        .filter(|d| !d.ignored.is_empty())
        .map(|d| format!("note: {}: the columns {} are read past", d.path.display(), d.ignored.join(", ")))
        .collect();
    let held_out = eval_data.map(|d| d.into_corpus(&names)).transpose()?;
    let corpus = data.into_corpus(&names)?;

    // The run's length: its steps, or its epochs over the examples it trains on.
    let saved_options = saved.as_ref().map(|(dir, state)| (*dir, &state.options));
    let old = saved_options.map(|(_, o)| o);
    let mut settings = args.settings.clone();
    let split = settings.eval_split.or(old.and_then(|o| o.eval_split));
    let seed = settings.seed.or(old.map(|o| o.batching.seed)).unwrap_or(0);
    let (corpus, held_out) = match split {
        Some(share) if share > 0.0 && share < 1.0 => {
            let (train, held) = corpus.split(share, seed)?;
            (train, Some(held))
        }
        _ => (corpus, held_out),
    };
    if settings.steps.is_none() && (args.epochs.is_some() || saved.is_none()) {
        let batch_size =
            settings.batch_size.or(old.map(|o| o.batching.batch_size)).unwrap_or(options::FINE_TUNING.batch_size);
        let epochs = args.epochs.unwrap_or(DEFAULT_EPOCHS);
        let steps = epochs.saturating_mul(corpus.batches_per_epoch(batch_size.max(1)));
        if let (Some((dir, state)), Some(epochs)) = (&saved, args.epochs) {
            if state.options.steps != steps {
                refuse!(
                    "{} makes {steps} steps, but the run saved in {} takes {}; leave it out to continue that run",
                    EPOCHS.with(epochs),
                    dir.display(),
                    state.options.steps
                );
            }
        }
        settings.steps = Some(steps);
    }
    let options = settings.resolve(saved_options, &model.config, options::FINE_TUNING)?;
    let dump_steps = dump_steps(&args.dump_steps)?;
    // What the run made or left out is said once every check has passed.
    let mut notes = new_weights;
    notes.extend(read_past);
    let trainer = match saved {
        Some((dir, state)) => Trainer::resume(model, corpus, state, dir)?,
        None => {
            let (made, dropped) = model.add_classifier(&names, options.batching.seed);
            if !made.is_empty() {
                notes.push(format!(
                    "note: {} has no {}: made new from {} as transformers initialises them (weights from \
                     N(0, {}²), biases 0)",
                    model.source.display(),
                    made.join(", "),
                    SEED.with(options.batching.seed),
                    model.config.initializer_range
                ));
            }
            if !dropped.is_empty() {
                notes.push(format!(
                    "note: {}'s pretraining heads ({}) are not part of a classifier: they are left out",
                    model.source.display(),
                    dropped.join(", ")
                ));
            }
            let mut trainer = Trainer::new(model, corpus, options)?;
            trainer.fresh_heads = made.iter().map(|s| s.to_string()).collect();
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
    let mut producer = crate::trace::producer(threads, kernels);
    producer["command"] = "finetune".into();
    let trainer = run_to_end(trainer, files, outputs, producer, &notes, progress)?;
    let classes = trainer.corpus.classes.as_ref().map(|c| c.names.clone()).unwrap_or_default();
    Ok(FinetuneReport { steps: trainer.log, evaluations: trainer.evals, classes })
}
