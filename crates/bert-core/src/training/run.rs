//! A whole training run, as `bert-trace train` and `bert_trace.train` ask for it: every check
//! first ([`prepare`]: the options, the text, the steps to dump, every directory the run will
//! write into), then the steps, the loss lines, the step dumps and the checkpoints ([`Run::go`]).
//! Nothing is written, and no directory is claimed, before every check has passed.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use super::corpus::Corpus;
use super::held_out::{evaluate, Evaluation};
use super::save::{self, CheckpointDir, ModelFiles, SaveObserver};
use super::{StepLog, Trainer};
use crate::error::{BertError, Result};
use crate::io::dump::{self, DumpWriter};
use crate::pass::{Discard, Sink};
use crate::words::Opt;

pub const SAVE: Opt = Opt("save");
pub const SAVE_EVERY: Opt = Opt("save_every");
pub const DUMP_STEP: Opt = Opt("dump_step");
pub const LOG_EVERY: Opt = Opt("log_every");
pub const EVAL_EVERY: Opt = Opt("eval_every");

/// What a run says as it goes. The command prints it (and draws a progress bar on a terminal);
/// the Python package hands it to Python.
pub trait Progress {
    /// A note, said once (heads made new).
    fn note(&mut self, text: &str);
    /// A line of the run's report: the header, a loss line.
    fn line(&mut self, text: &str);
    /// The run saved its model to `dir` at `step`: each caller says how its users load it.
    fn saved(&mut self, dir: &Path, step: usize);
    /// After every step, with its report; an error stops the run there (Ctrl-C in Python).
    fn step(&mut self, log: &StepLog, steps: usize) -> Result<()>;
    /// After each evaluation on held-out examples (its lines are also given to `line`).
    fn evaluated(&mut self, _evaluation: &Evaluation) -> Result<()> {
        Ok(())
    }
}

/// Where a run writes, and how often it reports.
#[derive(Clone, Debug, Default)]
pub struct Outputs {
    /// The checkpoint directory: the model at its top, `checkpoint-K/` and `step-K/` inside.
    pub save: Option<PathBuf>,
    /// Also save `checkpoint-K/` every this many steps.
    pub save_every: Option<usize>,
    /// The steps whose every tensor goes to `step-K/`.
    pub dump_steps: BTreeSet<usize>,
    /// A loss line every this many steps (and after the last).
    pub log_every: usize,
    /// A classifier's held-out examples, evaluated every `eval_every` steps and after the last.
    pub eval: Option<Corpus>,
    pub eval_every: Option<usize>,
}

/// The steps a `dump_step` value names: `K`, or `A-B` for every step from A to B.
pub fn parse_steps(spec: &str) -> Result<std::ops::RangeInclusive<usize>> {
    let bad =
        |accepted: &str| BertError::OptionValue { option: DUMP_STEP, value: spec.into(), accepted: accepted.into() };
    let number = |text: &str| text.trim().parse::<usize>().ok().filter(|&k| k >= 1);
    let expected = "a step number (from 1) or a range such as 1-10";
    let (first, last) = match spec.split_once('-') {
        Some((a, b)) => (number(a).ok_or_else(|| bad(expected))?, number(b).ok_or_else(|| bad(expected))?),
        None => {
            let k = number(spec).ok_or_else(|| bad(expected))?;
            (k, k)
        }
    };
    if first > last {
        return Err(bad("a range that does not run backwards, such as 1-10"));
    }
    Ok(first..=last)
}

/// A run that has passed every check, ready to go.
pub struct Run {
    pub trainer: Trainer,
    files: ModelFiles,
    outputs: Outputs,
    /// What made the step dumps, for their manifests.
    producer: serde_json::Value,
}

/// Checks everything a run could fail on before it starts, writing nothing: `outputs` against
/// the run's steps, and every directory it will write into (the save directory, each
/// `checkpoint-K/` and each `step-K/` it will write) against the rules of what is ours.
pub fn prepare(trainer: Trainer, files: ModelFiles, outputs: Outputs, producer: serde_json::Value) -> Result<Run> {
    let (steps, done) = (trainer.options.steps, trainer.step);
    let at_least_one = |option: Opt, value: usize| -> Result<()> {
        match value {
            0 => Err(BertError::OptionValue {
                option,
                value: "0".into(),
                accepted: "a number of steps, 1 or more".into(),
            }),
            _ => Ok(()),
        }
    };
    if let Some(every) = outputs.save_every {
        at_least_one(SAVE_EVERY, every)?;
    }
    at_least_one(LOG_EVERY, outputs.log_every)?;
    if let Some(every) = outputs.eval_every {
        at_least_one(EVAL_EVERY, every)?;
        if outputs.eval.is_none() {
            return Err(BertError::Training(format!(
                "{EVAL_EVERY} evaluates held-out examples: give {} or {} too",
                Opt("eval_file"),
                super::options::EVAL_SPLIT
            )));
        }
    }
    if let Some(eval) = &outputs.eval {
        let names = |corpus: &Corpus| corpus.classes.as_ref().map(|c| c.names.clone());
        if names(eval) != names(&trainer.corpus) {
            return Err(BertError::Training(format!(
                "{}: held-out examples of another kind than the training data's ({})",
                eval.path.display(),
                names(&trainer.corpus).map_or("text to fill in".into(), |n| format!("classes {}", n.join(", ")))
            )));
        }
        // A classifier is judged on examples of the form it learns from.
        if trainer.corpus.classes.is_some() && eval.pairs.is_some() != trainer.corpus.pairs.is_some() {
            let (this, that) = match eval.pairs {
                Some(_) => ("sentence pairs", "single texts"),
                None => ("single texts", "sentence pairs"),
            };
            return Err(BertError::Corpus {
                path: eval.path.clone(),
                line: 0,
                problem: format!("{this}, but the classifier trains on {that}"),
            });
        }
        super::check_pairs_fit(eval, &trainer.model)?;
        // Every held-out line must have a token to mask, as every training line must.
        eval.check(&trainer.model.tokenizer, &trainer.options.batching)?;
    }
    // A resumed run evaluates as the run it continues did: the same held-out file, as often.
    if let Some(dir) = &trainer.resumed_from {
        let differs = |what: String| {
            BertError::Training(format!(
                "{what}, unlike the run saved in {}; leave it out to continue that run",
                dir.display()
            ))
        };
        if outputs.eval_every != trainer.eval_every {
            let given = outputs.eval_every.map_or("no ‹eval_every›".into(), |every| EVAL_EVERY.with(every));
            let saved = trainer.eval_every.map_or("none".into(), |every| every.to_string());
            return Err(differs(format!("{given} (the saved run's: {saved})")));
        }
        let held_out_file = outputs.eval.as_ref().filter(|_| trainer.options.eval_split.is_none());
        if held_out_file.map(|c| &c.sha256) != trainer.eval_sha256.as_ref() {
            return Err(differs(match held_out_file {
                Some(eval) => format!("{}: held-out text that is not the saved run's", eval.path.display()),
                None => format!("no {}", Opt("eval_file")),
            }));
        }
    }
    let needs_save =
        |option: Opt| BertError::Training(format!("{option} writes into the {SAVE} directory: give {SAVE} too"));
    if outputs.save.is_none() && outputs.save_every.is_some() {
        return Err(needs_save(SAVE_EVERY));
    }
    if let (Some(&first), Some(&last)) = (outputs.dump_steps.first(), outputs.dump_steps.last()) {
        if outputs.save.is_none() {
            return Err(needs_save(DUMP_STEP));
        }
        if last > steps {
            return Err(BertError::OptionValue {
                option: DUMP_STEP,
                value: last.to_string(),
                accepted: format!("a step of the run: the run has {steps} steps"),
            });
        }
        if first <= done {
            return Err(BertError::OptionValue {
                option: DUMP_STEP,
                value: first.to_string(),
                accepted: format!("a step still to come: step {first} is already done in the run being resumed, which reached step {done}"),
            });
        }
    }
    if let Some(save) = &outputs.save {
        save::check(save)?;
        for step in checkpoint_steps(&outputs, done, steps) {
            save::check(&save.join(format!("checkpoint-{step}")))?;
        }
        for step in &outputs.dump_steps {
            dump::check_dir(&save.join(format!("step-{step}")), dump::Options::named_by(SAVE))?;
        }
    }
    let mut trainer = trainer;
    trainer.eval_every = outputs.eval_every;
    let held_out_file = outputs.eval.as_ref().filter(|_| trainer.options.eval_split.is_none());
    trainer.eval_file = held_out_file.map(|e| e.path.clone());
    trainer.eval_sha256 = held_out_file.map(|e| e.sha256.clone());
    Ok(Run { trainer, files, outputs, producer })
}

/// The steps after which `checkpoint-K/` is saved: every `save_every`, but not the last (the
/// save directory's top holds that one).
fn checkpoint_steps(outputs: &Outputs, done: usize, steps: usize) -> impl Iterator<Item = usize> {
    let every = outputs.save_every.filter(|_| outputs.save.is_some()).unwrap_or(usize::MAX);
    (done + 1..steps).filter(move |step| step % every == 0)
}

impl Run {
    /// The header line, the steps (a loss line every `log_every`, the step dumps, the
    /// checkpoints), then the save; returns the run as it ended. A step that fails (a diverged
    /// run) ends it there, with nothing of that step saved.
    pub fn go(self, progress: &mut dyn Progress, observer: &mut dyn SaveObserver) -> Result<Trainer> {
        let Run { trainer, files, outputs, producer } = self;
        let save = outputs.save.as_deref().map(CheckpointDir::claim).transpose()?;
        let result = steps(trainer, &files, &outputs, producer, save.as_ref(), progress, observer);
        if let (Err(_), Some(save)) = (&result, save) {
            save.abandon();
        }
        result
    }
}

/// The steps of [`Run::go`], then the save.
fn steps(
    mut trainer: Trainer,
    files: &ModelFiles,
    outputs: &Outputs,
    producer: serde_json::Value,
    save: Option<&CheckpointDir>,
    progress: &mut dyn Progress,
    observer: &mut dyn SaveObserver,
) -> Result<Trainer> {
    progress.line(&Header(&trainer).to_string());
    let steps = trainer.options.steps;
    let keep = checkpoint_steps(outputs, trainer.step, steps).collect::<BTreeSet<usize>>();
    while !trainer.finished() {
        let step = trainer.step + 1;
        let mut sink: Box<dyn Sink> = match (save, outputs.dump_steps.contains(&step)) {
            (Some(save), true) => {
                Box::new(step_writer(&trainer, &save.path().join(format!("step-{step}")), producer.clone())?)
            }
            _ => Box::new(Discard),
        };
        trainer.step(sink.as_mut())?;
        drop(sink);
        if step.is_multiple_of(outputs.log_every) || trainer.finished() {
            progress.line(&LogLine { log: &trainer.log, every: outputs.log_every, steps }.to_string());
        }
        progress.step(trainer.log.last().expect("a step was taken"), steps)?;
        if let Some(eval) = &outputs.eval {
            let every = outputs.eval_every.unwrap_or(usize::MAX);
            if step.is_multiple_of(every) || trainer.finished() {
                let evaluation = evaluate(&trainer.model, eval, &trainer.options.batching, step)?;
                progress.line(&evaluation.to_string());
                progress.evaluated(&evaluation)?;
                trainer.evals.push(evaluation);
            }
        }
        if let (Some(save), true) = (save, keep.contains(&step)) {
            save.save_subdir(&format!("checkpoint-{step}"), &trainer, files, observer)?;
        }
    }
    if let Some(save) = save {
        save.save(&trainer, files, observer)?;
        progress.saved(save.path(), trainer.step);
    }
    Ok(trainer)
}

/// The writer of one step's dump: its manifest records the batch's texts, pairs, NSP labels
/// and masking seed, from which `dump_reference.py` makes the same batch.
fn step_writer(trainer: &Trainer, dir: &Path, mut producer: serde_json::Value) -> Result<DumpWriter> {
    let (batch, mut inputs) = trainer.next_batch()?;
    inputs.tokens = Some(trainer.model.tokens_of(&batch));
    producer["train_step"] = serde_json::json!(trainer.step + 1);
    let model = trainer.model.source.display().to_string();
    let mut writer = DumpWriter::create(dir, producer, model, inputs, dump::Options::named_by(SAVE))?;
    writer.set_model(&trainer.model);
    Ok(writer)
}

/// The run's first line: the text, its batches, the objectives, the schedule.
pub struct Header<'a>(pub &'a Trainer);

impl fmt::Display for Header<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (corpus, options) = (&self.0.corpus, &self.0.options);
        let objectives = if corpus.pairs.is_some() { "MLM + NSP" } else { "MLM" };
        if let Some(dir) = &self.0.resumed_from {
            writeln!(f, "resuming {} at step {} of {}", dir.display(), self.0.step, options.steps)?;
        }
        if let Some(classes) = &corpus.classes {
            return write!(
                f,
                "fine-tuning on {}: {} {}, {} labels ({}), {}; {}, lr {:?} (warm-up {}), {}",
                corpus.path.display(),
                corpus.len(),
                if corpus.pairs.is_some() { "sentence pairs" } else { "examples" },
                classes.names.len(),
                classes.names.join(", "),
                batches(corpus.len(), options.batching.batch_size),
                plural(options.steps, "step", "steps"),
                options.lr,
                options.warmup_steps,
                Dropped(options.dropout)
            );
        }
        write!(
            f,
            "training on {}: {} {}, {}; {objectives}; {}, lr {:?} (warm-up {}), {}",
            corpus.path.display(),
            corpus.len(),
            match (options.batching.documents, corpus.pairs.is_some()) {
                (true, true) => "sentence pairs packed from its documents",
                (true, false) => "sequences packed from its documents",
                (false, true) => "sentence pairs",
                (false, false) => "lines",
            },
            batches(corpus.len(), options.batching.batch_size),
            plural(options.steps, "step", "steps"),
            options.lr,
            options.warmup_steps,
            Dropped(options.dropout)
        )
    }
}

/// `dropout 0.1`, or `no dropout`.
struct Dropped(crate::model::dropout::DropoutRates);

impl fmt::Display for Dropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.is_off() {
            true => write!(f, "no dropout"),
            false => write!(f, "dropout {}", self.0),
        }
    }
}

/// An epoch's batches as they are: `7 batches of 32 per epoch`, or with a smaller last one,
/// `8 batches per epoch (7 of 32 and one of 16)`.
fn batches(examples: usize, size: usize) -> String {
    let (full, rest) = (examples / size, examples % size);
    match (full, rest) {
        (_, 0) => format!("{} of {size} per epoch", plural(full, "batch", "batches")),
        (0, _) => format!("1 batch of {rest} per epoch"),
        _ => format!("{} batches per epoch ({full} of {size} and one of {rest})", full + 1),
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `step 3/10  loss 5.4321  mlm 4.7390  nsp 0.6931  lr 1.000e-4`: the last step's number and
/// rate, and the mean losses of the steps since the previous line (at most `every`), as
/// transformers' Trainer logs them.
pub struct LogLine<'a> {
    pub log: &'a [StepLog],
    pub every: usize,
    pub steps: usize,
}

impl fmt::Display for LogLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let LogLine { log, every, steps } = *self;
        let last = log.last().expect("a line follows a step");
        let since = log.len() - ((last.step - 1) % every + 1).min(log.len());
        let recent = &log[since..];
        let mean = |value: fn(&StepLog) -> Option<f32>| -> Option<f64> {
            let values: Option<Vec<f64>> = recent.iter().map(|l| value(l).map(f64::from)).collect();
            values.map(|v| v.iter().sum::<f64>() / v.len() as f64)
        };
        let width = steps.to_string().len();
        let loss = mean(|l| Some(l.loss)).expect("every step has a loss");
        write!(f, "step {:>width$}/{steps}  loss {loss:.4}", last.step)?;
        if let (Some(mlm), Some(nsp)) = (mean(|l| l.mlm_loss), mean(|l| l.nsp_loss)) {
            write!(f, "  mlm {mlm:.4}  nsp {nsp:.4}")?;
        }
        write!(f, "  lr {:.3e}", last.lr)
    }
}
