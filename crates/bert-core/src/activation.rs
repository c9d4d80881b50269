//! The feed-forward activations that BERT checkpoints name in `hidden_act`.

use ndarray::ArrayViewMut;
use ndarray::Dimension;

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

    /// Applies the activation in place, element by element.
    pub fn apply_inplace<D: Dimension>(self, mut x: ArrayViewMut<'_, f32, D>) {
        x.mapv_inplace(|v| self.apply(v));
    }
}

/// Exact GELU. `f32::erf` is not stable Rust, so erf comes from `libm`.
pub fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// The tanh approximation: x · (1 + tanh(√(2/π) · (x + 0.044715 x³))) / 2.
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh())
}
