//! `bert-trace explain DUMP 'STAGE[INDEX]'`: its arguments as an explain request
//! (`bert_commands::explain`), and the explanation printed, as text or JSON.

use anyhow::Result;
use bert_commands::explain::{self, ExplainRequest};

use crate::cli::ExplainArgs;

pub fn run(args: &ExplainArgs) -> Result<i32> {
    let report = explain::explain(&ExplainRequest {
        dump: args.dump.clone(),
        target: args.target.clone(),
        model: args.model.clone(),
    })?;
    match args.json {
        true => {
            crate::print(&report.notes, "");
            println!("{}", report.to_json())
        }
        false => crate::print(&report.notes, &report.text),
    }
    Ok(0)
}
