//! Errors as Python exceptions: `bert_trace.Error` and its subclasses (defined in
//! `bert_trace/errors.py`), each carrying the one-line message the CLI prints for the same
//! problem. A panic becomes a `bert_trace.Error` too, never an abort.

use std::panic::{catch_unwind, AssertUnwindSafe};

use bert_core::words::{render, Dialect};
use bert_core::BertError;
use pyo3::prelude::*;

/// Which exception class of `bert_trace.errors` a failure raises.
fn class_of(error: &anyhow::Error) -> &'static str {
    use std::io::ErrorKind::NotFound;
    for cause in error.chain() {
        if let Some(error) = cause.downcast_ref::<BertError>() {
            return match error {
                BertError::Io { error, .. } if error.kind() == NotFound => "NotFoundError",
                BertError::ModelDir { problem, .. }
                | BertError::Dump { problem, .. }
                | BertError::File { problem, .. }
                | BertError::Checkpoint { problem, .. }
                    if missing(problem) =>
                {
                    "NotFoundError"
                }
                BertError::Io { .. }
                | BertError::File { .. }
                | BertError::Dump { .. }
                | BertError::Checkpoint { .. } => "FileError",
                _ => "InputError",
            };
        }
        if let Some(error) = cause.downcast_ref::<std::io::Error>() {
            return if error.kind() == NotFound { "NotFoundError" } else { "FileError" };
        }
    }
    "InputError"
}

/// Whether a problem the library reports is that something is not there.
fn missing(problem: &str) -> bool {
    ["not found", "it does not exist", "does not exist"].iter().any(|p| problem.starts_with(p))
}

/// The exception `class` of `bert_trace.errors` with `message`.
pub fn raise(py: Python<'_>, class: &str, message: String) -> PyErr {
    match py.import("bert_trace.errors").and_then(|m| m.getattr(class)) {
        Ok(class) => PyErr::from_type(class.cast_into().expect("an exception class"), message),
        Err(error) => error,
    }
}

/// A failure of the library as the exception its kind calls for, with the CLI's message, its
/// options named as Python's keywords (see bert_core::words).
pub fn to_py(py: Python<'_>, error: anyhow::Error) -> PyErr {
    raise(py, class_of(&error), render(&format!("{error:#}"), Dialect::Keywords))
}

/// Runs `f`, turning a panic into `bert_trace.Error` ("internal error ..."), as the CLI turns
/// one into a single line.
pub fn guarded<T>(py: Python<'_>, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(raise(py, "Error", format!("internal error in bert-trace ({what}); please report it")))
        }
    }
}

/// `?` for the library's results inside a function that returns to Python.
pub trait OrRaise<T> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T>;
}

impl<T, E: Into<anyhow::Error>> OrRaise<T> for Result<T, E> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e.into()))
    }
}
