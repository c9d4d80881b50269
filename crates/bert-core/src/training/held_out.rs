//! A model measured on held-out examples, every `eval_every` steps of a run and at its end: a
//! classifier's mean loss, accuracy and confusion table; a pretraining run's MLM loss over every
//! held-out masked position, its perplexity and the share of masked tokens guessed right. The
//! training loss alone cannot tell learning from memorising; examples the run never trained on
//! can.

use std::fmt;

use ndarray::Axis;
use serde::{Deserialize, Serialize};

use super::corpus::{Batching, Corpus};
use crate::error::{BertError, Result};
use crate::model::{losses, BertModel};
use crate::objectives::IGNORE;
use crate::pass::Discard;

/// One evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// The steps done when it was made.
    pub step: usize,
    /// The mean of the cross-entropy losses, summed in f64: of the examples
    /// (`classifier.losses`), or of every held-out masked position (`mlm.losses`).
    pub loss: f64,
    /// The share of examples whose most likely class is their label, or of masked positions
    /// whose most likely token is the original.
    pub accuracy: f64,
    pub correct: usize,
    /// For the MLM: the share of masked positions whose original token is among the five most
    /// likely (ties counted against it), and how many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top5_accuracy: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top5_correct: Option<usize>,
    /// The examples judged, or the masked positions.
    pub examples: usize,
    /// For the MLM: the best a guess that ignores the text can do on these positions, the
    /// token most of them are (ties: the lowest id), and the share of positions it is. A model
    /// that has learnt nothing but how often each token occurs scores about this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constant_guess: Option<ConstantGuess>,
    /// `exp(loss)`, for the MLM loss; None for a classifier, and where it overflows f64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perplexity: Option<f64>,
    /// For the MLM: every token was masked in turn ([`evaluate_each_token`]), so `loss` is the
    /// mean negative pseudo-log-likelihood and `perplexity` the pseudo-perplexity.
    #[serde(default, skip_serializing_if = "is_false")]
    pub each_token: bool,
    /// `confusion[true][predicted]`: how many examples of each class went to each (a
    /// classifier's; empty for the MLM).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub confusion: Vec<Vec<usize>>,
    /// The classes' names, in the order of the table's rows and columns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<String>,
}

fn is_false(value: &bool) -> bool {
    !value
}

/// The best guess that ignores the text: one token for every masked position.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConstantGuess {
    pub token: String,
    pub accuracy: f64,
    pub correct: usize,
}

/// Runs `model` on every example of `held_out` (in the file's order, a batch of `batching` at a
/// time, masked as [`Corpus::held_out_batch`] masks them) and measures it, at step `step`.
pub fn evaluate(model: &BertModel, held_out: &Corpus, batching: &Batching, step: usize) -> Result<Evaluation> {
    match held_out.classes {
        Some(_) => classify(model, held_out, batching, step),
        None => fill_in(model, held_out, batching, step),
    }
}

/// The MLM loss over every held-out masked position (not a mean of the batches' means), its
/// perplexity, and how many masked tokens the model guesses right, first or among its five
/// best guesses.
fn fill_in(model: &BertModel, held_out: &Corpus, batching: &Batching, step: usize) -> Result<Evaluation> {
    require_mlm(model)?;
    let mut tally = Tally::default();
    for index in 0..held_out.batches_per_epoch(batching.batch_size.max(1)) {
        let mut batch = held_out.held_out_batch(index, &model.tokenizer, batching)?;
        // The NSP loss is not judged: a held-out pair keeps its own sentence B.
        batch.labels.nsp = None;
        tally.add(model, &batch)?;
    }
    tally.finish(model, step, false)
}

/// The same measure with every token of every example masked in turn, one at a time, each in a
/// pass of its own, as Salazar et al. (2020) score a sentence with BERT: the loss is then the
/// mean pseudo-log-likelihood's negative and its exponential the pseudo-perplexity. Nothing is
/// drawn, so no seed enters; it costs one sequence a token, for short texts such as famous
/// lines. Special tokens and `[UNK]` are never masked, as in training.
pub fn evaluate_each_token(model: &BertModel, held_out: &Corpus, batching: &Batching) -> Result<Evaluation> {
    require_mlm(model)?;
    let mask_id = model.tokenizer.token_to_id(crate::io::tokenizer::MASK).map(i64::from).ok_or_else(|| {
        BertError::Tokenizer { path: model.source.clone(), problem: "the vocabulary has no [MASK] token".into() }
    })?;
    let specials = model.tokenizer.special_ids();
    let mut tally = Tally::default();
    for index in 0..held_out.len() {
        let text = [held_out.texts[index].clone()];
        let pair = held_out.pairs.as_ref().map(|pairs| [pairs[index].clone()]);
        let one = model.tokenizer.encode(&text, pair.as_ref().map(|p| &p[..]), batching.max_len, true)?;
        let positions: Vec<usize> =
            one.ids.row(0).iter().enumerate().filter(|(_, id)| !specials.contains(id)).map(|(at, _)| at).collect();
        for chunk in positions.chunks(batching.batch_size.max(1)) {
            let rows = chunk.len();
            let repeat =
                |a: &ndarray::Array2<i64>| ndarray::Array2::from_shape_fn((rows, a.ncols()), |(_, t)| a[[0, t]]);
            let mut ids = repeat(&one.ids);
            let mut labels = ndarray::Array2::from_elem(ids.dim(), IGNORE);
            for (row, &at) in chunk.iter().enumerate() {
                labels[[row, at]] = ids[[row, at]];
                ids[[row, at]] = mask_id;
            }
            let batch = crate::Batch {
                tokens: vec![one.tokens[0].clone(); rows],
                ids,
                token_type_ids: repeat(&one.token_type_ids),
                attention_mask: repeat(&one.attention_mask),
                pairs: one.pairs,
                labels: crate::objectives::Labels { mlm: Some(labels), ..Default::default() },
            };
            tally.add(model, &batch)?;
        }
    }
    tally.finish(model, 0, true)
}

fn require_mlm(model: &BertModel) -> Result<()> {
    match model.mlm {
        Some(_) => Ok(()),
        None => Err(BertError::MissingHead {
            path: model.source.clone(),
            wanted: "the held-out MLM measure".into(),
            weights: "cls.predictions.*".into(),
        }),
    }
}

/// The masked positions judged so far: their summed loss, how many the model guessed right
/// first and among its five best, and how often each label came up.
#[derive(Default)]
struct Tally {
    sum: f64,
    count: usize,
    correct: usize,
    top5: usize,
    label_counts: std::collections::BTreeMap<i64, usize>,
}

impl Tally {
    /// Runs `model` on `batch` and judges its masked positions.
    fn add(&mut self, model: &BertModel, batch: &crate::Batch) -> Result<()> {
        let traced = model.trace(batch, &mut Discard, None)?;
        let logits = traced.outputs.mlm_logits.expect("a model with the MLM head has its logits");
        let labels = batch.labels.mlm.as_ref().expect("a masked batch has MLM labels");
        let per_position = losses::losses(logits.view().into_dyn(), labels.view().into_dyn());
        for ((at, &label), &loss) in labels.indexed_iter().zip(per_position.iter()).filter(|((_, &l), _)| l != IGNORE) {
            self.sum += f64::from(loss);
            self.count += 1;
            *self.label_counts.entry(label).or_default() += 1;
            let row = logits.slice(ndarray::s![at.0, at.1, ..]);
            let best = row.iter().enumerate().filter(|(_, v)| !v.is_nan()).max_by(|a, b| a.1.total_cmp(b.1));
            self.correct += usize::from(best.is_some_and(|(id, _)| id as i64 == label));
            // Its rank: how many tokens score at least as high, itself aside; NaN is never among
            // the best, nor is a label whose score is NaN.
            let own = row[label as usize];
            let above = row.iter().enumerate().filter(|&(id, v)| id as i64 != label && (*v >= own)).count();
            self.top5 += usize::from(!own.is_nan() && above < 5);
        }
        Ok(())
    }

    fn finish(self, model: &BertModel, step: usize, each_token: bool) -> Result<Evaluation> {
        let count = self.count;
        let loss = self.sum / count.max(1) as f64;
        if !loss.is_finite() {
            return Err(BertError::Diverged {
                step,
                problem: format!("the held-out MLM loss is {loss}: the run has diverged"),
            });
        }
        // The most frequent label, the lowest id among equals (the map is in id order).
        let constant_guess = self.label_counts.iter().rev().max_by_key(|(_, &n)| n).map(|(&id, &n)| ConstantGuess {
            token: model.tokenizer.id_to_token(id as u32).unwrap_or_default(),
            accuracy: n as f64 / count as f64,
            correct: n,
        });
        Ok(Evaluation {
            step,
            loss,
            accuracy: self.correct as f64 / count.max(1) as f64,
            correct: self.correct,
            top5_accuracy: Some(self.top5 as f64 / count.max(1) as f64),
            top5_correct: Some(self.top5),
            examples: count,
            constant_guess,
            perplexity: Some(loss.exp()).filter(|p| p.is_finite()),
            each_token,
            confusion: Vec::new(),
            classes: Vec::new(),
        })
    }
}

/// A classifier's mean loss over the held-out examples, its accuracy and its confusion table.
fn classify(model: &BertModel, held_out: &Corpus, batching: &Batching, step: usize) -> Result<Evaluation> {
    let (batch_size, max_len) = (batching.batch_size, batching.max_len);
    let classes = held_out.classes.as_ref().expect("a labelled corpus");
    let n = classes.names.len();
    let mut confusion = vec![vec![0usize; n]; n];
    let (mut sum, mut correct) = (0.0f64, 0usize);
    let examples: Vec<usize> = (0..held_out.len()).collect();
    for chunk in examples.chunks(batch_size.max(1)) {
        let (batch, _) = held_out.labelled_batch(chunk, &model.tokenizer, max_len)?;
        let traced = model.trace(&batch, &mut Discard, None)?;
        let logits = traced.outputs.classifier_logits.expect("a classifier's pass has logits");
        let labels = batch.labels.class.as_ref().expect("a labelled batch");
        let per_example = losses::losses(logits.view().into_dyn(), labels.view().into_dyn());
        sum += per_example.iter().map(|&l| f64::from(l)).sum::<f64>();
        for (row, &label) in logits.axis_iter(Axis(0)).zip(labels) {
            // A NaN is never the most likely class: a row of NaN predicts nothing.
            let predicted = row
                .iter()
                .enumerate()
                .filter(|(_, v)| !v.is_nan())
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(class, _)| class);
            let Some(predicted) = predicted else {
                return Err(BertError::Diverged {
                    step,
                    problem: "the classifier's logits are NaN on a held-out example: the run has diverged".into(),
                });
            };
            confusion[label as usize][predicted] += 1;
            correct += usize::from(predicted == label as usize);
        }
    }
    let examples = held_out.len();
    let loss = sum / examples as f64;
    if !loss.is_finite() {
        return Err(BertError::Diverged {
            step,
            problem: format!("the held-out loss is {loss}: the run has diverged"),
        });
    }
    Ok(Evaluation {
        step,
        loss,
        accuracy: correct as f64 / examples as f64,
        correct,
        top5_accuracy: None,
        top5_correct: None,
        examples,
        constant_guess: None,
        perplexity: None,
        each_token: false,
        confusion,
        classes: classes.names.clone(),
    })
}

impl fmt::Display for Evaluation {
    /// `eval  step 30  loss 0.6421  accuracy 0.7333 (22 of 30)`, then the confusion table; for
    /// the MLM, `eval  step 30  mlm loss 4.1234  perplexity 61.80  accuracy 0.2500 (3 of 12
    /// masked tokens)  top-5 0.5000 (6)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.classes.is_empty() {
            let perplexity = self.perplexity.map_or("beyond f64".into(), |p| format!("{p:.2}"));
            write!(
                f,
                "eval  step {}  mlm loss {:.4}  perplexity {perplexity}  accuracy {:.4} ({} of {} masked tokens)",
                self.step, self.loss, self.accuracy, self.correct, self.examples
            )?;
            if let (Some(share), Some(n)) = (self.top5_accuracy, self.top5_correct) {
                write!(f, "  top-5 {share:.4} ({n})")?;
            }
            return Ok(());
        }
        write!(
            f,
            "eval  step {}  loss {:.4}  accuracy {:.4} ({} of {})",
            self.step, self.loss, self.accuracy, self.correct, self.examples
        )?;
        let width = self.classes.iter().map(|c| c.chars().count()).max().unwrap_or(0).max(6);
        write!(f, "\n  {:width$}  predicted →", "true ↓")?;
        write!(f, "\n  {:width$}", "")?;
        for class in &self.classes {
            write!(f, "  {class:>width$}")?;
        }
        for (class, row) in self.classes.iter().zip(&self.confusion) {
            write!(f, "\n  {class:width$}")?;
            for count in row {
                write!(f, "  {count:>width$}")?;
            }
        }
        Ok(())
    }
}
