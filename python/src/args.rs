//! How Python's arguments become the library's: paths given as `str` or `os.PathLike`, one string
//! or a list of them, a keyword's choice, and the passes' settings.

use std::path::PathBuf;

use bert_commands::settings::PassSettings;
use bert_commands::source::process_env;
use bert_core::ops::Kernels;
use bert_core::words::{Choice, Opt};
use bert_core::BertError;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::errors::OrRaise;

/// A `str` or an `os.PathLike`, as text.
pub fn path_text(py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<String> {
    py.import("os")?.call_method1("fspath", (path,))?.extract()
}

/// A list of strings, or one string as a list of one (`pair="B"`).
pub fn strings(value: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    match value.filter(|v| !v.is_none()) {
        None => Ok(Vec::new()),
        Some(one) if one.is_instance_of::<PyString>() => Ok(vec![one.extract()?]),
        Some(many) => many.try_iter()?.map(|item| item?.extract::<String>()).collect(),
    }
}

/// A list of integers, or one integer as a list of one (`nsp_label=0`).
pub fn ints(value: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<i64>> {
    match value.filter(|v| !v.is_none()) {
        None => Ok(Vec::new()),
        Some(one) if one.extract::<i64>().is_ok() => Ok(vec![one.extract()?]),
        Some(many) => many.try_iter()?.map(|item| item?.extract::<i64>()).collect(),
    }
}

/// A path given as `str` or `os.PathLike`.
pub fn path(py: Python<'_>, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<PathBuf>> {
    value.filter(|v| !v.is_none()).map(|v| path_text(py, v).map(PathBuf::from)).transpose()
}

/// A keyword's value that is not one of those it takes.
pub fn bad_choice(py: Python<'_>, option: Opt, value: &str, accepted: &str) -> PyErr {
    crate::errors::to_py(py, BertError::OptionValue { option, value: format!("{value:?}"), accepted: accepted.into() })
}

/// A keyword that takes one of the library's words for a value (`method="occlusion"`), as the
/// library's own type; the message of another lists the words.
pub fn choice<T: Choice>(py: Python<'_>, option: Opt, given: &str) -> PyResult<T> {
    T::parse(given).ok_or_else(|| bad_choice(py, option, given, &T::accepted()))
}

/// The passes' settings: `threads=` and `kernels=`, else `BERT_TRACE_THREADS` and
/// `BERT_TRACE_KERNELS`, as the command reads them.
pub fn settings(py: Python<'_>, threads: Option<usize>, kernels: Option<&str>) -> PyResult<PassSettings> {
    let kernels = kernels.map(|name| choice::<Kernels>(py, bert_commands::settings::KERNELS, name)).transpose()?;
    PassSettings::from_env(PassSettings { threads, kernels }, &process_env).or_raise(py)
}

/// `words=`: None or False by tokens, True by the words found automatically (WordPiece's, and jieba's for Chinese: the command's `--words`), a
/// str by the words it separates by spaces (`--words "..."`).
pub fn words(py: Python<'_>, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    use bert_core::experiments::segmentation::WORDS;
    match value.filter(|w| !w.is_none()) {
        None => Ok(None),
        Some(w) if w.is_instance_of::<pyo3::types::PyBool>() => Ok(w.extract::<bool>()?.then(String::new)),
        Some(w) => match w.extract::<String>() {
            Ok(given) if !given.trim().is_empty() => Ok(Some(given)),
            _ => Err(bad_choice(py, WORDS, &w.to_string(), "True, or words separated by spaces")),
        },
    }
}
