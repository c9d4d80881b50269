//! `bert-trace tolerances`: each stage's float32 error measured against float64, written as a
//! tolerance file for `diff --tolerances` (`bert_commands::tolerances`).

use anyhow::Result;
use bert_commands::tolerances::{self, TolerancesRequest};

use crate::cli::TolerancesArgs;

pub fn run(args: &TolerancesArgs) -> Result<i32> {
    let request = TolerancesRequest {
        texts: args.texts.clone(),
        file: args.file.clone(),
        model: args.model.model.clone(),
        references: args.reference.clone(),
        truths: args.truth.clone(),
        headroom: args.headroom,
        out: args.out.clone(),
        settings: crate::cli::settings::of(&args.pass)?,
    };
    crate::show(&tolerances::tolerances(&request)?, args.json);
    Ok(0)
}
