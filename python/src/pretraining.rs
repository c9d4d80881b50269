//! `bert_trace.train`: the command's `train`, from Python. The options are the command's (read
//! by its parser); the loop is `bert_trace::train_cmd::train`. The run's lines are printed
//! through Python (so a notebook shows them), `on_step` gets every step's report, and Ctrl-C
//! stops the run after the step it is in.

use bert_core::train::run::Progress;
use bert_core::words::{render, Dialect};
use bert_trace::cli::Command;
use bert_trace::train_cmd;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{raise, OrRaise};
use crate::run::{flags, parse_cli};

/// The run's progress, handed to Python.
struct ToPython {
    on_step: Option<Py<PyAny>>,
    /// The exception that stopped the run (Ctrl-C, or `on_step`'s own), raised once it has.
    error: Option<PyErr>,
}

impl Progress for ToPython {
    fn note(&mut self, text: &str) {
        Python::attach(|py| {
            let _ = py.import("sys").and_then(|sys| {
                sys.getattr("stderr")?.call_method1("write", (format!("{}\n", render(text, Dialect::Keywords)),))
            });
        });
    }

    fn line(&mut self, text: &str) {
        Python::attach(|py| {
            let _ = py.import("builtins").and_then(|b| b.call_method1("print", (render(text, Dialect::Keywords),)));
        });
    }

    fn step(&mut self, log: &bert_core::train::StepLog, _: usize) -> bert_core::Result<()> {
        let result = Python::attach(|py| -> PyResult<()> {
            py.check_signals()?;
            if let Some(on_step) = &self.on_step {
                let report = serde_json::to_string(log).expect("a step's report serialises");
                let report = py.import("json")?.call_method1("loads", (report,))?;
                on_step.call1(py, (report,))?;
            }
            Ok(())
        });
        result.map_err(|error| {
            self.error = Some(error);
            bert_core::BertError::Interrupted
        })
    }
}

/// `train(file=None, model=None, *, on_step=None, **options)`: the run's report of every step.
pub fn train(
    py: Python<'_>,
    file: Option<&Bound<'_, PyAny>>,
    model: Option<&Bound<'_, PyAny>>,
    on_step: Option<&Bound<'_, PyAny>>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Py<PyAny>> {
    let mut argv = vec!["bert-trace".to_string(), "train".into()];
    for (flag, value) in [("--file", file), ("--model", model)] {
        if let Some(value) = value.filter(|v| !v.is_none()) {
            argv.extend([flag.to_string(), crate::run::path_text(py, value)?]);
        }
    }
    argv.extend(flags(options)?);
    let Some(Command::Train(args)) = parse_cli(py, argv)?.command else {
        return Err(raise(
            py,
            "Error",
            "internal error in bert-trace (train's options parsed as another command); please report it".into(),
        ));
    };
    if let Some(f) = on_step.filter(|f| !f.is_callable()) {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!("on_step={} is not callable", f.repr()?)));
    }
    let mut progress = ToPython { on_step: on_step.map(|f| f.clone().unbind()), error: None };
    let trained = py.detach(|| train_cmd::train(&args, &mut progress).map(|trainer| trainer.log));
    if let Some(error) = progress.error.take() {
        return Err(error);
    }
    let log = trained.or_raise(py)?;
    let log = serde_json::to_string(&log).expect("the log serialises");
    Ok(py.import("json")?.call_method1("loads", (log,))?.unbind())
}
