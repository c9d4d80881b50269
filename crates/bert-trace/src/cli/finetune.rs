//! `bert-trace finetune`: its arguments as a fine-tuning request (`bert_commands::finetune`),
//! and the run's lines printed as they come, with a progress bar on a terminal.

use anyhow::Result;
use bert_commands::finetune::{self, FinetuneRequest};
use bert_core::training::TrainSettings;

use crate::cli::train::Terminal;
use crate::cli::FinetuneArgs;

pub fn run(args: &FinetuneArgs) -> Result<i32> {
    let request = FinetuneRequest {
        file: args.file.clone(),
        eval_file: args.eval_file.clone(),
        model: args.model.model.clone(),
        from_config: args.from_config,
        settings: args.update.settings(TrainSettings {
            steps: args.steps,
            lr: args.lr,
            warmup_steps: args.warmup_steps,
            batch_size: args.batch_size,
            max_len: args.max_len,
            seed: args.seed,
            eval_split: args.eval_split,
            ..TrainSettings::default()
        }),
        epochs: args.epochs,
        save: args.save.clone(),
        save_every: args.save_every,
        resume: args.resume.clone(),
        dump_steps: args.dump_step.clone(),
        log_every: args.log_every,
        eval_every: args.eval_every,
        pass: crate::cli::settings::of(&args.pass)?,
    };
    finetune::finetune(&request, &mut Terminal::new("BertForSequenceClassification"))?;
    Ok(0)
}
