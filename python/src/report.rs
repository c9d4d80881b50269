//! `bert_trace.diff` and `Trace.view`: the CLI's diff report and page, from dumps on disk or
//! from traces in memory (written once into a temporary dump, which the report reads as the CLI
//! reads any dump).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use bert_core::diff::isolate::Isolation;
use bert_core::diff::truth::against_truth;
use bert_core::Dump;
use bert_trace::cli::ToleranceArgs;
use bert_trace::diff_cmd;
use bert_trace::owned_file::{self, Format};
use bert_trace::table::{html_escape, html_table};
use bert_trace::view::{page_html, Names};
use pyo3::prelude::*;

use crate::errors::{guarded, OrRaise};
use crate::model::Model;
use crate::result::{model_of, Trace};
use crate::run::path_text;

/// A temporary dump directory, removed when dropped.
pub struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A trace as a dump: the directory it was read from or saved to, or else written once into a
/// temporary directory (removed when the returned guard is dropped).
pub fn open_trace(py: Python<'_>, trace: &Trace) -> PyResult<(Dump, Option<Scratch>)> {
    if let Some(dir) = trace.dir() {
        return Ok((py.detach(|| Dump::open(&dir)).or_raise(py)?, None));
    }
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!("bert-trace-py-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let scratch = Scratch(std::env::temp_dir().join(name));
    trace.write(py, scratch.0.clone(), false, false)?;
    let dump = Dump::open(&scratch.0).or_raise(py)?;
    Ok((dump, Some(scratch)))
}

/// A trace or a dump directory (or .npz), opened as a dump.
fn open(py: Python<'_>, side: &Bound<'_, PyAny>) -> PyResult<(Dump, Option<Scratch>)> {
    if let Ok(trace) = side.cast::<Trace>() {
        return open_trace(py, trace.get());
    }
    let path = PathBuf::from(path_text(py, side)?);
    Ok((py.detach(|| Dump::open(&path)).or_raise(py)?, None))
}

/// What `bert_trace.diff` returns: `passed`, the per-stage `rows` (dicts, as `bert-trace diff
/// --json` gives them), `first_divergence` and the whole JSON report; `str()` of it is the
/// report the CLI prints.
#[pyclass(name = "DiffReport", module = "bert_trace", frozen)]
pub struct DiffReport {
    #[pyo3(get)]
    passed: bool,
    text: String,
    json: String,
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
        let verdict = self
            .text
            .lines()
            .filter(|l| l.contains("stages in common pass") || l.starts_with("first failing"))
            .collect::<Vec<_>>()
            .join("\n");
        Ok(format!("<p><b>{}</b></p>\n", html_escape(&verdict)) + &html_table(&["stage", "max|Δ|", "result"], &table))
    }
}

/// `diff(reference, trace, atol=None, rtol=None, isolate=False, truth=None, model=None)`.
pub fn diff(
    py: Python<'_>,
    reference: &Bound<'_, PyAny>,
    trace: &Bound<'_, PyAny>,
    tolerance: ToleranceArgs,
    isolate: bool,
    truth: Option<&Bound<'_, PyAny>>,
    model: Option<&Bound<'_, PyAny>>,
) -> PyResult<DiffReport> {
    guarded(py, || {
        let (reference, _a) = open(py, reference)?;
        let (trace, _b) = open(py, trace)?;
        let isolation = if isolate {
            let model = match model.filter(|m| !m.is_none()) {
                Some(m) if m.is_instance_of::<Model>() => m.cast::<Model>()?.clone().unbind(),
                Some(m) => Py::new(py, Model::load(py, Some(PathBuf::from(path_text(py, m)?)))?)?,
                None => Py::new(py, Model::load(py, None)?)?,
            };
            let model = model.get().f32.lock().expect("not poisoned");
            Some(py.detach(|| Isolation::of(&model, &reference, &trace)).or_raise(py)?)
        } else {
            None
        };
        let truth = match truth {
            Some(t) => {
                let (dump, _c) = open(py, t)?;
                Some(py.detach(|| against_truth(&reference, &trace, &dump)).or_raise(py)?)
            }
            None => None,
        };
        compare(py, &reference, &trace, tolerance, isolation.as_ref(), truth.as_deref())
    })
}

/// The report of two dumps, as `bert-trace diff` makes it.
pub fn compare(
    py: Python<'_>,
    reference: &Dump,
    trace: &Dump,
    tolerance: ToleranceArgs,
    isolation: Option<&Isolation>,
    truth: Option<&[bert_core::diff::truth::TruthStage]>,
) -> PyResult<DiffReport> {
    let rendered = diff_cmd::render(reference, trace, tolerance, isolation, truth).or_raise(py)?;
    Ok(DiffReport { passed: rendered.passed, text: rendered.text, json: rendered.json.to_string() })
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
            .map_err(|error| crate::errors::raise(py, "FileError", format!("{error:#}")))
    }

    fn __repr__(&self) -> String {
        format!("bert_trace.Page({:.1} MB)", self.html.len() as f64 / 1e6)
    }
}

/// The page of `trace`.
pub fn page(py: Python<'_>, trace: &Trace) -> PyResult<Page> {
    let (dump, _scratch) = open_trace(py, trace)?;
    let model = model_of(trace).map(|m| m.get().f32.lock().expect("not poisoned"));
    let (html, _) = page_html(&dump, &Names { model: model.as_deref() }, None).or_raise(py)?;
    Ok(Page { html })
}
