//! The activation that config.json names in `hidden_act`, used by the feed-forward block and
//! the MLM head's transform.

use ndarray::{Array, Dimension};

use crate::ops;

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
#[error("hidden_act `{0}` is not supported (expected gelu, gelu_new, gelu_pytorch_tanh, gelu_fast or relu)")]
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

    /// `[..]` -> `[..]`: the activation of every element.
    pub fn forward<D: Dimension>(self, x: Array<f32, D>) -> Array<f32, D> {
        match self {
            Activation::Gelu => ops::gelu(x),
            Activation::GeluTanh => ops::gelu_tanh(x),
            Activation::Relu => ops::relu(x),
        }
    }
}
