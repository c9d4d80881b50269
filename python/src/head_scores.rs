//! `bert_trace.heads`: the command's `heads`, from Python: which heads matter, as a dict of
//! `[layers][heads]` lists (the command's `--json`), made by the library
//! (`bert_commands::heads`).

use bert_commands::heads::HeadsRequest;
use pyo3::prelude::*;

use crate::args::{ints, path, settings, strings};
use crate::errors::OrRaise;

/// Every keyword of `heads`.
pub struct HeadsKeywords<'py> {
    pub file: Option<Bound<'py, PyAny>>,
    pub pair: Option<Bound<'py, PyAny>>,
    pub mlm_target: Option<Bound<'py, PyAny>>,
    pub nsp_label: Option<Bound<'py, PyAny>>,
    pub label: Option<Bound<'py, PyAny>>,
    pub importance: bool,
    pub statistics: bool,
    pub batch_size: Option<usize>,
    pub threads: Option<usize>,
    pub kernels: Option<String>,
}

/// `heads(text, model=None, **keywords)`: the report of `bert-trace heads --json`, as a dict.
pub fn heads(
    py: Python<'_>,
    text: &Bound<'_, PyAny>,
    model: Option<&Bound<'_, PyAny>>,
    k: HeadsKeywords<'_>,
) -> PyResult<Py<PyAny>> {
    let request = HeadsRequest {
        texts: strings(Some(text))?,
        file: path(py, k.file.as_ref())?,
        model: path(py, model)?,
        pair: strings(k.pair.as_ref())?,
        mlm_targets: strings(k.mlm_target.as_ref())?,
        nsp_labels: ints(k.nsp_label.as_ref())?,
        labels: strings(k.label.as_ref())?,
        importance: k.importance,
        statistics: k.statistics,
        batch_size: k.batch_size,
        settings: settings(py, k.threads, k.kernels.as_deref())?,
    };
    let reported = py.detach(|| bert_commands::heads::heads(&request, &mut |_, _| {})).or_raise(py)?;
    crate::errors::notes(py, &reported.notes);
    crate::report::report_of(py, &reported.report)
}

/// `_picture(json)`: the SVG `bert-trace view` draws of a command's JSON report.
#[pyfunction]
pub fn _picture(py: Python<'_>, json: &str) -> PyResult<String> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| crate::errors::raise(py, "InputError", format!("not a report: {e}")))?;
    bert_commands::view::svg_of_report(&value).map_err(bert_commands::error::drawn).or_raise(py)
}
