//! `bert-trace inspect`: the config and the parameter counts (`bert_commands::inspect`).

use anyhow::Result;
use bert_commands::inspect::{self, Inspected};

use crate::cli::InspectArgs;

pub fn run(args: &InspectArgs) -> Result<i32> {
    let what = match &args.config {
        Some(path) => Inspected::Config(path),
        None => Inspected::Model(args.model.model.as_deref()),
    };
    crate::show(&inspect::inspect(what)?, false);
    Ok(0)
}
