//! The losses: `BertForPreTraining`'s masked-language-model loss on the MLM head's logits and
//! next-sentence-prediction loss on the NSP head's, `BertForSequenceClassification`'s loss on a
//! classifier's logits, and their sum.
//!
//! Both are cross-entropies: -log of the probability the model gives the right answer. The MLM
//! loss is averaged over the labelled positions only (transformers marks every other position
//! -100): averaging over all B·T positions, a classic mistake, would make the loss depend on how
//! many tokens were not masked.

use ndarray::{arr0, Array1, Array2, Array3, ArrayD, ArrayView2, ArrayView3, ArrayViewD, Ix1, Ix2};

use crate::objectives::IGNORE;
use crate::ops::{self, Float};
use crate::pass::{Halt, Tracer};
use crate::stage::{Stage, StageKind::*};

/// `[B,T,V]` logits, `[B,T]` labels -> `mlm.losses` `[B,T]` and `mlm.loss` `[]`, which it returns.
pub(crate) fn mlm_loss<F: Float>(logits: &Array3<F>, labels: &Array2<i64>, tracer: &mut Tracer) -> Result<F, Halt> {
    let mut per_position = losses(logits.view().into_dyn(), labels.view().into_dyn())
        .into_dimensionality::<Ix2>()
        .expect("[B,T] labels, [B,T] losses");
    tracer.float(Stage::new(MlmLosses), &mut per_position)?;
    let mut loss = arr0(mean(per_position.view().into_dyn(), labels.view().into_dyn()));
    tracer.float(Stage::new(MlmLoss), &mut loss)?;
    Ok(loss[()])
}

/// `[B,2]` logits, `[B]` labels -> `nsp.losses` `[B]` and `nsp.loss` `[]`, which it returns.
/// Label 0 is "B follows A", 1 "B is random".
pub(crate) fn nsp_loss<F: Float>(logits: &Array2<F>, labels: &Array1<i64>, tracer: &mut Tracer) -> Result<F, Halt> {
    sequence_loss(logits, labels, (Stage::new(NspLosses), Stage::new(NspLoss)), tracer)
}

/// `[B,C]` logits, `[B]` classes -> `classifier.losses` `[B]` and `classifier.loss` `[]`, which it
/// returns: `BertForSequenceClassification`'s single-label loss.
pub(crate) fn classifier_loss<F: Float>(
    logits: &Array2<F>,
    labels: &Array1<i64>,
    tracer: &mut Tracer,
) -> Result<F, Halt> {
    sequence_loss(logits, labels, (Stage::new(ClassifierLosses), Stage::new(ClassifierLoss)), tracer)
}

/// A loss with one label per sequence: the cross-entropy of each sequence (`per_sequence`), then
/// their mean over the labelled sequences (`mean_stage`; today every sequence has a label).
fn sequence_loss<F: Float>(
    logits: &Array2<F>,
    labels: &Array1<i64>,
    (per_sequence, mean_stage): (Stage, Stage),
    tracer: &mut Tracer,
) -> Result<F, Halt> {
    let mut per_sequence_losses = losses(logits.view().into_dyn(), labels.view().into_dyn())
        .into_dimensionality::<Ix1>()
        .expect("[B] labels, [B] losses");
    tracer.float(per_sequence, &mut per_sequence_losses)?;
    let mut loss = arr0(mean(per_sequence_losses.view().into_dyn(), labels.view().into_dyn()));
    tracer.float(mean_stage, &mut loss)?;
    Ok(loss[()])
}

/// `loss` `[]`: the sum of the losses computed. With the MLM and NSP losses, it is
/// `BertForPreTraining`'s `loss`; with MLM labels only, `BertForMaskedLM`'s; with a classifier's
/// labels only, `BertForSequenceClassification`'s.
pub(crate) fn total_loss<F: Float>(parts: &[Option<F>], tracer: &mut Tracer) -> Result<F, Halt> {
    let mut loss = arr0(total(parts));
    tracer.float(Stage::new(Loss), &mut loss)?;
    Ok(loss[()])
}

/// `mlm.losses`, `nsp.losses`: `[..,C]` logits and `[..]` labels -> `[..]`, `-log softmax(logits)[label]`
/// at every position, 0 where the label is -100. The labels must be classes of the last axis
/// or -100.
pub fn losses<F: Float>(logits: ArrayViewD<'_, F>, labels: ArrayViewD<'_, i64>) -> ArrayD<F> {
    let classes = *logits.shape().last().expect("logits have a class axis");
    // Every position one row, against its label.
    let rows = logits.as_standard_layout().into_owned().into_shape_with_order((labels.len(), classes));
    let flat_labels = labels.as_standard_layout().into_owned().into_shape_with_order(labels.len());
    let losses = ops::cross_entropy(rows.expect("a row per label").view(), flat_labels.expect("labels").view(), IGNORE);
    losses.mapv(F::of).into_shape_with_order(labels.raw_dim()).expect("a loss per label")
}

/// `mlm.loss`, `nsp.loss`: the mean of the losses over the labelled positions only: their sum
/// (in f64, so that the f32 losses of many positions keep their digits) divided by the count of
/// labels not -100.
pub fn mean<F: Float>(losses: ArrayViewD<'_, F>, labels: ArrayViewD<'_, i64>) -> F {
    let labelled = labels.iter().filter(|&&label| label != IGNORE).count();
    let sum: f64 = losses.iter().map(|&v| v.to_f64().unwrap_or(f64::NAN)).sum();
    F::of(sum / labelled as f64)
}

/// `loss`: the sum of whichever of the losses were computed (MLM, NSP, the classifier's), in
/// that order.
pub fn total<F: Float>(parts: &[Option<F>]) -> F {
    parts.iter().flatten().fold(F::zero(), |sum, &part| sum + part)
}

/// The backward of [`mlm_loss`]: `[B,T,V]` logits and `[B,T]` labels -> d mlm.loss / d logits
/// `[B,T,V]`: (softmax - onehot(label)) / count at each labelled position, 0 elsewhere.
pub(crate) fn mlm_loss_backward<F: Float>(logits: ArrayView3<'_, F>, labels: &Array2<i64>) -> Array3<F> {
    let (b, t, v) = logits.dim();
    let rows = logits.as_standard_layout().into_owned().into_shape_with_order((b * t, v)).expect("[B·T,V]");
    let flat_labels = labels.view().into_shape_with_order(b * t).expect("[B,T] is contiguous");
    let labelled = labels.iter().filter(|&&label| label != IGNORE).count();
    let d_rows = ops::cross_entropy_backward(rows.view(), flat_labels, IGNORE, 1.0 / labelled as f64);
    d_rows.into_shape_with_order((b, t, v)).expect("[B,T,V]")
}

/// d (the mean of the losses over the labelled positions) / d each loss: 1 / count where there
/// is a label, 0 where there is none. `[B,T]` or `[B]`, as `labels`.
pub(crate) fn mean_backward<F: Float, D: ndarray::Dimension>(labels: &ndarray::Array<i64, D>) -> ndarray::Array<F, D> {
    let labelled = labels.iter().filter(|&&label| label != IGNORE).count();
    labels.mapv(|label| if label == IGNORE { F::zero() } else { F::of(1.0 / labelled as f64) })
}

/// The backward of [`nsp_loss`] and [`classifier_loss`]: `[B,C]` logits and `[B]` labels ->
/// d loss / d logits, (softmax - onehot(label)) / count of labelled sequences.
pub(crate) fn sequence_loss_backward<F: Float>(logits: ArrayView2<'_, F>, labels: &Array1<i64>) -> Array2<F> {
    let labelled = labels.iter().filter(|&&label| label != IGNORE).count();
    ops::cross_entropy_backward(logits, labels.view(), IGNORE, 1.0 / labelled as f64)
}
