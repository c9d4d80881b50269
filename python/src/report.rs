//! What `bert_trace.diff` and `Trace.view` return (the command's diff report and its page), and
//! the other commands' reports, as Python objects that a notebook shows.

use std::path::PathBuf;

use bert_commands::diff::{self, DiffJson};
use bert_commands::owned_file::{self, Format};
use bert_commands::render::text_table::{html_escape, html_table};
use bert_commands::view::{page_html, Names};
use bert_core::{BertModel, Dump};
use pyo3::prelude::*;

use crate::args::path_text;
use crate::errors::OrRaise;

/// What `bert_trace.diff` returns: `passed`, the per-stage `rows` (dicts, as `bert-trace diff
/// --json` gives them), `first_divergence` and the whole JSON report; `str()` of it is the
/// report the CLI prints.
#[pyclass(name = "DiffReport", module = "bert_trace", frozen)]
pub struct DiffReport {
    #[pyo3(get)]
    passed: bool,
    text: String,
    /// The JSON report, as `bert-trace diff --json` prints it.
    json: String,
    /// The verdict lines of the report: how many stages pass, and the first failing one.
    verdict: String,
}

impl DiffReport {
    /// The report of the library's diff.
    pub fn of(report: diff::DiffReport) -> DiffReport {
        let verdict = verdict(&report.json);
        DiffReport { passed: report.passed, text: report.text, json: report.json.to_value().to_string(), verdict }
    }
}

/// What a notebook shows above the table: the count of stages that pass, and where the first
/// failure is.
fn verdict(json: &DiffJson) -> String {
    let common: Vec<_> = json
        .stages
        .iter()
        .filter(|s| {
            !matches!(
                s.report.status,
                bert_core::divergence::Status::OnlyInReference | bert_core::divergence::Status::OnlyInTrace
            )
        })
        .collect();
    let passed = common.iter().filter(|s| s.report.status == bert_core::divergence::Status::Pass).count();
    let mut out = format!("{passed} of {} stages in common pass", common.len());
    if let Some(first) = &json.first_failure {
        out += &format!("\nfirst failing stage: {}", first.name);
    }
    out
}

#[pymethods]
impl DiffReport {
    /// Every stage compared, in execution order, as `bert-trace diff --json` lists them.
    #[getter]
    fn rows(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.json(py)?.bind(py).get_item("stages")?.unbind())
    }

    /// The first stage both sides have that did not pass, or None.
    #[getter]
    fn first_divergence(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let first = self.json(py)?.bind(py).get_item("first_failure")?;
        if first.is_none() {
            return Ok(first.unbind());
        }
        Ok(first.get_item("name")?.unbind())
    }

    /// The whole report, as `bert-trace diff --json` prints it.
    #[getter]
    fn json(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(py.import("json")?.call_method1("loads", (self.json.as_str(),))?.unbind())
    }

    fn __bool__(&self) -> bool {
        self.passed
    }

    fn __str__(&self) -> String {
        self.text.clone()
    }

    fn __repr__(&self) -> String {
        format!("bert_trace.DiffReport(passed={})", if self.passed { "True" } else { "False" })
    }

    fn _repr_html_(&self, py: Python<'_>) -> PyResult<String> {
        let rows = self.rows(py)?;
        let mut table = Vec::new();
        for row in rows.bind(py).try_iter()? {
            let row = row?;
            let text = |key: &str| -> PyResult<String> { Ok(row.get_item(key)?.str()?.to_string()) };
            let stats = row.get_item("stats")?;
            let max_abs = if stats.is_none() { "-".to_string() } else { stats.get_item("max_abs")?.str()?.to_string() };
            table.push(vec![text("name")?, max_abs, text("status")?]);
        }
        Ok(format!("<p><b>{}</b></p>\n", html_escape(&self.verdict))
            + &html_table(&["stage", "max|Δ|", "result"], &table))
    }
}

/// The page of `bert-trace view`, for a notebook: shown in an `<iframe>` of its own (its
/// scripts and styles stay apart from the notebook's), with no network request.
#[pyclass(name = "Page", module = "bert_trace", frozen)]
pub struct Page {
    /// The whole page, as `bert-trace view` writes it.
    #[pyo3(get)]
    html: String,
}

#[pymethods]
impl Page {
    fn _repr_html_(&self) -> String {
        format!(
            "<iframe srcdoc=\"{}\" style=\"width: 100%; height: 900px; border: 0\" sandbox=\"allow-scripts\"></iframe>",
            html_escape(&self.html)
        )
    }

    /// Writes the page to `path` by the CLI's rule: a file bert-trace did not write is never
    /// replaced.
    fn save(&self, py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<()> {
        let path = PathBuf::from(path_text(py, path)?);
        // Every way this can fail is the file's: not ours to replace, or not writable.
        owned_file::write(&path, self.html.as_bytes(), Format::Text, "page")
            .map_err(|error| crate::errors::raise(py, "FileError", error.to_string()))
    }

    fn __repr__(&self) -> String {
        format!("bert_trace.Page({:.1} MB)", self.html.len() as f64 / 1e6)
    }
}

impl Page {
    /// The page of `dump`, its tokens named by `model`'s tokenizer when there is one.
    pub fn of(py: Python<'_>, dump: &Dump, model: Option<&BertModel>) -> PyResult<Page> {
        let (html, _) = page_html(dump, &Names { model }, None).map_err(bert_commands::error::drawn).or_raise(py)?;
        Ok(Page { html })
    }
}

/// A command's report as a `bert_trace.Report`: a dict of its fields (what `--json` prints) that
/// draws itself in a notebook.
pub fn report_of(py: Python<'_>, report: &impl bert_commands::Report) -> PyResult<Py<PyAny>> {
    let dict = python_of(py, &serde_json::to_value(report).expect("a report serialises"))?;
    Ok(py.import("bert_trace._reports")?.getattr("Report")?.call1((dict,))?.unbind())
}

/// A JSON value as the Python object `json.loads` makes of it: NaN and the infinities, which
/// JSON has not, are None there as here.
pub fn python_of<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    use pyo3::types::{PyDict, PyList};
    use serde_json::Value;
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.into_pyobject(py)?.into_any(),
            (None, Some(u), _) => u.into_pyobject(py)?.into_any(),
            (None, None, f) => f.unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => s.into_pyobject(py)?.into_any(),
        Value::Array(items) => {
            PyList::new(py, items.iter().map(|item| python_of(py, item)).collect::<PyResult<Vec<_>>>()?)?.into_any()
        }
        Value::Object(fields) => {
            let dict = PyDict::new(py);
            for (key, item) in fields {
                dict.set_item(key, python_of(py, item)?)?;
            }
            dict.into_any()
        }
    })
}
