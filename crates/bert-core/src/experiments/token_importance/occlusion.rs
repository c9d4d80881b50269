//! Occlusion, the simplest attribution that approximates nothing: hide one input token (its id
//! replaced by `[MASK]`, or `[UNK]`) and see how much the target's score falls. A token whose
//! hiding costs much is one the prediction leans on. Each number is a forward pass; the passes
//! run as one batch, a row per hidden token.

use super::{Attribution, Prediction, Score, TokenAttribution};
use crate::error::{BertError, Result};
use crate::io::tokenizer::Batch;
use crate::model::BertModel;
use crate::ops::Float;

/// How many hidden tokens one pass holds at most.
const ROWS: usize = 32;

impl<F: Float> BertModel<F> {
    /// Hides each token of `batch`'s one sequence in turn with `hide` (not `[CLS]`, `[SEP]`,
    /// padding or the target's `[MASK]`) and reads the target's score: the attribution is the
    /// score with every token minus the score with that one hidden.
    pub fn occlude(&self, batch: &Batch, target: Prediction, of: Score, hide: &str) -> Result<Attribution> {
        self.check_target(batch, target)?;
        let hide_id = self
            .tokenizer
            .token_to_id(hide)
            .ok_or_else(|| BertError::Labels(format!("the vocabulary has no {hide} token to hide words with")))?;
        let score = self.scores(batch, target, of, None)?[0];
        let positions: Vec<usize> =
            self.kept(batch, target).iter().enumerate().filter(|(_, &kept)| !kept).map(|(t, _)| t).collect();
        let mut tokens = Vec::new();
        for chunk in positions.chunks(ROWS) {
            let mut hidden = batch.repeat_first(chunk.len());
            for (row, &position) in chunk.iter().enumerate() {
                hidden.ids[[row, position]] = i64::from(hide_id);
            }
            for (&position, without) in chunk.iter().zip(self.scores(&hidden, target, of, None)?) {
                tokens.push(TokenAttribution {
                    position,
                    token: self.token_at(batch, position),
                    attribution: score - without,
                    score_without: Some(without),
                });
            }
        }
        let attribution = Attribution { target: self.target_report(target), score, tokens, completeness: None };
        attribution.check_finite()?;
        Ok(attribution)
    }
}
