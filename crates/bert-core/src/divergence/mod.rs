//! Stage-by-stage comparison of two dumps (a PyTorch reference and a trace), with a tolerance
//! for each kind of stage.
//!
//! An element passes when |ours - reference| <= atol + rtol * |reference| (numpy's `allclose`),
//! computed in f64 whatever the two sides' dtypes; a float16 or bfloat16 side widens the
//! tolerance to its precision. A value that is not finite (NaN, ±inf) never passes, on either
//! side, with one exception: an attention score of a padding key is masked, and whoever wrote it
//! chose the constant (f32::MIN here and in transformers today, -1e4 in older transformers and
//! many tutorials, -1e9, -inf). Any score at or below [`MASKED`] gives its key probability 0
//! after softmax, so two masked scores are equal in their effect, which is what is compared; a
//! padding key that one side left unmasked fails. The rows of padded query tokens are reported
//! on their own and their finite differences do not fail a stage, because no real token ever
//! reads them; a non-finite value there fails it like anywhere else.

pub mod isolate;
pub mod measured_tolerance;
pub mod padded_rows;
pub mod truth;
pub mod two_models;

use ndarray::{ArrayD, Axis, Dimension};
use serde::Serialize;

use std::collections::HashSet;

use crate::error::{BertError, Result};
use crate::io::dump::manifest::ManifestStage;
use crate::io::dump::Dump;
use crate::pass::Tensor;
use crate::stage::{self, Agreement, Dim, Stage, StageKind};

/// |ours - reference| <= atol + rtol * |reference|
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
}

impl Tolerance {
    pub const EXACT: Tolerance = Tolerance { atol: 0.0, rtol: 0.0 };

    fn allowed(&self, reference: f64) -> f64 {
        self.atol + self.rtol * reference.abs()
    }
}

impl Tolerance {
    /// The tolerance of a stage on which two implementations agree as `agreement` says,
    /// measured against PyTorch float32 on the goldens (see the walkthrough's chapter on
    /// comparing).
    pub fn of(agreement: Agreement) -> Tolerance {
        match agreement {
            Agreement::Exact => Tolerance::EXACT,
            Agreement::Sum => Tolerance { atol: 1e-7, rtol: 1e-6 },
            Agreement::Probability => Tolerance { atol: 1e-5, rtol: 1e-4 },
            // A log-sum-exp over the logits: their error, at most, plus rounding.
            Agreement::Loss => Tolerance { atol: 1e-4, rtol: 1e-5 },
            Agreement::Rounded => Tolerance { atol: 1e-4, rtol: 1e-4 },
        }
    }
}

/// The default tolerance of a kind of stage: its row's agreement's.
pub fn default_tolerance(kind: StageKind) -> Tolerance {
    Tolerance::of(kind.info().agreement)
}

/// The tolerance of one stage: its kind's for a value; for a gradient, atol 1e-5 and rtol 1e-4,
/// which holds for every gradient of the tiny goldens against autograd (a backward pass sums
/// over every token, so a gradient carries the rounding of the whole pass after its stage).
pub fn stage_tolerance(stage: Stage) -> Tolerance {
    if stage.is_grad() {
        Tolerance { atol: 1e-5, rtol: 1e-4 }
    } else {
        default_tolerance(stage.kind)
    }
}

/// Attention scores at or below this are masked, whatever constant masked them: exp(-1000) is 0
/// in f32 and f64 alike, so such a key gets probability 0 beside any real key's score. It
/// covers f32::MIN and float16's -65504, and older transformers' -10000 added to a real score
/// (-9997.5 is above -1e4, so a bound of -1e4 would miss it).
pub const MASKED: f64 = -1000.0;

/// The one rule for a masked attention score, which `diff` and `view` share: where the dump
/// has its attention mask, `key_is_padding` says (a padding key's score is masked if it is at
/// or below [`MASKED`]: one left unmasked is not); without a mask, any score at or below
/// [`MASKED`] is.
pub fn is_masked_score(score: f64, key_is_padding: Option<bool>) -> bool {
    key_is_padding.unwrap_or(true) && score <= MASKED
}

/// How one stage compares.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageReport {
    pub name: String,
    pub status: Status,
    pub reference_shape: Option<Vec<usize>>,
    pub trace_shape: Option<Vec<usize>>,
    /// The dtype each side stores (`float32`, `float16`, `int64`, ...).
    pub reference_dtype: Option<String>,
    pub trace_dtype: Option<String>,
    pub tolerance: Tolerance,
    /// Why the tolerance is wider than the stage's own, if it is (a float16 side).
    pub widened: Option<String>,
    /// How one side's layout was changed to compare it (Q before the head split), if it was.
    pub layout: Option<String>,
    /// Statistics over the real (unpadded) rows.
    pub stats: Option<DiffStats>,
    /// Statistics over rows of padded query tokens, when the batch has padding.
    pub padded_rows: Option<DiffStats>,
}

/// The outcome for one stage.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "detail")]
pub enum Status {
    Pass,
    Fail,
    ShapeMismatch,
    OnlyInReference,
    OnlyInTrace,
}

/// Differences between two tensors of one shape.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffStats {
    pub elements: usize,
    pub max_abs: f64,
    pub mean_abs: f64,
    /// max |Δ| / |reference| over elements whose reference is not 0.
    pub max_rel: f64,
    pub cosine: f64,
    /// The largest share of the tolerance any element used (> 1 fails).
    pub tolerance_used: f64,
    /// Elements that are NaN or infinite on either side (masked scores apart).
    pub non_finite: usize,
    /// Masked attention scores (padding keys) on both sides, compared by their effect.
    pub masked: usize,
    /// The largest masked score of each side: the constant each side masks with, about.
    pub masked_reference: Option<f64>,
    pub masked_trace: Option<f64>,
    /// Where the element that used most of the tolerance is, with both values.
    pub worst: Option<Worst>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Worst {
    pub index: Vec<usize>,
    pub reference: f64,
    pub ours: f64,
}

impl DiffStats {
    pub fn passed(&self) -> bool {
        self.non_finite == 0 && self.tolerance_used <= 1.0
    }
}

/// The comparison of two whole dumps.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub stages: Vec<StageReport>,
    /// The first stage both dumps have, in execution order, that did not pass.
    pub first_failure: Option<FirstFailure>,
    /// What the reader of the report should know once: layouts matched, names not in the
    /// stage table.
    pub notes: Vec<String>,
}

/// Where the divergence starts.
#[derive(Clone, Debug, Serialize)]
pub struct FirstFailure {
    pub name: String,
    /// The stage before it and how far it already differed (max |Δ|), if it was compared.
    pub previous: Option<(String, f64)>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.first_failure.is_none()
    }

    /// The stages both dumps have.
    pub fn common(&self) -> impl Iterator<Item = &StageReport> {
        self.stages.iter().filter(|s| !matches!(s.status, Status::OnlyInReference | Status::OnlyInTrace))
    }
}

/// Overrides for every stage's tolerance (`--atol`, `--rtol`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ToleranceOverride {
    pub atol: Option<f64>,
    pub rtol: Option<f64>,
}

impl ToleranceOverride {
    pub fn apply(&self, tol: Tolerance) -> Tolerance {
        Tolerance { atol: self.atol.unwrap_or(tol.atol), rtol: self.rtol.unwrap_or(tol.rtol) }
    }
}

/// Compares every stage the two dumps have in common, in execution order. Stages present on one
/// side only are listed and do not fail the report: the verdict is over the stages both have.
/// Dumps with no float stage in common, or of 0 tokens, are an error: a comparison of nothing
/// must not pass.
pub fn diff_dumps(reference: &Dump, trace: &Dump, overrides: ToleranceOverride) -> Result<Report> {
    diff_dumps_with(reference, trace, overrides, None)
}

/// [`diff_dumps`], each stage `measured` has held to its tolerance there instead of the fixed
/// table's (`diff --tolerances`); `overrides` still apply over either.
pub fn diff_dumps_with(
    reference: &Dump,
    trace: &Dump,
    overrides: ToleranceOverride,
    measured: Option<&measured_tolerance::ToleranceFile>,
) -> Result<Report> {
    for dump in [reference, trace] {
        refuse_empty(dump)?;
    }
    let mut seen = HashSet::new();
    let mut names: Vec<&str> = Vec::new();
    for stage in reference.manifest.stages.iter().chain(&trace.manifest.stages) {
        if seen.insert(stage.name.as_str()) {
            names.push(&stage.name);
        }
    }
    names.sort_by_key(|name| stage::execution_key(name));
    let common_floats = names
        .iter()
        .filter_map(|n| Some((reference.entry(n)?, trace.entry(n)?)))
        .filter(|(r, o)| is_float_dtype(&r.dtype) || is_float_dtype(&o.dtype))
        .count();
    if common_floats == 0 {
        return Err(BertError::Dump {
            path: trace.dir.clone(),
            problem: format!(
                "has no float stage in common with {} ({} and {} stages): nothing to compare",
                reference.dir.display(),
                trace.manifest.stages.len(),
                reference.manifest.stages.len()
            ),
        });
    }
    let query_mask = match reference.attention_mask()? {
        Some(mask) => Some(mask),
        None => trace.attention_mask()?,
    };
    // A pass held in a narrower format, as each side's manifest says.
    let formats = (reference.simulation().format, trace.simulation().format);
    let all_names = names.clone();
    let mut notes = Notes::default();
    let mut stages = Vec::with_capacity(names.len());
    for name in names {
        let parsed = stage::parse(name);
        let kind = parsed.map(|s| s.kind);
        let fixed = parsed.map_or(default_tolerance(StageKind::AttnOutput), stage_tolerance);
        let base = overrides.apply(measured.and_then(|file| file.tolerance(name)).unwrap_or(fixed));
        let (theirs, ours) = (reference.entry(name), trace.entry(name));
        if kind.is_none() {
            for (side, entry) in [("reference", theirs), ("trace", ours)] {
                if entry.is_some() {
                    notes.unknown(side, name, &all_names);
                }
            }
        }
        let report = match (theirs, ours) {
            (Some(r), Some(o)) => {
                // A pass held in a narrower format has that format's precision, whatever its
                // files' dtype (bert-trace's simulations and PyTorch's bfloat16 passes write
                // float32 files).
                let held = |format: Option<crate::precision::Format>, dtype: &str| match (format, is_float_dtype(dtype))
                {
                    (Some(format), true) => format.torch_name().to_string(),
                    _ => dtype.to_string(),
                };
                let (tolerance, widened) = widen(base, &held(formats.0, &r.dtype), &held(formats.1, &o.dtype));
                let (r_tensor, o_tensor) = (reference.read(r)?, trace.read(o)?);
                let (r_tensor, o_tensor, layout) = match_layouts(name, r_tensor, o_tensor);
                if let Some(layout) = &layout {
                    notes.layout(layout);
                }
                check_f64_copies(name, &[&r_tensor, &o_tensor])?;
                let mut report = compare_tensors(name, &r_tensor, &o_tensor, tolerance, query_mask.as_ref());
                report.reference_dtype = Some(r.dtype.clone());
                report.trace_dtype = Some(o.dtype.clone());
                report.widened = widened;
                report.layout = layout;
                report
            }
            (Some(r), None) => one_sided(name, Status::OnlyInReference, Some(r), None, base),
            (None, Some(o)) => one_sided(name, Status::OnlyInTrace, None, Some(o), base),
            (None, None) => unreachable!("every name comes from one of the manifests"),
        };
        stages.push(report);
    }
    let mut report = finish_report(stages);
    report.notes = notes.lines();
    Ok(report)
}

/// Refuses a dump whose input has 0 sequences or 0 tokens: every stage of it is empty.
fn refuse_empty(dump: &Dump) -> Result<()> {
    if let Some(entry) = dump.entry("input.ids") {
        if entry.shape.contains(&0) {
            let what = if entry.shape.first() == Some(&0) { "0 sequences" } else { "0 tokens" };
            return Err(BertError::Dump {
                path: dump.dir.clone(),
                problem: format!("input.ids has shape {:?}: a dump of {what} holds nothing to compare", entry.shape),
            });
        }
    }
    Ok(())
}

fn is_float_dtype(dtype: &str) -> bool {
    dtype.starts_with("float") || dtype == "bfloat16"
}

/// The report of a stage that one side has.
fn one_sided(
    name: &str,
    status: Status,
    reference: Option<&ManifestStage>,
    trace: Option<&ManifestStage>,
    tolerance: Tolerance,
) -> StageReport {
    StageReport {
        name: name.into(),
        status,
        reference_shape: reference.map(|e| e.shape.clone()),
        trace_shape: trace.map(|e| e.shape.clone()),
        reference_dtype: reference.map(|e| e.dtype.clone()),
        trace_dtype: trace.map(|e| e.dtype.clone()),
        tolerance,
        widened: None,
        layout: None,
        stats: None,
        padded_rows: None,
    }
}

/// The precision of a half-precision type: the distance from 1 to the next value, 2^-10 for
/// float16 and 2^-7 for bfloat16. A value stored in it is off by up to half of that, relative.
fn precision_of(dtype: &str) -> Option<f64> {
    match dtype {
        "float16" => Some(9.765625e-4),
        "bfloat16" => Some(7.8125e-3),
        _ => None,
    }
}

/// `tolerance` widened to the precision of the coarser side when a side is float16 or
/// bfloat16 (such a side cannot be held to float32's tolerances), with the sentence that says so.
fn widen(tolerance: Tolerance, reference: &str, trace: &str) -> (Tolerance, Option<String>) {
    let coarsest = [reference, trace]
        .into_iter()
        .filter_map(|dtype| precision_of(dtype).map(|eps| (dtype, eps)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    match coarsest {
        Some((dtype, eps)) => {
            let widened = Tolerance { atol: tolerance.atol.max(eps), rtol: tolerance.rtol.max(eps) };
            (widened, Some(format!("a {dtype} side: atol and rtol widened to at least {dtype}'s precision, {eps:.2e}")))
        }
        None => (tolerance, None),
    }
}

/// The two tensors in one layout when they differ only as a learner's arrays do: Q, K or V kept
/// before the head split (`[B,T,H]`, or `[T,H]` for one sequence, for `[B,nh,T,hs]`) are split
/// into the other side's heads. Returns what was done, if anything.
fn match_layouts(name: &str, reference: Tensor, trace: Tensor) -> (Tensor, Tensor, Option<String>) {
    let qkv = stage::parse(name)
        .is_some_and(|s| matches!(s.kind, StageKind::AttnQuery | StageKind::AttnKey | StageKind::AttnValue));
    if !qkv || reference.shape() == trace.shape() {
        return (reference, trace, None);
    }
    if let Some(split) = split_like(&reference, trace.shape()) {
        return (split, trace, Some("reference: query, key or value before the head split ([B,T,H])".into()));
    }
    if let Some(split) = split_like(&trace, reference.shape()) {
        return (reference, split, Some("trace: query, key or value before the head split ([B,T,H])".into()));
    }
    (reference, trace, None)
}

/// `tensor` (`[B,T,H]`, or `[T,H]` for one sequence) split into heads as `[B,nh,T,hs]` =
/// `target`, when the sizes fit.
fn split_like(tensor: &Tensor, target: &[usize]) -> Option<Tensor> {
    let &[b, nh, t, hs] = target else { return None };
    let fits = match *tensor.shape() {
        [tb, tt, th] => tb == b && tt == t && th == nh * hs,
        [tt, th] => b == 1 && tt == t && th == nh * hs,
        _ => false,
    };
    if !fits {
        return None;
    }
    let split = tensor.to_f64().into_shape_with_order((b, t, nh, hs)).ok()?.permuted_axes([0, 2, 1, 3]);
    Some(Tensor::F64(split.as_standard_layout().into_owned().into_dyn()))
}

/// The notes of a report, each said once.
#[derive(Default)]
struct Notes {
    lines: Vec<String>,
    unknown: Vec<String>,
    /// Names not in the stage table beyond those [`Notes::SHOWN`] spells out.
    more_unknown: usize,
    /// The stages suggestions are drawn from, found once.
    known: Option<Vec<Stage>>,
}

impl Notes {
    /// How many names outside the stage table are named, each with its suggestions.
    const SHOWN: usize = 5;

    fn layout(&mut self, what: &str) {
        let line = format!("{what}; compared in the other side's layout");
        if !self.lines.contains(&line) {
            self.lines.push(line);
        }
    }

    fn unknown(&mut self, side: &str, name: &str, names: &[&str]) {
        if self.unknown.len() >= Self::SHOWN {
            self.more_unknown += 1;
            return;
        }
        let known = self.known.get_or_insert_with(|| {
            let known: Vec<Stage> = names.iter().filter_map(|n| stage::parse(n)).collect();
            if known.is_empty() {
                let every_head =
                    stage::OutputHeads { pooler: true, mlm: true, nsp: true, classifier: true, sentence: true };
                return stage::plan(12, every_head, stage::Objectives::ALL);
            }
            known
        });
        let hint = stage::suggestions(name, known);
        let hint = if hint.is_empty() {
            " (‹@stages› lists the names)".to_string()
        } else {
            format!("; did you mean {}?", hint.join(", "))
        };
        self.unknown.push(format!("{side}: `{name}` is not a stage name{hint}"));
    }

    fn lines(mut self) -> Vec<String> {
        self.lines.append(&mut self.unknown);
        if self.more_unknown > 0 {
            self.lines.push(format!("and {} more names that are not stage names", self.more_unknown));
        }
        self.lines
    }
}

/// Finds the first failing stage among those both dumps have, and what came before it.
pub fn finish_report(stages: Vec<StageReport>) -> Report {
    let both = |s: &StageReport| !matches!(s.status, Status::OnlyInReference | Status::OnlyInTrace);
    let first = stages.iter().position(|s| both(s) && s.status != Status::Pass);
    let first_failure = first.map(|idx| FirstFailure {
        name: stages[idx].name.clone(),
        previous: stages[..idx]
            .iter()
            .rev()
            .find(|s| both(s))
            .and_then(|prev| prev.stats.as_ref().map(|st| (prev.name.clone(), st.max_abs))),
    });
    Report { stages, first_failure, notes: Vec::new() }
}

/// Refuses to compare `tensors` (of stage `name`) when their float64 copies, which every
/// comparison makes, would not fit in this machine's or this process's memory: an allocation
/// that fails aborts the process without a word.
pub(crate) fn check_f64_copies(name: &str, tensors: &[&Tensor]) -> Result<()> {
    let values: u64 = tensors.iter().map(|t| t.shape().iter().product::<usize>() as u64).sum();
    // Copies of less than a MiB are never what runs a machine out of memory, and a dump of many
    // small stages would otherwise read /proc/meminfo once a stage.
    if values.saturating_mul(8) < 1 << 20 {
        return Ok(());
    }
    crate::io::memory::check(
        values.saturating_mul(8).saturating_add(64 << 20),
        &format!("to compare {name} in float64"),
    )
}

/// Compares one stage. `query_mask` `[B,T]` is the batch's attention mask, used to set apart the
/// rows of padded query tokens.
pub fn compare_tensors(
    name: &str,
    reference: &Tensor,
    ours: &Tensor,
    tolerance: Tolerance,
    query_mask: Option<&ArrayD<i64>>,
) -> StageReport {
    let mut report = StageReport {
        name: name.into(),
        status: Status::Pass,
        reference_shape: Some(reference.shape().to_vec()),
        trace_shape: Some(ours.shape().to_vec()),
        reference_dtype: Some(reference.dtype().numpy_name().into()),
        trace_dtype: Some(ours.dtype().numpy_name().into()),
        // Integers (ids, labels, masks) are equal or not, whatever the stage.
        tolerance: if reference.is_float() || ours.is_float() { tolerance } else { Tolerance::EXACT },
        widened: None,
        layout: None,
        stats: None,
        padded_rows: None,
    };
    let tolerance = report.tolerance;
    if reference.shape() != ours.shape() {
        report.status = Status::ShapeMismatch;
        return report;
    }
    let (reference, ours) = (reference.to_f64(), ours.to_f64());
    let padded = padded_selector(name, reference.shape(), query_mask);
    // For attention scores: the `[B,T]` mask, whose zeros are the keys whose scores are masked.
    let is_scores = stage::parse(name).is_some_and(|s| s.is_value_of(StageKind::AttnScores));
    let key_mask = query_mask.and_then(|m| m.clone().into_dimensionality::<ndarray::Ix2>().ok());
    // A padding key, or any key when the dumps carry no mask.
    let masked_key = |index: &[usize]| match (&key_mask, index) {
        (Some(mask), [b, _, _, key]) => mask.get([*b, *key]).is_some_and(|&m| m == 0),
        (None, [_, _, _, _]) => true,
        _ => false,
    };
    let mut real = Accumulator::default();
    let mut pad = Accumulator::default();
    for ((index, &r), &o) in reference.indexed_iter().zip(ours.iter()) {
        let index: Vec<usize> = index.slice().to_vec();
        let is_padded = padded.as_ref().is_some_and(|(axis, mask)| mask[[index[0], index[*axis]]] == 0);
        let acc = if is_padded { &mut pad } else { &mut real };
        let padding = masked_key(&index);
        let masked = is_scores && is_masked_score(r, Some(padding)) && is_masked_score(o, Some(padding));
        acc.add(&index, r, o, &tolerance, masked);
    }
    let stats = real.finish();
    let pad = (pad.elements > 0).then(|| pad.finish());
    let padded_ok = pad.as_ref().is_none_or(|p| p.non_finite == 0);
    report.status = if stats.passed() && padded_ok { Status::Pass } else { Status::Fail };
    report.stats = Some(stats);
    report.padded_rows = pad;
    report
}

/// For a stage with a query-token axis and a batch with padding: that axis and the `[B,T]` mask.
fn padded_selector(name: &str, shape: &[usize], mask: Option<&ArrayD<i64>>) -> Option<(usize, ndarray::Array2<i64>)> {
    let stage = stage::parse(name)?;
    if stage.info().part == stage::Part::Input {
        return None;
    }
    let mask = mask?.clone().into_dimensionality::<ndarray::Ix2>().ok()?;
    if !mask.iter().any(|&m| m == 0) {
        return None;
    }
    let axis = stage.info().shape.iter().position(|&d| d == Dim::T)?;
    if axis == 0 || shape.first() != Some(&mask.len_of(Axis(0))) || shape.get(axis) != Some(&mask.len_of(Axis(1))) {
        return None;
    }
    Some((axis, mask))
}

#[derive(Default)]
struct Accumulator {
    elements: usize,
    sum_abs: f64,
    max_abs: f64,
    max_rel: f64,
    dot: f64,
    norm_r: f64,
    norm_o: f64,
    used: f64,
    non_finite: usize,
    masked: usize,
    masked_reference: Option<f64>,
    masked_trace: Option<f64>,
    worst_diff: f64,
    worst: Option<Worst>,
}

impl Accumulator {
    /// Adds one element; `masked` when it is a masked attention score on both sides, which are
    /// equal in their effect whatever constant each side masked with.
    fn add(&mut self, index: &[usize], r: f64, o: f64, tolerance: &Tolerance, masked: bool) {
        self.elements += 1;
        if masked {
            self.masked += 1;
            self.masked_reference = Some(self.masked_reference.map_or(r, |m: f64| m.max(r)));
            self.masked_trace = Some(self.masked_trace.map_or(o, |m: f64| m.max(o)));
            return;
        }
        let used = if !r.is_finite() || !o.is_finite() {
            self.non_finite += 1;
            // The error is as large as the values make it: NaN or infinite, never 0.
            let diff = (o - r).abs();
            self.max_abs = if diff.is_nan() || self.max_abs.is_nan() { f64::NAN } else { f64::INFINITY };
            f64::INFINITY
        } else if r == o {
            0.0
        } else {
            let diff = (o - r).abs();
            self.sum_abs += diff;
            // f64::max drops a NaN: once an element made the error NaN, it stays NaN.
            if !self.max_abs.is_nan() {
                self.max_abs = self.max_abs.max(diff);
            }
            if r != 0.0 {
                self.max_rel = self.max_rel.max(diff / r.abs());
            }
            let allowed = tolerance.allowed(r);
            if allowed > 0.0 {
                diff / allowed
            } else {
                f64::INFINITY
            }
        };
        if r.is_finite() && o.is_finite() {
            self.dot += r * o;
            self.norm_r += r * r;
            self.norm_o += o * o;
        }
        // The worst element uses most of the tolerance; among elements that all exceed a zero
        // tolerance, it is the one with the largest difference.
        let diff = if used.is_finite() || !(r.is_finite() && o.is_finite()) { 0.0 } else { (o - r).abs() };
        if (used, diff) > (self.used, self.worst_diff) {
            self.used = used;
            self.worst_diff = diff;
            self.worst = Some(Worst { index: index.to_vec(), reference: r, ours: o });
        }
    }

    fn finish(self) -> DiffStats {
        // Two all-zero tensors point the same way; one all-zero tensor points nowhere.
        let cosine = match (self.norm_r == 0.0, self.norm_o == 0.0) {
            (true, true) => 1.0,
            (true, false) | (false, true) => 0.0,
            (false, false) => self.dot / (self.norm_r.sqrt() * self.norm_o.sqrt()),
        };
        DiffStats {
            elements: self.elements,
            max_abs: self.max_abs,
            mean_abs: self.sum_abs / self.elements.max(1) as f64,
            max_rel: self.max_rel,
            cosine,
            tolerance_used: self.used,
            non_finite: self.non_finite,
            masked: self.masked,
            masked_reference: self.masked_reference,
            masked_trace: self.masked_trace,
            worst: self.worst,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::IxDyn;

    /// `[B,T,H]` = `[2,3,3]` tensors: a hidden state whose second sequence is padded after one token.
    fn hidden(values: [f32; 18]) -> Tensor {
        Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[2, 3, 3]), values.to_vec()).unwrap())
    }

    #[test]
    fn a_non_finite_error_is_never_reported_as_finite() {
        // Found by the `compare` fuzz target: a NaN in a padded row, then a finite difference
        // later in the same bucket, and f64::max forgot the NaN.
        let mask = ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![1, 1, 1, 1, 0, 0]).unwrap();
        let name = "layer0.ffn.output";
        let tolerance = default_tolerance(stage::parse(name).unwrap().kind);
        let mut nan_then_finite = [0.0f32; 18];
        nan_then_finite[12] = f32::NAN;
        let mut shifted = nan_then_finite;
        shifted[13] = 1e-3;
        let mut inf_then_nan = [0.0f32; 18];
        inf_then_nan[3] = f32::INFINITY;
        let mut inf_then_nan_trace = inf_then_nan;
        inf_then_nan_trace[4] = f32::NAN;
        // (what, reference, trace, bucket: real rows or padded rows, expect NaN (else +inf)).
        // |inf - inf| is NaN, so inf on both sides reports NaN.
        let cases = [
            ("NaN then a finite difference in a padded row", nan_then_finite, shifted, true, true),
            ("inf on both sides, then NaN, in real rows", inf_then_nan, inf_then_nan_trace, false, true),
            ("inf against 0 in real rows", inf_then_nan, [0.0; 18], false, false),
        ];
        for (what, reference, trace, padded, nan) in cases {
            let report = compare_tensors(name, &hidden(reference), &hidden(trace), tolerance, Some(&mask));
            let stats = if padded { report.padded_rows } else { report.stats }.expect("statistics");
            let got = stats.max_abs;
            let ok = if nan { got.is_nan() } else { got == f64::INFINITY };
            assert!(ok, "{what}: expected max|Δ| {}, got {got}", if nan { "NaN" } else { "inf" });
            assert_ne!(report.status, Status::Pass, "{what}: passed");
        }
    }
}
