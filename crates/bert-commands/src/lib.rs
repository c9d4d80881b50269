//! What bert-trace's commands do, without their command line: each command's request (what to
//! trace, diff, compare, train, ...), its work, and its report, which the `bert-trace` binary
//! prints and the `bert_trace` Python package returns. BERT itself, its passes and every
//! measure are `bert_core`'s; where models come from (a directory, the Hugging Face cache or hub,
//! the models built into bert-trace) is `bert_sources`' (here as [`source`]), and how a dump is
//! drawn `bert_view`'s; this crate adds how reports are printed ([`render`]) and where the
//! drawings are written ([`view`]).
//!
//! | command | here |
//! | --- | --- |
//! | `bert-trace TEXT` (a trace) | [`trace`] |
//! | `diff`, `diff --isolate`, `diff --truth` | [`diff`] |
//! | `compare` | [`compare`] |
//! | `train` | [`train`] |
//! | `finetune` | [`finetune`] |
//! | `evaluate` | [`evaluate`] |
//! | `ablate`, `lens`, `attribute` | [`ablate`], [`lens`], [`attribute`] (and [`experiment`]) |
//! | `heads` | [`heads`] |
//! | `view` | [`view`] |
//! | `stages`, `inspect` | [`stages`], [`inspect`] |

pub mod ablate;
pub mod attribute;
pub mod compare;
pub mod diff;
pub mod error;
pub mod evaluate;
pub mod experiment;
pub mod explain;
pub mod finetune;
pub mod heads;
pub mod inspect;
pub mod lens;
pub mod owned_file;
pub mod padding;
pub mod render;
pub mod report;
pub mod rollout;
pub mod settings;
pub mod stages;
pub mod step;
pub mod tolerances;
pub mod trace;
pub mod train;
pub mod view;

pub use bert_sources as source;
pub use error::{Error, Result, Within};
pub use report::{Report, Reported};
