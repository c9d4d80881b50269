//! BERT's masking, as transformers' `DataCollatorForLanguageModeling` does it: each token that
//! is neither special nor padding is chosen with probability P; a chosen token is predicted
//! from what the model sees there, which is `[MASK]` with probability 0.8, a random token of
//! the vocabulary with 0.1, and the token itself with 0.1.
//!
//! Why the 10% random and 10% unchanged: the model never meets `[MASK]` after pretraining, so it
//! must not learn that only `[MASK]` positions matter; it has to keep a good representation of
//! every token, since any may be one it is asked about.
//!
//! The random numbers come from [`SplitMix64`] seeded with the user's seed, drawn in a fixed
//! order: sequence by sequence, position by position, and only at eligible positions. For each
//! one, `u = uniform()`, chosen if `u < P`; for a chosen one, `v = uniform()`: `[MASK]` if
//! `v < 0.8`, else a random id `next_u64() % vocabulary size` if `v < 0.9`, else unchanged. So
//! a seed gives the same masks on every platform, and `scripts/dump_reference.py` repeats them.

use ndarray::Array2;

use super::splitmix::SplitMix64;
use super::IGNORE;
use crate::error::{BertError, Result};
use crate::load::tokenize::{Batch, BertTokenizer, MASK};

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
}

/// Masks `batch` at random with `probability` and `seed` (see the module documentation):
/// `batch.ids` becomes what the model sees, and `batch.labels` records the original ids, the
/// labels and every replacement. Positions already labelled (typed `[MASK]`s with a target) are
/// special tokens, so they are never chosen.
pub fn mask_tokens(batch: &mut Batch, tokenizer: &BertTokenizer, probability: f64, seed: u64) -> Result<()> {
    if !(probability > 0.0 && probability <= 1.0) {
        return Err(BertError::Labels(format!(
            "masking probability {probability} is not a number greater than 0 and at most 1"
        )));
    }
    let mask_id = tokenizer
        .token_to_id(MASK)
        .map(i64::from)
        .ok_or_else(|| BertError::Labels("the vocabulary has no [MASK] token, so nothing can be masked".into()))?;
    let specials = tokenizer.special_ids();
    let vocab_len = tokenizer.vocab_len() as u64;
    let original = batch.ids.clone();
    let mut labels = batch.labels.mlm.take().unwrap_or_else(|| Array2::from_elem(original.dim(), IGNORE));
    let mut rng = SplitMix64::new(seed);
    let mut replacements = Vec::new();
    let mut eligible = 0;
    for ((seq, pos), &id) in original.indexed_iter() {
        if batch.attention_mask[[seq, pos]] == 0 || specials.contains(&id) {
            continue;
        }
        eligible += 1;
        if rng.uniform() >= probability {
            continue;
        }
        let v = rng.uniform();
        let (kind, shown) = if v < 0.8 {
            (ReplacementKind::Mask, mask_id)
        } else if v < 0.9 {
            (ReplacementKind::Random, (rng.next_u64() % vocab_len) as i64)
        } else {
            (ReplacementKind::Keep, id)
        };
        labels[[seq, pos]] = id;
        batch.ids[[seq, pos]] = shown;
        replacements.push(Replacement { seq, pos, original: id, shown, kind });
    }
    if replacements.is_empty() {
        return Err(BertError::Labels(format!(
            "masking with probability {probability} and seed {seed} chose none of the {eligible} tokens that can \
             be masked, so there is nothing to predict; try another seed or a larger probability"
        )));
    }
    batch.labels.original_ids = Some(original);
    batch.labels.mlm = Some(labels);
    batch.labels.replacements = replacements;
    Ok(())
}
