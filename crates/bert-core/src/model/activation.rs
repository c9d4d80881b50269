//! The activation that config.json names in `hidden_act` (read by `io/config.rs`), used by
//! the feed-forward block and the MLM head's transform: each name and the operation it runs.

use ndarray::{Array, ArrayView, Dimension};

pub use crate::io::config::{Activation, UnknownActivation};
use crate::ops::{self, Float};

impl Activation {
    /// `[..]` -> `[..]`: the activation of every element.
    pub fn forward<F: Float, D: Dimension>(self, x: Array<F, D>) -> Array<F, D> {
        match self {
            Activation::Gelu => ops::gelu(x),
            Activation::GeluTanh => ops::gelu_tanh(x),
            Activation::Relu => ops::relu(x),
        }
    }

    /// The backward: the activation's input `x` and d loss / d out -> d loss / d x.
    pub fn backward<F: Float, D: Dimension>(self, x: ArrayView<'_, F, D>, d_out: ArrayView<'_, F, D>) -> Array<F, D> {
        match self {
            Activation::Gelu => ops::gelu_backward(x, d_out),
            Activation::GeluTanh => ops::gelu_tanh_backward(x, d_out),
            Activation::Relu => ops::relu_backward(x, d_out),
        }
    }
}
