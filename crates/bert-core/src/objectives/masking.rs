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
//!
//! On a short text, P = 0.15 often chooses nothing at all (seeds 1, 2 and 4 choose none of the
//! 17 to 19 maskable tokens of two short sentences), and a sequence with nothing to predict
//! teaches nothing. So, as d2l's `max(1, round(0.15 · n))` does, every sequence gets at least
//! one: after the pass above, each sequence (in order) that has maskable tokens but none chosen
//! gets one, its `k = next_u64() % n`-th maskable position (of n), replaced by the same
//! `v = uniform()` rule. Such a replacement is marked [`Replacement::guaranteed`].

use ndarray::Array2;

use super::labels::{Replacement, ReplacementKind, IGNORE};
use super::splitmix::SplitMix64;
use crate::error::{BertError, Result};
use crate::io::tokenizer::{Batch, BertTokenizer, MASK};

/// Masks `batch` at random with `probability` and `seed` (see the module documentation):
/// `batch.ids` becomes what the model sees, and `batch.labels` records the original ids, the
/// labels and every replacement. Positions already labelled (typed `[MASK]`s with a target) are
/// special tokens, so they are never chosen.
pub fn mask_tokens(batch: &mut Batch, tokenizer: &BertTokenizer, probability: f64, seed: u64) -> Result<()> {
    if !(probability > 0.0 && probability <= 1.0) {
        return Err(BertError::Labels(format!(
            "masking probability {probability:?} is not a number greater than 0 and at most 1"
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
    // Per sequence, its maskable positions, in order.
    let mut eligible: Vec<Vec<usize>> = vec![Vec::new(); original.nrows()];
    // The draw: every maskable token, sequence by sequence, is chosen with probability P.
    for ((seq, pos), &id) in original.indexed_iter() {
        if batch.attention_mask[[seq, pos]] == 0 || specials.contains(&id) {
            continue;
        }
        eligible[seq].push(pos);
        if rng.uniform() < probability {
            replacements.push(replace(&mut rng, seq, pos, id, mask_id, vocab_len, false));
        }
    }
    if eligible.iter().all(Vec::is_empty) {
        return Err(BertError::Labels(
            "the text has no token that can be masked (it holds only special tokens), so there is nothing to predict"
                .into(),
        ));
    }
    // The guarantee: a sequence that has maskable tokens but none chosen gets one, picked
    // uniformly among them, so that every sequence has something to predict.
    for (seq, positions) in eligible.iter().enumerate() {
        if positions.is_empty() || replacements.iter().any(|r| r.seq == seq) {
            continue;
        }
        let pos = positions[(rng.next_u64() % positions.len() as u64) as usize];
        replacements.push(replace(&mut rng, seq, pos, original[[seq, pos]], mask_id, vocab_len, true));
    }
    // The label is the original id; the model sees the replacement.
    for r in &replacements {
        labels[[r.seq, r.pos]] = r.original;
        batch.ids[[r.seq, r.pos]] = r.shown;
    }
    replacements.sort_by_key(|r| (r.seq, r.pos));
    batch.labels.original_ids = Some(original);
    batch.labels.mlm = Some(labels);
    batch.labels.replacements = replacements;
    Ok(())
}

/// What the model sees at a chosen position: `[MASK]` if `v < 0.8`, else a random id if
/// `v < 0.9`, else the token itself, with `v = uniform()`.
fn replace(
    rng: &mut SplitMix64,
    seq: usize,
    pos: usize,
    id: i64,
    mask_id: i64,
    vocab_len: u64,
    guaranteed: bool,
) -> Replacement {
    let v = rng.uniform();
    let (kind, shown) = if v < 0.8 {
        (ReplacementKind::Mask, mask_id)
    } else if v < 0.9 {
        (ReplacementKind::Random, (rng.next_u64() % vocab_len) as i64)
    } else {
        (ReplacementKind::Keep, id)
    };
    Replacement { seq, pos, original: id, shown, kind, guaranteed }
}
