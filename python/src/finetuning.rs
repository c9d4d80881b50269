//! `bert_trace.finetune`: the command's `finetune`, from Python: a fine-tuning request built
//! from the keyword arguments (the command's options, by the same names), run by the library
//! (`bert_commands::finetune`). The run's lines are printed through Python, `on_step` gets every
//! step's report and `on_eval` every evaluation's, and Ctrl-C stops the run after its step.

use bert_commands::finetune::FinetuneRequest;
use bert_core::training::TrainSettings;
use pyo3::prelude::*;

use crate::args::{path, settings};
use crate::errors::OrRaise;
use crate::pretraining::{callable, dump_steps, ToPython};

/// Every keyword of `finetune` but the callbacks.
pub struct FinetuneKeywords<'py> {
    /// The keywords that decide the run's numbers, as the library takes them.
    pub settings: TrainSettings,
    pub from_config: bool,
    pub eval_file: Option<Bound<'py, PyAny>>,
    pub eval_every: Option<usize>,
    pub epochs: Option<usize>,
    pub save: Option<Bound<'py, PyAny>>,
    pub save_every: Option<usize>,
    pub resume: Option<Bound<'py, PyAny>>,
    pub dump_step: Option<Bound<'py, PyAny>>,
    pub log_every: usize,
    pub threads: Option<usize>,
    pub kernels: Option<String>,
}

/// `finetune(file=None, model=None, *, on_step=None, on_eval=None, **keywords)`: a dict of the
/// run's reports, `{"steps": [...], "evaluations": [...], "classes": [...]}`.
pub fn finetune(
    py: Python<'_>,
    file: Option<&Bound<'_, PyAny>>,
    model: Option<&Bound<'_, PyAny>>,
    on_step: Option<&Bound<'_, PyAny>>,
    on_eval: Option<&Bound<'_, PyAny>>,
    k: FinetuneKeywords<'_>,
) -> PyResult<Py<PyAny>> {
    callable("on_step", on_step)?;
    callable("on_eval", on_eval)?;
    let request = FinetuneRequest {
        file: path(py, file)?,
        eval_file: path(py, k.eval_file.as_ref())?,
        model: path(py, model)?,
        from_config: k.from_config,
        settings: k.settings,
        epochs: k.epochs,
        save: path(py, k.save.as_ref())?,
        save_every: k.save_every,
        resume: path(py, k.resume.as_ref())?,
        dump_steps: dump_steps(k.dump_step.as_ref())?,
        log_every: k.log_every,
        eval_every: k.eval_every,
        pass: settings(py, k.threads, k.kernels.as_deref())?,
    };
    let callback = |f: Option<&Bound<'_, PyAny>>| f.filter(|f| !f.is_none()).map(|f| f.clone().unbind());
    let mut progress = ToPython {
        on_step: callback(on_step),
        on_eval: callback(on_eval),
        architecture: "BertForSequenceClassification",
        error: None,
    };
    let finished = py.detach(|| bert_commands::finetune::finetune(&request, &mut progress));
    if let Some(error) = progress.error.take() {
        return Err(error);
    }
    let report = finished.or_raise(py)?;
    let report = serde_json::to_string(&report).expect("the report serialises");
    Ok(py.import("json")?.call_method1("loads", (report,))?.unbind())
}
