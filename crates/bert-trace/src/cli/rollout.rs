//! `bert-trace rollout TEXT` or `--dump DUMP`: attention rollout and flow of one sequence
//! (`bert_commands::rollout`), printed as text or JSON.

use anyhow::Result;
use bert_commands::experiment::ExperimentRequest;
use bert_commands::rollout::{self, RolloutRequest};
use bert_core::experiments::attention_flow::RolloutOptions;

use crate::cli::RolloutArgs;

pub fn run(args: &RolloutArgs) -> Result<i32> {
    let options = RolloutOptions { seq: args.seq, residual: args.residual, heads: args.heads, flow: args.flow };
    let input = ExperimentRequest {
        text: args.text.clone().unwrap_or_default(),
        model: args.model.model.clone(),
        settings: crate::cli::settings::of(&args.pass)?,
    };
    let request = RolloutRequest { dump: args.dump.clone(), input, options, top: args.top, words: args.words.clone() };
    crate::show(&rollout::rollout(&request)?, args.json);
    Ok(0)
}
