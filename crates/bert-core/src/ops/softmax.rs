//! Softmax over the last axis: every row becomes a probability distribution.

use ndarray::{Array, Array1, ArrayView, ArrayView1, Axis, Dimension, Zip};

use super::kernels::elementwise;
use super::{fast, for_each_row, Float};

/// One row's softmax, step by step: its largest value, exp(x - max) of each value, and their
/// sum; the probabilities are `exps / sum`. Subtracting the largest value first changes nothing
/// mathematically, keeps exp from overflowing, and turns a padded key's score (f32::MIN) into
/// exactly 0. The one place these are computed, for the reference softmax, the losses' log
/// softmax and `explain` alike.
#[derive(Clone, Debug, PartialEq)]
pub struct SoftmaxRow<F> {
    pub max: F,
    pub exps: Array1<F>,
    pub sum: F,
}

/// The [`SoftmaxRow`] of `row`.
pub fn softmax_row<F: Float>(row: ArrayView1<'_, F>) -> SoftmaxRow<F> {
    let max = row.fold(F::neg_infinity(), |m, &v| m.max(v));
    let exps = row.mapv(|v| (v - max).exp());
    let sum = exps.sum();
    SoftmaxRow { max, exps, sum }
}

/// `[..,N]` -> `[..,N]`, in place: each row becomes exp(x - max) / Σ exp(x - max).
pub fn softmax_rows<F: Float, D: Dimension>(x: Array<F, D>) -> Array<F, D> {
    F::softmax_rows(x)
}

/// [`softmax_rows`] on f32, by the fast kernel where it applies.
pub(super) fn softmax_rows_f32<D: Dimension>(mut x: Array<f32, D>) -> Array<f32, D> {
    let row_len = x.shape().last().copied().unwrap_or(1);
    if fast() && row_len > 0 {
        if let Some(values) = x.as_slice_mut() {
            elementwise::softmax_rows(values, row_len);
            return x;
        }
    }
    softmax_rows_reference(x)
}

/// The formula, one row at a time ([`softmax_row`]).
pub fn softmax_rows_reference<F: Float, D: Dimension>(mut x: Array<F, D>) -> Array<F, D> {
    let last = Axis(x.ndim() - 1);
    for mut row in x.lanes_mut(last) {
        let SoftmaxRow { exps, sum, .. } = softmax_row(row.view());
        Zip::from(&mut row).and(&exps).for_each(|v, &e| *v = e / sum);
    }
    x
}

/// The backward of [`softmax_rows`]: `probs` `[..,N]` and d loss / d probs -> d loss / d x.
///
/// p_i = exp(x_i) / Σ exp(x_k) gives ∂p_i/∂x_j = p_i (δ_ij - p_j), so
/// dx_j = Σ_i dp_i p_i (δ_ij - p_j) = p_j (dp_j - Σ_i p_i dp_i). A masked key has p_j = 0, so
/// its gradient is exactly 0: padding learns nothing.
pub fn softmax_rows_backward<F: Float, D: Dimension>(
    probs: ArrayView<'_, F, D>,
    d_probs: ArrayView<'_, F, D>,
) -> Array<F, D> {
    assert_eq!(probs.shape(), d_probs.shape(), "a gradient for each probability");
    let last = Axis(probs.ndim() - 1);
    let mut dx = super::c_order_copy(&d_probs);
    let width = probs.len_of(last);
    if let (Some(p), Some(d)) = (probs.as_slice(), dx.as_slice_mut()) {
        // Each row is a computation of its own: the threads share the rows, with the same bits.
        for_each_row(d, width, ROWS_PER_PART, |i, d_row| row_backward(&p[i * width..][..width], d_row));
        return dx;
    }
    for (mut d_row, p_row) in dx.lanes_mut(last).into_iter().zip(probs.lanes(last)) {
        let dot = Zip::from(&d_row).and(&p_row).fold(F::zero(), |acc, &d, &p| acc + d * p);
        Zip::from(&mut d_row).and(&p_row).for_each(|d, &p| *d = p * (*d - dot));
    }
    dx
}

/// One row of [`softmax_rows_backward`] on slices, in place over d probs: the same sums in the
/// same order as the loop over lanes.
fn row_backward<F: Float>(p: &[F], d: &mut [F]) {
    let dot = d.iter().zip(p).fold(F::zero(), |acc, (&d, &p)| acc + d * p);
    for (d, &p) in d.iter_mut().zip(p) {
        *d = p * (*d - dot);
    }
}

/// The fewest rows of the backward a thread takes: a row is a few hundred multiply-adds.
const ROWS_PER_PART: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gradcheck;
    use crate::ops::{with_kernels, Kernels};
    use ndarray::{Array2, Array4, ShapeBuilder};

    /// The backward shares contiguous rows between the threads; in any other layout it walks
    /// the lanes on one thread. Both are the same sums in the same order: the same bits, at a
    /// size that the threads do share.
    #[test]
    fn backward_is_the_same_bits_in_every_layout() {
        let probs = softmax_rows_reference(Array4::from_shape_fn((2, 3, 200, 37), |(b, h, i, j)| {
            ((b * 7 + h * 5 + i * 3 + j) % 23) as f32 / 4.0 - 2.5
        }));
        let d_probs =
            Array4::from_shape_fn(probs.dim(), |(b, h, i, j)| ((b + h * 3 + i * 11 + j * 13) % 17) as f32 - 8.0);
        let rows = softmax_rows_backward(probs.view(), d_probs.view());
        // The same values, stored with the last axis outermost.
        let column_major = |a: &Array4<f32>| {
            let mut c = Array4::zeros(a.dim().f());
            c.assign(a);
            c
        };
        let (probs_f, d_probs_f) = (column_major(&probs), column_major(&d_probs));
        assert!(probs_f.as_slice().is_none(), "the lanes' path");
        let lanes = softmax_rows_backward(probs_f.view(), d_probs_f.view());
        let differ = rows.iter().zip(&lanes).position(|(a, b)| a.to_bits() != b.to_bits());
        assert!(differ.is_none(), "element {differ:?} differs between the layouts");
    }

    #[test]
    fn backward_matches_finite_differences_with_masked_keys() {
        let mut x = gradcheck::values(&[2, 3, 5], 1) * 3.0;
        // A padded key in one row: the most negative float, as the additive mask makes it.
        x[[1, 2, 4]] = f64::MIN;
        let upstream = gradcheck::values(&[2, 3, 5], 2);
        let probs = softmax_rows_reference(x.clone());
        let got = softmax_rows_backward(probs.view(), upstream.view());
        // The difference quotient cannot step around f64::MIN: the masked entry is checked to be
        // exactly 0 and the others against the quotient of the unmasked entries.
        assert_eq!(got[[1, 2, 4]], 0.0, "a masked key's gradient");
        let expected = gradcheck::numeric(|x| softmax_rows_reference(x.clone()), &x.mapv(|v| v.max(-1e6)), &upstream);
        gradcheck::assert_close("softmax_rows_backward", &got, &expected);
    }

    #[test]
    fn fast_and_reference_match_f64_on_awkward_rows() {
        // One value, lengths around a vector's 16 lanes, and masked (f32::MIN) entries.
        for len in [1, 2, 15, 16, 17, 100] {
            let mut x = Array2::from_shape_fn((3, len), |(r, c)| ((r * 31 + c * 7) % 23) as f32 / 3.0 - 4.0);
            if len > 2 {
                x[[1, len - 1]] = f32::MIN;
                x[[2, 0]] = f32::MIN;
            }
            let want = softmax_rows_reference(x.mapv(f64::from));
            for kernels in [Kernels::Fast, Kernels::Reference] {
                let got = with_kernels(kernels, || softmax_rows(x.clone()));
                for ((index, g), w) in got.indexed_iter().zip(&want) {
                    assert!((*g as f64 - w).abs() <= 1e-6, "{kernels:?}, len {len}, {index:?}: expected {w}, got {g}");
                }
                assert_eq!(got[[1, len - 1]] == 0.0, len > 2, "{kernels:?}: a masked score gets exactly 0");
            }
        }
    }

    #[test]
    fn rows_of_a_4d_array_each_sum_to_one() {
        let x = Array4::from_shape_fn((2, 3, 5, 5), |(a, b, c, d)| (a + 2 * b + 3 * c + 5 * d) as f32 / 7.0);
        for kernels in [Kernels::Fast, Kernels::Reference] {
            let probs = with_kernels(kernels, || softmax_rows(x.clone()));
            for row in probs.lanes(Axis(3)) {
                assert!((row.sum() - 1.0).abs() < 1e-6, "{kernels:?}: a row sums to {}", row.sum());
            }
        }
    }
}
