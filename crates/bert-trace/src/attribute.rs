//! `bert-trace attribute --target WORD TEXT`: each token hidden in turn
//! (`bert_commands::attribute`).

use anyhow::Result;
use bert_commands::attribute::{self, AttributeRequest};
use bert_core::io::tokenizer::{MASK, UNK};

use crate::cli::{AttributeArgs, OccludeWith};

pub fn run(args: &AttributeArgs) -> Result<i32> {
    let occlude_with = match args.occlude_with {
        OccludeWith::Mask => MASK,
        OccludeWith::Unk => UNK,
    };
    let request =
        AttributeRequest { input: crate::ablate::input(&args.input)?, target: args.target.clone(), occlude_with };
    let report = attribute::attribute(&request)?;
    crate::print(&report.notes, &report.text);
    Ok(0)
}
