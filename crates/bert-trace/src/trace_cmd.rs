//! The default command: tokenize, trace, print tokens and per-stage statistics, write the dump,
//! show the heads' predictions and the losses, and optionally diff against a reference.
//!
//! Every check that can refuse a run (the arguments, the texts, the model, the tokens, the
//! labels, the memory a run needs, the reference, `--out` against the reference) happens before
//! the output directory is touched.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use bert_core::experiments::intervention::{AblateWith, Interventions};
use bert_core::io::dump::manifest::Inputs;
use bert_core::io::dump::{self, Dump, DumpWriter};
use bert_core::io::files;
use bert_core::model::Pass;
use bert_core::ops::{self, Float, Kernels};
use bert_core::pass::hook::Hook;
use bert_core::pass::{Discard, Sink, Tensor};
use bert_core::stage::{DType, Objectives, Part, Stage, StageKind};
use bert_core::words::Opt;
use bert_core::{Batch, BertError, BertModel};
use globset::{Glob, GlobSet, GlobSetBuilder};
use ndarray::{Axis, Slice};

use crate::cli::{AblateWithArg, Precision, TraceArgs};
use crate::diff_cmd;
use crate::model_source;
use crate::predictions;
use crate::preview::preview;
use crate::stats::Recorder;
use crate::table::{new_table, num, shape};
use crate::terminal_heatmap;
use crate::tokens_table;

/// Runs the trace; returns the exit status (1 when `--reference` finds a failing stage).
pub fn run(args: &TraceArgs) -> Result<i32> {
    let (threads, kernels) = pass_settings(args.threads, args.kernels.as_deref())?;
    let texts = texts(args)?;
    match args.precision {
        Precision::F32 => run_in::<f32>(args, texts, threads, kernels),
        Precision::F64 => run_in::<f64>(args, texts, threads, kernels),
    }
}

/// `--threads` and `--kernels` (or their environment variables), set for the passes to come.
/// Call it first, while this is the only thread: the thread count is passed on to
/// matrixmultiply through the environment (see bert_core::ops::set_threads).
pub fn pass_settings(threads: Option<usize>, kernels: Option<&str>) -> Result<(usize, Kernels)> {
    let threads = match threads {
        Some(n) => ops::set_threads(ops::check_threads(n, "--threads", &n.to_string())?)?,
        None => ops::init_from_env()?,
    };
    let kernels = match kernels {
        Some(name) => Kernels::parse(name).expect("clap checked the name"),
        None => Kernels::from_env().map_err(anyhow::Error::msg)?.unwrap_or_default(),
    };
    Ok((threads, kernels))
}

/// The trace in `F`: the model loaded in it, the pass run in it, the stages dumped in it.
fn run_in<F: Float>(args: &TraceArgs, texts: Vec<String>, threads: usize, kernels: Kernels) -> Result<i32> {
    let (mut model, embedded) = model_source::load_as::<F>(&args.model)?;
    if embedded {
        eprintln!("{}", model_source::embedded_note(&model));
    }
    // The default goes without saying; anything else is said, so that no one compares a run on
    // the reference operations believing it ran on the fast kernels.
    if kernels == Kernels::Reference {
        eprintln!("note: kernels: reference (the plain formulas)");
    }
    model.kernels = kernels;
    let Prepared { inputs, batch, stop, only, mut interventions, .. } = prepare(args, texts, &model)?;
    let reference = args.reference.as_deref().map(Dump::open).transpose()?;
    if let Some(reference) = &reference {
        refuse_out_as_reference(&args.out, &reference.dir)?;
    }

    let model_name = model_source::name(&args.model, &model);
    let mut sink: Box<dyn Sink> = if args.no_dump {
        Box::new(Discard)
    } else {
        let producer = serde_json::json!({
            "name": "bert-trace", "version": env!("CARGO_PKG_VERSION"), "threads": threads, "kernels": kernels.name(),
        });
        let options = dump::Options { force: args.force, npz: args.npz, ..dump::Options::default() };
        let mut writer = DumpWriter::create(&args.out, producer, model_name, inputs, options)?;
        writer.set_stopped_at(stop);
        writer.set_model_fingerprint(model.fingerprint());
        writer.set_interventions(interventions.records());
        writer.set_lens(args.lens);
        if !args.only.is_empty() {
            let only = only.clone();
            writer.set_only_stages(args.only.clone());
            writer = writer.with_filter(move |stage| only.keeps(stage));
        }
        Box::new(writer)
    };
    let mut recorder = Recorder::new(sink.as_mut(), stop);
    let hook = (!interventions.is_empty()).then_some(&mut interventions as &mut dyn Hook);
    let pass = Pass { stop_after: stop, hook, lens: args.lens, backward: args.backward };
    let traced = model.trace_with(&batch, &mut recorder, pass)?;

    tokens_table::print(&model, &batch);
    println!("\n{}", stage_table(&recorder, &only));
    for record in interventions.records() {
        println!("intervention: {record}");
    }
    if let (Some(stage), Some(tensor)) = (traced.stopped_at, &recorder.kept) {
        println!("\nstopped after {stage}; nothing after it was computed.");
        println!("{stage} {}:\n{}", shape(tensor.shape()), preview(tensor));
        let attention = stage.is_value_of(StageKind::AttnScores) || stage.is_value_of(StageKind::AttnProbs);
        if attention && args.color.enabled() {
            let tokens: Vec<String> = (0..batch.dims().1)
                .map(|pos| model.tokenizer.id_to_token(batch.ids[[0, pos]] as u32).unwrap_or_default())
                .collect();
            let probability = stage.is_value_of(StageKind::AttnProbs);
            if let Some(picture) = head_heatmap(tensor, args.head.unwrap_or(0), probability, &tokens) {
                println!("\n{picture}");
            }
        }
    }
    // The heads' outputs as printed: f32 is enough for probabilities to four decimals.
    let outputs = traced.outputs.to_f32();
    // The inputs as the pass read them: a patch of input.ids or input.labels changes them.
    let used = traced.batch.as_ref().unwrap_or(&batch);
    print!("{}", predictions::report(&model, used, &outputs, args.top_k));
    print!("{}", predictions::losses(&model, used, &outputs));
    let written = recorder.rows.iter().filter(|r| only.keeps(&r.stage)).count();
    drop(recorder);
    if !args.no_dump {
        let what = if args.npz { "trace.npz and manifest.json" } else { "manifest.json" };
        println!("\nwrote {written} stages to {} ({what})", args.out.display());
    }
    match &reference {
        Some(reference) => {
            println!();
            diff_cmd::report(reference, &Dump::open(&args.out)?, args.tolerance, false, None, None)
        }
        None => Ok(0),
    }
}

/// A trace ready to run: the batch the model reads and what the pass does with it, every
/// check that can refuse the run done (the texts, the labels, the heads, the interventions,
/// the stop stage, `--only`, the memory it needs). The CLI and the Python package share it.
pub struct Prepared {
    /// The manifest's inputs: the texts and options, and the tokens the model sees.
    pub inputs: Inputs,
    pub batch: Batch,
    pub objectives: Objectives,
    pub stop: Option<Stage>,
    pub only: Selection,
    pub interventions: Interventions,
}

/// How many bytes keeping every stage `prepared` selects takes: what a sink that holds the whole
/// trace in memory (the Python package's) adds to the pass's own memory.
pub fn kept_bytes<F: Float>(model: &BertModel<F>, prepared: &Prepared) -> u64 {
    let (b, t) = prepared.batch.dims();
    let dims = model.dims(b, t);
    let size = |stage: &Stage| match stage.info().dtype {
        DType::I64 => 8,
        _ => std::mem::size_of::<F>() as u64,
    };
    let plan = model.plan(prepared.objectives);
    plan.iter()
        .filter(|stage| prepared.only.keeps(stage))
        .map(|stage| stage.shape(&dims).iter().map(|&d| d as u64).product::<u64>().saturating_mul(size(stage)))
        .fold(0, u64::saturating_add)
}

/// Checks `args` against `model` and makes the batch: see [`Prepared`].
pub fn prepare<F: Float>(args: &TraceArgs, texts: Vec<String>, model: &BertModel<F>) -> Result<Prepared> {
    if texts.is_empty() {
        bail!("no TEXT given; try: bert-trace \"When in Rome, do as the [MASK] do.\" (or --help)");
    }
    let n_heads = model.config.num_attention_heads;
    if let Some(head) = args.head.filter(|&head| head >= n_heads) {
        bail!("--head {head} is out of range: the model has {n_heads} heads, 0 to {}", n_heads - 1);
    }
    let mut inputs = Inputs {
        texts,
        pair: (!args.pair.is_empty()).then(|| args.pair.clone()),
        mask_prob: args.mask_prob,
        seed: args.seed,
        mlm_targets: (!args.mlm_targets.is_empty()).then(|| args.mlm_targets.clone()),
        nsp_label: (!args.nsp_labels.is_empty()).then(|| args.nsp_labels.clone()),
        ..Inputs::default()
    };
    // This caller can cut a text, so a text too long is told how.
    let batch = model.encode_inputs(&inputs, args.truncate).map_err(|e| match e {
        BertError::TooLong { index, tokens, at_least, max, .. } => {
            let advice = format!("; pass {} to cut it to {max}", Opt("truncate").on());
            BertError::TooLong { index, tokens, at_least, max, advice }
        }
        other => other,
    })?;
    masking_notes(&batch, args.mask_prob);
    inputs.tokens = Some(tokens_table::tokens_seen(model, &batch));
    if let Some(labels) = &batch.labels.nsp {
        inputs.nsp_label = Some(labels.to_vec());
    }
    let objectives = Objectives { lens: args.lens, backward: args.backward, ..batch.objectives() };
    if args.lens && model.mlm.is_none() {
        bail!(
            "--lens: {}: the model has no MLM head (cls.predictions.*), which the lens reads every layer through",
            model.source.display()
        );
    }
    let with = match args.ablate_with {
        AblateWithArg::Zero => AblateWith::Zero,
        AblateWithArg::Mean => AblateWith::Mean,
    };
    let interventions = Interventions::load(model, &args.ablate, with, &args.patch)?;
    if args.backward {
        model.check_backward(&batch)?;
    }
    let stop = args.stop_at.as_deref().map(|name| model.resolve_stop(name, objectives)).transpose()?;
    if let (true, Some(stage)) = (args.backward, stop) {
        bail!("--backward needs the whole forward pass, up to the loss; --stop-at ends it after {stage}");
    }
    interventions.check_run(model, &batch, &model.plan(objectives), stop)?;
    let only = only_filter(&args.only, &model.plan(objectives))?;
    model.check(&batch)?;
    Ok(Prepared { inputs, batch, objectives, stop, only, interventions })
}

/// The terminal heatmap of head `head` of sequence 0 of a `[B,nh,T,T]` stage. The heatmap draws
/// the first head of what it is given, so it is given `[B,1,T,T]`, the chosen head alone, and
/// its title then says which head of how many that is.
fn head_heatmap(tensor: &Tensor, head: usize, probability: bool, tokens: &[String]) -> Option<String> {
    let values = tensor.to_f32()?;
    let n_heads = *values.shape().get(1)?;
    if head >= n_heads {
        return None;
    }
    let one_head = values.slice_axis(Axis(1), Slice::from(head..=head)).to_owned();
    let picture = terminal_heatmap::heatmap(&Tensor::F32(one_head), probability, tokens)?;
    Some(picture.replacen("head 0 of 1:", &format!("head {head} of {n_heads}:"), 1))
}

/// What the masking did that a reader would not expect, each said once: sequences whose draws
/// chose nothing (one token was then chosen for each), and sequences with nothing to mask.
fn masking_notes(batch: &bert_core::Batch, mask_prob: Option<f64>) {
    let Some(probability) = mask_prob else { return };
    let list = |seqs: &[usize]| {
        let shown: Vec<String> = seqs.iter().take(8).map(usize::to_string).collect();
        let more = if seqs.len() > 8 { format!(" and {} more", seqs.len() - 8) } else { String::new() };
        format!("{}{more}", shown.join(", "))
    };
    let guaranteed: Vec<usize> = batch.labels.replacements.iter().filter(|r| r.guaranteed).map(|r| r.seq).collect();
    if !guaranteed.is_empty() {
        eprintln!(
            "note: masking with probability {probability:?} chose no token of sequence(s) {}, so one was chosen in \
             each: every sequence with a token that can be masked gets at least one, as d2l's max(1, round(P·n)) gives",
            list(&guaranteed)
        );
    }
    let (b, _) = batch.dims();
    let unmasked: Vec<usize> = (0..b).filter(|&seq| !batch.labels.replacements.iter().any(|r| r.seq == seq)).collect();
    if !unmasked.is_empty() {
        eprintln!(
            "note: sequence(s) {} hold no token that can be masked (only special tokens): nothing is predicted there",
            list(&unmasked)
        );
    }
}

/// The most bytes `--file` may have: far more text than any batch a BERT can read.
const MAX_TEXT_FILE: u64 = 64 << 20;

/// The TEXT arguments, then the lines of `--file`.
pub fn texts(args: &TraceArgs) -> Result<Vec<String>> {
    let mut texts = args.texts.clone();
    if let Some(path) = &args.file {
        let bytes = files::read(path, MAX_TEXT_FILE).with_context(|| format!("{}: cannot read", path.display()))?;
        for (idx, line) in bytes.split(|&b| b == b'\n').enumerate() {
            let line = std::str::from_utf8(line)
                .with_context(|| format!("{}: line {} is not valid UTF-8", path.display(), idx + 1))?;
            let line = line.trim_end_matches('\r');
            if !line.trim().is_empty() {
                texts.push(line.to_string());
            }
        }
    }
    Ok(texts)
}

/// Refuses an `--out` that is the `--reference` directory: the trace would replace the dump it
/// is then checked against, and every stage would pass.
fn refuse_out_as_reference(out: &Path, reference: &Path) -> Result<()> {
    let canonical = |path: &Path| -> Option<PathBuf> {
        match path.canonicalize() {
            Ok(path) => Some(path),
            Err(_) => Some(path.parent()?.canonicalize().ok()?.join(path.file_name()?)),
        }
    };
    if canonical(out).is_some() && canonical(out) == canonical(reference) {
        bail!(
            "--out {} is the --reference directory: the trace would replace the dump it is compared with; choose \
             another --out",
            out.display()
        );
    }
    Ok(())
}

/// The stages `--only` selects: those matching any pattern, and always the inputs, which every
/// reader of a dump needs (the diff finds padding from `input.attention_mask`).
#[derive(Clone)]
pub struct Selection(Option<GlobSet>);

impl Selection {
    pub fn keeps(&self, stage: &Stage) -> bool {
        stage.info().part == Part::Input || self.0.as_ref().is_none_or(|set| set.is_match(stage.name()))
    }
}

/// The `--only` patterns as one matcher; each must match at least one stage of the model.
fn only_filter(patterns: &[String], plan: &[Stage]) -> Result<Selection> {
    if patterns.is_empty() {
        return Ok(Selection(None));
    }
    let mut set = GlobSetBuilder::new();
    for pattern in patterns {
        let glob = Glob::new(pattern).with_context(|| format!("--only `{pattern}` is not a valid glob"))?;
        let matcher = glob.compile_matcher();
        if !plan.iter().any(|s| matcher.is_match(s.name())) {
            let hint = bert_core::stage::suggestions(pattern, plan);
            bail!(
                "--only `{pattern}` matches no stage of this model{}",
                if hint.is_empty() {
                    " (run `bert-trace stages` for the list)".to_string()
                } else {
                    format!("; did you mean {}?", hint.join(", "))
                }
            );
        }
        set.add(glob);
    }
    Ok(Selection(Some(set.build()?)))
}

/// One row per stage `--only` selects (all of them without it).
fn stage_table(recorder: &Recorder, only: &Selection) -> comfy_table::Table {
    let mut table = new_table(&["stage", "shape", "min", "mean", "std", "max", "formula"], &[2, 3, 4, 5]);
    for row in recorder.rows.iter().filter(|r| only.keeps(&r.stage)) {
        // Token ids are integers; their min and max read better without decimals.
        let extreme = |v: f64| match row.stage.info().dtype {
            DType::I64 if v.is_finite() => format!("{v:.0}"),
            _ => num(v),
        };
        table.add_row(vec![
            row.stage.name(),
            shape(&row.shape),
            extreme(row.min),
            num(row.mean),
            num(row.std),
            extreme(row.max),
            row.stage.formula().to_string(),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_is_refused_only_when_it_is_the_reference() {
        let tmp = tempfile::tempdir().unwrap();
        let reference = tmp.path().join("ref");
        std::fs::create_dir(&reference).unwrap();
        let cases = [
            (reference.clone(), true),
            (tmp.path().join("ref/../ref"), true),
            (tmp.path().join("ref/"), true),
            (tmp.path().join("out"), false),
            (tmp.path().join("ref/inside"), false),
        ];
        for (out, refused) in cases {
            assert_eq!(refuse_out_as_reference(&out, &reference).is_err(), refused, "--out {}", out.display());
        }
    }
}
