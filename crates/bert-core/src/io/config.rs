//! `config.json`: every field of Hugging Face's `BertConfig` that changes the math.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::files;
use crate::error::{BertError, Result};
use crate::stage::Dims;

/// The model's sizes and choices, as `config.json` gives them.
///
/// Field names mirror `transformers.BertConfig`, so a reader can put the two side by side.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
pub struct BertConfig {
    /// H: the width of every hidden state.
    pub hidden_size: usize,
    /// How many encoder layers.
    pub num_hidden_layers: usize,
    /// nh: attention heads per layer; hs = H / nh.
    pub num_attention_heads: usize,
    /// I: the width of the feed-forward block.
    pub intermediate_size: usize,
    /// The feed-forward activation: `gelu` is the exact erf form.
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// BERT uses 1e-12, not PyTorch's default 1e-5.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// V: rows of the word embedding table.
    pub vocab_size: usize,
    /// The longest input (in tokens, with `[CLS]` and `[SEP]`) the position table covers.
    pub max_position_embeddings: usize,
    /// Rows of the token type table (2: sentence A and B).
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    #[serde(default)]
    pub pad_token_id: usize,
    /// The standard deviation of the normal distribution new weights are drawn from (heads a
    /// checkpoint lacks, made fresh for training); transformers' default is 0.02.
    #[serde(default = "default_initializer_range")]
    pub initializer_range: f64,
    /// The probability that dropout zeroes an element of a hidden state (after the embeddings,
    /// and each block's output before its residual), in training only; transformers' default
    /// is 0.1.
    #[serde(default = "default_dropout")]
    pub hidden_dropout_prob: f64,
    /// The probability that dropout zeroes an attention probability, in training only.
    #[serde(default = "default_dropout")]
    pub attention_probs_dropout_prob: f64,
    /// A classifier's dropout on the pooled vector; None (null): `hidden_dropout_prob`.
    #[serde(default)]
    pub classifier_dropout: Option<f64>,
    /// Only `absolute` is implemented; the others would silently give wrong answers.
    #[serde(default = "default_position_type")]
    pub position_embedding_type: String,
    /// Label names of a sequence-classification head, if the checkpoint has one.
    #[serde(default)]
    pub id2label: BTreeMap<String, String>,
    #[serde(default)]
    pub architectures: Vec<String>,
    /// `bert` for every checkpoint this tool reads; other families (roberta, distilbert, ...)
    /// name their tensors differently and are refused up front. Absent in some old configs.
    #[serde(default)]
    pub model_type: Option<String>,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_initializer_range() -> f64 {
    0.02
}
fn default_dropout() -> f64 {
    0.1
}
fn default_eps() -> f64 {
    1e-12
}
fn default_type_vocab() -> usize {
    2
}
fn default_position_type() -> String {
    "absolute".into()
}

/// Sizes beyond these are refused before anything is allocated; bert-large is far below them.
const MAX_HIDDEN: usize = 1 << 16;
const MAX_LAYERS: usize = 1 << 10;
const MAX_VOCAB: usize = 1 << 22;
const MAX_POSITIONS: usize = 1 << 17;
const MAX_TYPES: usize = 1 << 10;

/// serde_json names a mistyped field only by line and column (`invalid type: string "30522",
/// expected usize at line 21 column 23`); the text just before that point holds the field's
/// name, so it goes into the message. None when that text names no field (e.g. the closing
/// brace after a missing field, which serde already names).
fn json_context(text: &[u8], e: &serde_json::Error) -> Option<String> {
    let text = std::str::from_utf8(text).ok()?;
    let line = text.lines().nth(e.line().checked_sub(1)?)?;
    let floor = |mut i: usize| {
        i = i.min(line.len());
        while !line.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let end = floor(e.column());
    let start = floor(end.saturating_sub(60));
    let mut context = line[start..end].trim();
    // In a one-line file, keep only the last `"field": value`.
    if let Some((_, last)) = context.rsplit_once(',') {
        if last.contains('"') {
            context = last.trim();
        }
    }
    context.contains('"').then(|| context.to_string())
}

impl BertConfig {
    /// Reads and checks `path` (a `config.json`).
    pub fn from_file(path: &Path) -> Result<BertConfig> {
        let text = files::read(path, files::MAX_CONFIG)?;
        BertConfig::from_json(&text, path)
    }

    /// Parses and checks the JSON text of a `config.json`; `path` is only used in errors.
    pub fn from_json(text: &[u8], path: &Path) -> Result<BertConfig> {
        let config: BertConfig = serde_json::from_slice(text).map_err(|e| BertError::Config {
            path: path.into(),
            problem: match json_context(text, &e) {
                Some(context) => format!("not a valid BERT config.json: {e}, at `{context}`"),
                None => format!("not a valid BERT config.json: {e}"),
            },
        })?;
        config.validate(path)?;
        Ok(config)
    }

    fn validate(&self, path: &Path) -> Result<()> {
        let problem = |problem: String| BertError::Config { path: path.into(), problem };
        let sizes = [
            ("hidden_size", self.hidden_size, MAX_HIDDEN),
            ("num_hidden_layers", self.num_hidden_layers, MAX_LAYERS),
            ("num_attention_heads", self.num_attention_heads, MAX_HIDDEN),
            ("intermediate_size", self.intermediate_size, MAX_HIDDEN * 8),
            ("vocab_size", self.vocab_size, MAX_VOCAB),
            ("max_position_embeddings", self.max_position_embeddings, MAX_POSITIONS),
            ("type_vocab_size", self.type_vocab_size, MAX_TYPES),
        ];
        for (field, value, max) in sizes {
            if value == 0 {
                return Err(problem(format!("{field} is 0; it must be at least 1")));
            }
            if value > max {
                return Err(problem(format!("{field} is {value}, more than the {max} this tool accepts")));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(problem(format!(
                "hidden_size {} is not divisible by num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            )));
        }
        if let Some(model_type) = self.model_type.as_deref().filter(|t| *t != "bert") {
            return Err(problem(format!(
                "model_type is `{model_type}`, expected `bert`: bert-trace reads BERT checkpoints only"
            )));
        }
        if self.position_embedding_type != "absolute" {
            return Err(problem(format!(
                "position_embedding_type `{}` is not supported (only `absolute`)",
                self.position_embedding_type
            )));
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps > 0.0) {
            return Err(problem(format!("layer_norm_eps {} must be a positive number", self.layer_norm_eps)));
        }
        Activation::from_name(&self.hidden_act).map_err(|e| problem(e.to_string()))?;
        Ok(())
    }

    /// The sizes of the symbolic dimensions for a batch of `batch` × `tokens`, with `n_labels`
    /// classifier labels; config.json alone decides the rest, so no weights are needed.
    pub fn dims(&self, batch: usize, tokens: usize, n_labels: usize) -> Dims {
        Dims {
            batch,
            tokens,
            hidden: self.hidden_size,
            n_heads: self.num_attention_heads,
            head_size: self.head_size(),
            intermediate: self.intermediate_size,
            vocab: self.vocab_size,
            n_labels,
            max_positions: self.max_position_embeddings,
            type_vocab: self.type_vocab_size,
        }
    }

    /// hs: the size of one attention head.
    pub fn head_size(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// The feed-forward activation (already checked to be known).
    pub fn activation(&self) -> Activation {
        Activation::from_name(&self.hidden_act).expect("checked in validate")
    }

    /// The LayerNorm epsilon as the f32 that the computation uses.
    pub fn eps(&self) -> f32 {
        self.layer_norm_eps as f32
    }
}

/// `hidden_act` from config.json.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `gelu`: the exact form, x · Φ(x) = x · (1 + erf(x / √2)) / 2, as `torch.nn.functional.gelu`.
    Gelu,
    /// `gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`: the tanh approximation of GPT-2 and early BERT code.
    GeluTanh,
    /// `relu`: max(x, 0).
    Relu,
}

/// An activation name that we do not implement.
#[derive(Debug, thiserror::Error)]
#[error("hidden_act `{0}` is not supported (expected gelu, gelu_new, gelu_pytorch_tanh, gelu_fast or relu)")]
pub struct UnknownActivation(pub String);

impl Activation {
    pub fn from_name(name: &str) -> Result<Activation, UnknownActivation> {
        match name {
            "gelu" => Ok(Activation::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Activation::GeluTanh),
            "relu" => Ok(Activation::Relu),
            other => Err(UnknownActivation(other.to_string())),
        }
    }
}
