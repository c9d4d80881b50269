//! A classifier measured on held-out examples: the mean loss, the accuracy and the confusion
//! table, every `eval_every` steps of a fine-tuning run and at its end. The training loss alone
//! cannot tell learning from memorising; examples the run never trained on can.

use std::fmt;

use ndarray::Axis;
use serde::{Deserialize, Serialize};

use super::corpus::Corpus;
use crate::error::{BertError, Result};
use crate::model::{losses, BertModel};
use crate::pass::Discard;

/// One evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// The steps done when it was made.
    pub step: usize,
    /// The mean of the examples' cross-entropy losses (`classifier.losses`), summed in f64.
    pub loss: f64,
    /// The share of examples whose most likely class is their label.
    pub accuracy: f64,
    pub correct: usize,
    pub examples: usize,
    /// `confusion[true][predicted]`: how many examples of each class went to each.
    pub confusion: Vec<Vec<usize>>,
    /// The classes' names, in the order of the table's rows and columns.
    pub classes: Vec<String>,
}

/// Runs `model` on every example of `held_out` (in the file's order, `batch_size` at a time,
/// cut to `max_len` tokens) and measures it, at step `step`.
pub fn evaluate(
    model: &BertModel,
    held_out: &Corpus,
    batch_size: usize,
    max_len: usize,
    step: usize,
) -> Result<Evaluation> {
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
        examples,
        confusion,
        classes: classes.names.clone(),
    })
}

impl fmt::Display for Evaluation {
    /// `eval  step 30/30  loss 0.6421  accuracy 0.7333 (22 of 30)`, then the confusion table.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
