//! bert-core: BERT's forward pass on `ndarray`, tensor by tensor.
//!
//! Load a Hugging Face checkpoint with [`BertModel::load`], tokenize with [`BertModel::encode`],
//! and run [`BertModel::trace`] with a [`Sink`] that receives every named stage of the stage
//! table ([`trace::stage::STAGES`]) in execution order: [`Discard`] to only compute, [`Memory`]
//! to keep them, [`DumpWriter`] to write `OUT/<stage>.npy` and `OUT/manifest.json`.
//! [`compare`] diffs two dumps stage by stage.
//!
//! ```
//! use bert_core::{BertModel, Memory};
//!
//! # fn main() -> bert_core::Result<()> {
//! # let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../golden/tiny");
//! let model = BertModel::load(&dir)?; // config.json, model.safetensors, vocab.txt
//! let batch = model.encode(&["When in Rome, do as the [MASK] do.".to_string()], None, false)?;
//! let mut stages = Memory::default();
//! model.trace(&batch, &mut stages, None)?;
//!
//! let probs = stages.get("layer0.attention.probs").expect("every stage is kept");
//! assert_eq!(probs.shape(), &[1, 4, 13, 13]); // [B,nh,T,T]
//! # Ok(())
//! # }
//! ```
//!
//! The crate is laid out the way the model is read:
//!
//! - [`model`]: BERT itself, one file per Hugging Face module (`embeddings`, `attention`,
//!   `feed_forward`, ...), each forward pass written as the formula with a shape on every line;
//! - [`ops`]: the named operations the model calls (`linear`, `matmul`, `softmax_rows`,
//!   `layer_norm_rows`, `gelu`, `split_heads`, ...), each with its plain reference
//!   implementation beside it; the fast kernels are below them, in `ops/kernels/`;
//! - [`objectives`]: the pretraining objectives' inputs (masking, labels);
//! - [`trace`]: the stage table, the sinks, the manifest and the statistics;
//! - [`dump`]: writing and reading dump directories;
//! - [`load`]: config.json, the safetensors weights, the tokenizer;
//! - [`compare`]: the stage-by-stage diff;
//! - [`checkpoints`]: two models' traces of one input side by side;
//! - [`isolate`]: each stage recomputed from a dump's own inputs, for its own error;
//! - [`truth`]: both sides of a diff against a float64 dump of the same input;
//! - [`experiments`]: ablated heads, patched stages, the logit lens, occlusion;
//! - [`training`]: pretraining: batches of a text, AdamW, its schedule, checkpoints;
//! - [`words`]: how messages name the caller's options (`--max-len` or `max_len=`).

pub mod checkpoints;
pub mod compare;
pub mod dump;
pub mod error;
pub mod experiments;
pub mod isolate;
pub mod load;
pub mod model;
pub mod objectives;
pub mod ops;
pub mod params;
pub mod trace;
pub mod training;
pub mod truth;
pub mod words;

pub use dump::{Dump, DumpWriter};
pub use error::{BertError, Result};
pub use load::config::BertConfig;
pub use load::tokenize::Batch;
pub use model::BertModel;
pub use ops::Kernels;
pub use trace::stage::{Stage, StageKind};
pub use trace::{Discard, Memory, Sink, Tensor, TensorView};
