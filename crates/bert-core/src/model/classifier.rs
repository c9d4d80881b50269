//! `classifier`: sequence classification (`BertForSequenceClassification`), one dense layer on
//! the pooled `[CLS]` vector, with its labels' names from config.json's `id2label` (chapter 10).

use ndarray::Array2;

use super::dropout::{self, Dropout};
use super::gradients::{Grads, Record};
use super::linear::Linear;
use super::parameters::WeightAndBias;
use crate::error::{BertError, Result};
use crate::io::config::BertConfig;
use crate::io::weights::WeightStore;
use crate::ops::Float;
use crate::pass::{Halt, Tracer};
use crate::stage::{Stage, StageKind::*};

/// `classifier`: H -> C classes, with label names from config.json's `id2label` when it has them.
pub struct ClassifierHead<F: Float = f32> {
    pub dense: Linear<F>,
    pub labels: Vec<String>,
}

impl<F: Float> ClassifierHead<F> {
    /// The stages of the dense layer's weight and bias.
    pub fn params() -> WeightAndBias {
        WeightAndBias::read_by(Stage::new(ClassifierLogits))
    }

    pub fn present(store: &WeightStore) -> bool {
        store.contains(&Self::params().weight.hf())
    }

    /// The number of labels comes from the weight's shape; `id2label` must agree when present.
    pub fn load(store: &WeightStore, config: &BertConfig) -> Result<ClassifierHead<F>> {
        let n_labels = store.shape_of(&Self::params().weight.hf()).map_or(0, |s| s[0]);
        let dense = Linear::load(store, Self::params(), config.hidden_size, n_labels)?;
        let labels = if config.id2label.is_empty() {
            (0..n_labels).map(|i| format!("LABEL_{i}")).collect()
        } else {
            let labels: Option<Vec<String>> =
                (0..n_labels).map(|i| config.id2label.get(&i.to_string()).cloned()).collect();
            match labels {
                Some(labels) if config.id2label.len() == n_labels => labels,
                _ => {
                    return Err(BertError::Config {
                        path: store.path().with_file_name("config.json"),
                        problem: format!(
                            "id2label has {} labels but classifier.weight has {n_labels} rows",
                            config.id2label.len()
                        ),
                    })
                }
            }
        };
        Ok(ClassifierHead { dense, labels })
    }

    /// `[B,H]` -> `[B,C]`, the pooled vector dropped out first in a training pass.
    pub(crate) fn forward(
        &self,
        pooled: &Array2<F>,
        dropout: Option<&Dropout>,
        tracer: &mut Tracer,
    ) -> Result<Array2<F>, Halt> {
        let pooled = dropout::apply(dropout, Stage::new(ClassifierDropout), pooled.clone(), tracer)?;
        let mut logits = self.dense.forward(&pooled);
        tracer.float(Stage::new(ClassifierLogits), &mut logits)?;
        Ok(logits)
    }

    /// `[B,C]` d loss / d logits -> `[B,H]` d loss / d pooler.output, adding the gradients of
    /// `classifier.weight` and `classifier.bias` into `grads`.
    pub(crate) fn backward(
        &self,
        record: &Record<F>,
        d_logits: &Array2<F>,
        grads: &mut Grads<F>,
        tracer: &mut Tracer,
    ) -> Result<Array2<F>, Halt> {
        let mut d_logits = d_logits.clone();
        tracer.float(Stage::new(ClassifierLogits).grad(), &mut d_logits)?;
        // The dense layer read the pooled vector dropout left, in training.
        let read = record.of_dim(Stage::new(ClassifierDropout)).unwrap_or(record.two(Stage::new(PoolerOutput)));
        let d_read = self.dense.backward(&read, &d_logits, grads);
        dropout::backward(record, Stage::new(ClassifierDropout), d_read, tracer)
    }
}
