//! The feed-forward activations that BERT checkpoints name in `hidden_act`.
//!
//! They run on every element of the `[B,T,I]` intermediate tensor (1.5 million values per layer
//! for one 512-token sequence), so they are written as branch-free formulas that the compiler
//! vectorizes (see [`crate::simd`]) rather than calls into a maths library.

use ndarray::ArrayViewMut;
use ndarray::Dimension;

use crate::simd::{self, vectorized, LANES};
use crate::threads::{self, PARALLEL_MIN_LEN};

/// `hidden_act` from config.json.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `gelu`: the exact form, x · Φ(x) = x · (1 + erf(x / √2)) / 2, as `torch.nn.functional.gelu`.
    Gelu,
    /// `gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`: the tanh approximation of GPT-2 and early BERT code.
    GeluTanh,
    /// `relu`: max(x, 0).
    Relu,
}

/// An activation name that we do not implement.
#[derive(Debug, thiserror::Error)]
#[error("hidden_act `{0}` is not supported (expected gelu, gelu_new, gelu_pytorch_tanh or relu)")]
pub struct UnknownActivation(pub String);

impl Activation {
    pub fn from_name(name: &str) -> Result<Activation, UnknownActivation> {
        match name {
            "gelu" => Ok(Activation::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Activation::GeluTanh),
            "relu" => Ok(Activation::Relu),
            other => Err(UnknownActivation(other.to_string())),
        }
    }

    /// Applies the activation to one value.
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::Gelu => gelu_erf(x),
            Activation::GeluTanh => gelu_tanh(x),
            Activation::Relu => x.max(0.0),
        }
    }

    /// Applies the activation in place, element by element, with the same formulas as
    /// [`Activation::apply`].
    ///
    /// A large tensor is split between the threads (see `threads::for_each_part`).
    pub fn apply_inplace<D: Dimension>(self, mut x: ArrayViewMut<'_, f32, D>) {
        match x.as_slice_memory_order_mut() {
            Some(values) => threads::for_each_part(values, LANES, PARALLEL_MIN_LEN / LANES, |_, part| match self {
                Activation::Gelu => gelu_erf_slice(part),
                Activation::GeluTanh => gelu_tanh_slice(part),
                Activation::Relu => relu_slice(part),
            }),
            None => x.mapv_inplace(|v| self.apply(v)),
        }
    }
}

vectorized! {
    fn gelu_erf_slice(values: &mut [f32]) {
        for v in values {
            *v = gelu_erf(*v);
        }
    }
}

vectorized! {
    fn gelu_tanh_slice(values: &mut [f32]) {
        for v in values {
            *v = gelu_tanh(*v);
        }
    }
}

vectorized! {
    fn relu_slice(values: &mut [f32]) {
        for v in values {
            *v = v.max(0.0);
        }
    }
}

/// Exact GELU: x · (1 + erf(x / √2)) / 2.
#[inline(always)]
pub fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// The tanh approximation: x · (1 + tanh(√(2/π) · (x + 0.044715 x³))) / 2.
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
}

/// erf(x) for f32, within a few ulp, as a ratio of two polynomials in x² (the approximation
/// Eigen and XLA use). Outside [-4, 4], erf is ±1 to f32 precision, so x is clamped there.
// The coefficients are written as Eigen publishes them, so that a reader can check them against
// its source; one has more digits than an f32 holds, which rounds to the same f32.
#[allow(clippy::excessive_precision)]
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    // The numerator is odd in x, the denominator even.
    let p = -2.726_142_3e-10f32;
    let p = p * x2 + 2.770_681_4e-8;
    let p = p * x2 - 2.101_024e-6;
    let p = p * x2 - 5.692_506_4e-5;
    let p = p * x2 - 7.349_906_3e-4;
    let p = p * x2 - 2.954_599_8e-3;
    let p = p * x2 - 1.609_603_3e-2;
    let q = -1.456_607_2e-5f32;
    let q = q * x2 - 2.133_740_6e-4;
    let q = q * x2 - 1.682_827e-3;
    let q = q * x2 - 7.373_329_2e-3;
    let q = q * x2 - 1.426_473_9e-2;
    x * p / q
}

/// tanh(x) = 1 - 2 / (e^{2x} + 1), with the branch-free [`simd::exp`]; e^{2x} overflowing to
/// +inf gives exactly 1, and underflowing to 0 gives exactly -1.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    1.0 - 2.0 / (simd::exp(2.0 * x) + 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest |approximation - reference| over [-10, 10].
    fn worst(approx: impl Fn(f32) -> f32, reference: impl Fn(f32) -> f32) -> f32 {
        (-10_000..=10_000).map(|i| i as f32 * 1e-3).map(|x| (approx(x) - reference(x)).abs()).fold(0.0, f32::max)
    }

    #[test]
    fn erf_and_tanh_are_close_to_libm() {
        assert!(worst(erf, libm::erff) < 5e-7, "erf {}", worst(erf, libm::erff));
        assert!(worst(tanh, f32::tanh) < 5e-7, "tanh {}", worst(tanh, f32::tanh));
    }

    #[test]
    fn the_slice_loops_equal_the_scalar_formulas() {
        for activation in [Activation::Gelu, Activation::GeluTanh, Activation::Relu] {
            let xs = ndarray::Array1::linspace(-12.0f32, 12.0, 1001);
            let mut ys = xs.clone();
            activation.apply_inplace(ys.view_mut());
            for (x, y) in xs.iter().zip(&ys) {
                assert_eq!(*y, activation.apply(*x), "{activation:?}({x})");
            }
        }
    }
}
