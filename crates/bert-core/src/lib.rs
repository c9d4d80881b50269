//! bert-core: BERT's forward pass on `ndarray`, tensor by tensor.
//!
//! Load a Hugging Face checkpoint with [`BertModel::load`], tokenize with [`BertModel::encode`],
//! and run [`BertModel::trace`] with a [`Sink`] that receives every named stage of the stage
//! table ([`stage::STAGES`]) in execution order: [`Discard`] to only compute, [`Memory`]
//! to keep them, [`DumpWriter`] to write `OUT/<stage>.npy` and `OUT/manifest.json`.
//! [`divergence`] diffs two dumps stage by stage.
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
//! The crate is laid out the way the model is read. Its rooms are named for the work they do
//! (divergence, explanation, training, ablation, ...), so that they are not mistaken for the
//! commands' requests and reports in `bert-commands`, which are named as the commands are typed
//! (`diff`, `explain`, `train`, `ablate`, ...):
//!
//! - [`model`]: BERT itself, one file per Hugging Face module (`embeddings`, `attention`,
//!   `feed_forward`, ...), each forward pass written as the formula with a shape on every line
//!   and its backward beside it; loading a checkpoint and counting its parameters beside them;
//! - [`ops`]: the named operations the model calls (`linear`, `matmul`, `softmax_rows`,
//!   `layer_norm_rows`, `gelu`, `split_heads`, ...), each with its plain reference
//!   implementation beside it; the fast kernels are below them, in `ops/kernels/`;
//! - [`stage`]: the stage table, every name a traced tensor has, and what each stage reads;
//! - [`pass`]: where a pass's stages go: the sinks, the tracer, the hooks that change stages;
//! - [`objectives`]: the pretraining objectives' inputs (masking, labels);
//! - [`io`]: config.json, the safetensors weights, the tokenizer, and dumps ([`io::dump`]),
//!   written and read back;
//! - [`divergence`]: reading two dumps against each other: the stage-by-stage diff (`bert-trace
//!   diff`), each stage's own error (`diff --isolate`), both sides against a float64 truth
//!   (`diff --truth`), two models' traces of one input (`bert-trace compare`, in `two_models.rs`);
//! - [`precision`]: a pass simulated in bfloat16 or float16, or with int8 weights
//!   (`--precision bf16`, `--weights int8`);
//! - [`explanation`]: why one element is what it is, its formula with its operands
//!   (`bert-trace explain`);
//! - [`experiments`]: ablated heads and patched stages (`ablate`), the logit lens (`lens`),
//!   token importance (`attribute`), head importance (`heads`), attention flow (`rollout`);
//! - [`training`]: pretraining (`bert-trace train`): batches of a text, AdamW, its schedule, the
//!   run, and its saves;
//! - [`words`]: how messages name the caller's options (`--max-len` or `max_len=`).

pub mod divergence;
pub mod error;
pub mod experiments;
pub mod explanation;
pub mod io;
pub mod model;
pub mod objectives;
pub mod ops;
pub mod pass;
pub mod precision;
pub mod recompute;
pub mod stage;
pub mod training;
pub mod words;

pub use error::{BertError, Result};
pub use io::config::BertConfig;
pub use io::dump::{Dump, DumpWriter};
pub use io::tokenizer::Batch;
pub use model::BertModel;
pub use ops::Kernels;
pub use pass::{Discard, Memory, Sink, Tensor, TensorView};
pub use stage::{Stage, StageKind};
