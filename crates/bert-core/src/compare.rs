//! Stage-by-stage comparison of two dumps (a PyTorch reference and a trace), with a tolerance
//! for each kind of stage.
//!
//! An element passes when |ours - reference| <= atol + rtol * |reference| (numpy's `allclose`).
//! A value that is not finite (NaN, ±inf) never passes, on either side, with one exception: an
//! attention score of a padding key is masked, written as f32::MIN or -inf depending on who wrote
//! it, and two masked scores compare equal. The rows of padded query tokens are reported on
//! their own and their finite differences do not fail a stage, because no real token ever reads
//! them; a non-finite value there fails it like anywhere else.

use ndarray::{ArrayD, Axis, Dimension};
use serde::Serialize;

use crate::dump::Dump;
use crate::error::{BertError, Result};
use crate::trace::stage::{self, Dim, StageKind};
use crate::trace::Tensor;

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

/// The default tolerance for each kind of stage, measured against PyTorch float32 on the goldens
/// (see the walkthrough's chapter on comparing): token ids are exact; activations differ by the
/// order in which float32 sums are accumulated, which grows with the length of the dot products
/// and with the size of the values (logits over a large vocabulary are the largest).
pub fn default_tolerance(kind: StageKind) -> Tolerance {
    use StageKind::*;
    match kind {
        InputOriginalIds | InputIds | InputTokenTypeIds | InputAttentionMask => Tolerance::EXACT,
        InputLabels | InputNextSentenceLabel => Tolerance::EXACT,
        // A table lookup and one or two additions: only the rounding of the sums.
        EmbWord | EmbPosition | EmbTokenType => Tolerance::EXACT,
        EmbSum => Tolerance { atol: 1e-7, rtol: 1e-6 },
        AttnProbs => Tolerance { atol: 1e-5, rtol: 1e-4 },
        MlmLogits | NspLogits | ClassifierLogits => Tolerance { atol: 1e-4, rtol: 1e-4 },
        // A log-sum-exp over the logits: their error, at most, plus rounding.
        MlmLosses | MlmLoss | NspLosses | NspLoss | Loss => Tolerance { atol: 1e-4, rtol: 1e-5 },
        _ => Tolerance { atol: 1e-4, rtol: 1e-4 },
    }
}

/// Attention scores at or below this are masked, whether written as f32::MIN or -inf.
const MASKED: f64 = -1e30;

/// How one stage compares.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageReport {
    pub name: String,
    pub status: Status,
    pub reference_shape: Option<Vec<usize>>,
    pub trace_shape: Option<Vec<usize>>,
    pub tolerance: Tolerance,
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
    DtypeMismatch,
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
    /// The first stage, in execution order, that did not pass.
    pub first_failure: Option<FirstFailure>,
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

/// Compares every stage of `trace` with `reference`, in execution order. Stages present on one
/// side only are listed (and fail the report). Two dumps with no stage in common are an error:
/// a comparison of nothing must not pass.
pub fn compare_dumps(reference: &Dump, trace: &Dump, overrides: ToleranceOverride) -> Result<Report> {
    let common = reference.manifest.stages.iter().filter(|s| trace.entry(&s.name).is_some()).count();
    if common == 0 {
        return Err(BertError::Dump {
            path: trace.dir.clone(),
            problem: format!(
                "has no stage in common with {} ({} and {} stages): nothing to compare",
                reference.dir.display(),
                trace.manifest.stages.len(),
                reference.manifest.stages.len()
            ),
        });
    }
    let mut names: Vec<String> = reference.manifest.stages.iter().map(|s| s.name.clone()).collect();
    for stage in &trace.manifest.stages {
        if !names.contains(&stage.name) {
            names.push(stage.name.clone());
        }
    }
    names.sort_by_key(|name| execution_key(name));
    let query_mask = match reference.entry("input.attention_mask") {
        Some(entry) => reference.read(entry)?.to_i64(),
        None => None,
    };
    let mut stages = Vec::with_capacity(names.len());
    for name in &names {
        let kind = stage::parse(name).map(|s| s.kind);
        let tolerance = overrides.apply(kind.map_or(default_tolerance(StageKind::AttnOutput), default_tolerance));
        let (ours, theirs) = (trace.entry(name), reference.entry(name));
        let report = match (theirs, ours) {
            (Some(r), Some(o)) => {
                let (r, o) = (reference.read(r)?, trace.read(o)?);
                compare_tensors(name, &r, &o, tolerance, query_mask.as_ref())
            }
            (Some(r), None) => StageReport {
                name: name.clone(),
                status: Status::OnlyInReference,
                reference_shape: Some(r.shape.clone()),
                trace_shape: None,
                tolerance,
                stats: None,
                padded_rows: None,
            },
            (None, Some(o)) => StageReport {
                name: name.clone(),
                status: Status::OnlyInTrace,
                reference_shape: None,
                trace_shape: Some(o.shape.clone()),
                tolerance,
                stats: None,
                padded_rows: None,
            },
            (None, None) => unreachable!("every name comes from one of the manifests"),
        };
        stages.push(report);
    }
    Ok(finish_report(stages))
}

/// Finds the first failing stage and what came before it.
pub fn finish_report(stages: Vec<StageReport>) -> Report {
    let first = stages.iter().position(|s| s.status != Status::Pass);
    let first_failure = first.map(|idx| FirstFailure {
        name: stages[idx].name.clone(),
        previous: idx
            .checked_sub(1)
            .and_then(|prev| stages[prev].stats.as_ref().map(|st| (stages[prev].name.clone(), st.max_abs))),
    });
    Report { stages, first_failure }
}

/// Orders stage names as the forward pass produces them; names outside the table go last.
fn execution_key(name: &str) -> (usize, usize, usize) {
    match stage::parse(name) {
        Some(stage) => {
            let section = match (stage.layer, stage.kind < StageKind::AttnQuery) {
                (None, true) => 0,
                (Some(_), _) => 1,
                (None, false) => 2,
            };
            (section, stage.layer.unwrap_or(0), stage.kind as usize)
        }
        None => (3, 0, 0),
    }
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
        tolerance,
        stats: None,
        padded_rows: None,
    };
    if reference.dtype() != ours.dtype() {
        report.status = Status::DtypeMismatch;
        return report;
    }
    if reference.shape() != ours.shape() {
        report.status = Status::ShapeMismatch;
        return report;
    }
    let (reference, ours) = (reference.to_f64(), ours.to_f64());
    let padded = padded_selector(name, reference.shape(), query_mask);
    // For attention scores: the `[B,T]` mask, whose zeros are the keys whose scores are masked.
    let is_scores = stage::parse(name).is_some_and(|s| s.kind == StageKind::AttnScores);
    let key_mask = query_mask.and_then(|m| m.clone().into_dimensionality::<ndarray::Ix2>().ok());
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
        let masked = is_scores && r <= MASKED && o <= MASKED && masked_key(&index);
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
    worst_diff: f64,
    worst: Option<Worst>,
}

impl Accumulator {
    /// Adds one element; `masked` when it is a masked attention score on both sides, which are
    /// equal whether written as f32::MIN or -inf.
    fn add(&mut self, index: &[usize], r: f64, o: f64, tolerance: &Tolerance, masked: bool) {
        self.elements += 1;
        if masked {
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
