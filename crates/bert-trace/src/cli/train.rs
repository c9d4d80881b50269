//! `bert-trace train`: its arguments as a training request (`bert_commands::train`), and the
//! run's lines printed as they come, with a progress bar on a terminal.

use std::io::IsTerminal;
use std::path::Path;

use anyhow::Result;
use bert_commands::train::{self, TrainRequest};
use bert_core::training::run::Progress;
use bert_core::training::{StepLog, TrainSettings};
use bert_core::words::{in_dialect, Dialect};

use crate::cli::TrainArgs;

pub fn run(args: &TrainArgs) -> Result<i32> {
    let request = TrainRequest {
        file: args.file.clone(),
        eval_file: args.eval_file.clone(),
        eval_every: args.eval_every,
        model: args.model.model.clone(),
        from_config: args.from_config,
        settings: args.update.settings(TrainSettings {
            steps: args.steps,
            lr: args.lr,
            warmup_steps: args.warmup_steps,
            batch_size: args.batch_size,
            max_len: args.max_len,
            mask_prob: args.mask_prob,
            nsp_negatives: args.nsp_negatives,
            seed: args.seed,
            documents: args.documents.then_some(true),
            nsp: args.nsp.then_some(true),
            eval_split: args.eval_split,
            ..TrainSettings::default()
        }),
        save: args.save.clone(),
        save_every: args.save_every,
        resume: args.resume.clone(),
        dump_steps: args.dump_step.clone(),
        log_every: args.log_every,
        pass: crate::cli::settings::of(&args.pass)?,
    };
    train::train(&request, &mut Terminal::new("BertForPreTraining"))?;
    Ok(0)
}

/// The command's progress: notes on stderr, lines on stdout, and on a terminal a progress bar
/// that the lines print above.
pub struct Terminal {
    bar: Option<indicatif::ProgressBar>,
    /// The transformers class that loads what the run saves.
    architecture: &'static str,
}

impl Terminal {
    pub fn new(architecture: &'static str) -> Terminal {
        Terminal { bar: None, architecture }
    }
}

impl Progress for Terminal {
    fn note(&mut self, text: &str) {
        eprintln!("{}", in_dialect(text, Dialect::Flags));
    }

    fn line(&mut self, text: &str) {
        let text = in_dialect(text, Dialect::Flags);
        match &self.bar {
            Some(bar) => bar.println(text),
            None => println!("{text}"),
        }
    }

    fn saved(&mut self, dir: &Path, step: usize) {
        self.line(&format!(
            "saved {} (step {step}): bert-trace --model {0} and transformers' {}.from_pretrained load it",
            dir.display(),
            self.architecture
        ));
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
