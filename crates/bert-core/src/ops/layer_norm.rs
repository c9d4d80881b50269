//! LayerNorm over the last axis: (x - mean) / sqrt(var + eps) · weight + bias.
//!
//! The variance is the biased one (divided by H, not H - 1), as PyTorch computes it; BERT's eps
//! is 1e-12 (from config.json), not PyTorch's default 1e-5.

use ndarray::{Array, Array1, ArrayView, ArrayView1, Axis, Dimension, Zip};

use super::kernels::elementwise;
use super::{fast, Float};

/// One row's mean, its variance (biased: divided by the row's length, as PyTorch's) and
/// √(variance + eps): what LayerNorm subtracts and divides by. The one place they are computed,
/// for the reference forward, the backward and `explain` alike.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Moments<F> {
    pub mean: F,
    pub variance: F,
    pub std: F,
}

/// The [`Moments`] of `row`.
pub fn moments<F: Float>(row: ArrayView1<'_, F>, eps: F) -> Moments<F> {
    let n = F::of(row.len() as f64);
    let mean = row.sum() / n;
    let variance = row.mapv(|v| (v - mean) * (v - mean)).sum() / n;
    Moments { mean, variance, std: (variance + eps).sqrt() }
}

/// What LayerNorm's backward takes from one row, with g = d out ⊙ weight and x̂ the normalised
/// row: mean(g) and mean(g ⊙ x̂), the two means the row's own mean and variance pass back. The
/// one place they are computed, for the backward and `explain` alike.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackMoments<F> {
    pub g_mean: F,
    pub gx_mean: F,
}

/// The [`BackMoments`] of one row's `g` and `x_hat`.
pub fn back_moments<F: Float>(g: ArrayView1<'_, F>, x_hat: ArrayView1<'_, F>) -> BackMoments<F> {
    let n = F::of(g.len() as f64);
    BackMoments { g_mean: g.sum() / n, gx_mean: (&g * &x_hat).sum() / n }
}

/// `[..,H]` -> `[..,H]`, in place: every vector of H values normalised on its own.
pub fn layer_norm_rows<F: Float, D: Dimension>(
    x: Array<F, D>,
    weight: ArrayView1<'_, F>,
    bias: ArrayView1<'_, F>,
    eps: F,
) -> Array<F, D> {
    F::layer_norm_rows(x, weight, bias, eps)
}

/// [`layer_norm_rows`] on f32, by the fast kernel where it applies.
pub(super) fn layer_norm_rows_f32<D: Dimension>(
    mut x: Array<f32, D>,
    weight: ArrayView1<'_, f32>,
    bias: ArrayView1<'_, f32>,
    eps: f32,
) -> Array<f32, D> {
    if fast() && !weight.is_empty() {
        if let (Some(values), Some(w), Some(b)) = (x.as_slice_mut(), weight.as_slice(), bias.as_slice()) {
            elementwise::layer_norm_rows(values, w, b, eps);
            return x;
        }
    }
    layer_norm_rows_reference(x, weight, bias, eps)
}

/// The formula, one row at a time.
pub fn layer_norm_rows_reference<F: Float, D: Dimension>(
    mut x: Array<F, D>,
    weight: ArrayView1<'_, F>,
    bias: ArrayView1<'_, F>,
    eps: F,
) -> Array<F, D> {
    let last = Axis(x.ndim() - 1);
    for mut row in x.lanes_mut(last) {
        let Moments { mean, std, .. } = moments(row.view(), eps);
        Zip::from(&mut row).and(weight).and(bias).for_each(|v, &w, &b| *v = (*v - mean) / std * w + b);
    }
    x
}

/// The backward of [`layer_norm_rows`]: the input `x` `[..,H]`, the weight and d loss / d out
/// -> (d loss / d x, d loss / d weight, d loss / d bias).
///
/// With x̂ = (x - mean) · rstd, rstd = 1 / √(var + eps) and out = x̂ · w + b:
/// db = Σ_rows dout, dw = Σ_rows dout · x̂, and with g = dout · w,
/// dx = rstd · (g - mean(g) - x̂ · mean(g · x̂)): the two means are what the row's own mean and
/// variance pass back. The mean and rstd are recomputed from x rather than kept by the forward.
pub fn layer_norm_rows_backward<F: Float, D: Dimension>(
    x: ArrayView<'_, F, D>,
    weight: ArrayView1<'_, F>,
    eps: F,
    d_out: ArrayView<'_, F, D>,
) -> (Array<F, D>, Array1<F>, Array1<F>) {
    let last = Axis(x.ndim() - 1);
    let mut dx = d_out.to_owned();
    let (mut d_weight, mut d_bias) = (Array1::zeros(weight.len()), Array1::zeros(weight.len()));
    for ((x_row, d_row), mut dx_row) in x.lanes(last).into_iter().zip(d_out.lanes(last)).zip(dx.lanes_mut(last)) {
        let Moments { mean, std, .. } = moments(x_row, eps);
        let rstd = F::one() / std;
        let x_hat = x_row.mapv(|v| (v - mean) * rstd);
        d_bias += &d_row;
        d_weight += &(&d_row * &x_hat);
        let g = &d_row * &weight;
        let BackMoments { g_mean, gx_mean } = back_moments(g.view(), x_hat.view());
        Zip::from(&mut dx_row).and(&g).and(&x_hat).for_each(|d, &g, &xh| *d = rstd * (g - g_mean - xh * gx_mean));
    }
    (dx, d_weight, d_bias)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gradcheck;

    #[test]
    fn backward_matches_finite_differences() {
        let x = gradcheck::values(&[2, 3, 6], 3) * 2.0;
        let (w, b) = (gradcheck::values(&[6], 4) + 1.0, gradcheck::values(&[6], 5));
        let (w, b) =
            (w.into_dimensionality::<ndarray::Ix1>().unwrap(), b.into_dimensionality::<ndarray::Ix1>().unwrap());
        let upstream = gradcheck::values(&[2, 3, 6], 6);
        let eps = 1e-12;
        let (dx, dw, db) = layer_norm_rows_backward(x.view(), w.view(), eps, upstream.view());
        let forward = |x: &ndarray::ArrayD<f64>, w: &Array1<f64>, b: &Array1<f64>| {
            layer_norm_rows_reference(x.clone(), w.view(), b.view(), eps)
        };
        gradcheck::assert_close("dx", &dx, &gradcheck::numeric(|x| forward(x, &w, &b), &x, &upstream));
        let as_1d = |a: ndarray::ArrayD<f64>| a.into_dimensionality::<ndarray::Ix1>().unwrap();
        let numeric_w = gradcheck::numeric(|w| forward(&x, &as_1d(w.clone()), &b), &w.clone().into_dyn(), &upstream);
        gradcheck::assert_close("dweight", &dw.into_dyn(), &numeric_w);
        let numeric_b = gradcheck::numeric(|b| forward(&x, &w, &as_1d(b.clone())), &b.clone().into_dyn(), &upstream);
        gradcheck::assert_close("dbias", &db.into_dyn(), &numeric_b);
    }
    use crate::ops::{with_kernels, Kernels};
    use ndarray::{Array1, Array3};

    #[test]
    fn fast_and_reference_match_f64_on_awkward_rows() {
        // One value per row (the output is the bias), odd widths, values far from zero.
        for h in [1, 7, 16, 33, 384] {
            let x = Array3::from_shape_fn((2, 3, h), |(b, t, i)| 100.0 + ((b * 13 + t * 7 + i * 3) % 11) as f32 / 5.0);
            let weight = Array1::from_shape_fn(h, |i| 1.0 + (i % 5) as f32 / 10.0);
            let bias = Array1::from_shape_fn(h, |i| (i % 3) as f32 / 10.0 - 0.1);
            let want = layer_norm_rows_reference(
                x.mapv(f64::from),
                weight.mapv(f64::from).view(),
                bias.mapv(f64::from).view(),
                1e-12,
            );
            for kernels in [Kernels::Fast, Kernels::Reference] {
                let got = with_kernels(kernels, || layer_norm_rows(x.clone(), weight.view(), bias.view(), 1e-12));
                for ((index, g), w) in got.indexed_iter().zip(&want) {
                    assert!((*g as f64 - w).abs() <= 2e-5, "{kernels:?}, H = {h}, {index:?}: expected {w}, got {g}");
                }
            }
        }
    }
}
