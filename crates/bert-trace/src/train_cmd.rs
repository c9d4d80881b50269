//! `bert-trace train`: pretraining on a text file, a loss line per step, checkpoints and step
//! dumps. The loop and everything it computes are `bert_core::training`; this file turns the
//! command line into its options and prints what it reports.

use std::collections::BTreeSet;
use std::fmt::Display;
use std::io::IsTerminal;
use std::path::Path;

use anyhow::{bail, Context, Result};
use bert_core::dump::{self, DumpWriter};
use bert_core::training::adamw::AdamWConfig;
use bert_core::training::checkpoint::{read_state, CheckpointDir, TrainerState};
use bert_core::training::corpus::{Batching, Corpus};
use bert_core::training::{StepLog, TrainOptions, Trainer};
use bert_core::{BertModel, Discard, Sink};

use crate::cli::TrainArgs;
use crate::model_source;
use crate::tokens_table;
use crate::trace_cmd::pass_settings;

/// BERT's pretraining learning rate (Devlin et al., 2018).
const DEFAULT_LR: f64 = 1e-4;
const DEFAULT_BATCH_SIZE: usize = 8;
const DEFAULT_MAX_LEN: usize = 128;
/// BERT's masking rate and d2l's share of random sentence Bs.
const DEFAULT_MASK_PROB: f64 = 0.15;
const DEFAULT_NSP_NEGATIVES: f64 = 0.5;

/// What a run says as it goes. The command prints it (and draws a progress bar on a terminal);
/// the Python package hands it to Python.
pub trait Progress {
    /// A note, said once (the built-in model, heads made new).
    fn note(&mut self, text: &str);
    /// A line of the run's report: the header, a loss line, the save.
    fn line(&mut self, text: &str);
    /// After every step, with its report; an error stops the run there.
    fn step(&mut self, log: &StepLog, steps: usize) -> Result<()>;
}

/// The command's progress: notes on stderr, lines on stdout, and on a terminal a progress bar
/// that the lines print above.
#[derive(Default)]
struct Terminal {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress for Terminal {
    fn note(&mut self, text: &str) {
        eprintln!("{text}");
    }

    fn line(&mut self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None => println!("{text}"),
        }
    }

    fn step(&mut self, log: &StepLog, steps: usize) -> Result<()> {
        if self.bar.is_none() && std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(steps as u64);
            bar.set_position(log.step as u64 - 1);
            self.bar = Some(bar);
        }
        if let Some(bar) = &self.bar {
            bar.inc(1);
            if log.step == steps {
                bar.finish_and_clear();
            }
        }
        Ok(())
    }
}

pub fn run(args: &TrainArgs) -> Result<i32> {
    train(args, &mut Terminal::default())?;
    Ok(0)
}

/// Trains as `args` say, telling `progress` as it goes; returns the run as it ended.
pub fn train(args: &TrainArgs, progress: &mut dyn Progress) -> Result<Trainer> {
    let (threads, kernels) = pass_settings(args.threads, args.kernels.as_deref())?;
    let saved = args.resume.as_deref().map(|dir| read_state(dir).map(|state| (dir, state))).transpose()?;
    let file = match (&args.file, &saved) {
        (Some(file), _) => file.clone(),
        (None, Some((dir, state))) => {
            if !state.file.exists() {
                bail!(
                    "{}: the text the run in {} was trained on is not there (from here); give it with --file",
                    state.file.display(),
                    dir.display()
                );
            }
            state.file.clone()
        }
        (None, None) => bail!("--file is required: the text to train on, one example (or tab-separated pair) per line"),
    };
    let corpus = Corpus::read(&file)?;
    let (mut model, files, embedded) = match &saved {
        Some((dir, _)) => (BertModel::load(dir)?, model_source::files_of_dir(dir)?, false),
        None => {
            let (model, embedded) = model_source::load(&args.model)?;
            let files = model_source::files(&args.model, &model)?;
            (model, files, embedded)
        }
    };
    if embedded {
        progress.note(&model_source::embedded_note(&model));
    }
    model.kernels = kernels;
    let options =
        options(args, saved.as_ref().map(|(dir, state)| (*dir, state)), model.config.max_position_embeddings)?;
    let dump_steps = dump_steps(&args.dump_step, options.steps, saved.as_ref().map_or(0, |(_, s)| s.step))?;
    if args.save_every == Some(0) {
        bail!("--save-every 0: give a number of steps, 1 or more");
    }
    if args.log_every == 0 {
        bail!("--log-every 0: give a number of steps, 1 or more");
    }
    options.check()?;
    let mut trainer = match saved {
        Some((dir, state)) => {
            let trainer = Trainer::resume(model, corpus, state, dir)?;
            progress.line(&format!("resuming {} at step {} of {}", dir.display(), trainer.step, trainer.options.steps));
            trainer
        }
        None => {
            let pairs = corpus.pairs.is_some();
            let fresh = model.add_pretraining_heads(pairs, options.batching.seed);
            if !fresh.is_empty() {
                progress.note(&format!(
                    "note: {} has no {}: made new from --seed {} as transformers initialises them (weights from \
                     N(0, {}²), biases 0, the MLM decoder tied to the word embeddings)",
                    model.source.display(),
                    fresh.join(", "),
                    options.batching.seed,
                    model.config.initializer_range
                ));
            }
            let mut trainer = Trainer::new(model, corpus, options)?;
            trainer.fresh_heads = fresh.iter().map(|s| s.to_string()).collect();
            trainer
        }
    };
    // The directory is checked (and claimed) once everything else is, and before the first
    // step, so that a run is never trained only to be refused its save.
    let save = args.save.as_deref().map(CheckpointDir::create).transpose()?;
    progress.line(&header(&trainer));
    while !trainer.finished() {
        let step = trainer.step + 1;
        let mut sink: Box<dyn Sink> = match (&save, dump_steps.contains(&step)) {
            (Some(save), true) => Box::new(step_writer(&trainer, &save.path().join(format!("step-{step}")), threads)?),
            _ => Box::new(Discard),
        };
        trainer.step(sink.as_mut())?;
        drop(sink);
        if step % args.log_every == 0 || trainer.finished() {
            progress.line(&log_line(&trainer.log, args.log_every, trainer.options.steps));
        }
        progress.step(trainer.log.last().expect("a step was taken"), trainer.options.steps)?;
        if let (Some(save), Some(every)) = (&save, args.save_every) {
            if step % every == 0 && step < trainer.options.steps {
                let dir = CheckpointDir::create(&save.path().join(format!("checkpoint-{step}")))?;
                dir.save(&trainer, &files)?;
            }
        }
    }
    if let Some(save) = &save {
        save.save(&trainer, &files)?;
        progress.line(&format!(
            "saved {} (step {}): bert-trace --model {0} and transformers' BertForPreTraining.from_pretrained load it",
            save.path().display(),
            trainer.step
        ));
    }
    Ok(trainer)
}

/// The run's options: as given, else the resumed run's, else the defaults. A resumed run
/// continues exactly only with its own options, so one given otherwise is refused.
fn options(args: &TrainArgs, saved: Option<(&Path, &TrainerState)>, max_positions: usize) -> Result<TrainOptions> {
    let dir = saved.map(|(dir, _)| dir.display().to_string()).unwrap_or_default();
    let old = saved.map(|(_, state)| &state.options);
    // Compared by their printed form, which for f64 is exact (Rust prints the shortest text
    // that reads back as the same number).
    let choose = |flag: &str, given: Option<String>, saved: Option<String>, default: String| -> Result<String> {
        match (given, saved) {
            (Some(given), Some(saved)) if given != saved => bail!(
                "{flag} {given} differs from the run saved in {dir} ({flag} {saved}); leave it out to continue that run"
            ),
            (given, saved) => Ok(given.or(saved).unwrap_or(default)),
        }
    };
    let pick = |flag: &str, given: Option<&dyn Display>, saved: fn(&TrainOptions) -> String, default: &dyn Display| {
        choose(flag, given.map(|v| v.to_string()), old.map(saved), default.to_string())
    };
    let number = |text: String| -> f64 { text.parse().expect("printed from a number") };
    let count = |text: String| -> usize { text.parse().expect("printed from a count") };
    if args.steps.is_none() && old.is_none() {
        bail!("--steps is required: how many optimizer steps the run takes");
    }
    let steps = count(pick("--steps", args.steps.as_ref().map(|v| v as _), |o| o.steps.to_string(), &0)?);
    let lr = number(pick("--lr", args.lr.as_ref().map(|v| v as _), |o| o.lr.to_string(), &DEFAULT_LR)?);
    let warmup = args.warmup_steps.as_ref().map(|v| v as _);
    let warmup_steps = count(pick("--warmup-steps", warmup, |o| o.warmup_steps.to_string(), &0)?);
    let batch_size = args.batch_size.as_ref().map(|v| v as _);
    let batch_size =
        count(pick("--batch-size", batch_size, |o| o.batching.batch_size.to_string(), &DEFAULT_BATCH_SIZE)?);
    let max_len = args.max_len.as_ref().map(|v| v as _);
    let default_len = DEFAULT_MAX_LEN.min(max_positions);
    let max_len = count(pick("--max-len", max_len, |o| o.batching.max_len.to_string(), &default_len)?);
    let mask_prob = args.mask_prob.as_ref().map(|v| v as _);
    let mask_prob = number(pick("--mask-prob", mask_prob, |o| o.batching.mask_prob.to_string(), &DEFAULT_MASK_PROB)?);
    let negatives = args.nsp_negatives.as_ref().map(|v| v as _);
    let nsp_negatives =
        number(pick("--nsp-negatives", negatives, |o| o.batching.nsp_negatives.to_string(), &DEFAULT_NSP_NEGATIVES)?);
    let seed = pick("--seed", args.seed.as_ref().map(|v| v as _), |o| o.batching.seed.to_string(), &0)?;
    let seed: u64 = seed.parse().expect("printed from a seed");
    let defaults = AdamWConfig::default();
    let betas = args.betas.map(|(b1, b2)| format!("{b1},{b2}"));
    let saved_betas = old.map(|o| format!("{},{}", o.adamw.beta1, o.adamw.beta2));
    let betas = choose("--betas", betas, saved_betas, format!("{},{}", defaults.beta1, defaults.beta2))?;
    let (beta1, beta2) = betas.split_once(',').expect("two betas");
    let (beta1, beta2) = (number(beta1.into()), number(beta2.into()));
    let eps = number(pick("--eps", args.eps.as_ref().map(|v| v as _), |o| o.adamw.eps.to_string(), &defaults.eps)?);
    let decay = args.weight_decay.as_ref().map(|v| v as _);
    let weight_decay =
        number(pick("--weight-decay", decay, |o| o.adamw.weight_decay.to_string(), &defaults.weight_decay)?);
    if max_len > max_positions {
        bail!("--max-len {max_len} is more than the model's max_position_embeddings {max_positions}");
    }
    Ok(TrainOptions {
        steps,
        lr,
        warmup_steps,
        batching: Batching { batch_size, max_len, mask_prob, nsp_negatives, seed },
        adamw: AdamWConfig { beta1, beta2, eps, weight_decay },
    })
}

/// The steps `--dump-step` names (`K` or `A-B`, repeatable), each one the run will take.
fn dump_steps(specs: &[String], steps: usize, done: usize) -> Result<BTreeSet<usize>> {
    let mut all = BTreeSet::new();
    for spec in specs {
        let number =
            |text: &str| -> Result<usize> {
                text.trim().parse::<usize>().ok().filter(|&k| k >= 1).with_context(|| {
                    format!("--dump-step {spec}: expected a step number (from 1) or a range such as 1-10")
                })
            };
        let (first, last) = match spec.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(spec)?, number(spec)?),
        };
        if first > last {
            bail!("--dump-step {spec}: the range runs backwards");
        }
        if last > steps {
            bail!("--dump-step {spec}: the run has {steps} steps");
        }
        if first <= done {
            bail!("--dump-step {spec}: step {first} is already done in the run being resumed (it reached step {done})");
        }
        all.extend(first..=last);
    }
    Ok(all)
}

/// The writer of one step's dump: its manifest records the batch's texts, pairs, NSP labels
/// and masking seed, from which `dump_reference.py` makes the same batch.
fn step_writer(trainer: &Trainer, dir: &Path, threads: usize) -> Result<DumpWriter> {
    let (batch, mut inputs) = trainer.next_batch()?;
    inputs.tokens = Some(tokens_table::tokens_seen(&trainer.model, &batch));
    let producer = serde_json::json!({
        "name": "bert-trace", "version": env!("CARGO_PKG_VERSION"), "threads": threads,
        "kernels": trainer.model.kernels.name(), "train_step": trainer.step + 1,
    });
    let model = trainer.model.source.display().to_string();
    let mut writer = DumpWriter::create(dir, producer, model, inputs, dump::Options::default())?;
    writer.set_model_fingerprint(trainer.model.fingerprint());
    Ok(writer)
}

/// The run's first line: the text, its batches, the objectives, the schedule.
fn header(trainer: &Trainer) -> String {
    let (corpus, options) = (&trainer.corpus, &trainer.options);
    let objectives = if corpus.pairs.is_some() { "MLM + NSP" } else { "MLM" };
    format!(
        "training on {}: {} {}, {} of {} per epoch; {objectives}; {}, lr {} (warm-up {})",
        corpus.path.display(),
        corpus.len(),
        if corpus.pairs.is_some() { "sentence pairs" } else { "lines" },
        plural(corpus.batches_per_epoch(options.batching.batch_size), "batch", "batches"),
        options.batching.batch_size,
        plural(options.steps, "step", "steps"),
        options.lr,
        options.warmup_steps
    )
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `step 3/10  loss 5.4321  mlm 4.7390  nsp 0.6931  lr 1.000e-4`: the last step's number and
/// rate, and the mean losses of the steps since the previous line (at most `every`).
pub fn log_line(log: &[StepLog], every: usize, steps: usize) -> String {
    let last = log.last().expect("a line follows a step");
    let since = log.len() - ((last.step - 1) % every + 1).min(log.len());
    let recent = &log[since..];
    let mean = |value: fn(&StepLog) -> Option<f32>| -> Option<f64> {
        let values: Option<Vec<f64>> = recent.iter().map(|l| value(l).map(f64::from)).collect();
        values.map(|v| v.iter().sum::<f64>() / v.len() as f64)
    };
    let width = steps.to_string().len();
    let loss = mean(|l| Some(l.loss)).expect("every step has a loss");
    let mut line = format!("step {:>width$}/{steps}  loss {loss:.4}", last.step);
    if let (Some(mlm), Some(nsp)) = (mean(|l| l.mlm_loss), mean(|l| l.nsp_loss)) {
        line.push_str(&format!("  mlm {mlm:.4}  nsp {nsp:.4}"));
    }
    line.push_str(&format!("  lr {:.3e}", last.lr));
    line
}
