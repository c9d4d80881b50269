//! Dropout, BERT's regularisation, in training only (transformers' `model.train()`; every other
//! pass is `model.eval()`, where dropout is the identity). Where transformers drops:
//!
//! | stage | HF module | probability |
//! | --- | --- | --- |
//! | `embeddings.dropout` | `bert.embeddings.dropout`, after the LayerNorm | `hidden_dropout_prob` |
//! | `layer{i}.attention.probs_dropout` | the functional dropout of eager attention, before `probs @ value` | `attention_probs_dropout_prob` |
//! | `layer{i}.attention.output_dropout` | `attention.output.dropout`, before the residual | `hidden_dropout_prob` |
//! | `layer{i}.ffn.output_dropout` | `output.dropout`, before the residual | `hidden_dropout_prob` |
//! | `classifier.dropout` | `BertForSequenceClassification.dropout`, before `classifier` | `classifier_dropout`, else `hidden_dropout_prob` |
//!
//! Each is a stage of its own, after its mask (`..._dropout_mask`): 0 where an element is
//! dropped, 1/(1-p) where it is kept, the tensor PyTorch's CPU dropout multiplies by (its
//! `noise`). The stage before keeps the value before dropout: `attention.probs` are the
//! probabilities softmax gave, which is what a learner reads as attention.
//!
//! A mask is drawn from the pass's seed and its stage alone, element by element in row-major
//! order, with SplitMix64 ([`ops::dropout_mask`]), so that a training step's masks are the same
//! on every machine, thread count and kernel, and a dump's masks can be handed to PyTorch
//! (`scripts/train_reference.py` does).

use ndarray::{Array, ArrayBase, Data, Dimension};
use serde::{Deserialize, Serialize};

use super::gradients::Record;
use crate::io::config::BertConfig;
use crate::ops::{self, Float};
use crate::pass::{Halt, Tracer};
use crate::stage::{DropoutRate, Stage, StageKind};

/// The probability of dropout at each kind of place, as config.json gives them or a run's
/// `dropout` option sets them all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DropoutRates {
    /// After the embeddings and before each block's residual (`hidden_dropout_prob`).
    pub hidden: f64,
    /// On the attention probabilities (`attention_probs_dropout_prob`).
    pub attention: f64,
    /// On the pooler's output before a classifier (`classifier_dropout`, else `hidden`).
    pub classifier: f64,
}

impl DropoutRates {
    /// The rates of `config.json`, as transformers reads them.
    pub fn of_config(config: &BertConfig) -> DropoutRates {
        DropoutRates {
            hidden: config.hidden_dropout_prob,
            attention: config.attention_probs_dropout_prob,
            classifier: config.classifier_dropout.unwrap_or(config.hidden_dropout_prob),
        }
    }

    /// The same rate `p` everywhere.
    pub fn all(p: f64) -> DropoutRates {
        DropoutRates { hidden: p, attention: p, classifier: p }
    }

    /// A rate no run can use (below 0, 1 or more, or not a number), if there is one.
    pub fn outside(&self) -> Option<f64> {
        [self.hidden, self.attention, self.classifier].into_iter().find(|p| !(*p >= 0.0 && *p < 1.0))
    }

    /// Whether nothing is ever dropped.
    pub fn is_off(&self) -> bool {
        *self == DropoutRates::all(0.0)
    }

    /// A training step's dropout with these rates, its masks drawn from `seed`; None when off.
    pub fn with_seed(self, seed: u64) -> Option<Dropout> {
        (!self.is_off()).then_some(Dropout { rates: self, seed })
    }
}

/// `0.1`, or each rate by its place when they differ: what a run's first line says.
impl std::fmt::Display for DropoutRates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.attention == self.hidden, self.classifier == self.hidden) {
            (true, true) => write!(f, "{:?}", self.hidden),
            _ => {
                write!(f, "hidden {:?}, attention {:?}, classifier {:?}", self.hidden, self.attention, self.classifier)
            }
        }
    }
}

/// A training pass's dropout: the probability at each kind of place and the seed of its masks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dropout {
    pub rates: DropoutRates,
    /// The masks' seed: one per training step.
    pub seed: u64,
}

impl Dropout {
    /// The probability that an element of the dropout stage `kind` is dropped.
    pub fn rate(&self, kind: StageKind) -> f64 {
        let dropout = kind.mask_for().unwrap_or(kind);
        match dropout.info().drops.map(|drops| drops.rate) {
            Some(DropoutRate::Attention) => self.rates.attention,
            Some(DropoutRate::Classifier) => self.rates.classifier,
            Some(DropoutRate::Hidden) | None => self.rates.hidden,
        }
    }

    /// The mask of the dropout stage `stage`, of `shape`: each element 0 with probability p,
    /// else 1/(1-p) (rounded to `F`, as PyTorch rounds its scale to the tensor's type).
    pub fn mask<F: Float, D: Dimension>(&self, stage: Stage, shape: D) -> Array<F, D> {
        // The stage's own stream: the seed, the kind's row of the table and the layer.
        let layer = stage.layer.map_or(0, |l| l as u64 + 1);
        ops::dropout_mask(self.seed ^ ((stage.kind.index() as u64) << 48) ^ (layer << 32), self.rate(stage.kind), shape)
    }
}

/// `..._dropout`: `x ⊙ mask`, each element dropped (0) or scaled by 1/(1-p).
pub fn dropout<F: Float, D: Dimension>(x: Array<F, D>, mask: &Array<F, D>) -> Array<F, D> {
    x * mask
}

/// The backward of [`dropout`]: d x = d dropout ⊙ mask.
pub fn dropout_backward<F: Float, S: Data<Elem = F>, D: Dimension>(
    d_out: Array<F, D>,
    mask: &ArrayBase<S, D>,
) -> Array<F, D> {
    d_out * mask
}

/// Whether `kind` is a dropout mask, which a training step draws rather than computes.
pub fn is_mask(kind: StageKind) -> bool {
    kind.mask_for().is_some()
}

/// The mask stage of the dropout stage `kind`, which comes right before it.
pub fn mask_of(kind: StageKind) -> StageKind {
    kind.info().drops.unwrap_or_else(|| panic!("{kind:?} is not a dropout stage")).mask
}

/// In a training pass (`dropout` given): draws the mask of the dropout stage `stage`, traces it,
/// then traces and returns `x` with it applied. Otherwise `x` as it is, and nothing is traced.
pub(crate) fn apply<F: Float, D: Dimension>(
    dropout: Option<&Dropout>,
    stage: Stage,
    x: Array<F, D>,
    tracer: &mut Tracer,
) -> Result<Array<F, D>, Halt> {
    let Some(dropout) = dropout else {
        return Ok(x);
    };
    let mask_stage = Stage { kind: mask_of(stage.kind), ..stage };
    let mut mask = dropout.mask::<F, D>(mask_stage, x.raw_dim());
    tracer.float(mask_stage, &mut mask)?;
    let mut dropped = self::dropout(x, &mask);
    tracer.float(stage, &mut dropped)?;
    Ok(dropped)
}

/// The backward through the dropout stage `stage`: in a pass that dropped (its mask is in
/// `record`), traces d loss / d the stage and returns d loss / d its input, `d_out ⊙ mask`; in
/// a pass that did not, `d_out` as it is.
pub(crate) fn backward<F: Float, D: Dimension>(
    record: &Record<F>,
    stage: Stage,
    mut d_out: Array<F, D>,
    tracer: &mut Tracer,
) -> Result<Array<F, D>, Halt> {
    let mask_stage = Stage { kind: mask_of(stage.kind), ..stage };
    let Some(mask) = record.of_dim::<D>(mask_stage) else {
        return Ok(d_out);
    };
    tracer.float(stage.grad(), &mut d_out)?;
    Ok(dropout_backward(d_out, &mask))
}
