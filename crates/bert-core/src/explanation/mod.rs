//! Why is this number what it is? One element of a dump's stage, explained: its formula with the
//! real operands, the value the dump holds beside the value the stage's own function gives from
//! the dump's own operands (`recompute.rs`, the function the forward pass calls), and every
//! element of every stage and parameter it reads.
//!
//! The explanation of each kind of stage is in `element.rs`; the sums it shows are computed in
//! f64 and shown in the stage's dtype.

mod element;
mod gradient;
mod target;

use serde::{Serialize, Serializer};

pub use self::target::{Axis, Target};
use crate::divergence::isolate::{changed_by_intervention, check_model, intervened};
use crate::error::{BertError, Result};
use crate::io::dump::Dump;
use crate::model::BertModel;
use crate::ops::Float;
use crate::pass::Tensor;
use crate::recompute::recompute_from;
use crate::stage::{self, DType};

/// A number as its dtype holds it: printed as the shortest decimal that reads back to it in that
/// dtype, and as `null` in JSON when it is not finite.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    F32(f32),
    F64(f64),
    I64(i64),
}

impl Number {
    /// `value` in `dtype` (an f64 rounded to f32 for a float32 stage).
    pub fn of(dtype: DType, value: f64) -> Number {
        match dtype {
            DType::F32 => Number::F32(value as f32),
            DType::F64 => Number::F64(value),
            DType::I64 => Number::I64(value as i64),
        }
    }

    pub fn to_f64(self) -> f64 {
        match self {
            Number::F32(v) => f64::from(v),
            Number::F64(v) => v,
            Number::I64(v) => v as f64,
        }
    }
}

impl std::fmt::Display for Number {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Rust prints a float as the shortest decimal that parses back to the same value; very
        // large and very small ones (the mask's most negative float, LayerNorm's eps) with an
        // exponent, which reads back the same.
        let exponent = |v: f64| v != 0.0 && (v.abs() >= 1e16 || v.abs() < 1e-5);
        match *self {
            Number::F32(v) if exponent(f64::from(v)) => write!(f, "{v:e}"),
            Number::F64(v) if exponent(v) => write!(f, "{v:e}"),
            Number::F32(v) => write!(f, "{v}"),
            Number::F64(v) => write!(f, "{v}"),
            Number::I64(v) => write!(f, "{v}"),
        }
    }
}

impl Serialize for Number {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            Number::F32(v) if v.is_finite() => serializer.serialize_f32(v),
            Number::F64(v) if v.is_finite() => serializer.serialize_f64(v),
            Number::I64(v) => serializer.serialize_i64(v),
            _ => serializer.serialize_none(),
        }
    }
}

/// One scalar an element reads: a stage's element, or a parameter's (`param.<transformers name>`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Operand {
    pub stage: String,
    pub index: Vec<usize>,
    pub value: Number,
}

/// A named intermediate quantity of a formula (`dot`, `max`, `mean`, ...: one table,
/// `element::STEPS`), one of an explanation's `steps` on the way from the operands to the value.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Intermediate {
    pub name: &'static str,
    pub value: Number,
}

/// One of the largest contributions to a sum: the product of the operands `inputs` points to.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Term {
    pub inputs: [usize; 2],
    pub value: Number,
}

/// One element of one stage, explained.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Explanation {
    pub stage: String,
    pub index: Vec<usize>,
    /// The value the dump holds.
    pub value: Number,
    pub dtype: &'static str,
    /// The stage's own function (the forward pass's) on the dump's operands, at this element.
    pub recomputed: Number,
    /// The formula, with its operands' values written in.
    pub formula: String,
    pub inputs: Vec<Operand>,
    pub steps: Vec<Intermediate>,
    pub terms: Vec<Term>,
}

impl Explanation {
    /// The stage's own error at this element: the dump's value less the recomputed one.
    pub fn own_error(&self) -> f64 {
        self.value.to_f64() - self.recomputed.to_f64()
    }
}

/// Explains every element `target` names of `dump`'s stage, with `model`, which must be the
/// dump's (its fingerprint, or its word embeddings of the dump's ids, must match) and in the
/// dump's precision.
pub fn explain<F: Float>(model: &BertModel<F>, dump: &Dump, target: &Target) -> Result<Vec<Explanation>> {
    check_model(model, dump)?;
    explain_checked(model, dump, target)
}

/// [`explain`] for a caller that has checked `model` against `dump` once
/// (`divergence::isolate::check_model`) and explains many of its elements, as the page of
/// `view --serve` does: the check digests every weight, which for bert-base takes longer than
/// the explanation.
pub fn explain_checked<F: Float>(model: &BertModel<F>, dump: &Dump, target: &Target) -> Result<Vec<Explanation>> {
    let bad = |problem: String| BertError::Explain { target: target.text.clone(), problem };
    let Some(entry) = dump.entry(&target.stage) else {
        let stages: Vec<stage::Stage> = dump.manifest.stages.iter().filter_map(|s| stage::parse(&s.name)).collect();
        let suggestions = stage::suggestions(&target.stage, &stages);
        let hint =
            if suggestions.is_empty() { String::new() } else { format!(" (did you mean {}?)", suggestions.join(", ")) };
        return Err(bad(format!("{} has no stage {}{hint}", dump.dir.display(), target.stage)));
    };
    let stage = stage::parse(&target.stage)
        .ok_or_else(|| bad(format!("{} is not a stage of bert-trace's table", target.stage)))?;
    let indices = target.indices(&entry.shape).map_err(bad)?;
    let value = dump.read(entry)?;
    let dtype = value.dtype();
    let mut operands = element::Operands::new(model, dump);
    // Fails before anything is recomputed for a stage that is not computed or not yet explained.
    explain_element(&mut operands, stage, &indices[0]).map_err(bad)?;
    let recomputed = match recompute_from(model, dump, stage, model.config.num_hidden_layers)? {
        Ok(recomputed) => recomputed,
        Err(reason) => return Err(bad(format!("cannot be recomputed from the dump: {reason}"))),
    };
    // A stage an intervention changed holds the intervention's value, not its formula's.
    let wiring = crate::recompute::wiring_of(dump, model.config.num_hidden_layers);
    let changed = changed_by_intervention(stage, &intervened(dump), wiring);
    indices
        .into_iter()
        .map(|index| {
            let mut parts = explain_element(&mut operands, stage, &index).map_err(bad)?;
            if let Some(reason) = &changed {
                parts.formula += &format!("; this stage is not its formula's: {reason}");
            }
            Ok(Explanation {
                stage: target.stage.clone(),
                value: at(&value, &index),
                dtype: dtype.numpy_name(),
                recomputed: at(&recomputed, &index),
                formula: parts.formula,
                inputs: parts.inputs,
                steps: parts
                    .steps
                    .into_iter()
                    .map(|(name, v)| Intermediate { name, value: Number::of(dtype, v) })
                    .collect(),
                terms: parts
                    .terms
                    .into_iter()
                    .map(|(inputs, v)| Term { inputs, value: Number::of(dtype, v) })
                    .collect(),
                index,
            })
        })
        .collect()
}

/// The element `index` of `stage`, a value or a gradient, explained from the dump's operands.
fn explain_element<F: Float>(
    operands: &mut element::Operands<'_, F>,
    stage: stage::Stage,
    index: &[usize],
) -> std::result::Result<element::Parts, String> {
    if !stage.is_grad() {
        return element::explain(operands, stage, index);
    }
    let mut parts = element::Parts::of(operands, stage)?;
    gradient::explain(operands, &mut parts, stage, index)?;
    Ok(parts)
}

/// The element of `tensor` at `index`, as its dtype holds it.
fn at(tensor: &Tensor, index: &[usize]) -> Number {
    let index = ndarray::IxDyn(index);
    match tensor {
        Tensor::F32(a) => Number::F32(a[index]),
        Tensor::F64(a) => Number::F64(a[index]),
        Tensor::I64(a) => Number::I64(a[index]),
    }
}
