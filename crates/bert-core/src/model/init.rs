//! Heads a checkpoint lacks, made new for pretraining or fine-tuning as transformers'
//! `_init_weights` makes them: a dense layer's weight drawn from N(0, initializer_range²) and its bias zero;
//! LayerNorm's weight one and its bias zero; the MLM decoder tied to the word embeddings, with
//! a zero bias. The draws come from a seed (SplitMix64 through Box–Muller), not from PyTorch's
//! generator: the distribution is transformers', the numbers are our own.

use super::classifier::ClassifierHead;
use super::layer_norm::LayerNorm;
use super::linear::Linear;
use super::mlm::MlmHead;
use super::nsp::NspHead;
use super::pooler::BertPooler;
use super::BertModel;
use crate::io::weights::Param;
use crate::objectives::splitmix::SplitMix64;
use crate::ops::Float;

impl<F: Float> BertModel<F> {
    /// Gives the model the heads pretraining needs that it lacks: the MLM head, and with `nsp`
    /// the pooler and the NSP head. Returns the HF names of the modules it made
    /// (`cls.predictions`, `bert.pooler`, `cls.seq_relationship`), in that order.
    pub fn add_pretraining_heads(&mut self, nsp: bool, seed: u64) -> Vec<&'static str> {
        let (h, v) = (self.config.hidden_size, self.config.vocab_size);
        let mut init = Init { rng: SplitMix64::new(seed), std: self.config.initializer_range };
        let mut made = Vec::new();
        if self.mlm.is_none() {
            self.mlm = Some(MlmHead {
                transform: init.linear(h, h),
                activation: self.config.activation(),
                layer_norm: init.layer_norm(h, F::of(self.config.layer_norm_eps)),
                decoder: Linear { weight: self.embeddings.word_embeddings.clone(), bias: init.zeros(v) },
            });
            made.push("cls.predictions");
        }
        if nsp && self.pooler.is_none() {
            self.pooler = Some(BertPooler { dense: init.linear(h, h) });
            made.push("bert.pooler");
        }
        if nsp && self.nsp.is_none() {
            self.nsp = Some(NspHead { dense: init.linear(h, 2) });
            made.push("cls.seq_relationship");
        }
        made
    }

    /// Gives the model what sequence classification needs: a pooler if it lacks one, and a
    /// classifier of `labels.len()` classes if it lacks one; the pretraining heads go, as
    /// `BertForSequenceClassification` has none. Returns the HF names of the modules it made
    /// (`bert.pooler`, `classifier`), in that order, and of those it left out (`cls.predictions`,
    /// `cls.seq_relationship`).
    pub fn add_classifier(&mut self, labels: &[String], seed: u64) -> (Vec<&'static str>, Vec<&'static str>) {
        let h = self.config.hidden_size;
        let mut init = Init { rng: SplitMix64::new(seed), std: self.config.initializer_range };
        let (mut made, mut dropped) = (Vec::new(), Vec::new());
        if self.pooler.is_none() {
            self.pooler = Some(BertPooler { dense: init.linear(h, h) });
            made.push("bert.pooler");
        }
        match &mut self.classifier {
            Some(classifier) => classifier.labels = labels.to_vec(),
            None => {
                self.classifier = Some(ClassifierHead { dense: init.linear(h, labels.len()), labels: labels.to_vec() });
                made.push("classifier");
            }
        }
        if self.mlm.take().is_some() {
            dropped.push("cls.predictions");
        }
        if self.nsp.take().is_some() {
            dropped.push("cls.seq_relationship");
        }
        (made, dropped)
    }
}

/// The generator of new weights.
struct Init {
    rng: SplitMix64,
    std: f64,
}

impl Init {
    /// `nn.Linear` `[out,in]`, initialised as BERT's `_init_weights` does.
    fn linear<F: Float>(&mut self, inputs: usize, outputs: usize) -> Linear<F> {
        let weight = (0..inputs * outputs).map(|_| F::of(self.std * self.normal())).collect();
        Linear { weight: Param::from_vec(weight, vec![outputs, inputs]), bias: self.zeros(outputs) }
    }

    fn layer_norm<F: Float>(&mut self, hidden: usize, eps: F) -> LayerNorm<F> {
        LayerNorm { weight: Param::from_vec(vec![F::one(); hidden], vec![hidden]), bias: self.zeros(hidden), eps }
    }

    fn zeros<F: Float>(&mut self, n: usize) -> Param<F> {
        Param::from_vec(vec![F::zero(); n], vec![n])
    }

    /// One draw of N(0, 1) (Box–Muller; 1 - uniform keeps the logarithm's argument above 0).
    fn normal(&mut self) -> f64 {
        let (u1, u2) = (1.0 - self.rng.uniform(), self.rng.uniform());
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}
