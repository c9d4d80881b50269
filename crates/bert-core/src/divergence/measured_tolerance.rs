//! Tolerances measured from the truth: how far float32 honestly is from float64, stage by stage,
//! on texts a model was traced with, widened by a headroom; written as a file that `diff
//! --tolerances` reads in place of the fixed table (`default_tolerance`).
//!
//! For each stage, every element of every pass measured (the real tokens; a padding key's score
//! and probability are compared by their effect elsewhere, not fitted) gives its error d = |f32 −
//! f64| and its size r = |f64|. The envelope d ≤ atol + rtol·r is fitted in two steps:
//! `max_rel`, the largest d / r among the elements at least as large as the stage's typical
//! size (the root mean square of its values), where the error is relative; then `max_abs_beyond`, the largest
//! d − max_rel·r, what the small elements need beyond it. Both times the headroom are the file's
//! rtol and atol: a second honest float32 implementation (PyTorch's) is as far from the truth as
//! this one, in another direction, so the two can differ by twice the envelope.

use std::path::Path;

use ndarray::{ArrayD, IxDyn};
use serde::{Deserialize, Serialize};

use crate::divergence::{is_masked_score, Tolerance};
use crate::error::{BertError, Result};
use crate::io::dump::Dump;
use crate::stage::{self, Dim, Part};

/// The `format` of every tolerance file.
pub const FORMAT: &str = "bert-trace-tolerances/1";

/// A tolerance file: a tolerance for each stage measured, and what it was measured on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToleranceFile {
    pub format: String,
    pub model: String,
    /// What the envelope was multiplied by.
    pub headroom: f64,
    /// The texts traced (each alone, and all of them as one padded batch).
    pub texts: Vec<String>,
    /// Other float32 dumps measured against their truths (PyTorch's), as given.
    #[serde(default)]
    pub references: Vec<String>,
    pub stages: Vec<MeasuredStage>,
}

/// One stage's measured tolerance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasuredStage {
    pub name: String,
    pub atol: f64,
    pub rtol: f64,
    /// The largest |f32 − f64| measured.
    pub max_abs: f64,
    /// The largest |f32 − f64| / |f64| among the elements at least as large as the stage's
    /// root mean square.
    pub max_rel: f64,
    /// How many elements were measured.
    pub elements: usize,
}

impl ToleranceFile {
    /// The tolerance of stage `name`, if the file measured it.
    pub fn tolerance(&self, name: &str) -> Option<Tolerance> {
        self.stages.iter().find(|s| s.name == name).map(|s| Tolerance { atol: s.atol, rtol: s.rtol })
    }

    /// Reads and checks a tolerance file: its format, and every tolerance a finite number, 0 or
    /// more.
    pub fn read(path: &Path) -> Result<ToleranceFile> {
        let refuse = |problem: String| BertError::File { path: path.into(), problem };
        let bytes = crate::io::files::read_optional(path, crate::io::files::MAX_CONFIG)?
            .ok_or_else(|| refuse("does not exist".into()))?;
        let file: ToleranceFile =
            serde_json::from_slice(&bytes).map_err(|e| refuse(format!("is not a tolerance file ({FORMAT}): {e}")))?;
        if file.format != FORMAT {
            return Err(refuse(format!("is a {:?} file, not {FORMAT}", file.format)));
        }
        for stage in &file.stages {
            let bad = [stage.atol, stage.rtol].iter().any(|v| !(v.is_finite() && *v >= 0.0));
            if bad || stage::parse(&stage.name).is_none() {
                return Err(refuse(format!(
                    "its stage {:?} has atol {} and rtol {}: a known stage, and finite numbers 0 or more, are needed",
                    stage.name, stage.atol, stage.rtol
                )));
            }
        }
        Ok(file)
    }
}

/// Each stage's errors, gathered over the passes measured.
#[derive(Default)]
pub struct Measurement {
    /// Per stage, in the order first seen: every element's (|f32 − f64|, |f64|).
    stages: Vec<(String, Vec<(f64, f64)>)>,
}

impl Measurement {
    /// Adds every float stage `rounded` (a float32 pass) and `exact` (its float64 truth, of the
    /// same input) both hold, over the real tokens. Refused: a truth that is not float64, or of
    /// another input.
    pub fn add(&mut self, rounded: &Dump, exact: &Dump) -> Result<()> {
        let refuse = |dump: &Dump, problem: String| BertError::Dump { path: dump.dir.clone(), problem };
        if exact.float_dtype() != crate::stage::DType::F64 {
            return Err(refuse(
                exact,
                "is not a float64 dump: a tolerance is measured against the exact result".into(),
            ));
        }
        if rounded.float_dtype() != crate::stage::DType::F32 || !rounded.simulation().is_none() {
            return Err(refuse(
                rounded,
                "is not a plain float32 pass: a tolerance measures float32's own error (not float64's, nor a narrower \
                 format's)"
                    .into(),
            ));
        }
        crate::io::dump::same_input(rounded, exact)?;
        let mask = exact.attention_mask()?;
        let ids = exact.entry("input.ids").map(|e| e.shape.clone());
        if let (Some(mask), Some(ids)) = (&mask, &ids) {
            if mask.shape() != ids.as_slice() || ids.len() != 2 {
                return Err(refuse(
                    exact,
                    format!("its input.attention_mask is {:?}, its input.ids {ids:?}: [B, T] both", mask.shape()),
                ));
            }
        }
        for entry in &exact.manifest.stages {
            let Some(stage) = stage::parse(&entry.name) else { continue };
            if stage.info().part == Part::Input || !entry.dtype.starts_with("float") {
                continue;
            }
            let Some(theirs) = rounded.entry(&entry.name) else { continue };
            let (truth, value) = (exact.read(entry)?.to_f64(), rounded.read(theirs)?.to_f64());
            if truth.shape() != value.shape() {
                return Err(BertError::Dump {
                    path: rounded.dir.clone(),
                    problem: format!("its {} is {:?}, the truth's {:?}", entry.name, value.shape(), truth.shape()),
                });
            }
            // Each batch and token axis must be the mask's, which says which tokens are real.
            let dims = stage.info().shape;
            if let (Some(mask), true) = (&mask, dims.len() == truth.ndim()) {
                let (b, t) = (mask.shape()[0], mask.shape()[1]);
                let fits = dims.iter().zip(truth.shape()).all(|(dim, &n)| match dim {
                    stage::Dim::B => n == b,
                    stage::Dim::T => n == t,
                    _ => true,
                });
                if !fits {
                    return Err(refuse(
                        exact,
                        format!("its {} is {:?}, not of its {b} sequence(s) of {t} tokens", entry.name, truth.shape()),
                    ));
                }
            }
            let first_bad = truth.iter().zip(value.iter()).position(|(t, v)| !(t.is_finite() && v.is_finite()));
            if let Some(at) = first_bad {
                let dump = if truth.iter().nth(at).is_some_and(|t| t.is_finite()) { rounded } else { exact };
                return Err(refuse(
                    dump,
                    format!(
                        "its {} holds a value that is not finite (element {at}): no tolerance is measured from it",
                        entry.name
                    ),
                ));
            }
            let pairs = real_pairs(
                &truth,
                &value,
                stage.info().shape,
                mask.as_ref(),
                stage.is_value_of(stage::StageKind::AttnScores),
            );
            match self.stages.iter_mut().find(|(name, _)| *name == entry.name) {
                Some((_, all)) => all.extend(pairs),
                None => self.stages.push((entry.name.clone(), pairs)),
            }
        }
        Ok(())
    }

    /// Every stage's envelope, times `headroom`, in the order first seen.
    pub fn tolerances(&self, headroom: f64) -> Vec<MeasuredStage> {
        self.stages
            .iter()
            .map(|(name, pairs)| {
                let n = pairs.len().max(1) as f64;
                let typical = (pairs.iter().map(|(_, r)| r * r).sum::<f64>() / n).sqrt();
                let max_rel =
                    pairs.iter().filter(|(_, r)| *r >= typical && *r > 0.0).map(|(d, r)| d / r).fold(0.0, f64::max);
                let beyond = pairs.iter().map(|(d, r)| (d - max_rel * r).max(0.0)).fold(0.0, f64::max);
                let max_abs = pairs.iter().map(|(d, _)| *d).fold(0.0, f64::max);
                // A stage whose operation rounds may round where these texts did not: never
                // less than one float32 rounding. A lookup rounds nothing, and stays exact.
                let exact = stage::parse(name).is_some_and(|s| s.info().agreement == crate::stage::Agreement::Exact);
                let floor = if exact { 0.0 } else { f64::from(f32::EPSILON) / 2.0 };
                MeasuredStage {
                    name: name.clone(),
                    atol: headroom * beyond,
                    rtol: headroom * max_rel.max(floor),
                    max_abs,
                    max_rel,
                    elements: pairs.len(),
                }
            })
            .collect()
    }
}

/// (|value − truth|, |truth|) of every element of a stage of axes `dims` whose tokens are real
/// (each `T` axis's index a real token of its sequence), a masked score left out.
fn real_pairs(
    truth: &ArrayD<f64>,
    value: &ArrayD<f64>,
    dims: &[Dim],
    mask: Option<&ArrayD<i64>>,
    scores: bool,
) -> Vec<(f64, f64)> {
    let batch_axis = dims.iter().position(|d| *d == Dim::B).filter(|_| dims.len() == truth.ndim());
    let token_axes: Vec<usize> = dims.iter().enumerate().filter(|(_, d)| **d == Dim::T).map(|(i, _)| i).collect();
    let real = |index: &IxDyn| -> bool {
        let (Some(mask), Some(b)) = (mask, batch_axis) else { return true };
        token_axes.iter().all(|&axis| mask[IxDyn(&[index[b], index[axis]])] != 0)
    };
    truth
        .indexed_iter()
        .zip(value.iter())
        .filter(|((index, t), _)| real(index) && !(scores && is_masked_score(**t, None)))
        .map(|((_, &t), &v)| ((v - t).abs(), t.abs()))
        .collect()
}
