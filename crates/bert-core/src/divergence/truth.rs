//! Which side is closer to the exact result? Both sides of a diff measured against a truth: a
//! float64 dump of the same input (`scripts/dump_reference.py --dtype float64`, transformers
//! run with `model.double()`), whose own rounding is some nine digits below float32's. Per
//! stage, the largest |side − truth| over the real tokens of each side, and which is closer.

use serde::Serialize;

use crate::divergence::{compare_tensors, Tolerance};
use crate::error::{BertError, Result};
use crate::io::dump::Dump;

/// One stage against the truth.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TruthStage {
    pub name: String,
    /// max |reference − truth|, when the reference has the stage; NaN (`null` in JSON) when a
    /// value on either side is NaN or infinite.
    pub reference_max_abs: Option<f64>,
    /// max |trace − truth|, when the trace has the stage; NaN as above.
    pub trace_max_abs: Option<f64>,
    /// The standard deviation of the truth's values of the stage (every element), the scale an
    /// error of the stage is set against.
    pub spread: f64,
}

impl TruthStage {
    /// Whether a distance is not a number: a NaN or an infinity in the side or in the truth.
    pub fn non_finite(&self) -> bool {
        [self.reference_max_abs, self.trace_max_abs].iter().flatten().any(|d| !d.is_finite())
    }

    /// `reference` or `trace`, whichever is closer; `same` when both are as close; None when
    /// either side lacks the stage or either distance is not finite (a NaN is never as close).
    pub fn closer(&self) -> Option<&'static str> {
        let (r, t) = (self.reference_max_abs?, self.trace_max_abs?);
        if !(r.is_finite() && t.is_finite()) {
            return None;
        }
        Some(if r < t {
            "reference"
        } else if t < r {
            "trace"
        } else {
            "same"
        })
    }
}

/// Every stage the truth has and either side has, measured against the truth, in the truth's
/// (execution) order. The truth must be of the same input as the reference.
pub fn against_truth(reference: &Dump, trace: &Dump, truth: &Dump) -> Result<Vec<TruthStage>> {
    // A float32 truth is no truth: its own rounding is that of the sides it would judge.
    if let Some(entry) = truth.manifest.stages.iter().find(|e| e.dtype.starts_with("float") && e.dtype != "float64") {
        return Err(BertError::Dump {
            path: truth.dir.clone(),
            problem: format!(
                "is not a float64 dump ({} is {}): the truth must be computed in float64 (scripts/dump_reference.py \
                 --dtype float64, or bert-trace's {})",
                entry.name,
                entry.dtype,
                crate::words::Opt("precision").with("f64")
            ),
        });
    }
    same_ids(reference, truth)?;
    let mask = truth.attention_mask()?;
    let mut stages = Vec::new();
    for entry in &truth.manifest.stages {
        if entry.name.starts_with("input.") {
            continue;
        }
        let exact = truth.read(entry)?;
        let distance = |side: &Dump| -> Result<Option<f64>> {
            let Some(theirs) = side.entry(&entry.name) else { return Ok(None) };
            let value = side.read(theirs)?;
            crate::divergence::check_f64_copies(&entry.name, &[&exact, &value])?;
            // The tolerance plays no part: only the distances are kept.
            let report = compare_tensors(&entry.name, &exact, &value, Tolerance::EXACT, mask.as_ref());
            Ok(report.stats.map(|s| if s.non_finite > 0 { f64::NAN } else { s.max_abs }))
        };
        let (reference_max_abs, trace_max_abs) = (distance(reference)?, distance(trace)?);
        if reference_max_abs.is_some() || trace_max_abs.is_some() {
            let spread = spread(&exact.to_f64());
            stages.push(TruthStage { name: entry.name.clone(), reference_max_abs, trace_max_abs, spread });
        }
    }
    if stages.is_empty() {
        return Err(BertError::Dump {
            path: truth.dir.clone(),
            problem: "has no float stage in common with either side: nothing to measure".into(),
        });
    }
    Ok(stages)
}

/// The standard deviation of the finite `values`.
fn spread(values: &ndarray::ArrayD<f64>) -> f64 {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let n = finite.len().max(1) as f64;
    let mean = finite.iter().sum::<f64>() / n;
    (finite.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt()
}

/// Refuses a truth of another input than `dump`'s.
fn same_ids(dump: &Dump, truth: &Dump) -> Result<()> {
    let ids = |d: &Dump| -> Result<Option<ndarray::ArrayD<f64>>> {
        match d.entry("input.ids") {
            Some(entry) => Ok(Some(d.read(entry)?.to_f64())),
            None => Ok(None),
        }
    };
    match (ids(dump)?, ids(truth)?) {
        (Some(a), Some(b)) if a != b => Err(BertError::Dump {
            path: truth.dir.clone(),
            problem: format!(
                "is a truth of another input: its input.ids ({:?}) differ from {}'s ({:?})",
                b.shape(),
                dump.dir.display(),
                a.shape()
            ),
        }),
        _ => Ok(()),
    }
}
