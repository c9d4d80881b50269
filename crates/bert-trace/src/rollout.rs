//! `bert-trace rollout DUMP`: attention rollout and flow of one sequence of a dump
//! (`bert_commands::rollout`), printed as text or JSON.

use anyhow::Result;
use bert_commands::rollout::{self, RolloutRequest};
use bert_core::experiments::rollout::RolloutOptions;

use crate::cli::RolloutArgs;

pub fn run(args: &RolloutArgs) -> Result<i32> {
    let options = RolloutOptions { seq: args.seq, residual: args.residual, heads: args.heads, flow: args.flow };
    let request = RolloutRequest { dump: args.dump.clone(), options, top: args.top, model: args.model.model.clone() };
    let reported = rollout::rollout(&request)?;
    crate::show(&reported, args.json);
    Ok(0)
}
