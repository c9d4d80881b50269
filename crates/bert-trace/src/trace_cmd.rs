//! The default command: tokenize, trace, print tokens and per-stage statistics, write the dump,
//! show the heads' predictions, and optionally diff against a reference.

use std::path::Path;

use anyhow::{bail, Context, Result};
use bert_core::dump::{Dump, DumpWriter};
use bert_core::manifest::Inputs;
use bert_core::stage::{DType, Part, Stage};
use bert_core::threads;
use bert_core::trace::{Discard, Sink};
use bert_core::{Batch, BertModel};
use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::cli::TraceArgs;
use crate::diff_cmd;
use crate::model_source;
use crate::npz::NpzWriter;
use crate::predictions;
use crate::preview::preview;
use crate::stats::Recorder;
use crate::table::{new_table, num, shape};

/// Runs the trace; returns the exit status (1 when `--reference` finds a failing stage).
pub fn run(args: &TraceArgs) -> Result<i32> {
    // First, while this is the only thread: the setting is passed on to matrixmultiply through
    // the environment (see bert_core::threads).
    let threads = match args.threads {
        Some(n) if !(1..=threads::MAX_THREADS).contains(&n) => {
            bail!("--threads is {n}, expected a whole number of threads from 1 to {}", threads::MAX_THREADS)
        }
        Some(n) => threads::set_threads(n)?,
        None => threads::init_from_env()?,
    };
    let texts = texts(args)?;
    if texts.is_empty() {
        bail!("no TEXT given; try: bert-trace \"When in Rome, do as the [MASK] do.\" (or --help)");
    }
    let (model, embedded) = model_source::load(&args.model)?;
    if embedded {
        eprintln!("{}", model_source::embedded_note(&model));
    }
    let pairs = (!args.pair.is_empty()).then_some(args.pair.as_slice());
    let batch = model.encode(&texts, pairs, args.truncate)?;
    let stop = args.stop_at.as_deref().map(|name| model.resolve_stop(name)).transpose()?;
    let only = only_filter(&args.only, &model.plan())?;
    let model_name = model_source::name(&args.model, &model);

    let mut sink: Box<dyn Sink> = if args.no_dump {
        Box::new(Discard)
    } else if args.npz {
        Box::new(NpzWriter::create(&args.out, only.clone())?)
    } else {
        let inputs = Inputs { texts: texts.clone(), pair: pairs.map(<[String]>::to_vec) };
        let producer =
            serde_json::json!({"name": "bert-trace", "version": env!("CARGO_PKG_VERSION"), "threads": threads});
        let mut writer = DumpWriter::create(&args.out, producer, model_name, inputs, args.force)?;
        writer.set_stopped_at(stop);
        if !args.only.is_empty() {
            let only = only.clone();
            writer.set_only_stages(args.only.clone());
            writer = writer.with_filter(move |stage| only.keeps(stage));
        }
        Box::new(writer)
    };
    let mut recorder = Recorder::new(sink.as_mut(), stop);
    let traced = model.trace(&batch, &mut recorder, stop)?;

    print_tokens(&model, &batch);
    println!("\n{}", stage_table(&recorder, &only));
    if let (Some(stage), Some(tensor)) = (traced.stopped_at, &recorder.kept) {
        println!("\nstopped after {stage}; nothing after it was computed.");
        println!("{stage} {}:\n{}", shape(tensor.shape()), preview(tensor));
    }
    print!("{}", predictions::report(&model, &batch, &traced.outputs, args.top_k));
    let written = recorder.rows.iter().filter(|r| only.keeps(&r.stage)).count();
    drop(recorder);
    if !args.no_dump {
        let what = if args.npz { "trace.npz" } else { "manifest.json" };
        println!("\nwrote {written} stages to {} ({what})", args.out.display());
    }
    match &args.reference {
        Some(reference) => compare_with(reference, &args.out, args),
        None => Ok(0),
    }
}

/// The TEXT arguments, then the lines of `--file`.
fn texts(args: &TraceArgs) -> Result<Vec<String>> {
    let mut texts = args.texts.clone();
    if let Some(path) = &args.file {
        let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
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

fn print_tokens(model: &BertModel, batch: &Batch) {
    let (b, t) = batch.dims();
    for seq in 0..b {
        let mut table = new_table(&["pos", "token", "id", "type", "mask"], &[0, 2, 3, 4]);
        for pos in 0..t {
            let id = batch.ids[[seq, pos]];
            let token = batch.tokens[seq]
                .get(pos)
                .cloned()
                .or_else(|| model.tokenizer.id_to_token(id as u32))
                .unwrap_or_default();
            table.add_row(vec![
                pos.to_string(),
                token,
                id.to_string(),
                batch.token_type_ids[[seq, pos]].to_string(),
                batch.attention_mask[[seq, pos]].to_string(),
            ]);
        }
        let title = if b > 1 { format!("tokens of sequence {seq}") } else { "tokens".into() };
        println!("{title} ({} of {t} real):\n{table}", batch.tokens[seq].len());
    }
}

/// One row per stage `--only` selects (all of them without it).
fn stage_table(recorder: &Recorder, only: &Selection) -> comfy_table::Table {
    let mut table = new_table(&["stage", "shape", "min", "mean", "std", "max", "formula"], &[2, 3, 4, 5]);
    for row in recorder.rows.iter().filter(|r| only.keeps(&r.stage)) {
        // Token ids are integers; their min and max read better without decimals.
        let extreme = |v: f64| match row.stage.info().dtype {
            DType::I64 => format!("{v:.0}"),
            DType::F32 => num(v),
        };
        table.add_row(vec![
            row.stage.name(),
            shape(&row.shape),
            extreme(row.min),
            num(row.mean),
            num(row.std),
            extreme(row.max),
            row.stage.info().formula.to_string(),
        ]);
    }
    table
}

fn compare_with(reference: &Path, out: &Path, args: &TraceArgs) -> Result<i32> {
    let reference = Dump::open(reference)?;
    let ours = Dump::open(out)?;
    println!();
    diff_cmd::report(&reference, &ours, args.tolerance, false)
}
