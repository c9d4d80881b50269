//! The feed-forward activations that BERT checkpoints name in `hidden_act`, applied to every
//! element: the exact GELU (`gelu`), its tanh approximation (`gelu_new`, `gelu_pytorch_tanh`)
//! and ReLU.

use ndarray::{Array, ArrayView, Dimension, Zip};

use super::kernels::elementwise;
use super::{fast, Float};

/// Exact GELU of every element, in place: x · Φ(x), as `torch.nn.functional.gelu`.
pub fn gelu<F: Float, D: Dimension>(x: Array<F, D>) -> Array<F, D> {
    F::gelu(x)
}

/// [`gelu`] on f32, by the fast kernel where it applies.
pub(super) fn gelu_f32<D: Dimension>(mut x: Array<f32, D>) -> Array<f32, D> {
    if fast() {
        if let Some(values) = x.as_slice_memory_order_mut() {
            elementwise::gelu(values);
            return x;
        }
    }
    gelu_reference(x)
}

/// The formula: x · (1 + erf(x / √2)) / 2, where Φ(x) = (1 + erf(x / √2)) / 2 is the standard
/// normal distribution's CDF.
pub fn gelu_reference<F: Float, D: Dimension>(x: Array<F, D>) -> Array<F, D> {
    let half = F::of(0.5);
    let sqrt_2 = F::of(std::f64::consts::SQRT_2);
    x.mapv_into(|v| half * v * (F::one() + (v / sqrt_2).erf()))
}

/// The tanh approximation of GELU of every element, in place (GPT-2's and early BERT code's).
pub fn gelu_tanh<F: Float, D: Dimension>(x: Array<F, D>) -> Array<F, D> {
    F::gelu_tanh(x)
}

/// [`gelu_tanh`] on f32, by the fast kernel where it applies.
pub(super) fn gelu_tanh_f32<D: Dimension>(mut x: Array<f32, D>) -> Array<f32, D> {
    if fast() {
        if let Some(values) = x.as_slice_memory_order_mut() {
            elementwise::gelu_tanh(values);
            return x;
        }
    }
    gelu_tanh_reference(x)
}

/// The formula: x · (1 + tanh(√(2/π) · (x + 0.044715 x³))) / 2.
pub fn gelu_tanh_reference<F: Float, D: Dimension>(x: Array<F, D>) -> Array<F, D> {
    let half = F::of(0.5);
    let c = F::of((2.0 / std::f64::consts::PI).sqrt());
    let cubic = F::of(0.044715);
    x.mapv_into(|v| half * v * (F::one() + (c * (v + cubic * v * v * v)).tanh()))
}

/// tanh of every element, in place (the pooler's activation).
pub fn tanh<F: Float, D: Dimension>(x: Array<F, D>) -> Array<F, D> {
    F::tanh_array(x)
}

/// [`tanh`] on f32: each value's tanh in f64, rounded to f32 once (`elementwise::tanh_rounded`),
/// where std's f32 `tanh` is within about an ulp.
pub(super) fn tanh_f32<D: Dimension>(mut x: Array<f32, D>) -> Array<f32, D> {
    if fast() {
        if let Some(values) = x.as_slice_memory_order_mut() {
            elementwise::tanh_rounded(values);
            return x;
        }
    }
    tanh_reference(x)
}

/// The formula: tanh x = (e^x - e^-x) / (e^x + e^-x), by std's `tanh` of the element type.
pub fn tanh_reference<F: Float, D: Dimension>(x: Array<F, D>) -> Array<F, D> {
    x.mapv_into(F::tanh)
}

/// ReLU of every element, in place: max(x, 0). It is one comparison per value, so it has no
/// kernel of its own.
pub fn relu<F: Float, D: Dimension>(x: Array<F, D>) -> Array<F, D> {
    relu_reference(x)
}

/// The formula: max(x, 0).
pub fn relu_reference<F: Float, D: Dimension>(x: Array<F, D>) -> Array<F, D> {
    x.mapv_into(|v| v.max(F::zero()))
}

/// The backward of [`gelu`]: d loss / d out -> d loss / d x.
pub fn gelu_backward<F: Float, D: Dimension>(x: ArrayView<'_, F, D>, d_out: ArrayView<'_, F, D>) -> Array<F, D> {
    F::gelu_backward(x, d_out)
}

/// [`gelu_backward`] on f32, by the fast kernel where it applies.
pub(super) fn gelu_backward_f32<D: Dimension>(x: ArrayView<'_, f32, D>, d_out: ArrayView<'_, f32, D>) -> Array<f32, D> {
    if fast() && x.shape() == d_out.shape() {
        let mut d = super::c_order_copy(&d_out);
        if let (Some(x), Some(values)) = (x.as_slice(), d.as_slice_mut()) {
            elementwise::gelu_backward(x, values);
            return d;
        }
    }
    gelu_backward_reference(x, d_out)
}

/// The formula: d/dx [x · Φ(x)] = Φ(x) + x · φ(x), with φ(x) = exp(-x²/2) / √(2π) the normal
/// density; times d loss / d out.
pub fn gelu_backward_reference<F: Float, D: Dimension>(
    x: ArrayView<'_, F, D>,
    d_out: ArrayView<'_, F, D>,
) -> Array<F, D> {
    let (half, sqrt_2) = (F::of(0.5), F::of(std::f64::consts::SQRT_2));
    let inv_sqrt_2pi = F::of(1.0 / (2.0 * std::f64::consts::PI).sqrt());
    Zip::from(&x).and(&d_out).map_collect(|&v, &d| {
        let cdf = half * (F::one() + (v / sqrt_2).erf());
        let pdf = inv_sqrt_2pi * (-half * v * v).exp();
        d * (cdf + v * pdf)
    })
}

/// The backward of [`gelu_tanh`]: with u = √(2/π) (x + 0.044715 x³) and t = tanh u,
/// d/dx [x (1 + t) / 2] = (1 + t) / 2 + x (1 - t²) √(2/π) (1 + 3 · 0.044715 x²) / 2.
pub fn gelu_tanh_backward<F: Float, D: Dimension>(x: ArrayView<'_, F, D>, d_out: ArrayView<'_, F, D>) -> Array<F, D> {
    let half = F::of(0.5);
    let c = F::of((2.0 / std::f64::consts::PI).sqrt());
    let cubic = F::of(0.044715);
    Zip::from(&x).and(&d_out).map_collect(|&v, &d| {
        let t = (c * (v + cubic * v * v * v)).tanh();
        let du = c * (F::one() + F::of(3.0) * cubic * v * v);
        d * (half * (F::one() + t) + half * v * (F::one() - t * t) * du)
    })
}

/// The backward of [`relu`]: the gradient passes where x > 0 and stops elsewhere (PyTorch's
/// choice at x = 0 too).
pub fn relu_backward<F: Float, D: Dimension>(x: ArrayView<'_, F, D>, d_out: ArrayView<'_, F, D>) -> Array<F, D> {
    Zip::from(&x).and(&d_out).map_collect(|&v, &d| if v > F::zero() { d } else { F::zero() })
}

/// The backward of tanh (the pooler's activation), from its output y: d/dx tanh x = 1 - y².
pub fn tanh_backward<F: Float, D: Dimension>(y: ArrayView<'_, F, D>, d_out: ArrayView<'_, F, D>) -> Array<F, D> {
    Zip::from(&y).and(&d_out).map_collect(|&y, &d| d * (F::one() - y * y))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{with_kernels, Kernels};
    use crate::words::Choice;
    use ndarray::Array1;

    /// The activations in f64, written out independently of the code above, with the
    /// error function and tanh of libm and std.
    fn exact(name: &str, x: f64) -> f64 {
        match name {
            "gelu" => 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
            "gelu_tanh" => 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh()),
            "relu" => x.max(0.0),
            "tanh" => x.tanh(),
            _ => unreachable!(),
        }
    }

    type Op = fn(Array1<f32>) -> Array1<f32>;

    type Forward = fn(ndarray::ArrayD<f64>) -> ndarray::ArrayD<f64>;
    type Backward = fn(ndarray::ArrayViewD<'_, f64>, ndarray::ArrayViewD<'_, f64>) -> ndarray::ArrayD<f64>;

    #[test]
    fn every_backward_matches_finite_differences() {
        let tanh: Forward = |x| x.mapv_into(f64::tanh);
        let tanh_backward_from_input: Backward = |x, d| tanh_backward(x.mapv(f64::tanh).view(), d);
        // (name, forward, backward); values away from 0, where ReLU has no derivative.
        let cases: [(&str, Forward, Backward); 4] = [
            ("gelu", gelu_reference, gelu_backward),
            ("gelu_tanh", gelu_tanh_reference, gelu_tanh_backward),
            ("relu", relu_reference, relu_backward),
            ("tanh", tanh, tanh_backward_from_input),
        ];
        let x = crate::ops::gradcheck::values(&[3, 7], 7).mapv(|v| if v.abs() < 0.01 { 0.5 } else { v * 4.0 });
        let upstream = crate::ops::gradcheck::values(&[3, 7], 8);
        for (name, forward, backward) in cases {
            let expected = crate::ops::gradcheck::numeric(|x| forward(x.clone()), &x, &upstream);
            crate::ops::gradcheck::assert_close(name, &backward(x.view(), upstream.view()), &expected);
        }
    }

    #[test]
    fn every_activation_matches_its_f64_formula_both_ways() {
        let ops: [(&str, Op); 4] = [("gelu", gelu), ("gelu_tanh", gelu_tanh), ("relu", relu), ("tanh", tanh)];
        // -12..12 in small steps, and 1001 values (not a multiple of a vector's 16 lanes).
        let xs = Array1::linspace(-12.0f32, 12.0, 1001);
        for (name, op) in ops {
            for kernels in [Kernels::Fast, Kernels::Reference] {
                let got = with_kernels(kernels, || op(xs.clone()));
                let mut worst = 0.0f64;
                for (&x, &y) in xs.iter().zip(&got) {
                    let want = exact(name, x as f64);
                    let err = (y as f64 - want).abs();
                    worst = worst.max(err);
                    assert!(err <= 1e-6 * (1.0 + want.abs()), "{name} {kernels:?}({x}): expected {want}, got {y}");
                }
                println!("{name:<10} {:<9} largest error against f64 over [-12, 12]: {worst:.2e}", kernels.name());
            }
        }
    }

    #[test]
    fn fast_gelu_backward_is_within_half_an_ulp_and_the_density_s_error() {
        // Every f32 in [-10, 10] in steps of about 1e-4, each with its own upstream gradient.
        // The kernel rounds once from f64, but its density e^{-x²/2} comes from an f64 exp
        // within 1e-11 of itself. So the bound is half an ulp of the result plus that share of the
        // x · φ(x) term, plus d times Φ's absolute error, half of erf's 3.2e-12 (which is most of
        // the error below x ≈ -6, where the derivative itself is under 1e-8).
        let xs = Array1::from_iter((-100_000..=100_000).map(|i| i as f32 * 1e-4));
        let ds = xs.mapv(|x| ((x * 7.3).sin() + 1.5) * if x > 0.3 { -1.0 } else { 1.0 });
        let got = with_kernels(Kernels::Fast, || gelu_backward(xs.view(), ds.view()));
        for ((&x, &d), &g) in xs.iter().zip(&ds).zip(&got) {
            let (x, d) = (x as f64, d as f64);
            let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            let want = d * (0.5 * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)) + x * pdf);
            let half_ulp =
                0.5 * (f32::from_bits((want as f32).abs().to_bits() + 1) as f64 - (want as f32).abs() as f64);
            let bound = half_ulp + 1e-11 * (d * x * pdf).abs() + 1.6e-12 * d.abs();
            assert!((g as f64 - want).abs() <= bound, "gelu backward at {x}, d {d}: expected {want}, got {g}");
        }
        let odd = Array1::from(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0]);
        let ones = Array1::from(vec![1.0f32; 4]);
        let fast = with_kernels(Kernels::Fast, || gelu_backward(odd.view(), ones.view()));
        let formula = gelu_backward_reference(odd.view(), ones.view());
        for (i, (f, r)) in fast.iter().zip(&formula).enumerate() {
            assert!(f == r || (f.is_nan() && r.is_nan()), "at {}: the kernel gives {f}, the formula {r}", odd[i]);
        }
    }

    #[test]
    fn fast_tanh_is_the_f64_tanh_rounded_once() {
        // Every f32 in [-10, 10] in steps of about 1e-4, and the values whose tanh rounds to
        // ±1: each result within half an f32 ulp of f64's tanh (rounding the f64 result, itself
        // within an f64 ulp, can only miss the nearest f32 by that f64 ulp).
        let xs: Vec<f32> = (-100_000..=100_000).map(|i| i as f32 * 1e-4).chain([-30.0, 30.0, 0.0, -0.0]).collect();
        let got = with_kernels(Kernels::Fast, || tanh(Array1::from(xs.clone())));
        for (&x, &y) in xs.iter().zip(&got) {
            let want = (x as f64).tanh();
            let nearest = want as f32;
            let ulp = f32::from_bits(nearest.abs().to_bits() + 1) as f64 - nearest.abs() as f64;
            let err = (y as f64 - want).abs();
            assert!(err <= 0.5 * ulp + want.abs() * f64::EPSILON, "tanh({x}): expected {want}, got {y}");
        }
        let signed_zero = with_kernels(Kernels::Fast, || tanh(Array1::from(vec![-0.0f32, f32::NAN, f32::INFINITY])));
        assert!(signed_zero[0] == 0.0 && signed_zero[0].is_sign_negative(), "tanh(-0) is -0");
        assert!(signed_zero[1].is_nan() && signed_zero[2] == 1.0, "tanh of NaN and +inf");
    }
}
