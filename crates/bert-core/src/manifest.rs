//! `manifest.json`: the table of contents of a dump directory, written by both `bert-trace` and
//! `scripts/dump_reference.py`.

use serde::{Deserialize, Serialize};

use crate::stage::{Dims, Stage};

/// The `format` value of every manifest we write and accept.
pub const FORMAT: &str = "bert-trace-dump/1";

/// The whole manifest.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: String,
    /// Who wrote the dump (program, versions).
    pub producer: serde_json::Value,
    /// The model it was made with.
    pub model: String,
    pub inputs: Inputs,
    /// Every stage written, in execution order.
    pub stages: Vec<ManifestStage>,
    /// The glob patterns the dump was limited to (`--only`), when it holds a subset of the stages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only_stages: Option<Vec<String>>,
    /// The stage the trace stopped at, when it stopped early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<String>,
}

/// The texts the dump was made from.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Inputs {
    pub texts: Vec<String>,
    /// Sentence B for each text, for sentence pairs.
    pub pair: Option<Vec<String>>,
}

/// One stage's entry.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ManifestStage {
    pub name: String,
    pub shape: Vec<usize>,
    /// `float32` or `int64`.
    pub dtype: String,
    /// The `.npy` file, relative to the manifest.
    pub file: String,
    /// The Hugging Face module or output it corresponds to.
    #[serde(default)]
    pub hf: String,
    #[serde(default)]
    pub formula: String,
}

impl ManifestStage {
    /// The entry for `stage` with the shape it takes for `dims`.
    pub fn describe(stage: &Stage, dims: &Dims) -> ManifestStage {
        ManifestStage::new(stage, stage.shape(dims))
    }

    /// The entry for `stage` written with `shape`.
    pub fn new(stage: &Stage, shape: Vec<usize>) -> ManifestStage {
        ManifestStage {
            name: stage.name(),
            shape,
            dtype: stage.info().dtype.numpy_name().into(),
            file: stage.file_name(),
            hf: stage.hf(),
            formula: stage.info().formula.into(),
        }
    }
}
