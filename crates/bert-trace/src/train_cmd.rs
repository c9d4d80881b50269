//! `bert-trace train`: pretraining on a text file, a loss line per step, checkpoints and step
//! dumps. The run, its checks and everything it computes are `bert_core::train`; this file
//! turns the command line into its request, loads the model, and prints what the run reports.

use std::collections::BTreeSet;
use std::io::IsTerminal;

use anyhow::{bail, Result};
use bert_core::train::corpus::Corpus;
use bert_core::train::run::{self, Outputs, Progress};
use bert_core::train::save::{read_state, Unobserved};
use bert_core::train::{StepLog, TrainSettings, Trainer};
use bert_core::words::{render, Dialect};
use bert_core::BertModel;

use crate::cli::TrainArgs;
use crate::model_source;
use crate::trace_cmd::pass_settings;

/// The command's progress: notes on stderr, lines on stdout, and on a terminal a progress bar
/// that the lines print above.
#[derive(Default)]
struct Terminal {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress for Terminal {
    fn note(&mut self, text: &str) {
        eprintln!("{}", render(text, Dialect::Flags));
    }

    fn line(&mut self, text: &str) {
        let text = render(text, Dialect::Flags);
        match &self.bar {
            Some(bar) => bar.println(text),
            None => println!("{text}"),
        }
    }

    fn step(&mut self, log: &StepLog, steps: usize) -> bert_core::Result<()> {
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

/// Trains as `args` say, telling `progress` as it goes; returns the run as it ended. Every
/// check is made before anything is written (`bert_core::train::run::prepare`).
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
    let settings = TrainSettings {
        steps: args.steps,
        lr: args.lr,
        warmup_steps: args.warmup_steps,
        batch_size: args.batch_size,
        max_len: args.max_len,
        mask_prob: args.mask_prob,
        nsp_negatives: args.nsp_negatives,
        seed: args.seed,
        betas: args.betas,
        eps: args.eps,
        weight_decay: args.weight_decay,
    };
    let saved_options = saved.as_ref().map(|(dir, state)| (*dir, &state.options));
    let options = settings.resolve(saved_options, model.config.max_position_embeddings)?;
    let mut dump_steps = BTreeSet::new();
    for spec in &args.dump_step {
        dump_steps.extend(run::parse_steps(spec)?);
    }
    let trainer = match saved {
        Some((dir, state)) => Trainer::resume(model, corpus, state, dir)?,
        None => {
            let fresh = model.add_pretraining_heads(corpus.pairs.is_some(), options.batching.seed);
            if !fresh.is_empty() {
                progress.note(&format!(
                    "note: {} has no {}: made new from {} as transformers initialises them (weights from \
                     N(0, {}²), biases 0, the MLM decoder tied to the word embeddings)",
                    model.source.display(),
                    fresh.join(", "),
                    bert_core::train::options::SEED.with(options.batching.seed),
                    model.config.initializer_range
                ));
            }
            let mut trainer = Trainer::new(model, corpus, options)?;
            trainer.fresh_heads = fresh.iter().map(|s| s.to_string()).collect();
            trainer
        }
    };
    let outputs =
        Outputs { save: args.save.clone(), save_every: args.save_every, dump_steps, log_every: args.log_every };
    let producer = serde_json::json!({
        "name": "bert-trace", "version": env!("CARGO_PKG_VERSION"), "threads": threads,
        "kernels": trainer.model.kernels.name(),
    });
    let run = run::prepare(trainer, files, outputs, producer)?;
    Ok(run.go(progress, &mut Unobserved)?)
}
