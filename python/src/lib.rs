//! `bert_trace` for Python: the CLI's trace, diff and page from a notebook, with every stage as a
//! numpy array. Nothing here computes BERT or compares anything: each function parses its
//! options with the CLI's parser and calls the same code the CLI runs (`bert-core` and the
//! `bert-trace` library); this crate moves the results into Python objects.
//!
//! | Python | here | CLI |
//! | --- | --- | --- |
//! | `bert_trace.trace`, `Model.trace` | `run.rs` | `bert-trace TEXT ...` |
//! | `Trace` (`save`, `predictions`, `stage_table`, `view`) | `result.rs` | the dump, the tables, `view` |
//! | `bert_trace.load` | `result.rs` | reading a dump (`diff`, `view`) |
//! | `bert_trace.diff`, `DiffReport`, `Page` | `report.rs` | `bert-trace diff`, `bert-trace view` |
//! | `trace(..., hooks={stage: fn})` | `hooks.rs` | `--ablate`, `--patch` (the same seam) |
//! | `bert_trace.train` | `pretraining.rs` | `bert-trace train` |
//! | `bert_trace.Error` and its subclasses | `errors.rs` | the one-line message and exit 2 |

mod errors;
mod hooks;
mod model;
mod pretraining;
mod report;
mod result;
mod run;

use std::path::PathBuf;

use bert_core::stage;
use bert_trace::cli::ToleranceArgs;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{guarded, raise};
use crate::model::Model;
use crate::result::Trace;

/// Traces `text` (a string, or a list of strings for a padded batch) through `model` (a
/// directory, a Hugging Face id, a loaded `Model`, or None for the built-in tiny model) and
/// returns every stage as a numpy array. Every other option is the CLI's, by the same name
/// (`pair`, `stop_at`, `only`, `mask_prob`, `seed`, `mlm_target`, `nsp_label`, `backward`,
/// `precision`, `ablate`, `patch`, `lens`, `truncate`, `threads`, `kernels`, ...; a repeatable
/// option takes a list), with the same defaults and errors. `hooks={stage: fn}` calls `fn` with
/// the stage as a numpy array as the pass computes it; what `fn` returns is what the model
/// uses from there on. The GIL is released during the pass; Ctrl-C stops it between stages.
#[pyfunction]
#[pyo3(signature = (text, model = None, *, hooks = None, **options))]
fn trace(
    py: Python<'_>,
    text: &Bound<'_, PyAny>,
    model: Option<&Bound<'_, PyAny>>,
    hooks: Option<&Bound<'_, PyDict>>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Trace> {
    guarded(py, || run::trace(py, text, model, hooks, options))
}

/// Reads a dump directory (or .npz): bert-trace's, `scripts/dump_reference.py`'s, or your own
/// numpy program's. `model` (a `Model`, a directory or a hub id) names the predicted tokens.
#[pyfunction]
#[pyo3(signature = (dir, model = None))]
fn load(py: Python<'_>, dir: &Bound<'_, PyAny>, model: Option<&Bound<'_, PyAny>>) -> PyResult<Trace> {
    guarded(py, || {
        let dir = PathBuf::from(run::path_text(py, dir)?);
        let model = match model.filter(|m| !m.is_none()) {
            Some(m) if m.is_instance_of::<Model>() => Some(m.cast::<Model>()?.clone().unbind()),
            Some(m) => Some(Py::new(py, Model::load(py, Some(PathBuf::from(run::path_text(py, m)?)))?)?),
            None => None,
        };
        Trace::load(py, dir, model)
    })
}

/// Compares `reference` and `trace` (each a `Trace` or a dump directory) stage by stage, as
/// `bert-trace diff` does, and returns its report. `isolate=True` recomputes each stage from
/// each side's own inputs with `model`'s weights (whose error is it); `truth` is a float64 dump
/// of the same input (which side is closer to the exact result).
#[pyfunction]
#[pyo3(signature = (reference, trace, *, atol = None, rtol = None, isolate = false, truth = None, model = None))]
#[allow(clippy::too_many_arguments)]
fn diff(
    py: Python<'_>,
    reference: &Bound<'_, PyAny>,
    trace: &Bound<'_, PyAny>,
    atol: Option<f64>,
    rtol: Option<f64>,
    isolate: bool,
    truth: Option<&Bound<'_, PyAny>>,
    model: Option<&Bound<'_, PyAny>>,
) -> PyResult<report::DiffReport> {
    for (name, value) in [("atol", atol), ("rtol", rtol)] {
        if value.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
            return Err(raise(
                py,
                "InputError",
                format!("{name}={}: expected a finite number, 0 or more", value.unwrap_or_default()),
            ));
        }
    }
    report::diff(py, reference, trace, ToleranceArgs { atol, rtol }, isolate, truth, model)
}

/// Every stage name of the stage table, in execution order, with its shape, Hugging Face
/// equivalent and formula (`bert-trace stages`), for the tiny model's layout with every head.
#[pyfunction]
fn stages(py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
    let mut out = Vec::new();
    for info in stage::STAGES {
        let d = PyDict::new(py);
        d.set_item("name", info.pattern)?;
        let symbols: Vec<&str> = info.shape.iter().map(|d| d.symbol()).collect();
        d.set_item("shape", format!("[{}]", symbols.join(",")))?;
        d.set_item("hf", info.hf)?;
        d.set_item("formula", info.formula)?;
        out.push(d.into_any().unbind());
    }
    Ok(out)
}

/// Pretrains BERT on `file` as `bert-trace train` does (every option is the command's, by the
/// same name) and returns the report of every step (`step`, `loss`, `mlm_loss`, `nsp_loss`,
/// `lr`). The run's lines are printed as the command prints them; `on_step(report)` is called
/// after each step. The GIL is released while a step runs; Ctrl-C stops the run after the step
/// it is in (a checkpoint already saved stays).
#[pyfunction]
#[pyo3(signature = (file = None, model = None, *, on_step = None, **options))]
fn train(
    py: Python<'_>,
    file: Option<&Bound<'_, PyAny>>,
    model: Option<&Bound<'_, PyAny>>,
    on_step: Option<&Bound<'_, PyAny>>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Py<PyAny>> {
    guarded(py, || pretraining::train(py, file, model, on_step, options))
}

/// For the tests: a panic inside the extension, which must surface as `bert_trace.Error`.
#[pyfunction]
fn _panic_for_tests(py: Python<'_>) -> PyResult<()> {
    guarded(py, || panic!("a panic the tests asked for"))
}

#[pymodule]
fn _bert_trace(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(trace, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(diff, m)?)?;
    m.add_function(wrap_pyfunction!(stages, m)?)?;
    m.add_function(wrap_pyfunction!(train, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_tests, m)?)?;
    m.add_class::<Model>()?;
    m.add_class::<Trace>()?;
    m.add_class::<report::DiffReport>()?;
    m.add_class::<report::Page>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
