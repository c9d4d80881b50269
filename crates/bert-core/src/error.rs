//! Typed errors: each names the file or tensor at fault, what was expected and what was found,
//! so the CLI can print it as one line.

use std::path::PathBuf;

use crate::words::Opt;

/// Everything that can go wrong while loading a model, tokenizing, tracing or reading a dump.
#[derive(Debug, thiserror::Error)]
pub enum BertError {
    /// The I/O error is part of the message rather than a `source`, so that printing the error
    /// with its chain does not say it twice.
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },

    #[error("{path}: not a model directory: {problem}")]
    ModelDir { path: PathBuf, problem: String },

    /// A path the caller named that is not there: what it was to be, and what may help.
    #[error("{path}: {problem}")]
    NotFound { path: PathBuf, problem: String },

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

    /// A text longer than the model reads. `advice` is the caller's, when it has a way to cut
    /// the text (a trace's `truncate`); empty otherwise.
    #[error(
        "input {index}: {}{tokens} tokens long, more than max_position_embeddings {max} of config.json{advice}",
        if *at_least { "at least " } else { "" }
    )]
    TooLong { index: usize, tokens: usize, at_least: bool, max: usize, advice: String },

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

    /// A line of a training text that cannot be used (`bert-trace train --file`,
    /// `finetune --file`); line 0 is the file as a whole.
    #[error("{}{}: {problem}", path.display(), at_line(*line))]
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

    /// An intervention (an ablation, a patch) that cannot be applied to this model or run.
    /// An element `explain` cannot explain: a target that does not parse, an index out of
    /// range, a stage or operand the dump lacks, a model that is not the dump's.
    #[error("{target}: {problem}")]
    Explain { target: String, problem: String },

    #[error("{spec}: {problem}")]
    Intervention { spec: String, problem: String },

    /// An option given a value it cannot take; `accepted` says what it can take. The option is
    /// named in the caller's words when the message is shown (see [`crate::words`]).
    #[error("{}: expected {accepted}", option.with(value))]
    OptionValue { option: Opt, value: String, accepted: String },

    /// A tensor of a model or an optimizer's state that holds NaN or an infinity, where a run
    /// would start from it: it could only train, and save, a broken model.
    #[error(
        "{path}: tensor `{tensor}` holds {value} at element {index}: a run cannot start from a model or optimizer \
         state with NaN or inf in it"
    )]
    NonFinite { path: PathBuf, tensor: String, index: usize, value: f32 },

    /// A training run that stopped because a value became NaN or infinite; nothing of the step
    /// was saved.
    #[error("step {step}: {problem}")]
    Diverged { step: usize, problem: String },
}

fn hint(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        " (‹@stages› lists them)".to_string()
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

/// `: line N` for a line of a file, nothing for the file as a whole (line 0).
fn at_line(line: usize) -> String {
    match line {
        0 => String::new(),
        n => format!(": line {n}"),
    }
}
