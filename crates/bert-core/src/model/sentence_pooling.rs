//! sentence-transformers' mean pooling: a sentence embedding is the mean of the last hidden state
//! over the real tokens.
//!
//! It is not part of BERT. A sentence-transformers model directory (all-MiniLM-L6-v2, for one)
//! lists its modules in `modules.json`: the BERT encoder, then `sentence_transformers.models.Pooling`
//! whose settings are in `1_Pooling/config.json`, then often `2_Normalize`. When that config asks
//! for mean pooling and nothing else, the trace gains one stage after the heads, `sentence.pooled`,
//! equal to `Pooling.forward`'s `sentence_embedding` (before any `2_Normalize`). Other pooling modes
//! (CLS, max, ...) are not traced: the stage is simply absent.

use std::path::{Path, PathBuf};

use ndarray::{Array2, Array3, Axis};
use serde::Deserialize;

use crate::error::{BertError, Result};
use crate::io::config::BertConfig;
use crate::io::files;
use crate::ops::Float;
use crate::pass::{Halt, Tracer};
use crate::stage::{Stage, StageKind};

/// The module type that `modules.json` gives the pooling step.
const POOLING_TYPE: &str = "sentence_transformers.models.Pooling";

/// Where the pooling config lives when there is no `modules.json` to say.
pub const DEFAULT_POOLING_DIR: &str = "1_Pooling";

/// Mean pooling over the tokens whose attention mask is 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentencePooling {
    /// The `config.json` it was read from, for messages.
    pub config_path: PathBuf,
}

/// The fields of `1_Pooling/config.json` that decide what is computed.
#[derive(Debug, Deserialize)]
struct PoolingConfig {
    word_embedding_dimension: usize,
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
}

/// One entry of `modules.json`.
#[derive(Debug, Deserialize)]
struct Module {
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

impl SentencePooling {
    /// The pooling of the model in `dir`, if it is a sentence-transformers model whose pooling
    /// is the mean alone; `None` for a plain BERT directory.
    pub fn from_dir(dir: &Path, config: &BertConfig) -> Result<Option<SentencePooling>> {
        let Some(pooling_dir) = pooling_dir(dir)? else {
            return Ok(None);
        };
        let path = dir.join(pooling_dir).join("config.json");
        let Some(bytes) = files::read_optional(&path, files::MAX_CONFIG)? else {
            return Ok(None);
        };
        let pooling: PoolingConfig = serde_json::from_slice(&bytes).map_err(|e| BertError::Config {
            path: path.clone(),
            problem: format!("not a valid sentence-transformers pooling config: {e}"),
        })?;
        if pooling.word_embedding_dimension != config.hidden_size {
            return Err(BertError::Config {
                path,
                problem: format!(
                    "word_embedding_dimension is {}, expected {} (hidden_size of config.json)",
                    pooling.word_embedding_dimension, config.hidden_size
                ),
            });
        }
        let others = pooling.pooling_mode_cls_token
            || pooling.pooling_mode_max_tokens
            || pooling.pooling_mode_mean_sqrt_len_tokens
            || pooling.pooling_mode_weightedmean_tokens
            || pooling.pooling_mode_lasttoken;
        if !pooling.pooling_mode_mean_tokens || others {
            return Ok(None);
        }
        Ok(Some(SentencePooling { config_path: path }))
    }

    /// `[B,T,H]`, `[B,T]` -> `[B,H]`: sentence-transformers computes
    /// `sum(hidden * mask, over T) / clamp(sum(mask, over T), min=1e-9)`.
    pub(crate) fn forward<F: Float>(
        &self,
        hidden: &Array3<F>,
        mask: &Array2<i64>,
        tracer: &mut Tracer,
    ) -> Result<Array2<F>, Halt> {
        let mut pooled = mean_pool(hidden, mask);
        tracer.float(Stage::new(StageKind::SentencePooled), &mut pooled)?;
        Ok(pooled)
    }
}

/// `sentence.pooled`: `[B,T,H]`, `[B,T]` -> `[B,H]`, the mean of the hidden states of the
/// tokens whose attention mask is 1.
pub fn mean_pool<F: Float>(hidden: &Array3<F>, mask: &Array2<i64>) -> Array2<F> {
    // [B,T] -> [B,T,1]: 1 for a real token and 0 for padding, broadcast over H below.
    let mask = mask.mapv(|m| m as f64).insert_axis(Axis(2));
    // [B,T,H] -> [B,H]: the real tokens' hidden states summed over T, in f64 whatever F is. In
    // f32 the running sum over up to 512 tokens rounds at every token, and came out farther
    // from the exact mean than PyTorch's at every 512-token text of scripts/accuracy.py.
    // In a simulated narrower format the sums are a tensor of that format (`ops::narrow`).
    let sums =
        crate::ops::narrow((hidden.mapv(|v| v.to_f64().expect("an f32 or f64 is an f64")) * &mask).sum_axis(Axis(1)));
    // ... over [B,1]: how many real tokens each sequence has.
    let counts = mask.sum_axis(Axis(1)).mapv(|n| n.max(1e-9));
    (sums / &counts).mapv(|mean| F::from_f64(mean).expect("an f64 converts to f32 or f64"))
}

/// The pooling module's directory inside `dir`: from `modules.json` when there is one, else
/// `1_Pooling` if it exists. `None` when the model has no pooling module.
fn pooling_dir(dir: &Path) -> Result<Option<String>> {
    let modules_path = dir.join("modules.json");
    let Some(bytes) = files::read_optional(&modules_path, files::MAX_CONFIG)? else {
        let exists = dir.join(DEFAULT_POOLING_DIR).is_dir();
        return Ok(exists.then(|| DEFAULT_POOLING_DIR.to_string()));
    };
    let modules: Vec<Module> = serde_json::from_slice(&bytes).map_err(|e| BertError::Config {
        path: modules_path.clone(),
        problem: format!("not a valid sentence-transformers modules.json: {e}"),
    })?;
    let Some(module) = modules.into_iter().find(|m| m.kind == POOLING_TYPE) else {
        return Ok(None);
    };
    // The path names a folder of the model directory; anything that could leave it is refused.
    let inside = Path::new(&module.path).components().all(|c| matches!(c, std::path::Component::Normal(_)));
    if !inside || module.path.is_empty() {
        return Err(BertError::Config {
            path: modules_path,
            problem: format!("the Pooling module's path `{}` is not a folder of the model directory", module.path),
        });
    }
    Ok(Some(module.path))
}
