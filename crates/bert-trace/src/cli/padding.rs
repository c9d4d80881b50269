//! `bert-trace padding`: does padding change a real token's numbers (`bert_commands::padding`)?
//! Exit 0 when it changes none, 1 when it leaks into a stage, 2 on bad input.

use anyhow::Result;
use bert_commands::padding::{self, PaddingRequest};

use crate::cli::PaddingArgs;

pub fn run(args: &PaddingArgs) -> Result<i32> {
    let request = PaddingRequest {
        texts: args.texts.clone(),
        file: args.file.clone(),
        model: args.model.model.clone(),
        batched: args.batched.clone(),
        alone: args.alone.clone(),
        settings: crate::cli::settings::of(&args.pass)?,
    };
    let reported = padding::padding(&request)?;
    crate::show(&reported, args.json);
    Ok(if reported.report.passed { 0 } else { 1 })
}
