//! The activation that config.json names in `hidden_act` (read by `load/config.rs`), used by
//! the feed-forward block and the MLM head's transform: each name and the operation it runs.

use ndarray::{Array, Dimension};

pub use crate::load::config::{Activation, UnknownActivation};
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
}
