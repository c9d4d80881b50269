//! `bert-trace attribute`: which input tokens a prediction rests on (`bert_commands::attribute`).

use anyhow::Result;
use bert_commands::attribute::{self, AttributeRequest, Method, OccludeWith};
use bert_core::experiments::attribute::integrated::Baseline;
use bert_core::experiments::attribute::{Of, Rule};

use crate::cli::{self, AttributeArgs, BaselineArg, MethodArg, OfArg, RuleArg};

pub fn run(args: &AttributeArgs) -> Result<i32> {
    let request = AttributeRequest {
        texts: args.texts.clone(),
        file: args.file.clone(),
        pair: args.pair.clone(),
        model: args.model.model.clone(),
        method: match args.method {
            MethodArg::Occlusion => Method::Occlusion,
            MethodArg::IntegratedGradients => Method::IntegratedGradients,
            MethodArg::GradInput => Method::GradInput,
        },
        targets: args.target.clone(),
        labels: args.label.clone(),
        nsp_labels: args.nsp_label.clone(),
        of: match args.of {
            OfArg::Logprob => Of::Logprob,
            OfArg::Logit => Of::Logit,
        },
        occlude_with: args.occlude_with.map(|with| match with {
            cli::OccludeWith::Mask => OccludeWith::Mask,
            cli::OccludeWith::Unk => OccludeWith::Unk,
        }),
        baseline: args.baseline.map(|b| match b {
            BaselineArg::Pad => Baseline::Pad,
            BaselineArg::Zero => Baseline::Zero,
        }),
        ig_steps: args.ig_steps,
        ig_rule: args.ig_rule.map(|r| match r {
            RuleArg::GaussLegendre => Rule::GaussLegendre,
            RuleArg::Midpoint => Rule::Midpoint,
        }),
        json: args.json,
        settings: crate::settings::of(&args.pass)?,
    };
    // Integrated gradients of a long text take a while: a terminal sees how far they are.
    let mut points = crate::progress::bar("points");
    let mut progress = |_text: usize, done: usize, all: usize| points(done, all);
    let (_, report) = attribute::attribute(&request, &mut progress)?;
    crate::print(&report.notes, &report.text);
    Ok(0)
}
