//! Typed errors: each names the file or tensor at fault, what was expected and what was found,
//! so the CLI can print it as one line.

use std::path::PathBuf;

/// Everything that can go wrong while loading a model, tokenizing, tracing or reading a dump.
#[derive(Debug, thiserror::Error)]
pub enum BertError {
    /// The I/O error is part of the message rather than a `source`, so that printing the error
    /// with its chain does not say it twice.
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },

    #[error("{path}: not a model directory: {problem}")]
    ModelDir { path: PathBuf, problem: String },

    #[error("{path}: {problem}")]
    Config { path: PathBuf, problem: String },

    #[error("{path}: not a valid safetensors file: {problem}")]
    Safetensors { path: PathBuf, problem: String },

    #[error("{path}: tensor `{name}` is missing (looked for {tried})")]
    MissingTensor { path: PathBuf, name: String, tried: String },

    #[error("{path}: tensor `{name}` has shape {found:?}, expected {expected:?} from config.json")]
    TensorShape { path: PathBuf, name: String, expected: Vec<usize>, found: Vec<usize> },

    #[error("{path}: tensor `{name}` has dtype {found}, expected one of F32, F16, BF16")]
    TensorDtype { path: PathBuf, name: String, found: String },

    #[error("{path}: {problem}")]
    Tokenizer { path: PathBuf, problem: String },

    #[error("input {index}: {problem}")]
    Input { index: usize, problem: String },

    #[error("unknown stage `{name}`{}", hint(suggestions))]
    UnknownStage { name: String, suggestions: Vec<String> },

    #[error("this model has no stage `{name}`: {reason}")]
    AbsentStage { name: String, reason: String },

    #[error("{path}: {problem}")]
    Dump { path: PathBuf, problem: String },

    /// A path that is not the kind of file expected (a FIFO, a directory, a device), or one far
    /// larger than such a file can be.
    #[error("{path}: {problem}")]
    File { path: PathBuf, problem: String },

    #[error("this run {problem}")]
    Memory { problem: String },

    #[error("{0}")]
    Labels(String),

    #[error("{path}: the model has no {weights} weights, so it cannot compute {wanted}")]
    MissingHead { path: PathBuf, wanted: String, weights: String },

    /// A line of a training text that cannot be used (`bert-trace train --file`).
    #[error("{path}: line {line}: {problem}")]
    Corpus { path: PathBuf, line: usize, problem: String },

    /// A training run's options or saved state that do not fit together.
    #[error("{0}")]
    Training(String),

    /// A checkpoint directory that cannot be written or resumed from.
    #[error("{path}: {problem}")]
    Checkpoint { path: PathBuf, problem: String },

    /// The user stopped the pass (Ctrl-C in Python, between two stages).
    #[error("interrupted")]
    Interrupted,

    /// An intervention (`--ablate`, `--patch`) that cannot be applied to this model or run.
    #[error("{spec}: {problem}")]
    Intervention { spec: String, problem: String },
}

fn hint(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        " (run `bert-trace stages` for the list)".to_string()
    } else {
        format!("; did you mean {}?", suggestions.join(", "))
    }
}

impl BertError {
    pub(crate) fn io(path: impl Into<PathBuf>, error: std::io::Error) -> BertError {
        BertError::Io { path: path.into(), error }
    }
}

pub type Result<T, E = BertError> = std::result::Result<T, E>;
