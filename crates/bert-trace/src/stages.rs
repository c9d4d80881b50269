//! `bert-trace stages`: every stage name in execution order (`bert_commands::stages`).

use anyhow::Result;

use crate::cli::StagesArgs;

pub fn run(args: &StagesArgs) -> Result<i32> {
    let report = bert_commands::stages::stages(args.model.model.as_deref(), args.names)?;
    crate::print(&report.notes, &report.text);
    Ok(0)
}
