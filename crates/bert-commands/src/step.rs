//! `step`: one forward pass walked through stage by stage, like a debugger. The session holds a
//! cursor on the pass's stages and the changes made (`set`, `ablate`, `patch`); each command is
//! one line, answered with text. Every answer comes from running the model's own pass up to the
//! cursor with the changes as hooks, so what follows a change is recomputed, never guessed.

use std::fmt::Write;

use bert_core::experiments::intervention::{AblateWith, Interventions};
use bert_core::explanation::{self, Target};
use bert_core::io::dump::manifest::InterventionRecord;
use bert_core::io::dump::{self, DumpWriter};
use bert_core::model::Pass;
use bert_core::pass::hook::{Chain, Hook, TensorViewMut};
use bert_core::pass::summary::Summary;
use bert_core::pass::{Memory, Sink, Tensor};
use bert_core::stage::{self, Part, Stage, StageKind};
use bert_core::{Batch, BertModel};
use ndarray::ArrayView2;

use crate::error::{Error, Result};
use crate::render::preview::preview;
use crate::render::text_table::num;
use crate::trace::{self, Output, TraceRequest};
use crate::{render, source};

/// The commands, as `help` lists them.
pub const HELP: &str = "\
next [N]             run to the next stage (or N stages on): its name, shape, statistics, formula, values
back                 one stage back (changes made at later stages are dropped)
goto STAGE           to STAGE, forward or back (changes made after it are dropped)
show [INDEX]         the stage's values, or a part: integers and numpy's a:b on any axis ([0,0,3,:])
head H               which head `next` and `show` show of an attention stage
explain INDEX        why one element of the stage is what it is ([0,0,3,5])
set INDEX VALUE      change one element of the stage; every stage after it is recomputed
ablate LAYER.HEAD    zero a head's output from here on (layer0.head3), as ‹ablate› does
patch DUMP:STAGE     take a stage from another dump, as ‹patch› does (at or after the cursor)
continue             run to the end and print the predictions and losses (and write ‹out›); the
                     session goes on, on the finished pass
help                 this list
quit                 end (so does the end of the input)";

/// Every command word, for completion.
pub const COMMANDS: &[&str] =
    &["next", "back", "goto", "show", "head", "explain", "set", "ablate", "patch", "continue", "help", "quit"];

/// What a session is started from: a trace request (texts, model, labels, interventions, and
/// the dump `continue` writes, when its output is one).
pub struct StepRequest {
    pub trace: TraceRequest,
}

/// One change the session makes to the pass, and the stage (its position in the plan) it was
/// made at: going back before that drops it.
#[derive(Clone, Debug)]
enum Change {
    Set { stage: Stage, index: Vec<usize>, value: f64 },
    Ablate(String),
    Patch(String),
}

/// One `set`: the element of a stage it changes, as a hook.
struct Sets<'a>(&'a [(Stage, Vec<usize>, f64)]);

impl Hook for Sets<'_> {
    fn wants(&self, stage: &Stage) -> bool {
        self.0.iter().any(|(s, _, _)| s == stage)
    }

    fn apply(&mut self, stage: Stage, tensor: TensorViewMut<'_>, _: ArrayView2<'_, i64>) -> bert_core::Result<()> {
        let mut tensor = tensor;
        for (_, index, value) in self.0.iter().filter(|(s, _, _)| *s == stage) {
            let at = ndarray::IxDyn(index);
            match &mut tensor {
                TensorViewMut::F32(a) => a[at] = *value as f32,
                TensorViewMut::F64(a) => a[at] = *value,
                TensorViewMut::I64(a) => a[at] = *value as i64,
            }
        }
        Ok(())
    }
}

/// Where a session is: its cursor (a position in `stages`, None before the first), the stage
/// under it, the head shown of an attention stage, and the changes made, as the commands read.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StepState {
    pub cursor: Option<usize>,
    pub stages: Vec<String>,
    pub current: Option<CurrentStage>,
    pub head: usize,
    pub changes: Vec<String>,
}

/// The stage under the cursor: what `next` prints above its values.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CurrentStage {
    pub name: String,
    pub shape: Vec<usize>,
    pub min: f64,
    pub mean: f64,
    pub std: f64,
    pub max: f64,
    pub formula: String,
}

/// What a session's changes do to the whole pass ([`StepSession::effect`]).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Effect {
    /// The stages whose values differ from the unchanged pass, in execution order.
    pub stages: Vec<ChangedStage>,
    /// The predictions and losses without the changes, then with them, as `continue` prints
    /// them.
    pub before: String,
    pub after: String,
}

/// One stage a change reached, and by how much at most (NaN where a side is not finite).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ChangedStage {
    pub stage: String,
    pub max_abs: f64,
}

/// An answer: the text to print, and whether the session is over.
pub struct Reply {
    pub text: String,
    pub done: bool,
}

/// A pass being stepped through.
pub struct StepSession {
    model: BertModel,
    name: String,
    batch: Batch,
    inputs: bert_core::io::dump::manifest::Inputs,
    plan: Vec<Stage>,
    /// The stage the cursor is on (its position in `plan`); None before the first.
    cursor: Option<usize>,
    head: usize,
    changes: Vec<(usize, Change)>,
    top_k: usize,
    /// The pass up to the cursor, with the changes: every stage computed.
    stages: Vec<(Stage, Tensor)>,
    /// Where `continue` writes the pass, checked at the start.
    out: Option<(std::path::PathBuf, dump::Options)>,
    /// Whether `continue` has written it.
    wrote: bool,
    pub notes: Vec<String>,
}

impl StepSession {
    /// Loads the model and prepares the pass `request` asks for, before the first stage.
    pub fn start(request: &StepRequest) -> Result<StepSession> {
        let request = &request.trace;
        request.check()?;
        // The dump's directory is checked before anything else is done, and written at the end.
        let out = match &request.output {
            Output::Dump { out, force, npz } => {
                let options = dump::Options { force: *force, npz: *npz, ..dump::Options::default() };
                dump::check_dir(out, options)?;
                Some((out.clone(), options))
            }
            Output::Nowhere => None,
        };
        let texts = request.all_texts()?;
        let loaded = source::load(request.model.as_deref())?;
        let model = loaded.model;
        let prepared = trace::prepare(request, texts, &model)?;
        let plan = model.plan(prepared.objectives);
        let mut changes = Vec::new();
        for spec in &request.ablate {
            changes.push((0, Change::Ablate(spec.clone())));
        }
        for spec in &request.patch {
            changes.push((0, Change::Patch(spec.clone())));
        }
        let mut notes = loaded.notes;
        notes.extend(prepared.notes);
        Ok(StepSession {
            model,
            name: loaded.name,
            batch: prepared.batch,
            inputs: prepared.inputs,
            plan,
            cursor: None,
            head: 0,
            changes,
            top_k: request.top_k,
            stages: Vec::new(),
            out,
            wrote: false,
            notes,
        })
    }

    /// A session on a dump's pass, with `model` (which must be the dump's: `explain`'s check):
    /// its inputs encoded again from the manifest, which must give the ids, token types and mask
    /// the dump holds. Nothing is written. Refused, with the reason, for a dump that records
    /// interventions (the session reruns the plain pass) or whose inputs do not encode again;
    /// the model is then handed back with the reason.
    pub fn of_dump(
        dump: &bert_core::Dump,
        model: BertModel,
        name: String,
    ) -> std::result::Result<StepSession, Box<(Error, BertModel)>> {
        match Self::batch_of(dump, &model) {
            Ok(batch) => Ok(Self::on_batch(dump, model, name, batch)),
            Err(error) => Err(Box::new((error, model))),
        }
    }

    /// The batch of `dump`'s manifest's inputs, when it is the one the dump holds.
    fn batch_of(dump: &bert_core::Dump, model: &BertModel) -> Result<Batch> {
        let why = |problem: String| Error::Request(format!("{}: {problem}", dump.dir.display()));
        let simulation = dump.simulation();
        if !simulation.is_none() {
            return Err(why(format!(
                "it is a pass {}, and stepping reruns the pass in float32",
                simulation.describe()
            )));
        }
        bert_core::divergence::isolate::check_model(model, dump)?;
        if !dump.manifest.interventions.is_empty() {
            return Err(why("it records interventions, and stepping reruns the pass without them".into()));
        }
        let inputs = dump.manifest.inputs.clone();
        let batch = model
            .encode_inputs(&inputs, false)
            .map_err(|e| why(format!("its manifest's inputs do not encode again ({e})")))?;
        let (b, t) = batch.dims();
        let held: [(&str, &ndarray::Array2<i64>); 3] = [
            ("input.ids", &batch.ids),
            ("input.token_type_ids", &batch.token_type_ids),
            ("input.attention_mask", &batch.attention_mask),
        ];
        for (name, encoded) in held {
            let Some(entry) = dump.entry(name) else {
                return Err(why(format!("it holds no {name}, which stepping checks its inputs against")));
            };
            let values = dump.read(entry)?.to_f64();
            let same = values.shape() == [b, t] && values.iter().zip(encoded.iter()).all(|(&x, &y)| x == y as f64);
            if !same {
                return Err(why(format!(
                    "its manifest's inputs encode to other {name} than it holds, so its pass cannot be rerun"
                )));
            }
        }
        Ok(batch)
    }

    fn on_batch(dump: &bert_core::Dump, model: BertModel, name: String, batch: Batch) -> StepSession {
        let objectives = bert_core::stage::Objectives { lens: dump.manifest.lens, ..batch.objectives() };
        let plan = model.plan(objectives);
        StepSession {
            model,
            name,
            batch,
            inputs: dump.manifest.inputs.clone(),
            plan,
            cursor: None,
            head: 0,
            changes: Vec::new(),
            top_k: TraceRequest::default().top_k,
            stages: Vec::new(),
            out: None,
            wrote: false,
            notes: Vec::new(),
        }
    }

    /// Why nothing was written, when the session was asked for a dump and ended without the
    /// `continue` that writes it.
    pub fn unwritten(&self) -> Option<String> {
        match (&self.out, self.wrote) {
            (Some((out, _)), false) => Some(format!(
                "note: nothing was written to {}: the dump is written by `continue`, which the session did not reach",
                out.display()
            )),
            _ => None,
        }
    }

    /// The stage names of the pass, in order, for completion.
    pub fn stage_names(&self) -> Vec<String> {
        self.plan.iter().map(Stage::name).collect()
    }

    /// Runs one command line; a bad command is an error, and the session goes on.
    pub fn run(&mut self, line: &str) -> Result<Reply> {
        let line = line.trim();
        let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let rest = rest.trim();
        let reply = |text: String| Ok(Reply { text, done: false });
        match word {
            "" => reply(String::new()),
            "help" | "?" => reply(format!("{HELP}\n")),
            "quit" | "exit" => Ok(Reply { text: String::new(), done: true }),
            "next" | "n" => {
                let steps = match rest {
                    "" => 1,
                    n => n
                        .parse::<usize>()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| bad(&format!("next {n}: expected a count of stages, 1 or more")))?,
                };
                let at = self.cursor.map_or(Some(steps - 1), |c| c.checked_add(steps)).unwrap_or(usize::MAX);
                if at >= self.plan.len() {
                    return Err(bad(&format!(
                        "next {steps}: the pass has {} stages; `continue` runs to the end",
                        self.plan.len()
                    )));
                }
                self.move_to(at)?;
                reply(self.describe())
            }
            "back" | "b" => match self.cursor {
                None | Some(0) => Err(bad("back: already before the first stage")),
                Some(c) => {
                    self.move_to(c - 1)?;
                    reply(self.describe())
                }
            },
            "goto" | "g" => {
                let at = self.plan.iter().position(|s| s.name() == rest).ok_or_else(|| {
                    let suggestions = stage::suggestions(rest, &self.plan);
                    bad(&format!("goto {rest}: no such stage in this pass{}", hint(&suggestions)))
                })?;
                self.move_to(at)?;
                reply(self.describe())
            }
            "show" | "s" => {
                let (stage, tensor) = self.current()?;
                match rest {
                    "" => reply(format!("{stage} {:?}:\n{}\n", tensor.shape(), preview(tensor))),
                    part => reply(show(stage, tensor, part)?),
                }
            }
            "head" => {
                let heads = self.model.config.num_attention_heads;
                self.head = rest
                    .parse::<usize>()
                    .ok()
                    .filter(|&h| h < heads)
                    .ok_or_else(|| bad(&format!("head {rest}: expected a head from 0 to {}", heads - 1)))?;
                reply(format!("head {}\n", self.head))
            }
            "explain" | "e" => {
                let (stage, _) = self.current()?;
                let target = Target::parse(&format!("{stage}{rest}"))?;
                reply(self.explain(&target)?)
            }
            "set" => {
                let (index_text, value_text) = rest
                    .rsplit_once(char::is_whitespace)
                    .ok_or_else(|| bad("set: expected INDEX VALUE, e.g. set [0,3,5] 0.5"))?;
                let value: f64 = value_text
                    .parse()
                    .ok()
                    .filter(|v: &f64| v.is_finite())
                    .ok_or_else(|| bad(&format!("set: `{value_text}` is not a finite number")))?;
                let (stage, tensor) = self.current()?;
                let stage = *stage;
                if matches!(tensor, Tensor::F32(_)) && !(value as f32).is_finite() {
                    return Err(bad(&format!("set: {value_text} is outside the range of {stage}'s float32")));
                }
                if !tensor.is_float() && value.fract() != 0.0 {
                    return Err(bad(&format!("set: {stage} holds integers, `{value_text}` is not one")));
                }
                let target = Target::parse(&format!("{stage}{}", index_text.trim()))?;
                if target.is_row() {
                    return Err(bad("set: give one element, without `:`"));
                }
                let index = target.indices(tensor.shape()).map_err(|e| bad(&format!("set: {e}")))?.remove(0);
                let cursor = self.cursor.expect("a current stage");
                let integer = !tensor.is_float();
                self.changes.push((cursor, Change::Set { stage, index: index.clone(), value }));
                // An id or a label is checked by the stages that read it (an id must index the
                // table): run the pass through them now, not at `continue`.
                let checked = match integer {
                    true => self.run_pass(None).map(drop),
                    false => Ok(()),
                };
                if let Err(error) = checked {
                    self.changes.pop();
                    self.move_to(cursor)?;
                    return Err(error);
                }
                self.move_to(cursor)?;
                reply(format!("set {stage}{index:?} to {value}; the stages after it are recomputed\n"))
            }
            "ablate" | "patch" => {
                let cursor = self.cursor.unwrap_or(0);
                let change =
                    if word == "ablate" { Change::Ablate(rest.to_string()) } else { Change::Patch(rest.to_string()) };
                self.check_change(&change)?;
                self.changes.push((cursor, change));
                if let Some(c) = self.cursor {
                    self.move_to(c)?;
                }
                reply(format!("{word} {rest}: from here on\n"))
            }
            "continue" | "c" => {
                let traced = self.run_pass(None)?;
                let mut text = self.finished(&traced);
                if let Some((out, options)) = self.out.clone() {
                    // A later `continue` rewrites the dump this session wrote, and only that.
                    let options = dump::Options { force: options.force || self.wrote, ..options };
                    self.write(&out, options)?;
                    self.wrote = true;
                    text += &format!("\nwrote {} stages to {} (manifest.json)\n", self.stages.len(), out.display());
                }
                // The pass is finished and the session goes on: the cursor is on its last stage,
                // where show, explain, head, goto and back read it, and a set reruns from its stage.
                self.cursor = Some(self.plan.len() - 1);
                Ok(Reply { text, done: false })
            }
            other => Err(bad(&format!("unknown command `{other}`: type help for the commands"))),
        }
    }

    /// Refuses an `ablate` or `patch` the pass cannot make (checked as the command's options
    /// are: a stage the pass computes, of its shape), and one that would change a stage before
    /// the cursor, which the session has already shown as it was.
    fn check_change(&self, change: &Change) -> Result<()> {
        let (ablate, patch) = match change {
            Change::Ablate(spec) => (vec![spec.clone()], Vec::new()),
            Change::Patch(spec) => (Vec::new(), vec![spec.clone()]),
            Change::Set { .. } => return Ok(()),
        };
        // The library names the command's options (‹ablate›, ‹patch›); here the user typed a
        // command, and the message names it so.
        let (word, spec) = match change {
            Change::Ablate(spec) => ("ablate", spec),
            Change::Patch(spec) => ("patch", spec),
            Change::Set { .. } => unreachable!("returned above"),
        };
        let typed = |error: bert_core::BertError| match error {
            bert_core::BertError::Intervention { problem, .. } => bad(&format!("{word} {spec}: {problem}")),
            other => other.into(),
        };
        let interventions = Interventions::load(&self.model, &ablate, AblateWith::Zero, &patch).map_err(typed)?;
        interventions.check_run(&self.model, &self.batch, &self.plan, None).map_err(typed)?;
        if let Some((out, _)) = &self.out {
            trace::refuse_out_as_patch_source(out, &interventions)?;
        }
        let cursor = self.cursor.unwrap_or(0);
        if let Some(before) = self.plan[..cursor].iter().find(|stage| interventions.wants(stage)) {
            let spec = ablate.iter().chain(&patch).next().expect("one change");
            return Err(bad(&format!(
                "{spec}: it changes {before}, before the cursor ({}); goto {before} first",
                self.plan[cursor]
            )));
        }
        Ok(())
    }

    /// Every change the session has made, as a manifest records it.
    fn records(&self) -> Result<Vec<InterventionRecord>> {
        let mut records = self.interventions()?.records();
        for (_, change) in &self.changes {
            if let Change::Set { stage, index, value } = change {
                let index: Vec<String> = index.iter().map(usize::to_string).collect();
                records.push(InterventionRecord::Set { set: format!("{stage}[{}]", index.join(",")), value: *value });
            }
        }
        Ok(records)
    }

    /// Writes the pass, run to its end, as a dump in `out`, its changes recorded.
    fn write(&self, out: &std::path::Path, options: dump::Options) -> Result<()> {
        // Everything that can fail is done before the directory is touched.
        let records = self.records()?;
        let producer = serde_json::json!({"name": "bert-trace step", "version": env!("CARGO_PKG_VERSION")});
        let mut writer = DumpWriter::create(out, producer, self.name.clone(), self.inputs.clone(), options)?;
        writer.set_model(&self.model);
        writer.set_interventions(records);
        for (stage, tensor) in &self.stages {
            if writer.wants(stage) {
                writer.emit(*stage, tensor.view())?;
            }
        }
        writer.finish()?;
        Ok(())
    }

    /// The interventions the `ablate` and `patch` changes make.
    fn interventions(&self) -> Result<Interventions> {
        let (mut ablate, mut patch) = (Vec::new(), Vec::new());
        for (_, change) in &self.changes {
            match change {
                Change::Ablate(spec) => ablate.push(spec.clone()),
                Change::Patch(spec) => patch.push(spec.clone()),
                Change::Set { .. } => {}
            }
        }
        Ok(Interventions::load(&self.model, &ablate, AblateWith::Zero, &patch)?)
    }

    /// Runs the pass with the changes, up to `stop` (to the end without), keeping every stage.
    fn run_pass(&mut self, stop: Option<Stage>) -> Result<bert_core::model::Traced> {
        let (traced, stages) = self.pass(true, stop)?;
        self.stages = stages;
        Ok(traced)
    }

    /// The pass with the session's changes (or without any), up to `stop` (to the end without),
    /// and every stage it computed; the session is left as it was.
    fn pass(&self, changed: bool, stop: Option<Stage>) -> Result<(bert_core::model::Traced, Vec<(Stage, Tensor)>)> {
        let mut interventions = match changed {
            true => self.interventions()?,
            false => Interventions::load(&self.model, &[], AblateWith::Zero, &[])?,
        };
        let sets: Vec<(Stage, Vec<usize>, f64)> = self
            .changes
            .iter()
            .filter(|_| changed)
            .filter_map(|(_, c)| match c {
                Change::Set { stage, index, value } => Some((*stage, index.clone(), *value)),
                _ => None,
            })
            .collect();
        let mut sets = Sets(&sets);
        let mut chain = Chain(vec![&mut interventions as &mut dyn Hook, &mut sets as &mut dyn Hook]);
        let mut memory = Memory::default();
        let pass = Pass { stop_after: stop, hook: Some(&mut chain), ..Pass::default() };
        let traced = self.model.trace_with(&self.batch, &mut memory, pass)?;
        Ok((traced, memory.stages))
    }

    /// The predictions and losses of a finished pass, as `continue` prints them.
    fn finished(&self, traced: &bert_core::model::Traced) -> String {
        // The inputs as the changes left them: a set of an id or a label changes what the
        // predictions and losses are of.
        let used = traced.batch.as_ref().unwrap_or(&self.batch);
        let mut text = render::predictions::report(&self.model, used, &traced.outputs, self.top_k);
        text += &render::predictions::losses(&self.model, used, &traced.outputs);
        text
    }

    /// What the session's changes do to the whole pass: each stage they change (its largest
    /// |changed − unchanged|, over every element), and the predictions and losses with and
    /// without them, as `continue` prints them. None while there is no change.
    pub fn effect(&self) -> Result<Option<Effect>> {
        if self.changes.is_empty() {
            return Ok(None);
        }
        let (plain, plain_stages) = self.pass(false, None)?;
        let (changed, changed_stages) = self.pass(true, None)?;
        let mut stages = Vec::new();
        for (stage, tensor) in &changed_stages {
            let Some((_, before)) = plain_stages.iter().find(|(s, _)| s == stage) else { continue };
            let (a, b) = (tensor.to_f64(), before.to_f64());
            if a.shape() != b.shape() {
                continue;
            }
            // A NaN on one side and not the other is a change; the distance is then NaN.
            let mut largest = 0.0f64;
            let mut differs = false;
            for (x, y) in a.iter().zip(b.iter()) {
                let same = x == y || (x.is_nan() && y.is_nan());
                if !same {
                    differs = true;
                    let d = (x - y).abs();
                    largest = if d.is_nan() || largest.is_nan() { f64::NAN } else { largest.max(d) };
                }
            }
            if differs {
                stages.push(ChangedStage { stage: stage.name(), max_abs: largest });
            }
        }
        Ok(Some(Effect { stages, before: self.finished(&plain), after: self.finished(&changed) }))
    }

    /// Where the session is, for a caller that draws it (the page of `view --serve`).
    pub fn state(&self) -> StepState {
        let current = self.current_summary();
        let changes = self
            .changes
            .iter()
            .map(|(at, change)| match change {
                Change::Set { stage, index, value } => {
                    let index: Vec<String> = index.iter().map(usize::to_string).collect();
                    format!("set {stage}[{}] {value} (at {})", index.join(","), self.plan[*at])
                }
                Change::Ablate(spec) => format!("ablate {spec}"),
                Change::Patch(spec) => format!("patch {spec}"),
            })
            .collect();
        StepState { cursor: self.cursor, stages: self.stage_names(), current, head: self.head, changes }
    }

    /// The stage under the cursor, by name, and its shape; None before the first.
    pub fn current_stage(&self) -> Option<(String, Vec<usize>)> {
        self.current().ok().map(|(stage, tensor)| (stage.name(), tensor.shape().to_vec()))
    }

    /// The stage under the cursor and the inputs, with the changes, as a dump in memory: what
    /// the page draws the stage's picture from (not every stage: at 512 tokens of bert-base,
    /// the whole pass is hundreds of megabytes).
    pub fn computed_for_picture(&self) -> Result<bert_core::Dump> {
        let (current, _) = self.current()?;
        let stages = self
            .stages
            .iter()
            .filter(|(stage, _)| stage == current || (!stage.is_grad() && stage.info().part == Part::Input))
            .cloned()
            .collect();
        self.as_dump(stages)
    }

    /// The session's model.
    pub fn model(&self) -> &BertModel {
        &self.model
    }

    /// Puts the cursor on stage `at` of the plan, dropping the changes made after it.
    fn move_to(&mut self, at: usize) -> Result<()> {
        self.changes.retain(|(made, _)| *made <= at);
        self.run_pass(Some(self.plan[at]))?;
        self.cursor = Some(at);
        Ok(())
    }

    /// The stage under the cursor and its values.
    fn current(&self) -> Result<(&Stage, &Tensor)> {
        let at = self.cursor.ok_or_else(|| bad("before the first stage: type next"))?;
        let stage = &self.plan[at];
        let tensor = self
            .stages
            .iter()
            .find(|(s, _)| s == stage)
            .map(|(_, t)| t)
            .ok_or_else(|| bad(&format!("{stage} was not computed")))?;
        Ok((stage, tensor))
    }

    /// The stage under the cursor: its name, shape, statistics, formula and values.
    fn describe(&self) -> String {
        let (Ok((stage, tensor)), Some(summary)) = (self.current(), self.current_summary()) else {
            return String::new();
        };
        let mut text = format!(
            "[{}/{}] {} {:?}  min {}  mean {}  std {}  max {}\n  formula: {}\n",
            self.cursor.unwrap_or(0) + 1,
            self.plan.len(),
            summary.name,
            summary.shape,
            num(summary.min),
            num(summary.mean),
            num(summary.std),
            num(summary.max),
            summary.formula
        );
        let attention = tensor.shape().len() == 4 && tensor.shape()[1] == self.model.config.num_attention_heads;
        let shown = match attention {
            true => show(stage, tensor, &format!("[0,{}]", self.head)).unwrap_or_default(),
            false => format!("{}\n", preview(tensor)),
        };
        text += &shown;
        text
    }

    /// The stage under the cursor, its name, shape, statistics and formula: what `next` prints
    /// above its values, and what the page shows.
    fn current_summary(&self) -> Option<CurrentStage> {
        let (stage, tensor) = self.current().ok()?;
        let values = tensor.to_f64();
        let summary = Summary::of_f64(values.as_slice().unwrap_or(&[]));
        Some(CurrentStage {
            name: stage.name(),
            shape: tensor.shape().to_vec(),
            min: summary.min,
            mean: summary.mean,
            std: summary.std,
            max: summary.max,
            formula: stage.formula().to_string(),
        })
    }

    /// `stages` of this pass, with its changes recorded, as a dump in memory.
    fn as_dump(&self, stages: Vec<(Stage, Tensor)>) -> Result<bert_core::Dump> {
        Ok(bert_core::Dump::of_pass(
            "this pass",
            self.name.clone(),
            self.model.fingerprint(),
            self.inputs.clone(),
            self.records()?,
            stages,
        )?)
    }

    /// `explain` on the stages computed so far, in memory.
    fn explain(&self, target: &Target) -> Result<String> {
        let dump = self.as_dump(self.stages.clone())?;
        let explanations = explanation::explain(&self.model, &dump, target)?;
        Ok(explanations.iter().map(crate::explain::text).collect())
    }
}

/// `show [a:b,...]`: the part of `tensor` a numpy index names, one row per line.
fn show(stage: &Stage, tensor: &Tensor, part: &str) -> Result<String> {
    let inner = part
        .trim()
        .strip_prefix('[')
        .and_then(|p| p.strip_suffix(']'))
        .ok_or_else(|| bad(&format!("show {part}: expected [i,j,...], with numpy's a:b on any axis")))?;
    let shape = tensor.shape();
    let axes: Vec<&str> = inner.split(',').map(str::trim).collect();
    if axes.len() > shape.len() {
        return Err(bad(&format!("show {part}: {stage} has {} axes", shape.len())));
    }
    let mut ranges = Vec::new();
    for (axis, text) in axes.iter().enumerate() {
        let n = shape[axis];
        let number = |t: &str, default: usize| -> Result<usize> {
            match t.trim() {
                "" => Ok(default),
                t => t.parse::<usize>().map_err(|_| bad(&format!("show {part}: `{t}` is not an index from 0"))),
            }
        };
        let range = match text.split_once(':') {
            Some((a, b)) => number(a, 0)?..number(b, n)?.min(n),
            None => {
                let i = number(text, 0)?;
                i..i + 1
            }
        };
        if range.start >= n || range.is_empty() {
            return Err(bad(&format!("show {part}: axis {axis} of {stage} has {n} entries")));
        }
        ranges.push(range);
    }
    ranges.extend(shape[axes.len()..].iter().map(|&n| 0..n));
    let values = tensor.to_f64();
    let mut text = String::new();
    let rows: usize = ranges[..ranges.len() - 1].iter().map(|r| r.len()).product();
    if rows * ranges[ranges.len() - 1].len() > 4096 {
        return Err(bad(&format!("show {part}: more than 4096 values; narrow it")));
    }
    let mut index: Vec<usize> = ranges.iter().map(|r| r.start).collect();
    let last = ranges.len() - 1;
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    'rows: loop {
        let cells: Vec<String> = ranges[last]
            .clone()
            .map(|i| {
                index[last] = i;
                num(values[ndarray::IxDyn(&index)])
            })
            .collect();
        rows.push((format!("{:?}", &index[..last]), cells));
        // The next row: the last axis but one that can move on, the axes after it back to start.
        for axis in (0..last).rev() {
            if index[axis] + 1 < ranges[axis].end {
                index[axis] += 1;
                for later in axis + 1..last {
                    index[later] = ranges[later].start;
                }
                continue 'rows;
            }
        }
        break;
    }
    // A header names the last axis's indices, each over its column: for attention, the keys.
    let attention = stage.is_value_of(StageKind::AttnScores) || stage.is_value_of(StageKind::AttnProbs);
    let corner = if attention { "[b, head, query] \\ key" } else { "row \\ last axis" };
    let label_width =
        rows.iter().map(|(label, _)| label.chars().count()).max().unwrap_or(0).max(corner.chars().count());
    let columns: Vec<usize> = ranges[last].clone().collect();
    let widths: Vec<usize> = (0..columns.len())
        .map(|c| rows.iter().map(|(_, cells)| cells[c].len()).max().unwrap_or(0).max(columns[c].to_string().len()))
        .collect();
    let header: Vec<String> = columns.iter().zip(&widths).map(|(i, w)| format!("{i:>w$}")).collect();
    let _ = writeln!(text, "{corner:<label_width$}  {}", header.join("  "));
    for (label, cells) in rows {
        let cells: Vec<String> = cells.iter().zip(&widths).map(|(cell, w)| format!("{cell:>w$}")).collect();
        let _ = writeln!(text, "{label:<label_width$}  {}", cells.join("  "));
    }
    Ok(text)
}

fn bad(message: &str) -> Error {
    Error::Request(message.to_string())
}

fn hint(suggestions: &[String]) -> String {
    match suggestions.is_empty() {
        true => String::new(),
        false => format!(" (did you mean {}?)", suggestions.join(", ")),
    }
}
