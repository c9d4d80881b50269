//! `bert-trace diff REFERENCE TRACE`: its arguments as a diff request (`bert_commands::diff`),
//! and the report printed, as text or JSON. Exit status 0 when every stage passes, 1 otherwise.

use anyhow::Result;
use bert_commands::diff::{self, DiffRequest};
use bert_core::divergence::ToleranceOverride;

use crate::cli::DiffArgs;

pub fn run(args: &DiffArgs) -> Result<i32> {
    let report = diff::diff(&DiffRequest {
        reference: args.reference.clone(),
        trace: args.trace.clone(),
        tolerance: ToleranceOverride { atol: args.tolerance.atol, rtol: args.tolerance.rtol },
        isolate: args.isolate,
        truth: args.truth.clone(),
        model: args.model.model.clone(),
        tolerances: args.tolerances.clone(),
    })?;
    match args.json {
        true => println!("{}", report.json.to_pretty()),
        false => crate::print(&[], &report.text),
    }
    Ok(if report.passed { 0 } else { 1 })
}
