//! `bert-trace compare A B`: two models' traces of the same input, side by side
//! (`bert_commands::compare`), printed as text or JSON. Nothing is pass or fail: the exit status
//! is 0 unless an input is unusable.

use anyhow::Result;
use bert_commands::compare::{self, CompareRequest};

use crate::cli::CompareArgs;

pub fn run(args: &CompareArgs) -> Result<i32> {
    let reported = compare::compare(&CompareRequest { a: args.a.clone(), b: args.b.clone(), top: args.top })?;
    crate::show(&reported, args.json);
    Ok(0)
}
