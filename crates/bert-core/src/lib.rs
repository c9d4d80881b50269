//! bert-core: BERT's forward pass on `ndarray`, tensor by tensor.
//!
//! Load a Hugging Face checkpoint with [`BertModel::load`], tokenize with [`BertModel::encode`],
//! and run [`BertModel::trace`] with a [`trace::Sink`] that receives every named stage of
//! [`stage::STAGES`] in execution order: [`trace::Discard`] to only compute,
//! [`trace::Memory`] to keep them, [`dump::DumpWriter`] to write `OUT/<stage>.npy` and
//! `OUT/manifest.json`. [`compare`] diffs two dumps stage by stage.
//!
//! The modules follow Hugging Face's `modeling_bert.py`, one concept each, in the order the
//! forward pass runs them: [`embeddings`], [`layer_norm`], [`attention`], [`feed_forward`],
//! [`pooler`], [`mlm`], [`heads`], and for sentence-transformers models, [`sentence_pooling`].

pub mod activation;
pub mod attention;
pub mod compare;
pub mod config;
pub mod dump;
pub mod embeddings;
pub mod error;
pub mod feed_forward;
pub mod gemm;
pub mod heads;
pub mod layer_norm;
pub mod linear;
pub mod manifest;
pub mod mlm;
pub mod model;
pub mod params;
pub mod pooler;
pub mod sentence_pooling;
pub mod simd;
pub mod stage;
pub mod summary;
pub mod threads;
pub mod tokenize;
pub mod trace;
pub mod weights;

pub use config::BertConfig;
pub use error::{BertError, Result};
pub use model::BertModel;
pub use stage::{Stage, StageKind};
pub use tokenize::Batch;
