//! What the MLM head predicts at one position, read from a hidden state: the log-probability
//! of every word of the vocabulary there, a target's rank among them, the top few.

use ndarray::{s, Array1, Array3};

use crate::error::{BertError, Result};
use crate::io::tokenizer::{Batch, MASK};
use crate::model::BertModel;
use crate::ops::{self, Float};
use crate::pass::{Discard, Halt, Tracer};

/// `[V]`: log p(word) at one position.
#[derive(Clone, Debug)]
pub struct Readout {
    pub log_probs: Array1<f64>,
}

impl Readout {
    /// log p(`id`).
    pub fn log_prob(&self, id: u32) -> f64 {
        self.log_probs[id as usize]
    }

    /// Where `id` ranks, 1 for the most probable word (ties go to the target's favour); None
    /// when the log-probabilities are not all numbers (a NaN is never a rank).
    pub fn rank(&self, id: u32) -> Option<usize> {
        let own = self.log_prob(id);
        if own.is_nan() || self.log_probs.iter().any(|v| v.is_nan()) {
            return None;
        }
        Some(1 + self.log_probs.iter().filter(|&&v| v > own).count())
    }

    /// The `k` most probable words, most probable first: (id, probability). A NaN is no
    /// guess: words whose log-probability is NaN are never listed.
    pub fn top(&self, k: usize) -> Vec<(u32, f64)> {
        let mut order: Vec<usize> = (0..self.log_probs.len()).filter(|&id| !self.log_probs[id].is_nan()).collect();
        order.sort_by(|&a, &b| self.log_probs[b].total_cmp(&self.log_probs[a]).then(a.cmp(&b)));
        order.into_iter().take(k).map(|id| (id as u32, self.log_probs[id].exp())).collect()
    }
}

/// Where the experiments read their prediction: sequence and position of the text's one
/// `[MASK]`.
pub fn the_mask(model_mask: Option<u32>, batch: &Batch) -> Result<(usize, usize)> {
    let mask = model_mask.map(i64::from);
    let masks: Vec<(usize, usize)> =
        batch.ids.indexed_iter().filter(|(_, &id)| Some(id) == mask).map(|(index, _)| index).collect();
    match masks.as_slice() {
        [one] => Ok(*one),
        found => Err(BertError::Labels(format!(
            "the text must hold exactly one {MASK} to predict; it holds {}",
            found.len()
        ))),
    }
}

/// The halt of a pass that has no stop stage is always an error.
pub(crate) fn failed(halt: Halt) -> BertError {
    match halt {
        Halt::Failed(e) => e,
        Halt::Stopped(stage) => BertError::Labels(format!("the pass stopped at {stage}, which no experiment asks for")),
    }
}

impl<F: Float> BertModel<F> {
    /// The MLM head's prediction at `(seq, pos)` of the last hidden state `[B,T,H]`. The head
    /// works on each token alone, so only that token's row goes through it.
    pub(crate) fn readout(&self, hidden: &Array3<F>, (seq, pos): (usize, usize)) -> Result<Readout> {
        let mlm = self.mlm.as_ref().ok_or_else(|| BertError::MissingHead {
            path: self.source.clone(),
            wanted: "a masked word's prediction".into(),
            weights: "cls.predictions.*".into(),
        })?;
        let row = hidden.slice(s![seq..=seq, pos..=pos, ..]).to_owned();
        let logits = ops::with_kernels(self.kernels, || mlm.forward(&row, &mut Tracer::new(&mut Discard, None, None)))
            .map_err(failed)?;
        let vocab = logits.len();
        let logits = logits.into_shape_with_order((1, vocab)).expect("[1,1,V] is [1,V]");
        let log_probs = ops::log_softmax_rows(logits.view());
        Ok(Readout { log_probs: log_probs.row(0).to_owned() })
    }
}
