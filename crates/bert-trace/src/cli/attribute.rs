//! `bert-trace attribute`: which input tokens a prediction rests on (`bert_commands::attribute`).

use anyhow::Result;
use bert_commands::attribute::{self, AttributeRequest};

use crate::cli::AttributeArgs;

pub fn run(args: &AttributeArgs) -> Result<i32> {
    let request = AttributeRequest {
        texts: args.texts.clone(),
        file: args.file.clone(),
        pair: args.pair.clone(),
        model: args.model.model.clone(),
        method: args.method,
        targets: args.target.clone(),
        labels: args.label.clone(),
        nsp_labels: args.nsp_label.clone(),
        of: args.of,
        occlude_with: args.occlude_with,
        baseline: args.baseline,
        ig_steps: args.ig_steps,
        ig_rule: args.ig_rule,
        settings: crate::cli::settings::of(&args.pass)?,
        words: args.words.clone(),
    };
    // Integrated gradients of a long text take a while: a terminal sees how far they are.
    let mut points = crate::progress::bar("points");
    let mut progress = |_text: usize, done: usize, all: usize| points(done, all);
    crate::show(&attribute::attribute(&request, &mut progress)?, args.json);
    Ok(0)
}
