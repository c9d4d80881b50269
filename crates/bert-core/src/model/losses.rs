//! The pretraining losses of `BertForPreTraining`: the masked-language-model loss on the MLM
//! head's logits, the next-sentence-prediction loss on the NSP head's, and their sum.
//!
//! Both are cross-entropies: -log of the probability the model gives the right answer. The MLM
//! loss is averaged over the labelled positions only (transformers marks every other position
//! -100): averaging over all B·T positions, a classic mistake, would make the loss depend on how
//! many tokens were not masked.

use ndarray::{arr0, Array1, Array2, Array3};

use crate::objectives::IGNORE;
use crate::ops;
use crate::trace::stage::{Stage, StageKind::*};
use crate::trace::{Halt, Tracer};

/// `[B,T,V]` logits, `[B,T]` labels -> `mlm.losses` `[B,T]` and `mlm.loss` `[]`, which it returns.
pub(crate) fn mlm_loss(logits: &Array3<f32>, labels: &Array2<i64>, tracer: &mut Tracer) -> Result<f32, Halt> {
    let (b, t, v) = logits.dim();
    // [B·T,V] rows against [B·T] labels: -log softmax(logits)[label], 0 where the label is -100.
    let rows = logits.view().into_shape_with_order((b * t, v)).expect("[B,T,V] is contiguous");
    let flat_labels = labels.view().into_shape_with_order(b * t).expect("[B,T] is contiguous");
    let losses = ops::cross_entropy(rows, flat_labels, IGNORE);
    let mut per_position = losses.mapv(|l| l as f32).into_shape_with_order((b, t)).expect("B·T losses");
    tracer.f32(Stage::new(MlmLosses), &mut per_position)?;
    // The mean over the labelled positions only: the sum divided by the count of labels not -100.
    let labelled = labels.iter().filter(|&&label| label != IGNORE).count();
    let mut loss = arr0((sum(per_position.iter()) / labelled as f64) as f32);
    tracer.f32(Stage::new(MlmLoss), &mut loss)?;
    Ok(loss[()])
}

/// `[B,2]` logits, `[B]` labels -> `nsp.losses` `[B]` and `nsp.loss` `[]`, which it returns.
pub(crate) fn nsp_loss(logits: &Array2<f32>, labels: &Array1<i64>, tracer: &mut Tracer) -> Result<f32, Halt> {
    // [B]: -log p(is next) for label 0, -log p(random) for label 1.
    let mut losses = ops::cross_entropy(logits.view(), labels.view(), IGNORE).mapv(|l| l as f32);
    tracer.f32(Stage::new(NspLosses), &mut losses)?;
    // The mean over the labelled pairs, as for the MLM loss (today every pair has a label).
    let labelled = labels.iter().filter(|&&label| label != IGNORE).count();
    let mut loss = arr0((sum(losses.iter()) / labelled as f64) as f32);
    tracer.f32(Stage::new(NspLoss), &mut loss)?;
    Ok(loss[()])
}

/// `loss` `[]`: the sum of the losses computed. With both, it is `BertForPreTraining`'s `loss`;
/// with MLM labels only, it is the MLM loss, as `BertForMaskedLM` returns it.
pub(crate) fn total_loss(mlm: Option<f32>, nsp: Option<f32>, tracer: &mut Tracer) -> Result<f32, Halt> {
    let mut loss = arr0(mlm.unwrap_or(0.0) + nsp.unwrap_or(0.0));
    tracer.f32(Stage::new(Loss), &mut loss)?;
    Ok(loss[()])
}

/// The sum of `values`, in f64: the f32 losses of many positions keep their digits that way.
fn sum<'a>(values: impl Iterator<Item = &'a f32>) -> f64 {
    values.map(|&v| f64::from(v)).sum()
}
