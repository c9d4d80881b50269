//! The MLM head at the labelled positions only, as Google's `run_pretraining.py` computes it
//! (`gather_indexes`): a training step needs the logits of the M positions it predicts, not of
//! all B·T, and the decoder to the vocabulary is the costliest part of a small model's step (for
//! the course's model, V = 8,192 words against H = 256: two fifths of the step's arithmetic).
//!
//! The rows are the same rows, through the same head and the same loss, so the loss and every
//! gradient are the same numbers up to float rounding: the order of some float sums differs
//! (the decoder's gradient sums over M rows instead of B·T rows, of which the unlabelled ones
//! add zero), which can change their last bits.

use ndarray::{Array2, Array3, ArrayView3};

use crate::objectives::IGNORE;
use crate::ops::Float;

/// `[B,T,H]` hidden states and `[B,T]` labels -> `[1,M,H]`, the rows of the M labelled positions
/// (sequence by sequence, position by position), and `[1,M]`, their labels.
pub(crate) fn gather<F: Float>(hidden: ArrayView3<'_, F>, labels: &Array2<i64>) -> (Array3<F>, Array2<i64>) {
    let h = hidden.dim().2;
    let at: Vec<(usize, usize)> = labelled(labels).collect();
    let mut rows = Array3::zeros((1, at.len(), h));
    let mut row_labels = Array2::zeros((1, at.len()));
    for (m, &(seq, pos)) in at.iter().enumerate() {
        rows.slice_mut(ndarray::s![0, m, ..]).assign(&hidden.slice(ndarray::s![seq, pos, ..]));
        row_labels[[0, m]] = labels[[seq, pos]];
    }
    (rows, row_labels)
}

/// `[1,M,H]` d loss / d the gathered rows -> `[B,T,H]`: each row back at its position, zero at
/// every position without a label (the loss does not read them through this head).
pub(crate) fn scatter<F: Float>(d_rows: ArrayView3<'_, F>, labels: &Array2<i64>) -> Array3<F> {
    let (b, t) = labels.dim();
    let mut d_hidden = Array3::zeros((b, t, d_rows.dim().2));
    for (m, (seq, pos)) in labelled(labels).enumerate() {
        d_hidden.slice_mut(ndarray::s![seq, pos, ..]).assign(&d_rows.slice(ndarray::s![0, m, ..]));
    }
    d_hidden
}

/// The labelled positions `(sequence, position)`, in order.
fn labelled(labels: &Array2<i64>) -> impl Iterator<Item = (usize, usize)> + '_ {
    labels.indexed_iter().filter(|(_, &label)| label != IGNORE).map(|(at, _)| at)
}
