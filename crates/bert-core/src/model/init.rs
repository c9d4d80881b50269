//! New weights, as transformers' `_init_weights` makes them: a whole `BertForPreTraining` for a
//! `config.json` ([`BertModel::from_config`], `train --from-config`), or the heads a checkpoint
//! lacks for pretraining or fine-tuning. A dense layer's weight and an embedding table are drawn
//! from N(0, initializer_range²), the word table's padding row and every bias are zero;
//! LayerNorm's weight is one and its bias zero; the MLM decoder is tied to the word embeddings,
//! with a zero bias. The draws come from a seed (SplitMix64 through Box–Muller), not from
//! PyTorch's generator: the distribution is transformers', the numbers are our own.

use std::path::Path;

use super::classifier::ClassifierHead;
use super::layer_norm::LayerNorm;
use super::linear::Linear;
use super::load::TokenizerFiles;
use super::mlm::MlmHead;
use super::nsp::NspHead;
use super::parameters::WeightAndBias;
use super::pooler::BertPooler;
use super::BertModel;
use crate::error::{BertError, Result};
use crate::io::config::BertConfig;
use crate::io::tokenizer::BertTokenizer;
use crate::io::weights::{Param, Storage, WeightStore};
use crate::objectives::splitmix::SplitMix64;
use crate::ops::Float;
use crate::stage::{self, OutputHeads, ParamKind, Stage, StageKind};

/// How `_init_weights` fills a parameter.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fill {
    /// N(0, initializer_range²): dense weights and embedding tables.
    Normal,
    Zeros,
    Ones,
}

/// What `_init_weights` puts in a parameter of this kind, read from the stage table: a matrix
/// (an `nn.Linear` weight or an `nn.Embedding` table) is drawn; a vector that some stage's row
/// reads as its weight is a LayerNorm's scale (a dense layer's weight is a matrix), one; any other
/// vector is a bias, zero.
fn fill(kind: ParamKind) -> Fill {
    let matrix = StageKind::Param(kind).info().shape.len() == 2;
    let a_scale = stage::STAGES.iter().any(|row| row.params.is_some_and(|params| params.weight == kind));
    match (matrix, a_scale) {
        (true, _) => Fill::Normal,
        (false, true) => Fill::Ones,
        (false, false) => Fill::Zeros,
    }
}

impl BertModel {
    /// `BertForPreTraining(config)`: the config.json and tokenizer of `dir` with new weights
    /// drawn from `seed`, every module of the encoder, the pooler and both pretraining heads.
    /// Weights `dir` may hold are not read. The tensors are built under the names the stage
    /// table gives and loaded by each module's own `load`, as a checkpoint's are.
    pub fn from_config(dir: &Path, seed: u64) -> Result<BertModel> {
        let config_path = dir.join("config.json");
        if !dir.is_dir() {
            let problem = "not a directory: give the directory that holds config.json and the tokenizer's files";
            return Err(BertError::NotFound { path: dir.into(), problem: problem.into() });
        }
        if !config_path.is_file() {
            let problem = "there is no config.json in it: new weights are drawn for a config.json";
            return Err(BertError::ModelDir { path: dir.into(), problem: problem.into() });
        }
        let config = BertConfig::from_file(&config_path)?;
        let tokenizer = BertTokenizer::from_dir(dir)?;
        let source = dir.join("model.safetensors");
        let store = WeightStore::new(&source, Storage::Owned(initial_weights(&config, seed)?))?;
        BertModel::assemble(config, &store, tokenizer, dir.into())
    }

    /// [`BertModel::from_config`] for files already in memory (a model built into bert-trace):
    /// new weights for `config_json`, with that tokenizer; `source` names it in messages.
    pub fn from_config_bytes(
        config_json: &[u8],
        tokenizer: TokenizerFiles<'_>,
        source: &Path,
        seed: u64,
    ) -> Result<BertModel> {
        let config = BertConfig::from_json(config_json, &source.join("config.json"))?;
        let weights = Storage::Owned(initial_weights(&config, seed)?);
        BertModel::from_bytes_as(config_json, weights, tokenizer, source)
    }
}

/// The safetensors bytes of a new `BertForPreTraining` for `config`, every parameter filled as
/// [`fill`] says, the draws in the order of `named_parameters()`.
fn initial_weights(config: &BertConfig, seed: u64) -> Result<Vec<u8>> {
    let heads = OutputHeads { pooler: true, mlm: true, nsp: true, classifier: false, sentence: false };
    let dims = config.dims(1, 1, 0);
    let std = config.initializer_range;
    // How many numbers of the stream the parameters before this one took: a normal draw takes
    // two.
    let mut taken = 0u64;
    let mut tensors = Vec::new();
    for stage in stage::parameters(config.num_hidden_layers, heads) {
        let StageKind::Param(kind) = stage.kind else { unreachable!("the table's parameters are parameters") };
        let shape = stage.shape(&dims);
        let n: usize = shape.iter().product();
        let mut values: Vec<f32> = match fill(kind) {
            Fill::Normal => {
                let values = normals(seed, taken, n, std);
                taken += 2 * n as u64;
                values
            }
            Fill::Zeros => vec![0.0; n],
            Fill::Ones => vec![1.0; n],
        };
        // `nn.Embedding(padding_idx=pad_token_id)`: the padding token's row is zero.
        if kind == ParamKind::WordEmbeddings && config.pad_token_id < config.vocab_size {
            let h = config.hidden_size;
            values[config.pad_token_id * h..(config.pad_token_id + 1) * h].fill(0.0);
        }
        tensors.push((stage.hf(), shape, values));
    }
    let views: Vec<(String, Vec<usize>, &[f32])> =
        tensors.iter().map(|(name, shape, values)| (name.clone(), shape.clone(), &values[..])).collect();
    crate::io::weights::safetensors_bytes(&views, Path::new("config.json"))
}

/// `n` draws of N(0, `std`²) as f32, the first from the numbers of `seed`'s stream after the
/// first `taken`: the draws one `Init` would make in turn, made on every thread. Each number of
/// SplitMix64's stream is known from its place in it, so every part starts where its first draw
/// is, and the values are the same whatever the thread count (bert-base's 110 million draws took
/// about 3.7 s on one thread).
fn normals(seed: u64, taken: u64, n: usize, std: f64) -> Vec<f32> {
    const AT_ONCE: usize = 1 << 16;
    let mut values = vec![0.0f32; n];
    let parts: Vec<(usize, &mut [f32])> =
        values.chunks_mut(AT_ONCE).enumerate().map(|(i, part)| (i * AT_ONCE, part)).collect();
    crate::ops::for_each_item(parts, |(start, part)| {
        let mut init = Init { rng: SplitMix64::after(seed, taken + 2 * start as u64), std };
        part.iter_mut().for_each(|value| *value = (init.std * init.normal()) as f32);
    });
    values
}

impl<F: Float> BertModel<F> {
    /// Gives the model the heads pretraining needs that it lacks: the MLM head, and with `nsp`
    /// the pooler and the NSP head. Returns the HF names of the modules it made
    /// (`cls.predictions`, `bert.pooler`, `cls.seq_relationship`), in that order.
    pub fn add_pretraining_heads(&mut self, nsp: bool, seed: u64) -> Vec<&'static str> {
        let (h, v) = (self.config.hidden_size, self.config.vocab_size);
        let mut init = Init { rng: SplitMix64::new(seed), std: self.config.initializer_range };
        let mut made = Vec::new();
        if self.mlm.is_none() {
            let params = |kind| WeightAndBias::read_by(Stage::new(kind));
            let decoder = params(StageKind::MlmLogits);
            self.mlm = Some(MlmHead {
                transform: init.linear(params(StageKind::MlmTransform), h, h),
                activation: self.config.activation(),
                layer_norm: init.layer_norm(params(StageKind::MlmLayerNorm), h, F::of(self.config.layer_norm_eps)),
                decoder: Linear {
                    weight: self.embeddings.word_embeddings.clone(),
                    bias: init.zeros(v),
                    params: decoder,
                },
            });
            made.push("cls.predictions");
        }
        if nsp && self.pooler.is_none() {
            self.pooler = Some(BertPooler { dense: init.linear(BertPooler::<F>::params(), h, h) });
            made.push("bert.pooler");
        }
        if nsp && self.nsp.is_none() {
            self.nsp = Some(NspHead { dense: init.linear(NspHead::<F>::params(), h, 2) });
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
            self.pooler = Some(BertPooler { dense: init.linear(BertPooler::<F>::params(), h, h) });
            made.push("bert.pooler");
        }
        match &mut self.classifier {
            Some(classifier) => classifier.labels = labels.to_vec(),
            None => {
                let dense = init.linear(ClassifierHead::<F>::params(), h, labels.len());
                self.classifier = Some(ClassifierHead { dense, labels: labels.to_vec() });
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
    fn linear<F: Float>(&mut self, params: WeightAndBias, inputs: usize, outputs: usize) -> Linear<F> {
        let weight = (0..inputs * outputs).map(|_| F::of(self.std * self.normal())).collect();
        Linear { weight: Param::from_vec(weight, vec![outputs, inputs]), bias: self.zeros(outputs), params }
    }

    fn layer_norm<F: Float>(&mut self, params: WeightAndBias, hidden: usize, eps: F) -> LayerNorm<F> {
        let weight = Param::from_vec(vec![F::one(); hidden], vec![hidden]);
        LayerNorm { weight, bias: self.zeros(hidden), eps, params }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The draws made in parts on every thread are the draws one `Init` makes in turn, after the
    /// numbers the parameters before took, across the parts' seams.
    #[test]
    fn draws_made_in_parts_are_the_draws_made_in_turn() {
        let (seed, taken, n, std) = (7, 3 * 1000 + 1, 3 * (1 << 16) + 5, 0.02);
        let mut init = Init { rng: SplitMix64::new(seed), std };
        for _ in 0..taken {
            init.rng.next_u64();
        }
        let in_turn: Vec<u32> = (0..n).map(|_| ((init.std * init.normal()) as f32).to_bits()).collect();
        let in_parts: Vec<u32> = normals(seed, taken, n, std).iter().map(|v| v.to_bits()).collect();
        assert_eq!(in_turn.len(), in_parts.len());
        let first = in_turn.iter().zip(&in_parts).position(|(a, b)| a != b);
        assert_eq!(first, None, "the first draw that differs");
    }
}
