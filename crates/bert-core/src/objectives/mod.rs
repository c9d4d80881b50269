//! What BERT was pretrained on: masked tokens to predict (the MLM objective) and whether
//! sentence B follows sentence A (the NSP objective). This module prepares the labels of a
//! [`Batch`]; the losses themselves are `model/losses.rs`.
//!
//! Labels follow transformers' conventions, which the classic bugs get wrong: an MLM label is
//! the original id where a token is to be predicted and -100 ([`IGNORE`]) everywhere else; an
//! NSP label is 0 when sentence B follows A and 1 when B is random.

pub mod masking;
pub mod splitmix;

use ndarray::{Array1, Array2};

use crate::error::{BertError, Result};
use crate::load::tokenize::{Batch, BertTokenizer, MASK};
use crate::model::BertModel;
use crate::trace::manifest::Inputs;

pub use self::masking::{mask_tokens, Replacement, ReplacementKind};

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
    /// Every position the random masking chose, in order.
    pub replacements: Vec<Replacement>,
}

impl BertModel {
    /// Tokenizes `inputs` and gives the batch the labels they ask for: the typed `[MASK]`s'
    /// targets, then BERT's random masking, then the next-sentence labels. A manifest's inputs
    /// give the same batch again.
    pub fn encode_inputs(&self, inputs: &Inputs, truncate: bool) -> Result<Batch> {
        let mut batch = self.encode(&inputs.texts, inputs.pair.as_deref(), truncate)?;
        if let Some(targets) = &inputs.mlm_targets {
            set_mlm_targets(&mut batch, &self.tokenizer, targets)?;
        }
        match (inputs.mask_prob, inputs.seed) {
            (Some(probability), Some(seed)) => mask_tokens(&mut batch, &self.tokenizer, probability, seed)?,
            (None, None) => {}
            _ => return Err(BertError::Labels("random masking needs both a probability and a seed".into())),
        }
        if let Some(labels) = &inputs.nsp_label {
            set_nsp_labels(&mut batch, labels)?;
        }
        Ok(batch)
    }
}

/// Labels the `[MASK]` tokens the user typed, in order (sequence by sequence, left to right),
/// with `targets`: each must be one token of the vocabulary.
pub fn set_mlm_targets(batch: &mut Batch, tokenizer: &BertTokenizer, targets: &[String]) -> Result<()> {
    let mask_id = tokenizer.token_to_id(MASK).map(i64::from);
    let typed: Vec<(usize, usize)> =
        batch.ids.indexed_iter().filter(|(_, &id)| Some(id) == mask_id).map(|(index, _)| index).collect();
    if typed.len() != targets.len() {
        return Err(BertError::Labels(format!(
            "{} target word(s) for {} [MASK] token(s) in the input; give one target per [MASK], in order",
            targets.len(),
            typed.len()
        )));
    }
    let mut labels = batch.labels.mlm.take().unwrap_or_else(|| Array2::from_elem(batch.ids.dim(), IGNORE));
    for (&position, word) in typed.iter().zip(targets) {
        labels[position] = i64::from(tokenizer.single_token(word).map_err(BertError::Labels)?);
    }
    batch.labels.mlm = Some(labels);
    Ok(())
}

/// Gives every sequence of a batch of sentence pairs its NSP label: one label for all, or one
/// per sequence.
pub fn set_nsp_labels(batch: &mut Batch, labels: &[i64]) -> Result<()> {
    let (b, _) = batch.dims();
    if !batch.is_pairs() {
        return Err(BertError::Labels("a next-sentence label needs sentence pairs (sentence B from --pair)".into()));
    }
    if let Some(bad) = labels.iter().find(|&&l| l != 0 && l != 1) {
        return Err(BertError::Labels(format!(
            "next-sentence label {bad}: expected 0 (sentence B follows A) or 1 (B is random)"
        )));
    }
    let labels = match labels.len() {
        1 => Array1::from_elem(b, labels[0]),
        n if n == b => Array1::from(labels.to_vec()),
        n => {
            return Err(BertError::Labels(format!(
                "{n} next-sentence labels for {b} sequences; give one for all, or one per sequence"
            )))
        }
    };
    batch.labels.nsp = Some(labels);
    Ok(())
}
