//! `bert_trace.train`: the command's `train`, from Python: a training request built from the
//! keyword arguments (the command's options, by the same names), run by the library
//! (`bert_commands::train`). The run's lines are printed through Python (so a notebook shows
//! them), `on_step` gets every step's report, and Ctrl-C stops the run after the step it is in.

use bert_commands::train::TrainRequest;
use bert_core::training::run::Progress;
use bert_core::training::TrainSettings;
use bert_core::words::{in_dialect, Dialect};
use pyo3::prelude::*;

use crate::args::{path, settings, strings};
use crate::errors::OrRaise;

/// The run's progress, handed to Python (`train`'s and `finetune`'s).
pub(crate) struct ToPython {
    pub on_step: Option<Py<PyAny>>,
    /// Called with each evaluation on held-out examples (`finetune`).
    pub on_eval: Option<Py<PyAny>>,
    /// The transformers class that loads what the run saves.
    pub architecture: &'static str,
    /// The exception that stopped the run (Ctrl-C, or a callback's own), raised once it has.
    pub error: Option<PyErr>,
}

/// A report's JSON text as Python's values (a dict), for a callback.
fn to_python<'py>(py: Python<'py>, report: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (report,))
}

impl ToPython {
    /// Calls `callback` with `report`, after checking for Ctrl-C; an exception stops the run.
    fn call(&mut self, which: fn(&ToPython) -> Option<&Py<PyAny>>, report: String) -> bert_core::Result<()> {
        let result = Python::attach(|py| -> PyResult<()> {
            py.check_signals()?;
            if let Some(callback) = which(self) {
                callback.call1(py, (to_python(py, &report)?,))?;
            }
            Ok(())
        });
        result.map_err(|error| {
            self.error = Some(error);
            bert_core::BertError::Interrupted
        })
    }
}

impl Progress for ToPython {
    fn note(&mut self, text: &str) {
        Python::attach(|py| crate::errors::notes(py, &[text.to_string()]));
    }

    fn line(&mut self, text: &str) {
        Python::attach(|py| {
            let _ = py.import("builtins").and_then(|b| b.call_method1("print", (in_dialect(text, Dialect::Keywords),)));
        });
    }

    fn saved(&mut self, dir: &std::path::Path, step: usize) {
        self.line(&format!(
            "saved {} (step {step}): bert_trace.Model({:?}) and transformers' {}.from_pretrained load it",
            dir.display(),
            dir.display().to_string(),
            self.architecture
        ));
    }

    fn step(&mut self, log: &bert_core::training::StepLog, _: usize) -> bert_core::Result<()> {
        self.call(|p| p.on_step.as_ref(), serde_json::to_string(log).expect("a step's report serialises"))
    }

    fn evaluated(&mut self, evaluation: &bert_core::training::held_out::Evaluation) -> bert_core::Result<()> {
        self.call(|p| p.on_eval.as_ref(), serde_json::to_string(evaluation).expect("an evaluation serialises"))
    }
}

/// Every keyword of `train`.
pub struct TrainKeywords<'py> {
    /// The keywords that decide the run's numbers, as the library takes them.
    pub settings: TrainSettings,
    pub from_config: bool,
    pub eval_file: Option<Bound<'py, PyAny>>,
    pub eval_every: Option<usize>,
    pub save: Option<Bound<'py, PyAny>>,
    pub save_every: Option<usize>,
    pub resume: Option<Bound<'py, PyAny>>,
    pub dump_step: Option<Bound<'py, PyAny>>,
    pub log_every: usize,
    pub threads: Option<usize>,
    pub kernels: Option<String>,
}

/// `train(file=None, model=None, *, on_step=None, **keywords)`: the run's report of every step.
pub fn train(
    py: Python<'_>,
    file: Option<&Bound<'_, PyAny>>,
    model: Option<&Bound<'_, PyAny>>,
    on_step: Option<&Bound<'_, PyAny>>,
    on_eval: Option<&Bound<'_, PyAny>>,
    k: TrainKeywords<'_>,
) -> PyResult<Py<PyAny>> {
    callable("on_step", on_step)?;
    callable("on_eval", on_eval)?;
    let dump_steps = dump_steps(k.dump_step.as_ref())?;
    let request = TrainRequest {
        file: path(py, file)?,
        eval_file: path(py, k.eval_file.as_ref())?,
        eval_every: k.eval_every,
        model: path(py, model)?,
        from_config: k.from_config,
        settings: k.settings,
        save: path(py, k.save.as_ref())?,
        save_every: k.save_every,
        resume: path(py, k.resume.as_ref())?,
        dump_steps,
        log_every: k.log_every,
        pass: settings(py, k.threads, k.kernels.as_deref())?,
    };
    let mut progress = ToPython {
        on_step: on_step.filter(|f| !f.is_none()).map(|f| f.clone().unbind()),
        on_eval: on_eval.filter(|f| !f.is_none()).map(|f| f.clone().unbind()),
        architecture: "BertForPreTraining",
        error: None,
    };
    let trained = py.detach(|| bert_commands::train::train(&request, &mut progress).map(|trainer| trainer.log));
    if let Some(error) = progress.error.take() {
        return Err(error);
    }
    let log = trained.or_raise(py)?;
    let log = serde_json::to_string(&log).expect("the log serialises");
    Ok(py.import("json")?.call_method1("loads", (log,))?.unbind())
}

/// Refuses a callback that cannot be called, naming its keyword.
pub(crate) fn callable(keyword: &str, f: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    match f.filter(|f| !f.is_none() && !f.is_callable()) {
        Some(f) => Err(pyo3::exceptions::PyTypeError::new_err(format!("{keyword}={} is not callable", f.repr()?))),
        None => Ok(()),
    }
}

/// `dump_step`: a step given as a number is the command's `K`; a string may be a range, `A-B`;
/// or a list of either.
pub(crate) fn dump_steps(value: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    match value.filter(|v| !v.is_none()) {
        Some(one) if one.extract::<usize>().is_ok() => Ok(vec![one.extract::<usize>()?.to_string()]),
        Some(many) if many.extract::<String>().is_err() => {
            many.try_iter()?.map(|item| item?.str().map(|s| s.to_string())).collect::<PyResult<_>>()
        }
        other => strings(other),
    }
}
