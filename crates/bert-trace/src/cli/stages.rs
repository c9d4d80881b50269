//! `bert-trace stages`: every stage name in execution order (`bert_commands::stages`).

use anyhow::Result;

use crate::cli::StagesArgs;

pub fn run(args: &StagesArgs) -> Result<i32> {
    crate::show(&bert_commands::stages::stages(args.model.model.as_deref(), args.names)?, false);
    Ok(0)
}
