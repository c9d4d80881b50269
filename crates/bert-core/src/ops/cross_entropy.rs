//! Cross-entropy, for the pretraining losses: how surprised the model is by the right answer.

use ndarray::{Array1, Array2, ArrayView1, ArrayView2, Axis};

use super::softmax::{softmax_row, SoftmaxRow};
use super::{for_each_row, Float};

/// `[N,V]` -> `[N,V]`: log softmax of every row, log p_j = x_j - max - log Σ_k exp(x_k - max).
///
/// In f64: the losses are a handful of numbers, and the sum over a vocabulary of 30,000 logits
/// keeps its digits that way.
pub fn log_softmax_rows<F: Float>(logits: ArrayView2<'_, F>) -> Array2<f64> {
    let mut out = logits.mapv(|v| v.to_f64().unwrap_or(f64::NAN));
    for mut row in out.axis_iter_mut(Axis(0)) {
        let SoftmaxRow { max, sum, .. } = softmax_row(row.view());
        let log_sum = sum.ln();
        row.mapv_inplace(|v| v - max - log_sum);
    }
    out
}

/// `[N,V]`, `[N]` -> `[N]`: the cross-entropy of each row against its label, -log p_label, and 0
/// where the label is `ignore` (transformers' -100, "nothing to predict here"), as
/// `CrossEntropyLoss(reduction="none", ignore_index=-100)`.
pub fn cross_entropy<F: Float>(logits: ArrayView2<'_, F>, labels: ArrayView1<'_, i64>, ignore: i64) -> Array1<f64> {
    assert_eq!(labels.len(), logits.nrows(), "a label for each row of logits");
    let mut losses = vec![0.0; labels.len()];
    // Each row is a softmax of its own: the threads share the rows, with the same bits.
    for_each_row(&mut losses, 1, ROWS_PER_PART, |i, loss| {
        let label = labels[i];
        if label == ignore {
            return;
        }
        // Only the labelled rows need their log softmax, and only at the label.
        let log_probs = log_softmax_rows(logits.row(i).insert_axis(Axis(0)));
        loss[0] = -log_probs[[0, label as usize]];
    });
    Array1::from_vec(losses)
}

/// The fewest rows the losses hand to a thread of their own: a row of a vocabulary's logits is
/// thousands of exponentials, so a few rows outweigh the hand-over. Each row is a softmax of its
/// own, so the rows' results do not depend on how they are shared.
const ROWS_PER_PART: usize = 8;

/// The backward of `scale · Σ_rows` [`cross_entropy`]: `[N,V]` logits and `[N]` labels ->
/// d loss / d logits `[N,V]` = scale · (softmax(row) - onehot(label)), and 0 for a row whose
/// label is `ignore`. For the mean over the labelled rows (BERT's MLM loss), scale is 1 over
/// their count.
pub fn cross_entropy_backward<F: Float>(
    logits: ArrayView2<'_, F>,
    labels: ArrayView1<'_, i64>,
    ignore: i64,
    scale: f64,
) -> Array2<F> {
    let (rows, width) = logits.dim();
    assert_eq!(labels.len(), rows, "a label for each row of logits");
    let mut d_logits = vec![F::zero(); rows * width];
    // Each row is a softmax of its own: the threads share the rows, with the same bits.
    for_each_row(&mut d_logits, width, ROWS_PER_PART, |i, d_row| {
        let label = labels[i];
        if label == ignore {
            return;
        }
        let probs = log_softmax_rows(logits.row(i).insert_axis(Axis(0))).mapv(f64::exp);
        for (j, (d, &p)) in d_row.iter_mut().zip(probs.row(0)).enumerate() {
            let onehot = if j as i64 == label { 1.0 } else { 0.0 };
            *d = F::of(scale * (p - onehot));
        }
    });
    Array2::from_shape_vec((rows, width), d_logits).expect("[N,V] values")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backward_matches_finite_differences_and_ignored_rows_get_nothing() {
        use crate::ops::gradcheck;
        let logits = gradcheck::values(&[4, 6], 18) * 3.0;
        let labels = ndarray::arr1(&[2, -100, 5, 0]);
        let scale = 1.0 / 3.0; // the mean over the three labelled rows
        let got = cross_entropy_backward(logits.view().into_dimensionality().unwrap(), labels.view(), -100, scale);
        let loss = |l: &ndarray::ArrayD<f64>| {
            let losses = cross_entropy(l.view().into_dimensionality().unwrap(), labels.view(), -100);
            ndarray::arr0(losses.sum() * scale).into_dyn()
        };
        let expected = gradcheck::numeric(loss, &logits, &ndarray::arr0(1.0).into_dyn());
        gradcheck::assert_close("cross_entropy_backward", &got.clone().into_dyn(), &expected);
        assert!(got.row(1).iter().all(|&v| v == 0.0), "an ignored row gets no gradient");
    }

    #[test]
    fn uniform_logits_cost_log_v_and_ignored_rows_cost_nothing() {
        let logits = Array2::<f32>::zeros((3, 4));
        let losses = cross_entropy(logits.view(), ndarray::arr1(&[2, -100, 0]).view(), -100);
        assert!((losses[0] - 4f64.ln()).abs() < 1e-12, "{losses}");
        assert_eq!(losses[1], 0.0);
        let probs: f64 = log_softmax_rows(ndarray::arr2(&[[1.0f32, 2.0, 3.0]]).view()).mapv(f64::exp).sum();
        assert!((probs - 1.0).abs() < 1e-12, "probabilities sum to {probs}");
    }
}
