//! Which input tokens a prediction rests on (`bert-trace attribute`), three ways, for one
//! target of one text:
//!
//! - `occlusion.rs`: hide each token (its id replaced by `[MASK]` or `[UNK]`) and see how much
//!   the target's score falls. Nothing is estimated: each number is a forward pass.
//! - `integrated.rs`: integrated gradients (Sundararajan et al. 2017) along a straight path in
//!   the word embeddings from a baseline to the input, and gradient × input, both by the
//!   backward pass.
//!
//! Every method reports, per token, a number that is positive where the token raises the
//! target's score: the target's log-probability (or its logit) at the `[MASK]`, of a
//! classifier's class, or of the NSP label.

pub mod integrated;
pub mod occlusion;
mod path;

use ndarray::{s, Array2, Array3};
use serde::Serialize;

use super::readout::failed;
use crate::error::{BertError, Result};
use crate::io::tokenizer::{Batch, CLS, SEP};
use crate::model::{additive_mask, BertModel};
use crate::ops::{self, Float};
use crate::pass::hook::Hook;
use crate::pass::{Discard, Tracer};

pub use self::path::Rule;

/// The format of `bert-trace attribute --json`.
pub const FORMAT: &str = "bert-trace-attribute/2";

/// What is attributed: one output of the model for the text's one sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prediction {
    /// The word `id` at the `[MASK]` at `position`.
    Masked { position: usize, id: u32 },
    /// A classifier's class.
    Class(usize),
    /// The NSP label: 0 when sentence B follows A, 1 when it is random.
    NextSentence(usize),
}

/// Which score of the target is attributed (the `of` option): its log-probability or its logit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Score {
    /// Its log-probability: log softmax of the logits, at the target.
    #[default]
    Logprob,
    /// Its logit, before the softmax: what the other outputs cannot move.
    Logit,
}

crate::choice!(Score { Logprob => "logprob", Logit => "logit" });

/// One attributed token.
#[derive(Clone, Debug, Serialize)]
pub struct TokenAttribution {
    pub position: usize,
    pub token: String,
    /// Positive where the token raises the target's score.
    pub attribution: f64,
    /// Occlusion: the score with this token hidden.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score_without: Option<f64>,
}

/// What [`Prediction`] is, as a report names it.
#[derive(Clone, Debug, Serialize)]
pub struct PredictionReport {
    /// `mlm`, `label` or `nsp`.
    pub kind: &'static str,
    /// The word, the class's name, or `IsNext`/`NotNext`.
    pub name: String,
    /// Its id: the word's, the class's or the NSP label's.
    pub index: usize,
    /// The `[MASK]`'s position, for a word.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<usize>,
}

/// Every attributed token of one text for one target, by one method.
#[derive(Clone, Debug, Serialize)]
pub struct Attribution {
    pub target: PredictionReport,
    /// The score attributed (`of`), with every token as it is.
    pub score: f64,
    pub tokens: Vec<TokenAttribution>,
    /// Integrated gradients: the path and whether the attributions add up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completeness: Option<integrated::Completeness>,
}

impl Attribution {
    /// Refuses an attribution with a number that is not finite: a NaN is never an answer.
    pub fn check_finite(&self) -> Result<()> {
        let mut numbers = vec![("the score".to_string(), self.score)];
        for t in &self.tokens {
            numbers.push((format!("the attribution of {} at {}", t.token, t.position), t.attribution));
            numbers.extend(t.score_without.map(|v| (format!("the score without {} at {}", t.token, t.position), v)));
        }
        if let Some(c) = &self.completeness {
            numbers.push(("the score of the baseline".into(), c.baseline_score));
        }
        match numbers.into_iter().find(|(_, v)| !v.is_finite()) {
            Some((what, value)) => Err(BertError::Diverged {
                step: 0,
                problem: format!("{what} is {value}: the model's output is not a number there"),
            }),
            None => Ok(()),
        }
    }
}

impl<F: Float> BertModel<F> {
    /// `target`, checked against the model's heads and `batch` (one sequence).
    pub fn check_target(&self, batch: &Batch, target: Prediction) -> Result<()> {
        let (b, t) = batch.dims();
        if b != 1 {
            return Err(BertError::Labels(format!("attribution reads one text at a time, not {b}")));
        }
        let missing = |wanted: &str, weights: &str| BertError::MissingHead {
            path: self.source.clone(),
            wanted: wanted.into(),
            weights: weights.into(),
        };
        match target {
            Prediction::Masked { position, .. } if position >= t => {
                Err(BertError::Labels(format!("the [MASK] at {position} is past the text's {t} tokens")))
            }
            Prediction::Masked { .. } if self.mlm.is_none() => {
                Err(missing("a masked word's prediction", "cls.predictions.*"))
            }
            Prediction::Class(_) if self.classifier.is_none() || self.pooler.is_none() => {
                Err(missing("a classifier's class", "classifier.* and bert.pooler.*"))
            }
            Prediction::Class(class) if class >= self.n_classes() => Err(BertError::Labels(format!(
                "the classifier has {} classes, 0 to {}; {class} is not one",
                self.n_classes(),
                self.n_classes() - 1
            ))),
            Prediction::NextSentence(_) if self.nsp.is_none() || self.pooler.is_none() => {
                Err(missing("the NSP prediction", "cls.seq_relationship.* and bert.pooler.*"))
            }
            Prediction::NextSentence(label) if label > 1 => {
                Err(BertError::Labels(format!("the NSP label is 0 or 1, not {label}")))
            }
            _ => Ok(()),
        }
    }

    fn n_classes(&self) -> usize {
        self.classifier.as_ref().map_or(0, |c| c.labels.len())
    }

    /// The class the classifier predicts for `batch`'s one sequence.
    pub fn predicted_class(&self, batch: &Batch) -> Result<usize> {
        let probe = Prediction::Class(0);
        self.check_target(batch, probe)?;
        let logits = self.head_logits(batch, probe, None)?;
        let row = logits.row(0);
        let best =
            (0..row.len()).filter(|&c| !row[c].is_nan()).max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a)));
        best.ok_or_else(|| BertError::Labels("the classifier's logits are not numbers: no class is predicted".into()))
    }

    /// `target` as a report names it.
    pub fn target_report(&self, target: Prediction) -> PredictionReport {
        match target {
            Prediction::Masked { position, id } => PredictionReport {
                kind: "mlm",
                name: self.tokenizer.id_to_token(id).unwrap_or_default(),
                index: id as usize,
                position: Some(position),
            },
            Prediction::Class(class) => PredictionReport {
                kind: "label",
                name: self.classifier.as_ref().and_then(|c| c.labels.get(class).cloned()).unwrap_or_default(),
                index: class,
                position: None,
            },
            Prediction::NextSentence(label) => PredictionReport {
                kind: "nsp",
                name: ["IsNext", "NotNext"][label.min(1)].into(),
                index: label,
                position: None,
            },
        }
    }

    /// The positions the baseline keeps as they are, so that none is attributed: `[CLS]`,
    /// `[SEP]` and the target's `[MASK]`, besides padding.
    pub(crate) fn kept(&self, batch: &Batch, target: Prediction) -> Vec<bool> {
        let special = [CLS, SEP]
            .map(|token| self.tokenizer.token_to_id(token).map(i64::from))
            .into_iter()
            .flatten()
            .collect::<Vec<_>>();
        (0..batch.dims().1)
            .map(|t| {
                batch.attention_mask[[0, t]] == 0
                    || special.contains(&batch.ids[[0, t]])
                    || matches!(target, Prediction::Masked { position, .. } if position == t)
            })
            .collect()
    }

    /// The token at `position`, as the tokenizer spells it.
    pub(crate) fn token_at(&self, batch: &Batch, position: usize) -> String {
        self.tokenizer.id_to_token(batch.ids[[0, position]] as u32).unwrap_or_default()
    }

    /// `[rows]` the target's score (`of`) for each row of `batch`, whose rows are all the same
    /// text (with hidden tokens, or `hook` putting other word embeddings in). Only what the
    /// target reads is computed: the MLM head at the `[MASK]` alone.
    pub(crate) fn scores(
        &self,
        batch: &Batch,
        target: Prediction,
        of: Score,
        hook: Option<&mut dyn Hook>,
    ) -> Result<Vec<f64>> {
        let logits = self.head_logits(batch, target, hook)?;
        let index = match target {
            Prediction::Masked { id, .. } => id as usize,
            Prediction::Class(class) => class,
            Prediction::NextSentence(label) => label,
        };
        let scores = match of {
            Score::Logprob => ops::log_softmax_rows(logits.view()).column(index).to_vec(),
            Score::Logit => logits.column(index).to_vec(),
        };
        Ok(scores)
    }

    /// `[rows, outputs]` the logits `target` is one of, in f64, for each row of `batch`.
    fn head_logits(&self, batch: &Batch, target: Prediction, hook: Option<&mut dyn Hook>) -> Result<Array2<f64>> {
        self.check(batch)?;
        let mut discard = Discard;
        let mut tracer = Tracer::new(&mut discard, None, hook.map(|h| h as &mut dyn Hook));
        tracer.set_attention_mask(&batch.attention_mask);
        let rows = batch.dims().0;
        let logits: Array2<F> = ops::with_kernels(self.kernels, || {
            let embedded = self.embeddings.forward(batch, None, &mut tracer)?;
            let hidden =
                self.layers_from(0, embedded, additive_mask::<F>(&batch.attention_mask).as_ref(), &mut tracer)?;
            match target {
                Prediction::Masked { position, .. } => {
                    let mlm = self.mlm.as_ref().expect("checked: an MLM head");
                    // The head reads each token alone: only the [MASK]'s row goes through it.
                    let at: Array3<F> = hidden.slice(s![.., position..=position, ..]).to_owned();
                    let logits = mlm.forward(&at, &mut tracer)?;
                    let v = logits.dim().2;
                    Ok(logits.into_shape_with_order((rows, v)).expect("[B,1,V] is [B,V]"))
                }
                Prediction::Class(_) => {
                    let pooled = self.pooler.as_ref().expect("checked: a pooler").forward(&hidden, &mut tracer)?;
                    self.classifier.as_ref().expect("checked: a classifier").forward(&pooled, None, &mut tracer)
                }
                Prediction::NextSentence(_) => {
                    let pooled = self.pooler.as_ref().expect("checked: a pooler").forward(&hidden, &mut tracer)?;
                    self.nsp.as_ref().expect("checked: an NSP head").forward(&pooled, &mut tracer)
                }
            }
        })
        .map_err(failed)?;
        Ok(logits.mapv(|v| v.to_f64().unwrap_or(f64::NAN)))
    }
}
