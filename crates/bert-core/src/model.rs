//! `BertModel` and its optional heads: loading a checkpoint directory and running the traced
//! forward pass, and for sentence-transformers models, their mean pooling.

use std::path::{Path, PathBuf};

use ndarray::{Array2, Array3};

use crate::attention::BertAttention;
use crate::config::BertConfig;
use crate::embeddings::BertEmbeddings;
use crate::error::{BertError, Result};
use crate::feed_forward::FeedForward;
use crate::heads::{ClassifierHead, NspHead};
use crate::mlm::MlmHead;
use crate::pooler::BertPooler;
use crate::sentence_pooling::SentencePooling;
use crate::stage::{self, Dims, HeadSet, Stage, StageKind};
use crate::tokenize::{Batch, BertTokenizer};
use crate::trace::{Halt, Sink, Tracer};
use crate::weights::{Storage, WeightStore};

/// `bert.encoder.layer.{i}`: attention, then feed-forward.
pub struct BertLayer {
    pub attention: BertAttention,
    pub feed_forward: FeedForward,
}

/// A loaded checkpoint: the encoder, whichever heads its weights have, and its tokenizer.
pub struct BertModel {
    pub config: BertConfig,
    pub embeddings: BertEmbeddings,
    pub layers: Vec<BertLayer>,
    pub pooler: Option<BertPooler>,
    pub mlm: Option<MlmHead>,
    pub nsp: Option<NspHead>,
    pub classifier: Option<ClassifierHead>,
    /// sentence-transformers' mean pooling, when the directory has `1_Pooling/config.json`.
    pub sentence_pooling: Option<SentencePooling>,
    pub tokenizer: BertTokenizer,
    /// Where the model came from, for messages and manifests.
    pub source: PathBuf,
}

/// The tokenizer's files, when they do not come from a directory.
pub enum TokenizerFiles<'a> {
    Json(&'a [u8]),
    Vocab { vocab: &'a [u8], config: Option<&'a [u8]> },
}

/// What the forward pass returns besides the traced stages.
#[derive(Default)]
pub struct Outputs {
    /// `[B,T,H]`, the last layer's output.
    pub last_hidden: Option<Array3<f32>>,
    /// `[B,H]`
    pub pooled: Option<Array2<f32>>,
    /// `[B,T,V]`
    pub mlm_logits: Option<Array3<f32>>,
    /// `[B,2]`
    pub nsp_logits: Option<Array2<f32>>,
    /// `[B,L]`
    pub classifier_logits: Option<Array2<f32>>,
    /// `[B,H]`, the sentence embedding of a sentence-transformers model.
    pub sentence: Option<Array2<f32>>,
}

/// The result of one traced forward pass.
pub struct Traced {
    /// The stop stage, if the pass stopped there before its end.
    pub stopped_at: Option<Stage>,
    pub outputs: Outputs,
}

impl BertModel {
    /// Loads `dir`: config.json, model.safetensors (memory-mapped), tokenizer.json or vocab.txt,
    /// and for a sentence-transformers model, `1_Pooling/config.json`.
    pub fn load(dir: &Path) -> Result<BertModel> {
        let problem = |problem: &str| BertError::ModelDir { path: dir.into(), problem: problem.into() };
        if !dir.exists() {
            return Err(problem("it does not exist"));
        }
        if !dir.is_dir() {
            return Err(problem("it is a file; give the directory that holds config.json"));
        }
        let config_path = dir.join("config.json");
        if !config_path.is_file() {
            return Err(problem("there is no config.json in it"));
        }
        let config = BertConfig::from_file(&config_path)?;
        let weights_path = dir.join("model.safetensors");
        if !weights_path.is_file() {
            if dir.join("pytorch_model.bin").is_file() {
                return Err(problem(
                    "it has only pytorch_model.bin (a pickle, never loaded here); convert it with \
                     `python scripts/convert_to_safetensors.py DIR`",
                ));
            }
            return Err(problem("there is no model.safetensors in it"));
        }
        let store = WeightStore::new(&weights_path, Storage::map(&weights_path)?)?;
        let tokenizer = BertTokenizer::from_dir(dir)?;
        let sentence_pooling = SentencePooling::from_dir(dir, &config)?;
        let mut model = BertModel::assemble(config, &store, tokenizer, dir.into())?;
        model.sentence_pooling = sentence_pooling;
        Ok(model)
    }

    /// Builds a model from files already in memory (the tiny model built into the binary).
    /// `source` names it in messages.
    pub fn from_bytes(
        config_json: &[u8],
        weights: Storage,
        tokenizer: TokenizerFiles<'_>,
        source: &Path,
    ) -> Result<BertModel> {
        let config = BertConfig::from_json(config_json, &source.join("config.json"))?;
        let store = WeightStore::new(&source.join("model.safetensors"), weights)?;
        let tokenizer = match tokenizer {
            TokenizerFiles::Json(bytes) => BertTokenizer::from_json(bytes, &source.join("tokenizer.json"))?,
            TokenizerFiles::Vocab { vocab, config } => {
                BertTokenizer::from_vocab(vocab, config, &source.join("vocab.txt"))?
            }
        };
        BertModel::assemble(config, &store, tokenizer, source.into())
    }

    /// Loads every module from `store`, finding the heads from the tensor names.
    pub fn assemble(
        config: BertConfig,
        store: &WeightStore,
        tokenizer: BertTokenizer,
        source: PathBuf,
    ) -> Result<BertModel> {
        let embeddings = BertEmbeddings::load(store, &config)?;
        let layers = (0..config.num_hidden_layers)
            .map(|i| {
                let prefix = format!("bert.encoder.layer.{i}");
                Ok(BertLayer {
                    attention: BertAttention::load(store, &config, &format!("{prefix}.attention"))?,
                    feed_forward: FeedForward::load(store, &config, &prefix)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let pooler =
            if store.contains("bert.pooler.dense.weight") { Some(BertPooler::load(store, &config)?) } else { None };
        let mlm = if MlmHead::present(store) {
            Some(MlmHead::load(store, &config, &embeddings.word_embeddings)?)
        } else {
            None
        };
        let nsp = if NspHead::present(store) { Some(NspHead::load(store, &config)?) } else { None };
        let classifier =
            if ClassifierHead::present(store) { Some(ClassifierHead::load(store, &config)?) } else { None };
        if pooler.is_none() && (nsp.is_some() || classifier.is_some()) {
            return Err(BertError::MissingTensor {
                path: store.path().into(),
                name: "bert.pooler.dense.weight".into(),
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
        })
    }

    /// Which heads this checkpoint has.
    pub fn heads(&self) -> HeadSet {
        HeadSet {
            pooler: self.pooler.is_some(),
            mlm: self.mlm.is_some(),
            nsp: self.nsp.is_some(),
            classifier: self.classifier.is_some(),
            sentence: self.sentence_pooling.is_some(),
        }
    }

    /// Every stage this model produces, in execution order.
    pub fn plan(&self) -> Vec<Stage> {
        stage::plan(self.config.num_hidden_layers, self.heads())
    }

    /// The sizes of the symbolic dimensions for a batch of `batch` × `tokens`.
    pub fn dims(&self, batch: usize, tokens: usize) -> Dims {
        let n_labels = self.classifier.as_ref().map_or(0, |c| c.labels.len());
        self.config.dims(batch, tokens, n_labels)
    }

    /// The last stage of `name`, which is a stage or a group on a dot boundary
    /// (`layer0.attention`, `layer3`, `embeddings`).
    pub fn resolve_stop(&self, name: &str) -> Result<Stage> {
        let plan = self.plan();
        if let Some(stage) = plan.iter().rev().find(|s| stage::in_group(&s.name(), name)) {
            return Ok(*stage);
        }
        // A name that some BERT computes, but not this one, deserves to be told why.
        let every_head = HeadSet { pooler: true, mlm: true, nsp: true, classifier: true, sentence: true };
        let n_layers = self.config.num_hidden_layers;
        let elsewhere = stage::plan(n_layers + 1000, every_head).into_iter().find(|s| stage::in_group(&s.name(), name));
        match elsewhere {
            Some(stage) => Err(BertError::AbsentStage {
                name: name.into(),
                reason: match stage.layer {
                    Some(_) => format!("it has {n_layers} layers, layer0 to layer{}", n_layers - 1),
                    None => format!("its checkpoint has no {} weights", stage.info().part.weights()),
                },
            }),
            None => Err(BertError::UnknownStage { name: name.into(), suggestions: stage::suggestions(name, &plan) }),
        }
    }

    /// Tokenizes `texts` (with sentence B from `pairs`) for this model.
    pub fn encode(&self, texts: &[String], pairs: Option<&[String]>, truncate: bool) -> Result<Batch> {
        self.tokenizer.encode(texts, pairs, self.config.max_position_embeddings, truncate)
    }

    /// Runs the forward pass on `batch`, handing every stage to `sink` in execution order, and
    /// stops after `stop_after` if given: nothing after it is computed.
    pub fn trace(&self, batch: &Batch, sink: &mut dyn Sink, stop_after: Option<Stage>) -> Result<Traced> {
        self.embeddings.check_ids(batch)?;
        let mut tracer = Tracer::new(sink, stop_after);
        let mut outputs = Outputs::default();
        let stopped_at = match self.run(batch, &mut tracer, &mut outputs) {
            Ok(()) => None,
            Err(Halt::Stopped(stage)) => Some(stage),
            Err(Halt::Failed(e)) => return Err(e),
        };
        tracer.finish()?;
        Ok(Traced { stopped_at, outputs })
    }

    fn run(&self, batch: &Batch, tracer: &mut Tracer, outputs: &mut Outputs) -> Result<(), Halt> {
        tracer.i64(Stage::new(StageKind::InputIds), batch.ids.view())?;
        tracer.i64(Stage::new(StageKind::InputTokenTypeIds), batch.token_type_ids.view())?;
        tracer.i64(Stage::new(StageKind::InputAttentionMask), batch.attention_mask.view())?;

        // [B,T]: 0 where the key is a real token, the most negative f32 where it is padding, as
        // HF's eager attention builds it: (1 - mask) * finfo(float32).min.
        let mask_add = batch.attention_mask.mapv(|m| (1.0 - m as f32) * f32::MIN);

        let mut hidden = self.embeddings.forward(batch, tracer)?;
        for (layer_idx, layer) in self.layers.iter().enumerate() {
            hidden = layer.attention.forward(layer_idx, &hidden, &mask_add, tracer)?;
            hidden = layer.feed_forward.forward(layer_idx, &hidden, tracer)?;
        }
        if let Some(pooler) = &self.pooler {
            outputs.pooled = Some(pooler.forward(&hidden, tracer)?);
        }
        if let Some(mlm) = &self.mlm {
            outputs.mlm_logits = Some(mlm.forward(&hidden, tracer)?);
        }
        if let (Some(nsp), Some(pooled)) = (&self.nsp, &outputs.pooled) {
            outputs.nsp_logits = Some(nsp.forward(pooled, tracer)?);
        }
        if let (Some(classifier), Some(pooled)) = (&self.classifier, &outputs.pooled) {
            outputs.classifier_logits = Some(classifier.forward(pooled, tracer)?);
        }
        if let Some(pooling) = &self.sentence_pooling {
            outputs.sentence = Some(pooling.forward(&hidden, &batch.attention_mask, tracer)?);
        }
        outputs.last_hidden = Some(hidden);
        Ok(())
    }
}
