//! The default command, `bert-trace [OPTIONS] TEXT...`: its arguments as a trace request
//! (`bert_commands::trace`), and the report printed.

use anyhow::Result;
use bert_commands::trace::{self, Output, TraceRequest};
use bert_core::divergence::ToleranceOverride;

use crate::cli::TraceArgs;

/// Traces; the exit status is 1 when `--reference` finds a failing stage.
pub fn run(args: &TraceArgs) -> Result<i32> {
    // Run bare, the command shows how it is used rather than the library's "no text given".
    if args.texts.is_empty() && args.file.is_none() {
        anyhow::bail!(bert_commands::Error::Request(
            "no TEXT given; try: bert-trace \"When in Rome, do as the [MASK] do.\" (or --help)".into()
        ));
    }
    let report = trace::trace(&request(args)?)?;
    crate::print(&report.notes, &report.text);
    Ok(if report.passed == Some(false) { 1 } else { 0 })
}

/// The request the arguments make.
pub fn request(args: &TraceArgs) -> Result<TraceRequest> {
    Ok(TraceRequest {
        texts: args.texts.clone(),
        file: args.file.clone(),
        model: args.model.model.clone(),
        pair: args.pair.clone(),
        stop_at: args.stop_at.clone(),
        only: args.only.clone(),
        mask_prob: args.mask_prob,
        seed: args.seed,
        mlm_targets: args.losses.mlm_targets.clone(),
        nsp_labels: args.losses.nsp_labels.clone(),
        labels: args.losses.labels.clone(),
        truncate: args.truncate,
        head: args.head,
        top_k: args.top_k,
        ablate: args.ablate.clone(),
        ablate_with: args.ablate_with,
        patch: args.patch.clone(),
        lens: args.lens,
        backward: args.backward,
        precision: args.precision,
        weights: args.weights,
        settings: crate::cli::settings::of(&args.pass)?,
        output: match args.no_dump {
            true => Output::Nowhere,
            false => Output::Dump { out: args.out.clone(), force: args.force, npz: args.npz },
        },
        reference: args.reference.clone(),
        tolerance: ToleranceOverride { atol: args.tolerance.atol, rtol: args.tolerance.rtol },
        explain: args.explain.clone(),
        color: args.color.enabled(),
    })
}
