//! Does padding change a real token's numbers? A text traced alone, and the same text as one
//! row of a padded batch, must give the same value at every real position of every stage:
//! padding only appends positions that the attention mask hides from every real query. A port
//! whose mask does not reach the scores (or reaches them with too small a number) lets the
//! padding's keys into the softmax, and every stage after it differs from the text's own pass.
//!
//! [`padding_rows`] sets each row of a batched dump against the dump of its text alone, stage by
//! stage, over the real positions (the first `len` of every `T` axis), and checks that the batch
//! hides its padding keys from the real queries: a padding key's score masked as `diff` reads
//! one ([`is_masked_score`]: at or below -1000, whatever constant masked it), its probability
//! at most e^-88, below float32's smallest normal number.

use ndarray::{ArrayD, Axis, IxDyn, Slice};
use serde::Serialize;

use crate::divergence::{compare_tensors, is_masked_score, StageReport, Status, Tolerance};
use crate::error::{BertError, Result};
use crate::io::dump::Dump;
use crate::pass::Tensor;
use crate::stage::{self, Dim, Part, Stage, StageKind};

/// The largest probability a padding key may have: e^-88, below float32's smallest normal
/// number.
pub const HIDDEN_BELOW: f64 = 6.0e-39;

/// One stage of a batch against its texts alone.
#[derive(Clone, Debug, Serialize)]
pub struct PaddingStage {
    pub name: String,
    /// The batch's rows against the texts' own passes over the real positions, as a diff
    /// reports a stage (the largest difference of any row; `status` the worst).
    pub report: StageReport,
    /// The sequence with the largest difference.
    pub sequence: usize,
    /// An attention stage's first padding key the batch did not hide from a real query:
    /// `[b, head, query, key]`.
    pub unmasked: Option<Vec<usize>>,
}

impl PaddingStage {
    /// Whether the batch gives this stage's real positions as the texts alone do, within the
    /// tolerance, and hides its padding keys.
    pub fn passed(&self) -> bool {
        self.report.status == Status::Pass && self.unmasked.is_none()
    }
}

/// Every stage of a batch against its texts alone.
#[derive(Clone, Debug, Serialize)]
pub struct PaddingRows {
    /// Each text's tokens: the real positions of its row.
    pub lengths: Vec<usize>,
    pub stages: Vec<PaddingStage>,
    /// Stages of the batch not compared, and why (a mean over the batch, absent alone).
    pub not_compared: Vec<(String, String)>,
}

impl PaddingRows {
    /// The first stage, in execution order, whose real positions differ beyond tolerance or
    /// that lets a padding key through.
    pub fn first_leak(&self) -> Option<&PaddingStage> {
        self.stages.iter().find(|stage| !stage.passed())
    }
}

/// Sets each row of `batched` (a padded batch's dump) against `alone[b]` (the dump of its text
/// alone), every stage both have, each within `tolerance(stage)`. Refused, naming the dump: a
/// count of texts that is not the batch's, a text whose tokens are not its row's, a row not
/// padded on the right.
pub fn padding_rows(batched: &Dump, alone: &[Dump], tolerance: impl Fn(Stage) -> Tolerance) -> Result<PaddingRows> {
    let lengths = check_rows(batched, alone)?;
    let mut stages = Vec::new();
    let mut not_compared = Vec::new();
    for entry in &batched.manifest.stages {
        let Some(stage) = stage::parse(&entry.name) else { continue };
        let info = stage.info();
        if info.part == Part::Input || stage.is_grad() || !entry.dtype.starts_with("float") {
            continue;
        }
        let dims = info.shape;
        if dims.first() != Some(&Dim::B) {
            not_compared.push((entry.name.clone(), "one value for the whole batch".into()));
            continue;
        }
        let Some(missing) = alone.iter().position(|d| d.entry(&entry.name).is_none()).map(|i| &alone[i]) else {
            stages.push(compare_stage(batched, alone, stage, &entry.name, dims, &lengths, &tolerance)?);
            continue;
        };
        not_compared.push((entry.name.clone(), format!("{} does not hold it", missing.dir.display())));
    }
    if stages.is_empty() {
        // A verdict over no stage would say padding changes nothing when nothing was compared.
        return Err(BertError::Dump {
            path: batched.dir.clone(),
            problem: "has no computed stage that every text alone also holds: nothing to compare".into(),
        });
    }
    Ok(PaddingRows { lengths, stages, not_compared })
}

/// The real positions of `b`'s row of a stage of axes `dims`: index `b` on the batch axis, the
/// first `len` on every token axis.
fn real(values: &ArrayD<f64>, dims: &[Dim], b: usize, len: usize) -> ArrayD<f64> {
    let mut view = values.view();
    for (axis, dim) in dims.iter().enumerate() {
        match dim {
            Dim::B => view.slice_axis_inplace(Axis(axis), Slice::from(b..=b)),
            Dim::T => view.slice_axis_inplace(Axis(axis), Slice::from(0..len)),
            _ => {}
        }
    }
    view.to_owned()
}

/// Refuses a stage of `dump` whose shape is not the one its axes `dims` give for a batch of `b`
/// sequences of `t` tokens (what the rows are cut from must hold them).
fn check_shape(dump: &Dump, name: &str, shape: &[usize], dims: &[Dim], (b, t): (usize, usize)) -> Result<()> {
    let fits = shape.len() == dims.len()
        && dims.iter().zip(shape).all(|(dim, &n)| match dim {
            Dim::B => n == b,
            Dim::T => n == t,
            _ => true,
        });
    match fits {
        true => Ok(()),
        false => {
            let axes: Vec<&str> = dims.iter().map(|d| d.symbol()).collect();
            Err(BertError::Dump {
                path: dump.dir.clone(),
                problem: format!(
                    "its {name} is {shape:?}, not [{}] for {b} sequence(s) of {t} tokens",
                    axes.join(", ")
                ),
            })
        }
    }
}

/// How bad a row's comparison is: a failure before any pass, then the larger difference (a NaN
/// the largest).
fn badness(report: &StageReport) -> (bool, f64) {
    let max_abs =
        report.stats.as_ref().map_or(f64::INFINITY, |s| if s.max_abs.is_nan() { f64::INFINITY } else { s.max_abs });
    (report.status != Status::Pass, max_abs)
}

fn compare_stage(
    batched: &Dump,
    alone: &[Dump],
    stage: Stage,
    name: &str,
    dims: &[Dim],
    lengths: &[usize],
    tolerance: &impl Fn(Stage) -> Tolerance,
) -> Result<PaddingStage> {
    let entry = batched.entry(name).expect("listed");
    let t = lengths_t(batched)?;
    check_shape(batched, name, &entry.shape, dims, (lengths.len(), t))?;
    let values = batched.read(entry)?.to_f64();
    let mut worst: Option<(usize, StageReport)> = None;
    for (b, (dump, &len)) in alone.iter().zip(lengths).enumerate() {
        let theirs = dump.entry(name).expect("checked");
        check_shape(dump, name, &theirs.shape, dims, (1, len))?;
        let row = Tensor::F64(real(&values, dims, b, len));
        let own = Tensor::F64(real(&dump.read(theirs)?.to_f64(), dims, 0, len));
        let report = compare_tensors(name, &own, &row, tolerance(stage), None);
        let worse = worst.as_ref().is_none_or(|(_, w)| {
            let (new, old) = (badness(&report), badness(w));
            (new.0 && !old.0) || (new.0 == old.0 && new.1 > old.1)
        });
        if worse {
            worst = Some((b, report));
        }
    }
    let Some((sequence, report)) = worst else {
        return Err(BertError::Dump { path: batched.dir.clone(), problem: "is a batch of no sequence".into() });
    };
    let unmasked = match stage.kind {
        StageKind::AttnScores | StageKind::AttnProbs => unmasked(&values, lengths, stage.kind),
        _ => None,
    };
    Ok(PaddingStage { name: name.to_string(), report, sequence, unmasked })
}

/// The first padding key of `[B,nh,T,T]` scores or probabilities that a real query can see:
/// a score not masked, or a probability above [`HIDDEN_BELOW`] (or NaN).
fn unmasked(values: &ArrayD<f64>, lengths: &[usize], kind: StageKind) -> Option<Vec<usize>> {
    let shape = values.shape();
    let (heads, t) = (shape[1], shape[3]);
    for (b, &len) in lengths.iter().enumerate() {
        for h in 0..heads {
            for q in 0..len {
                for k in len..t {
                    let value = values[IxDyn(&[b, h, q, k])];
                    let seen = match kind {
                        StageKind::AttnScores => !is_masked_score(value, Some(true)),
                        _ => value.is_nan() || value > HIDDEN_BELOW,
                    };
                    if seen {
                        return Some(vec![b, h, q, k]);
                    }
                }
            }
        }
    }
    None
}

/// The batch's token count, T of its `input.ids`.
fn lengths_t(batched: &Dump) -> Result<usize> {
    let entry = batched.entry("input.ids").expect("checked by check_rows");
    Ok(entry.shape.get(1).copied().unwrap_or(0))
}

/// Each row's real length, after checking that `alone` are `batched`'s texts, one a row, and
/// that the batch pads on the right.
fn check_rows(batched: &Dump, alone: &[Dump]) -> Result<Vec<usize>> {
    let refuse = |dump: &Dump, problem: String| BertError::Dump { path: dump.dir.clone(), problem };
    let ints = |dump: &Dump, name: &str| -> Result<ArrayD<i64>> {
        let entry = dump.entry(name).ok_or_else(|| refuse(dump, format!("holds no {name}, which says its tokens")))?;
        Ok(dump.read(entry)?.to_f64().mapv(|v| v as i64))
    };
    let (ids, mask) = (ints(batched, "input.ids")?, ints(batched, "input.attention_mask")?);
    if ids.ndim() != 2 {
        return Err(refuse(batched, format!("its input.ids are {:?}, not [B, T]", ids.shape())));
    }
    if mask.shape() != ids.shape() {
        return Err(refuse(
            batched,
            format!(
                "its input.attention_mask is {:?}, its input.ids {:?}: one mask value a token",
                mask.shape(),
                ids.shape()
            ),
        ));
    }
    if alone.is_empty() {
        return Err(refuse(batched, "has no text alone to be set against".into()));
    }
    if ids.shape()[0] != alone.len() {
        return Err(refuse(
            batched,
            format!(
                "is a batch of {} sequences, and {} texts alone were given: one for each row",
                ids.shape()[0],
                alone.len()
            ),
        ));
    }
    let mut lengths = Vec::new();
    for (b, dump) in alone.iter().enumerate() {
        let row_mask = mask.index_axis(Axis(0), b);
        let len = row_mask.iter().take_while(|&&m| m == 1).count();
        if row_mask.iter().skip(len).any(|&m| m != 0) {
            return Err(refuse(
                batched,
                format!("row {b}'s attention mask is not its tokens then padding (1s then 0s)"),
            ));
        }
        let own = ints(dump, "input.ids")?;
        let own_mask = ints(dump, "input.attention_mask")?;
        let row: Vec<i64> = ids.index_axis(Axis(0), b).iter().take(len).copied().collect();
        let theirs: Vec<i64> = own.iter().copied().collect();
        if own.ndim() != 2 || own.shape()[0] != 1 || own_mask.iter().any(|&m| m != 1) {
            return Err(refuse(dump, format!("is not one text without padding: its input.ids are {:?}", own.shape())));
        }
        if theirs != row {
            return Err(refuse(
                dump,
                format!(
                    "its tokens are not row {b} of {}: {} ids against the row's {len}",
                    batched.dir.display(),
                    theirs.len()
                ),
            ));
        }
        lengths.push(len);
    }
    Ok(lengths)
}
