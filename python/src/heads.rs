//! `bert_trace.heads`: the command's `heads`, from Python: which heads matter, as a dict of
//! `[layers][heads]` lists (the command's `--json`), made by the library
//! (`bert_commands::heads`).

use bert_commands::heads::HeadsRequest;
use pyo3::prelude::*;

use crate::args::{path, settings, strings};
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
    let nsp_labels = match k.nsp_label.as_ref().filter(|v| !v.is_none()) {
        None => Vec::new(),
        Some(one) if one.extract::<i64>().is_ok() => vec![one.extract()?],
        Some(many) => many.try_iter()?.map(|item| item?.extract::<i64>()).collect::<PyResult<_>>()?,
    };
    let request = HeadsRequest {
        texts: strings(Some(text))?,
        file: path(py, k.file.as_ref())?,
        model: path(py, model)?,
        pair: strings(k.pair.as_ref())?,
        mlm_targets: strings(k.mlm_target.as_ref())?,
        nsp_labels,
        labels: strings(k.label.as_ref())?,
        importance: k.importance,
        statistics: k.statistics,
        batch_size: k.batch_size,
        json: true,
        settings: settings(py, k.threads, k.kernels.as_deref())?,
    };
    let report = py.detach(|| bert_commands::heads::heads(&request, &mut |_, _| {})).or_raise(py)?;
    crate::errors::notes(py, &report.notes);
    report_of(py, &report.text)
}

/// A command's JSON report as a `bert_trace.Report`: a dict that draws itself in a notebook.
pub fn report_of(py: Python<'_>, json: &str) -> PyResult<Py<PyAny>> {
    let dict = py.import("json")?.call_method1("loads", (json,))?;
    Ok(py.import("bert_trace._reports")?.getattr("Report")?.call1((dict,))?.unbind())
}

/// `_picture(json)`: the SVG `bert-trace view` draws of a command's JSON report.
#[pyfunction]
pub fn _picture(py: Python<'_>, json: &str) -> PyResult<String> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| crate::errors::raise(py, "InputError", format!("not a report: {e}")))?;
    bert_commands::view::svg_of_report(&value).or_raise(py)
}
