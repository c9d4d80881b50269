//! The labels of the pretraining objectives as plain data: what the tokenizer's `Batch`
//! carries, and what the masking and the losses read. This file imports nothing of the crate,
//! so that the tokenizer, the masking and the model can all use it without importing each
//! other.

use ndarray::{Array1, Array2};

/// The label of a position with nothing to predict (PyTorch's `ignore_index` default).
pub const IGNORE: i64 = -100;

/// The labels of a batch, and how it was masked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Labels {
    /// `[B,T]` the ids before masking, when tokens were masked at random.
    pub original_ids: Option<Array2<i64>>,
    /// `[B,T]` the id to predict at each position, [`IGNORE`] where nothing is predicted.
    pub mlm: Option<Array2<i64>>,
    /// `[B]` 0 when sentence B follows A, 1 when it is random.
    pub nsp: Option<Array1<i64>>,
    /// `[B]` each sequence's class for a classifier's loss: its index in `id2label`.
    pub class: Option<Array1<i64>>,
    /// Every position the random masking chose, in order.
    pub replacements: Vec<Replacement>,
}

/// What the model sees at a chosen position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplacementKind {
    /// `[MASK]` (80% of chosen tokens).
    Mask,
    /// A random token of the vocabulary (10%).
    Random,
    /// The token itself (10%).
    Keep,
}

impl ReplacementKind {
    pub fn name(self) -> &'static str {
        match self {
            ReplacementKind::Mask => "mask",
            ReplacementKind::Random => "random",
            ReplacementKind::Keep => "keep",
        }
    }
}

/// One position the masking chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replacement {
    pub seq: usize,
    pub pos: usize,
    /// The id the tokenizer gave, which is the label.
    pub original: i64,
    /// The id the model sees.
    pub shown: i64,
    pub kind: ReplacementKind,
    /// Chosen by the one-per-sequence guarantee, not by the draw with probability P.
    pub guaranteed: bool,
}
