//! What BERT was pretrained on: masked tokens to predict (the MLM objective) and whether
//! sentence B follows sentence A (the NSP objective). This module prepares the labels of a
//! [`Batch`]; the losses themselves are `model/losses.rs`.
//!
//! Labels follow transformers' conventions, which the classic bugs get wrong: an MLM label is
//! the original id where a token is to be predicted and -100 ([`IGNORE`]) everywhere else; an
//! NSP label is 0 when sentence B follows A and 1 when B is random.

pub mod labels;
pub mod masking;
pub mod splitmix;

use ndarray::{Array1, Array2};

use crate::error::{BertError, Result};
use crate::io::tokenizer::{Batch, BertTokenizer, MASK};

pub use self::labels::{Labels, Replacement, ReplacementKind, IGNORE};
pub use self::masking::mask_tokens;

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
        return Err(BertError::Labels("a next-sentence label needs sentence pairs (sentence B from ‹pair›)".into()));
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

/// Gives every sequence of a batch its class for a classifier's loss: one label for all, or one
/// per sequence, each a name of `names` (the classifier's labels, from `id2label`) or an index
/// into them.
pub fn set_class_labels(batch: &mut Batch, names: &[String], labels: &[String]) -> Result<()> {
    let (b, _) = batch.dims();
    let class = |label: &String| -> Result<i64> {
        if let Some(index) = names.iter().position(|name| name == label) {
            return Ok(index as i64);
        }
        match label.trim().parse::<usize>() {
            Ok(index) if index < names.len() => Ok(index as i64),
            _ => Err(BertError::Labels(format!(
                "label {label:?} is not one of the classifier's {} labels: {}",
                names.len(),
                names.join(", ")
            ))),
        }
    };
    let classes = labels.iter().map(class).collect::<Result<Vec<i64>>>()?;
    let classes = match classes.len() {
        1 => Array1::from_elem(b, classes[0]),
        n if n == b => Array1::from(classes),
        n => {
            return Err(BertError::Labels(format!(
                "{n} labels for {b} sequences; give one for all, or one per sequence"
            )))
        }
    };
    batch.labels.class = Some(classes);
    Ok(())
}
