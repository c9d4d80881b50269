//! Occlusion, the simplest honest attribution (`bert-trace attribute`): hide one input token
//! (replace it by `[MASK]`, or `[UNK]`) and see how much the prediction of the masked word
//! falls. A token whose hiding costs much is one the prediction leans on. Nothing is estimated:
//! each number is a forward pass.

use serde::Serialize;

use super::readout::failed;
use crate::error::{BertError, Result};
use crate::io::tokenizer::Batch;
use crate::model::{additive_mask, BertModel};
use crate::ops::{self, Float};
use crate::pass::{Discard, Tracer};

/// The format of `bert-trace attribute --json`.
pub const FORMAT: &str = "bert-trace-attribute/1";

/// One hidden token.
#[derive(Clone, Debug, Serialize)]
pub struct TokenEffect {
    pub position: usize,
    pub token: String,
    /// log p(target) with this token hidden.
    pub log_prob: f64,
    /// The change from the full input: negative when the token helped.
    pub change: f64,
}

/// Every hideable token of the masked word's sequence.
#[derive(Clone, Debug, Serialize)]
pub struct Occlusion {
    pub format: &'static str,
    /// What hid each token: `[MASK]` or `[UNK]`.
    pub occluded_with: String,
    /// (sequence, position) of the `[MASK]` whose prediction is read.
    pub position: (usize, usize),
    pub target: String,
    pub log_prob: f64,
    pub tokens: Vec<TokenEffect>,
}

impl<F: Float> BertModel<F> {
    /// Hides each token of the masked word's sequence in turn (not the special tokens, not
    /// padding, not the `[MASK]` itself) with `hide`, and reads log p(`target`) at `position`.
    pub fn occlude(
        &self,
        batch: &Batch,
        position: (usize, usize),
        target: (&str, u32),
        hide: &str,
    ) -> Result<Occlusion> {
        self.check(batch)?;
        let hide_id = self
            .tokenizer
            .token_to_id(hide)
            .ok_or_else(|| BertError::Labels(format!("the vocabulary has no {hide} token to hide words with")))?;
        let log_prob = self.masked_log_prob(batch, position, target.1)?;
        let (seq, mask_pos) = position;
        let specials = self.tokenizer.special_ids();
        let mut tokens = Vec::new();
        for pos in 0..batch.dims().1 {
            let id = batch.ids[[seq, pos]];
            if pos == mask_pos || batch.attention_mask[[seq, pos]] == 0 || specials.contains(&id) {
                continue;
            }
            let mut hidden = batch.clone();
            hidden.ids[[seq, pos]] = i64::from(hide_id);
            let ablated = self.masked_log_prob(&hidden, position, target.1)?;
            tokens.push(TokenEffect {
                position: pos,
                token: self.tokenizer.id_to_token(id as u32).unwrap_or_default(),
                log_prob: ablated,
                change: ablated - log_prob,
            });
        }
        Ok(Occlusion {
            format: FORMAT,
            occluded_with: hide.to_string(),
            position,
            target: target.0.to_string(),
            log_prob,
            tokens,
        })
    }

    /// log p(`target`) at `position` after the whole encoder.
    fn masked_log_prob(&self, batch: &Batch, position: (usize, usize), target: u32) -> Result<f64> {
        let mut discard = Discard;
        let mut tracer = Tracer::new(&mut discard, None, None);
        let hidden = ops::with_kernels(self.kernels, || {
            let embedded = self.embeddings.forward(batch, &mut tracer)?;
            self.layers_from(0, embedded, additive_mask::<F>(&batch.attention_mask).as_ref(), &mut tracer)
        })
        .map_err(failed)?;
        Ok(self.readout(&hidden, position)?.log_prob(target))
    }
}
