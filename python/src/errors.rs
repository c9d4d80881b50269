//! Errors as Python exceptions: `bert_trace.Error` and its subclasses (defined in
//! `bert_trace/errors.py`), each carrying the one-line message the CLI prints for the same
//! problem, with options named as Python's keywords. A panic becomes a `bert_trace.Error` too,
//! never an abort.

use std::panic::{catch_unwind, AssertUnwindSafe};

use bert_commands::source::HubFailure;
use bert_commands::Error;
use bert_core::words::{in_dialect, Dialect};
use bert_core::BertError;
use pyo3::prelude::*;

/// Which exception class of `bert_trace.errors` a failure raises, from its type.
fn class_of(error: &Error) -> &'static str {
    use std::io::ErrorKind::NotFound;
    if let Some(hub) = error.hub() {
        return match hub.kind {
            HubFailure::NotFound | HubFailure::Offline => "NotFoundError",
            HubFailure::Network | HubFailure::Broken | HubFailure::Access => "FileError",
            HubFailure::Unsupported => "InputError",
        };
    }
    match error {
        Error::File { .. } => return "FileError",
        Error::Within { inner, .. } if error.bert().is_none() => return class_of(inner),
        _ => {}
    }
    match error.bert() {
        Some(BertError::Io { error, .. }) if error.kind() == NotFound => "NotFoundError",
        Some(BertError::NotFound { .. }) => "NotFoundError",
        Some(BertError::Io { .. } | BertError::File { .. } | BertError::Dump { .. } | BertError::Checkpoint { .. }) => {
            "FileError"
        }
        _ => "InputError",
    }
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
pub fn to_py(py: Python<'_>, error: impl Into<Error>) -> PyErr {
    let error = error.into();
    raise(py, class_of(&error), in_dialect(&error.to_string(), Dialect::Keywords))
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

impl<T, E: Into<Error>> OrRaise<T> for Result<T, E> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}

/// The library's notes, written to `sys.stderr` (where a notebook shows them), options named as
/// keywords.
pub fn notes(py: Python<'_>, notes: &[String]) {
    if notes.is_empty() {
        return;
    }
    let text: String = notes.iter().map(|note| format!("{}\n", in_dialect(note, Dialect::Keywords))).collect();
    let _ = py.import("sys").and_then(|sys| sys.getattr("stderr")?.call_method1("write", (text,)));
}
