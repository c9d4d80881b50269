//! The default command, a trace: tokenize, run the pass, keep or write its stages, and report
//! the tokens, each stage's statistics, the heads' predictions and the losses, and optionally
//! the diff against a reference.
//!
//! Every check that can refuse a run (the request, the texts, the model, the tokens, the labels,
//! the interventions, the memory a run needs, the reference, `out` against the reference)
//! happens in [`prepare`] or before it, before the output directory is touched.

mod recorder;

use std::path::{Path, PathBuf};

use bert_core::divergence::ToleranceOverride;
use bert_core::experiments::intervention::{AblateWith, Interventions};
use bert_core::explanation::Target;
use bert_core::io::dump::manifest::Inputs;
use bert_core::io::dump::{self, Dump, DumpWriter};
use bert_core::io::files;
use bert_core::model::{Pass, Traced};
use bert_core::ops::{Float, Kernels};
use bert_core::pass::hook::{Chain, Hook};
use bert_core::pass::{Discard, Sink, Tensor};
use bert_core::precision::{Format, Rounding, Simulation, WeightFormat};
use bert_core::stage::{DType, Objectives, Part, Stage, StageKind};
use bert_core::words::{Choice, Opt};
use bert_core::{Batch, BertError, BertModel};
use globset::{Glob, GlobSet, GlobSetBuilder};
use ndarray::{Axis, Slice};

use crate::diff::{self, DiffRequest};
use crate::error::{Error, Result, Within};
use crate::refuse;
use crate::render::predictions;
use crate::render::preview::preview;
use crate::render::terminal_heatmap;
use crate::render::text_table::{new_table, num, shape};
use crate::render::tokens_table;
use crate::settings::PassSettings;
use crate::source;
use bert_core::io::dump::manifest::InterventionRecord;
use recorder::Recorder;

pub const TEXT: Opt = Opt("text");
pub const FILE: Opt = Opt("file");
pub const PAIR: Opt = Opt("pair");
pub const STOP_AT: Opt = Opt("stop_at");
pub const ONLY: Opt = Opt("only");
pub const OUT: Opt = Opt("out");
pub const MASK_PROB: Opt = Opt("mask_prob");
pub const SEED: Opt = Opt("seed");
pub const MLM_TARGET: Opt = Opt("mlm_target");
pub const NSP_LABEL: Opt = Opt("nsp_label");
pub const LABEL: Opt = Opt("label");
pub const HEAD: Opt = Opt("head");
pub const TOP_K: Opt = Opt("top_k");
pub const LENS: Opt = Opt("lens");
pub const BACKWARD: Opt = Opt("backward");
pub const ABLATE_WITH: Opt = Opt("ablate_with");
pub const PRECISION: Opt = Opt("precision");
pub const REFERENCE: Opt = Opt("reference");
pub const NPZ: Opt = Opt("npz");

pub const WEIGHTS: Opt = Opt("weights");

/// The element type a whole pass runs in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// BERT's own.
    #[default]
    F32,
    /// To see how far f32's rounding takes each stage (the dump is then float64).
    F64,
    /// bfloat16, simulated: f32 arithmetic, every weight and stage rounded to bfloat16.
    Bf16,
    /// float16, simulated the same way.
    F16,
}

bert_core::choice!(Precision { F32 => "f32", F64 => "f64", Bf16 => "bf16", F16 => "f16" });

impl Precision {
    /// The narrower format a simulated pass rounds to; None for f32 and f64, which are run.
    pub fn format(self) -> Option<Format> {
        match self {
            Precision::F32 | Precision::F64 => None,
            Precision::Bf16 => Some(Format::Bfloat16),
            Precision::F16 => Some(Format::Float16),
        }
    }
}

/// Where a trace's stages go.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// A dump directory (`out`); `force` shares it with other files, `npz` writes one archive.
    Dump { out: PathBuf, force: bool, npz: bool },
    /// Nowhere: only what the report shows.
    Nowhere,
}

/// What to trace and how, as a caller asks for it; each field is the option of that name.
#[derive(Clone, Debug)]
pub struct TraceRequest {
    /// The texts; several make a padded batch.
    pub texts: Vec<String>,
    /// More texts, one per line.
    pub file: Option<PathBuf>,
    /// A model directory or hub id; None: the built-in english-small.
    pub model: Option<PathBuf>,
    /// Sentence B of each text, for sentence pairs.
    pub pair: Vec<String>,
    pub stop_at: Option<String>,
    pub only: Vec<String>,
    pub mask_prob: Option<f64>,
    pub seed: Option<u64>,
    pub mlm_targets: Vec<String>,
    pub nsp_labels: Vec<i64>,
    /// A classifier's class for each text (its name in `id2label`, or its index): once for all,
    /// or once per text.
    pub labels: Vec<String>,
    pub truncate: bool,
    /// The head an attention stage's terminal heatmap shows.
    pub head: Option<usize>,
    pub top_k: usize,
    pub ablate: Vec<String>,
    pub ablate_with: AblateWith,
    pub patch: Vec<String>,
    pub lens: bool,
    pub backward: bool,
    pub precision: Precision,
    /// How the dense layers' weights are held: None for the pass's own float format.
    pub weights: Option<WeightFormat>,
    pub settings: PassSettings,
    pub output: Output,
    pub reference: Option<PathBuf>,
    pub tolerance: ToleranceOverride,
    /// `STAGE[INDEX]` to explain after the pass (`bert_core::explanation`).
    pub explain: Option<String>,
    /// Whether the report draws an attention stage it stopped at as a coloured heatmap.
    pub color: bool,
}

impl Default for TraceRequest {
    fn default() -> TraceRequest {
        TraceRequest {
            texts: Vec::new(),
            file: None,
            model: None,
            pair: Vec::new(),
            stop_at: None,
            only: Vec::new(),
            mask_prob: None,
            seed: None,
            mlm_targets: Vec::new(),
            nsp_labels: Vec::new(),
            labels: Vec::new(),
            truncate: false,
            head: None,
            top_k: 5,
            ablate: Vec::new(),
            ablate_with: AblateWith::Zero,
            patch: Vec::new(),
            lens: false,
            backward: false,
            precision: Precision::F32,
            weights: None,
            settings: PassSettings::default(),
            output: Output::Dump { out: PathBuf::from("trace"), force: false, npz: false },
            reference: None,
            tolerance: ToleranceOverride::default(),
            explain: None,
            color: false,
        }
    }
}

impl TraceRequest {
    /// Refuses options that do not fit together, whatever the model: each option that needs
    /// another, and values out of their range.
    pub fn check(&self) -> Result<()> {
        let needs = |option: Opt, other: Opt| Err(Error::Request(format!("{option} needs {other}")));
        if let Some(p) = self.mask_prob {
            if !(p > 0.0 && p <= 1.0) {
                return Err(BertError::OptionValue {
                    option: MASK_PROB,
                    value: format!("{p:?}"),
                    accepted: "greater than 0, at most 1 (BERT used 0.15)".into(),
                }
                .into());
            }
        }
        match (self.mask_prob, self.seed) {
            (Some(_), None) => return needs(MASK_PROB, SEED),
            (None, Some(_)) => return needs(SEED, MASK_PROB),
            _ => {}
        }
        if let Some(label) = self.nsp_labels.iter().find(|&&l| l != 0 && l != 1) {
            return Err(BertError::OptionValue {
                option: NSP_LABEL,
                value: label.to_string(),
                accepted: "0 (B follows A) or 1 (B is random)".into(),
            }
            .into());
        }
        if !self.nsp_labels.is_empty() && self.pair.is_empty() {
            return needs(NSP_LABEL, PAIR);
        }
        if self.head.is_some() && self.stop_at.is_none() {
            return needs(HEAD, STOP_AT);
        }
        if self.ablate_with != AblateWith::Zero && self.ablate.is_empty() {
            return needs(ABLATE_WITH, bert_core::experiments::intervention::ABLATE);
        }
        if let Some(target) = &self.explain {
            Target::parse(target)?;
        }
        let simulated = self.precision.format().is_some() || self.weights.is_some();
        if simulated && self.backward {
            return Err(Error::Request(format!(
                "{BACKWARD}: a simulated pass ({PRECISION} or {WEIGHTS}) is forward only; its gradients are not simulated"
            )));
        }
        if let (true, Some(_)) = (simulated, &self.explain) {
            return Err(Error::Request(format!(
                "{}: explain the dump of a simulated pass with ‹@explain›, which recomputes each element exactly \
                 from the pass's own weights",
                Opt("explain")
            )));
        }
        if simulated && self.lens {
            return Err(Error::Request(format!(
                "{LENS}: the lens runs the MLM head inside one stage, where a simulated pass ({PRECISION} or \
                 {WEIGHTS}) would not round as the format does"
            )));
        }
        if let (Output::Nowhere, Some(_)) = (&self.output, &self.reference) {
            return Err(Error::Request(format!(
                "{} diffs the dump the trace writes: it cannot be used without one",
                REFERENCE
            )));
        }
        Ok(())
    }

    /// What the pass simulates: the precision's format and the weights' storage.
    pub fn simulation(&self) -> Simulation {
        Simulation { format: self.precision.format(), weights: self.weights }
    }

    /// The texts: the request's, then the lines of its file.
    pub fn all_texts(&self) -> Result<Vec<String>> {
        texts(&self.texts, self.file.as_deref())
    }
}

/// A trace's report: what the command prints on stdout, the notes it prints on stderr, and
/// whether the diff against a reference passed.
#[derive(Clone, Debug, Default)]
pub struct TraceReport {
    pub notes: Vec<String>,
    pub text: String,
    /// None without a reference; else whether every stage passed.
    pub passed: Option<bool>,
}

/// Runs a trace as `request` asks.
pub fn trace(request: &TraceRequest) -> Result<TraceReport> {
    request.check()?;
    let (threads, kernels) = request.settings.apply()?;
    let texts = request.all_texts()?;
    match request.precision {
        Precision::F32 | Precision::Bf16 | Precision::F16 => run_in::<f32>(request, texts, threads, kernels),
        Precision::F64 => run_in::<f64>(request, texts, threads, kernels),
    }
}

/// The trace in `F`: the model loaded in it, the pass run in it, the stages dumped in it.
fn run_in<F: Float>(
    request: &TraceRequest,
    texts: Vec<String>,
    threads: usize,
    kernels: Kernels,
) -> Result<TraceReport> {
    let loaded = source::load_as::<F>(request.model.as_deref())?;
    let mut report = TraceReport { notes: loaded.notes, ..TraceReport::default() };
    let name = loaded.name;
    let mut model = loaded.model;
    // The default goes without saying; anything else is said, so that no one compares a run on
    // the reference operations believing it ran on the fast kernels.
    if kernels == Kernels::Reference {
        report.notes.push("note: kernels: reference (the plain formulas)".into());
    }
    model.kernels = kernels;
    let simulation = request.simulation();
    if !simulation.is_none() {
        simulation.apply_to_weights(&mut model);
        report.notes.push(format!("note: {}", simulation.describe()));
    }
    let mut prepared = prepare(request, texts, &model)?;
    let (inputs, notes) = (std::mem::take(&mut prepared.inputs), std::mem::take(&mut prepared.notes));
    let stop = prepared.stop;
    let explained = request.explain.as_deref().map(Target::parse).transpose()?.map(|target| (target, inputs.clone()));
    if let Some((target, _)) = &explained {
        check_target(
            &model,
            target,
            &prepared.batch,
            prepared.objectives,
            stop.map(|stop| (stop, request.stop_at.as_deref().unwrap_or_default())),
        )?;
    }
    report.notes.extend(notes);
    let reference = request.reference.as_deref().map(Dump::open).transpose()?;
    if let (Some(reference), Output::Dump { out, .. }) = (&reference, &request.output) {
        refuse_out_as_reference(out, &reference.dir)?;
    }

    let mut sink: Box<dyn Sink> = match &request.output {
        Output::Nowhere => Box::new(Discard),
        Output::Dump { out, force, npz } => {
            let options = dump::Options { force: *force, npz: *npz, ..dump::Options::default() };
            let mut writer = DumpWriter::create(out, producer(threads, kernels), name.clone(), inputs, options)?;
            writer.set_stopped_at(stop);
            writer.set_model(&model);
            writer.set_interventions(prepared.interventions.records());
            writer.set_lens(request.lens);
            if !simulation.is_none() {
                let first = prepared.rounding.as_ref().map(Rounding::first_non_finite_cell).unwrap_or_default();
                writer.set_simulation(simulation, first);
            }
            if !request.only.is_empty() {
                let only = prepared.only.clone();
                writer.set_only_stages(request.only.clone());
                writer = writer.with_filter(move |stage| only.keeps(stage));
            }
            Box::new(writer)
        }
    };
    let mut recorder = Recorder::new(sink.as_mut(), stop);
    if explained.is_some() {
        recorder = recorder.keeping_all();
    }
    let traced = prepared.run(&model, request, None, &mut recorder)?;
    if let Some(first) = prepared.rounding.as_ref().and_then(Rounding::first_non_finite) {
        report.notes.push(format!("note: in {}, {first}", simulation.format.map_or("float32", Format::torch_name)));
    }
    let Prepared { batch, only, interventions, .. } = &prepared;

    let text = &mut report.text;
    *text += &tokens_table::render(&model, batch);
    *text += &format!("\n{}\n", stage_table(&recorder, only));
    for record in interventions.records() {
        *text += &format!("intervention: {record}\n");
    }
    if let (Some(stage), Some(tensor)) = (traced.stopped_at, &recorder.kept) {
        *text += &format!("\nstopped after {stage}; nothing after it was computed.\n");
        *text += &format!("{stage} {}:\n{}\n", shape(tensor.shape()), preview(tensor));
        let attention = stage.is_value_of(StageKind::AttnScores) || stage.is_value_of(StageKind::AttnProbs);
        if attention && request.color {
            let tokens: Vec<String> = (0..batch.dims().1)
                .map(|pos| model.tokenizer.id_to_token(batch.ids[[0, pos]] as u32).unwrap_or_default())
                .collect();
            let probability = stage.is_value_of(StageKind::AttnProbs);
            if let Some(picture) = head_heatmap(tensor, request.head.unwrap_or(0), probability, &tokens) {
                *text += &format!("\n{picture}\n");
            }
        }
    }
    // The heads' outputs as printed: f32 is enough for probabilities to four decimals.
    let outputs = traced.outputs.to_f32();
    // The inputs as the pass read them: a patch of input.ids or input.labels changes them.
    let used = traced.batch.as_ref().unwrap_or(batch);
    *text += &predictions::report(&model, used, &outputs, request.top_k);
    *text += &predictions::losses(&model, used, &outputs);
    let written = recorder.rows.iter().filter(|r| only.keeps(&r.stage)).count();
    let explanation = match (explained, recorder.all.take()) {
        (Some((target, inputs)), Some(all)) => {
            Some(explain_pass(&model, &name, inputs, interventions.records(), all, &target)?)
        }
        _ => None,
    };
    drop(recorder);
    if let Output::Dump { out, npz, .. } = &request.output {
        let what = if *npz { "trace.npz and manifest.json" } else { "manifest.json" };
        *text += &format!("\nwrote {written} stages to {} ({what})\n", out.display());
        if let Some(reference) = &request.reference {
            let diff = diff::diff(&DiffRequest {
                reference: reference.clone(),
                trace: out.clone(),
                tolerance: request.tolerance,
                ..DiffRequest::default()
            })?;
            *text += &format!("\n{}", diff.text);
            report.passed = Some(diff.passed);
        }
    }
    if let Some(explanation) = explanation {
        report.text += &format!("\n{explanation}");
    }
    Ok(report)
}

/// Refuses, before the pass runs and anything is written, an `--explain` target this pass will
/// not have: a stage it does not make or makes only after `stop`, or an index outside the
/// stage's shape for this batch.
fn check_target<F: Float>(
    model: &BertModel<F>,
    target: &Target,
    batch: &Batch,
    objectives: Objectives,
    stop: Option<(Stage, &str)>,
) -> Result<()> {
    let bad = |problem: String| Error::from(BertError::Explain { target: target.text.clone(), problem });
    let plan = model.plan(objectives);
    let reached = match stop {
        Some((stop, _)) => &plan[..plan.iter().position(|s| *s == stop).map_or(plan.len(), |i| i + 1)],
        None => &plan[..],
    };
    let Some(stage) = reached.iter().find(|s| s.name() == target.stage) else {
        if let (Some((stop, given)), true) = (stop, plan.iter().any(|s| s.name() == target.stage)) {
            let at = if given == stop.name() { String::new() } else { format!(" (after {stop})") };
            return Err(bad(format!(
                "{} comes after {}{at}: the pass stops before it",
                target.stage,
                STOP_AT.with(given)
            )));
        }
        let suggestions = bert_core::stage::suggestions(&target.stage, reached);
        let hint =
            if suggestions.is_empty() { String::new() } else { format!(" (did you mean {}?)", suggestions.join(", ")) };
        return Err(bad(format!("this pass makes no stage {}{hint}", target.stage)));
    };
    if stage.info().part == Part::Input && !stage.is_grad() {
        return Err(bad(format!("{} is an input of the pass: given, not computed", target.stage)));
    }
    let (b, t) = batch.dims();
    target.indices(&stage.shape(&model.dims(b, t))).map_err(bad)?;
    Ok(())
}

/// `target` explained on the pass's stages, kept in memory (nothing is written for it).
fn explain_pass<F: Float>(
    model: &BertModel<F>,
    name: &str,
    inputs: Inputs,
    interventions: Vec<InterventionRecord>,
    stages: Vec<(Stage, Tensor)>,
    target: &Target,
) -> Result<String> {
    let dump = Dump::of_pass("this pass", name.to_string(), model.fingerprint(), inputs, interventions, stages)?;
    let explanations = bert_core::explanation::explain(model, &dump, target)?;
    Ok(explanations.iter().map(crate::explain::text).collect())
}

/// A trace ready to run: the batch the model reads and what the pass does with it, every
/// check that can refuse the run done (the texts, the labels, the heads, the interventions,
/// the stop stage, `only`, the memory it needs). The command and the Python package share it.
pub struct Prepared {
    /// The manifest's inputs: the texts and options, and the tokens the model sees.
    pub inputs: Inputs,
    pub batch: Batch,
    pub objectives: Objectives,
    pub stop: Option<Stage>,
    pub only: Selection,
    pub interventions: Interventions,
    /// What the input did that a reader would not expect: the masking's surprises, and the
    /// words the vocabulary lacks.
    pub notes: Vec<String>,
    /// In a pass simulated in a narrower format, the hook that rounds every stage to it.
    pub rounding: Option<Rounding>,
}

impl Prepared {
    /// Runs the pass this trace prepared, as `request` asks (its stop, the lens, the backward
    /// pass), handing each stage to `sink`. The interventions change their stages first, then
    /// `extra` (a Python caller's functions) the ones it wants.
    pub fn run<'a, F: Float>(
        &'a mut self,
        model: &BertModel<F>,
        request: &TraceRequest,
        extra: Option<&'a mut dyn Hook>,
        sink: &mut dyn Sink,
    ) -> bert_core::Result<Traced<F>> {
        let mut chain = Chain(Vec::new());
        if !self.interventions.is_empty() {
            chain.0.push(&mut self.interventions as &mut dyn Hook);
        }
        chain.0.extend(extra);
        // Last, so that whatever the hooks before set is a value of the format too.
        let format = self.rounding.as_ref().map(|rounding| rounding.format);
        if let Some(rounding) = &mut self.rounding {
            chain.0.push(rounding as &mut dyn Hook);
        }
        let hook = (!chain.0.is_empty()).then_some(&mut chain as &mut dyn Hook);
        let pass =
            Pass { stop_after: self.stop, hook, lens: request.lens, backward: request.backward, ..Pass::default() };
        bert_core::precision::with_format(format, || model.trace_with(&self.batch, sink, pass))
    }
}

/// The plain pass of `texts` (a padded batch of them, or one text), every stage kept in memory
/// as a dump: what `padding` and `tolerances` set against each other.
pub fn pass_in_memory<F: Float>(model: &BertModel<F>, texts: &[String]) -> Result<Dump> {
    let batch = model.encode(texts, None, false)?;
    let mut memory = bert_core::pass::Memory::default();
    model.trace(&batch, &mut memory, None)?;
    let inputs = Inputs { texts: texts.to_vec(), ..Inputs::default() };
    let name = format!("the pass of {} text(s)", texts.len());
    let model_name = model.source.display().to_string();
    Ok(Dump::of_pass(&name, model_name, model.fingerprint(), inputs, Vec::new(), memory.stages)?)
}

/// Who made a dump, as its manifest says: bert-trace, its version, and how its passes ran.
pub fn producer(threads: usize, kernels: Kernels) -> serde_json::Value {
    serde_json::json!({
        "name": "bert-trace", "version": env!("CARGO_PKG_VERSION"), "threads": threads, "kernels": kernels.name(),
    })
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

/// Checks `request` against `model` and makes the batch of `texts`: see [`Prepared`].
pub fn prepare<F: Float>(request: &TraceRequest, texts: Vec<String>, model: &BertModel<F>) -> Result<Prepared> {
    refuse_no_text(&texts, request.file.as_deref())?;
    let n_heads = model.config.num_attention_heads;
    if let Some(head) = request.head.filter(|&head| head >= n_heads) {
        refuse!("{} is out of range: the model has {n_heads} heads, 0 to {}", HEAD.with(head), n_heads - 1);
    }
    let mut inputs = Inputs {
        texts,
        pair: (!request.pair.is_empty()).then(|| request.pair.clone()),
        mask_prob: request.mask_prob,
        seed: request.seed,
        mlm_targets: (!request.mlm_targets.is_empty()).then(|| request.mlm_targets.clone()),
        nsp_label: (!request.nsp_labels.is_empty()).then(|| request.nsp_labels.clone()),
        label: (!request.labels.is_empty()).then(|| request.labels.clone()),
        ..Inputs::default()
    };
    // This caller can cut a text, so a text too long is told how.
    let batch = model.encode_inputs(&inputs, request.truncate).map_err(|e| match e {
        BertError::TooLong { index, tokens, at_least, max, .. } => {
            let advice = format!("; pass {} to cut it to {max}", Opt("truncate").on());
            BertError::TooLong { index, tokens, at_least, max, advice }
        }
        other => other,
    })?;
    let mut notes = masking_notes(&batch, request.mask_prob);
    notes.extend(unknown_notes(model, &inputs, &batch));
    inputs.tokens = Some(model.tokens_of(&batch));
    if let Some(labels) = &batch.labels.nsp {
        inputs.nsp_label = Some(labels.to_vec());
    }
    let objectives = Objectives { lens: request.lens, backward: request.backward, ..batch.objectives() };
    if request.lens && model.mlm.is_none() {
        refuse!(
            "{LENS}: {}: the model has no MLM head (cls.predictions.*), which the lens reads every layer through",
            model.source.display()
        );
    }
    let interventions = Interventions::load(model, &request.ablate, request.ablate_with, &request.patch)?;
    if request.backward {
        model.check_backward(&batch)?;
    }
    let stop = request.stop_at.as_deref().map(|name| model.resolve_stop(name, objectives)).transpose()?;
    if let (true, Some(stage)) = (request.backward, stop) {
        refuse!("{BACKWARD} needs the whole forward pass, up to the loss; {STOP_AT} ends it after {stage}");
    }
    interventions.check_run(model, &batch, &model.plan(objectives), stop)?;
    if let Output::Dump { out, .. } = &request.output {
        refuse_out_as_patch_source(out, &interventions)?;
    }
    let only = only_filter(&request.only, &model.plan(objectives))?;
    model.check(&batch)?;
    let rounding = request.precision.format().map(Rounding::new);
    Ok(Prepared { inputs, batch, objectives, stop, only, interventions, notes, rounding })
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

/// The words of each text the vocabulary lacks, which the model reads as `[UNK]` and so cannot
/// tell apart: said once a text, since a trace of them shows only `[UNK]`. Only the texts whose
/// sequence in `batch` holds an `[UNK]` are tokenized again, and only as far as it reaches.
fn unknown_notes<F: Float>(model: &BertModel<F>, inputs: &Inputs, batch: &bert_core::Batch) -> Vec<String> {
    // A file of many lines is said in a few notes, not one a line.
    const SHOWN: usize = 3;
    let Some(unk) = model.tokenizer.token_to_id(bert_core::io::tokenizer::UNK).map(i64::from) else {
        return Vec::new();
    };
    let max_len = batch.dims().1;
    let texts = inputs.texts.iter().chain(inputs.pair.iter().flatten());
    let count = inputs.texts.len();
    let mut notes: Vec<String> = texts
        .enumerate()
        .filter_map(|(index, text)| {
            // Sentence B shares its sequence's row with sentence A.
            let row = if index < count { index } else { index - count };
            if !batch.ids.row(row).iter().any(|&id| id == unk) {
                return None;
            }
            let words = model.tokenizer.unknown_words(text, max_len);
            let which = match (index < count, count + inputs.pair.as_ref().map_or(0, Vec::len)) {
                (_, 1) => String::new(),
                (true, _) => format!(" (in sequence {index})"),
                (false, _) => format!(" (in sequence {}'s sentence B)", index - count),
            };
            // A Traditional character given to a model of Simplified ones: name the form it has.
            let forms: Vec<String> = words
                .iter()
                .filter_map(|word| {
                    let form = bert_core::io::simplified::simplified(word)?;
                    model.tokenizer.unknown_words(&form, usize::MAX).is_empty().then(|| format!("{word} → {form}"))
                })
                .collect();
            let known = match forms.is_empty() {
                true => String::new(),
                false => format!(
                    "; it has the Simplified form{} {}",
                    if forms.len() == 1 { "" } else { "s" },
                    forms.join(", ")
                ),
            };
            (!words.is_empty()).then(|| {
                format!("note: the model's vocabulary lacks {}{which}, which it reads as [UNK]{known}", words.join(" "))
            })
        })
        .collect();
    if notes.len() > SHOWN {
        let more = notes.len() - SHOWN;
        notes.truncate(SHOWN);
        notes.push(format!("note: and {more} more sequence(s) with words the vocabulary lacks"));
    }
    notes
}

/// What the masking did that a reader would not expect, each said once: sequences whose draws
/// chose nothing (one token was then chosen for each), and sequences with nothing to mask.
fn masking_notes(batch: &bert_core::Batch, mask_prob: Option<f64>) -> Vec<String> {
    let mut notes = Vec::new();
    let Some(probability) = mask_prob else { return notes };
    let list = |seqs: &[usize]| {
        let shown: Vec<String> = seqs.iter().take(8).map(usize::to_string).collect();
        let more = if seqs.len() > 8 { format!(" and {} more", seqs.len() - 8) } else { String::new() };
        format!("{}{more}", shown.join(", "))
    };
    let guaranteed: Vec<usize> = batch.labels.replacements.iter().filter(|r| r.guaranteed).map(|r| r.seq).collect();
    if !guaranteed.is_empty() {
        notes.push(format!(
            "note: masking with probability {probability:?} chose no token of sequence(s) {}, so one was chosen in \
             each: every sequence with a token that can be masked gets at least one, as d2l's max(1, round(P·n)) gives",
            list(&guaranteed)
        ));
    }
    let (b, _) = batch.dims();
    let unmasked: Vec<usize> = (0..b).filter(|&seq| !batch.labels.replacements.iter().any(|r| r.seq == seq)).collect();
    if !unmasked.is_empty() {
        notes.push(format!(
            "note: sequence(s) {} hold no token that can be masked (only special tokens): nothing is predicted there",
            list(&unmasked)
        ));
    }
    notes
}

/// The most bytes a file of texts may have: far more text than any batch a BERT can read.
const MAX_TEXT_FILE: u64 = 64 << 20;

/// The texts given and the lines of `file` (blank lines left out), in that order.
pub fn texts(texts: &[String], file: Option<&Path>) -> Result<Vec<String>> {
    Ok(texts_with_origins(texts, file)?.into_iter().map(|(text, _)| text).collect())
}

/// [`texts`], each with where it came from, as messages name it: `text 2` for the second
/// given, `reviews.txt: line 7` for a line of the file (counted as an editor counts them, blank
/// lines included). None of them refused: [`refuse_no_text`] does that.
pub fn texts_with_origins(texts: &[String], file: Option<&Path>) -> Result<Vec<(String, String)>> {
    let mut all: Vec<(String, String)> =
        texts.iter().enumerate().map(|(i, text)| (text.clone(), format!("text {}", i + 1))).collect();
    if let Some(path) = file {
        let bytes = files::read(path, MAX_TEXT_FILE).within(|| format!("{}: cannot read", path.display()))?;
        for (idx, line) in bytes.split(|&b| b == b'\n').enumerate() {
            let Ok(line) = std::str::from_utf8(line) else {
                return Err(Error::File { path: path.into(), problem: format!("line {} is not valid UTF-8", idx + 1) });
            };
            let line = line.trim_end_matches('\r');
            if !line.trim().is_empty() {
                all.push((line.to_string(), format!("{}: line {}", path.display(), idx + 1)));
            }
        }
    }
    Ok(all)
}

/// Refuses a command given no text: naming the file when it was one of blank lines only.
pub fn refuse_no_text(texts: &[String], file: Option<&Path>) -> Result<()> {
    if texts.is_empty() {
        match file {
            Some(path) => refuse!("{}: holds no text (every line is blank)", path.display()),
            None => refuse!("no text given: give one, or {} for a file of them", FILE),
        }
    }
    Ok(())
}

/// Refuses an `out` that a patch reads: writing the pass there would replace the values the
/// manifest says it took.
pub fn refuse_out_as_patch_source(out: &Path, interventions: &Interventions) -> Result<()> {
    let canonical = |path: &Path| path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    for record in interventions.records() {
        if let InterventionRecord::Patch { from, .. } = record {
            if canonical(Path::new(&from)) == canonical(out) {
                refuse!(
                    "{}: a patch reads {from}, which the pass would be written over; choose another",
                    Opt("out").with(out.display())
                );
            }
        }
    }
    Ok(())
}

/// Refuses an `out` that is the `reference` directory: the trace would replace the dump it
/// is then checked against, and every stage would pass.
fn refuse_out_as_reference(out: &Path, reference: &Path) -> Result<()> {
    let canonical = |path: &Path| -> Option<PathBuf> {
        match path.canonicalize() {
            Ok(path) => Some(path),
            Err(_) => Some(path.parent()?.canonicalize().ok()?.join(path.file_name()?)),
        }
    };
    if canonical(out).is_some() && canonical(out) == canonical(reference) {
        refuse!(
            "{} is the {REFERENCE} directory: the trace would replace the dump it is compared with; choose another \
             {OUT}",
            OUT.with(out.display())
        );
    }
    Ok(())
}

/// The stages `only` selects: those matching any pattern, and always the inputs, which every
/// reader of a dump needs (the diff finds padding from `input.attention_mask`).
#[derive(Clone)]
pub struct Selection(Option<GlobSet>);

impl Selection {
    pub fn keeps(&self, stage: &Stage) -> bool {
        stage.info().part == Part::Input || self.0.as_ref().is_none_or(|set| set.is_match(stage.name()))
    }
}

/// The `only` patterns as one matcher; each must match at least one stage of the model.
fn only_filter(patterns: &[String], plan: &[Stage]) -> Result<Selection> {
    if patterns.is_empty() {
        return Ok(Selection(None));
    }
    let mut set = GlobSetBuilder::new();
    for pattern in patterns {
        let glob = Glob::new(pattern)
            .map_err(|e| Error::Request(format!("{} is not a valid glob: {e}", ONLY.with(format!("`{pattern}`")))))?;
        let matcher = glob.compile_matcher();
        if !plan.iter().any(|s| matcher.is_match(s.name())) {
            let hint = bert_core::stage::suggestions(pattern, plan);
            refuse!(
                "{} matches no stage of this model{}",
                ONLY.with(format!("`{pattern}`")),
                if hint.is_empty() {
                    " (run `bert-trace stages` for the list)".to_string()
                } else {
                    format!("; did you mean {}?", hint.join(", "))
                }
            );
        }
        set.add(glob);
    }
    Ok(Selection(Some(set.build().map_err(|e| Error::Request(format!("{ONLY}: {e}")))?)))
}

/// One row per stage `only` selects (all of them without it).
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
