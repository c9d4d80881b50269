//! `bert-trace lens TEXT`: every layer's guess at the `[MASK]` (`bert_commands::lens`).

use anyhow::Result;
use bert_commands::lens::{self, LensRequest};

use crate::cli::LensArgs;

pub fn run(args: &LensArgs) -> Result<i32> {
    let request = LensRequest {
        input: crate::cli::ablate::input(&args.input)?,
        target: args.target.clone(),
        pos: args.pos,
        top_k: args.top_k,
    };
    crate::show(&lens::lens(&request)?, args.input.json);
    Ok(0)
}
