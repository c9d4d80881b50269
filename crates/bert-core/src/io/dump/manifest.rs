//! `manifest.json`: the table of contents of a dump directory, written by both `bert-trace` and
//! `scripts/dump_reference.py`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::pass::TensorView;
use crate::stage::{Dims, Stage};

/// The `format` value of every manifest we write. Version 2 added the interventions, the lens,
/// the gradients and the model's fingerprint: a reader of version 1 would take an intervened run
/// for the model's own. Version 3 added the digest of every tensor (`model_tensors`): a reader of
/// version 2 would accept a model that differs in a weight other than the position table.
pub const FORMAT: &str = "bert-trace-dump/3";

/// What every format name starts with; the number after it is the format's major version.
pub const FORMAT_PREFIX: &str = "bert-trace-dump/";

/// The newest major version this build reads: a manifest of a newer one is refused in one line,
/// since it may hold what this version would misread.
pub const FORMAT_MAJOR: u32 = 3;

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
    /// The `.npz` archive beside the manifest that holds the stages (each stage's `file` is then
    /// its member), when the dump is one archive rather than one `.npy` file per stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<String>,
    /// Which checkpoint made the dump: the first 16 hex digits of the SHA-256 of its
    /// position-embedding table (see `io/fingerprint.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_fingerprint: Option<String>,
    /// The digest of every tensor of that checkpoint, by its transformers name (format 3; see
    /// `io/fingerprint.rs`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub model_tensors: std::collections::BTreeMap<String, String>,
    /// What was changed in the pass (ablated heads, patched stages), in the order applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interventions: Vec<InterventionRecord>,
    /// Whether the dump holds the logit lens (`lens.*`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lens: bool,
    /// After a backward pass: the parameters the loss did not reach, which have no
    /// `grad.param.*` stage (PyTorch leaves their `.grad` None).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub no_gradient: Vec<String>,
    /// A pass simulated in a narrower format or with int8 weights (`crate::precision`): what was
    /// simulated, and where a value first stopped being finite. Its stages are float32 files
    /// whose values are the format's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulated: Option<crate::precision::SimulationRecord>,
}

impl Manifest {
    /// The manifest of a dump `producer` writes of `model` on `inputs`, in the current format,
    /// with no stages yet and nothing else recorded: the one place a manifest is made, whoever
    /// fills it in (the dump writer, a trace kept in memory, a dump read from another program).
    pub fn new(producer: serde_json::Value, model: String, inputs: Inputs) -> Manifest {
        Manifest {
            format: FORMAT.into(),
            producer,
            model,
            inputs,
            stages: Vec::new(),
            only_stages: None,
            stopped_at: None,
            archive: None,
            model_fingerprint: None,
            model_tensors: Default::default(),
            interventions: Vec::new(),
            lens: false,
            no_gradient: Vec::new(),
            simulated: None,
        }
    }
}

/// The texts the dump was made from, and what was done to them: enough to make the same dump
/// again.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Inputs {
    pub texts: Vec<String>,
    /// Sentence B for each text, for sentence pairs.
    pub pair: Option<Vec<String>>,
    /// Each sequence's tokens as the model sees them (after any masking), padding included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Vec<Vec<String>>>,
    /// The probability of BERT's random masking, when tokens were masked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask_prob: Option<f64>,
    /// The masking's seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The words the typed `[MASK]`s are to be predicted as, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlm_targets: Option<Vec<String>>,
    /// Each sequence's next-sentence label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nsp_label: Option<Vec<i64>>,
    /// Each sequence's class for a classifier's loss, by its name in `id2label` (or its index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<Vec<String>>,
    /// The dump the labels were read from (`dump_reference.py --labels-from`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels_from: Option<String>,
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

    /// The entry for `stage` holding `tensor`: its shape, and the dtype its values have
    /// (float64 in an f64 pass), not only the one the table gives.
    pub fn of(stage: &Stage, tensor: &TensorView<'_>) -> ManifestStage {
        let mut entry = ManifestStage::new(stage, tensor.shape().to_vec());
        entry.dtype = tensor.dtype().numpy_name().into();
        entry
    }

    /// The entry for `stage` written with `shape`.
    pub fn new(stage: &Stage, shape: Vec<usize>) -> ManifestStage {
        ManifestStage {
            name: stage.name(),
            shape,
            dtype: stage.info().dtype.numpy_name().into(),
            file: stage.file_name(),
            hf: stage.hf(),
            formula: stage.formula(),
        }
    }
}

/// One intervention as the manifest records it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum InterventionRecord {
    Ablate {
        ablate: String,
        with: String,
    },
    Patch {
        patch: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        positions: Option<String>,
        from: String,
    },
    /// One element set by hand (`bert-trace step`'s `set`): `STAGE[i,j,...]`.
    Set {
        set: String,
        value: f64,
    },
}

impl fmt::Display for InterventionRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InterventionRecord::Ablate { ablate, with } => write!(f, "ablate {ablate} (with {with})"),
            InterventionRecord::Patch { patch, positions: Some(positions), from } => {
                write!(f, "patch {patch}@{positions} from {from}")
            }
            InterventionRecord::Patch { patch, positions: None, from } => write!(f, "patch {patch} from {from}"),
            InterventionRecord::Set { set, value } => write!(f, "set {set} to {value}"),
        }
    }
}
