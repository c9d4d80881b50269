//! `bert_trace.trace`: the CLI's trace, from Python. The keyword options are the CLI's
//! (`mask_prob=0.15` is `--mask-prob 0.15`, a list repeats an option) and are read by the CLI's
//! own parser, so their names, defaults and errors are the CLI's; the checks and the pass are
//! `bert_trace::trace_cmd`'s. What is new here is only where the stages go: into memory, as
//! numpy arrays, with the GIL released during the pass.

use std::collections::HashMap;
use std::sync::Mutex;

use bert_core::io::dump::manifest::{Manifest, ManifestStage, FORMAT};
use bert_core::io::memory;
use bert_core::model::Pass;
use bert_core::ops::Float;
use bert_core::pass::hook::{Chain, Hook};
use bert_core::pass::{Sink, Tensor, TensorView};
use bert_core::stage::Stage;
use bert_core::{BertError, BertModel};
use bert_trace::cli::{Cli, Precision, ToleranceArgs};
use bert_trace::trace_cmd::{self, Prepared, Selection};
use clap::Parser;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::errors::{raise, OrRaise};
use crate::hooks::PyHooks;
use crate::model::Model;
use crate::result::Trace;

/// The command line the keyword options stand for: `--name value` for each, a flag for True,
/// nothing for None or False, the option repeated for a list; then `--` and the texts.
fn command_line(
    text: &Bound<'_, PyAny>,
    model: Option<String>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Vec<String>> {
    let mut argv = vec!["bert-trace".to_string()];
    if let Some(model) = model {
        argv.extend(["--model".into(), model]);
    }
    argv.extend(flags(options)?);
    argv.push("--".into());
    if let Ok(one) = text.cast::<PyString>() {
        argv.push(one.to_string());
    } else {
        for item in text.try_iter()? {
            argv.push(item?.extract::<String>()?);
        }
    }
    Ok(argv)
}

/// The options as the command's flags (see [`command_line`]).
pub fn flags(options: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<String>> {
    let mut argv = Vec::new();
    for (key, value) in options.into_iter().flat_map(|o| o.iter()) {
        let flag = format!("--{}", key.extract::<String>()?.replace('_', "-"));
        if value.is_none() {
            continue;
        }
        if let Ok(on) = value.cast::<pyo3::types::PyBool>() {
            if on.is_true() {
                argv.push(flag);
            }
            continue;
        }
        let items: Vec<Bound<'_, PyAny>> = if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
            value.try_iter()?.collect::<PyResult<_>>()?
        } else {
            vec![value]
        };
        for item in items {
            argv.push(flag.clone());
            // A path is given as its text, as os.fspath gives it.
            let text = if item.hasattr("__fspath__")? { path_text(item.py(), &item)? } else { item.str()?.to_string() };
            argv.push(text);
        }
    }
    Ok(argv)
}

/// `trace(text, model=None, *, hooks=None, **options)`.
pub fn trace(
    py: Python<'_>,
    text: &Bound<'_, PyAny>,
    model: Option<&Bound<'_, PyAny>>,
    hooks: Option<&Bound<'_, PyDict>>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Trace> {
    let model = model.filter(|m| !m.is_none());
    if let Some(loaded) = model.filter(|m| m.is_instance_of::<Model>()) {
        return trace_with_model(py, text, loaded.cast::<Model>()?.clone().unbind(), hooks, options, None);
    }
    // A directory or a hub id, read as the CLI reads `--model`.
    let spec = model.map(|m| path_text(py, m)).transpose()?;
    let args = parse(py, command_line(text, spec, options)?)?;
    let model = Py::new(py, Model::load(py, args.model.model.clone())?)?;
    trace_with_model(py, text, model, hooks, options, Some(args))
}

/// A `str` or an `os.PathLike`, as text.
pub fn path_text(py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<String> {
    py.import("os")?.call_method1("fspath", (path,))?.extract()
}

/// The CLI's parser on `argv`: its trace options, or its one-line message as an exception
/// (TypeError for an option the CLI does not have, as for any unknown keyword).
fn parse(py: Python<'_>, argv: Vec<String>) -> PyResult<bert_trace::cli::TraceArgs> {
    Ok(parse_cli(py, argv)?.trace)
}

/// The CLI's parser on `argv`, its errors as exceptions (see [`parse`]).
pub fn parse_cli(py: Python<'_>, argv: Vec<String>) -> PyResult<Cli> {
    match Cli::try_parse_from(argv) {
        Ok(cli) => Ok(cli),
        Err(error) => {
            let message = bert_trace::cli::one_line(&error);
            match error.kind() {
                clap::error::ErrorKind::UnknownArgument => Err(pyo3::exceptions::PyTypeError::new_err(message)),
                _ => Err(raise(py, "InputError", message)),
            }
        }
    }
}

/// `trace` with a loaded model; `args` when the options are parsed already.
pub fn trace_with_model(
    py: Python<'_>,
    text: &Bound<'_, PyAny>,
    model: Py<Model>,
    hooks: Option<&Bound<'_, PyDict>>,
    options: Option<&Bound<'_, PyDict>>,
    args: Option<bert_trace::cli::TraceArgs>,
) -> PyResult<Trace> {
    let args = match args {
        Some(args) => args,
        None => {
            if options.is_some_and(|o| o.contains("model").unwrap_or(false)) {
                return Err(raise(py, "InputError", "model= is given twice: as the Model and as an option".into()));
            }
            parse(py, command_line(text, None, options)?)?
        }
    };
    let (threads, kernels) = trace_cmd::pass_settings(args.threads, args.kernels.as_deref()).or_raise(py)?;
    let texts = trace_cmd::texts(&args).or_raise(py)?;
    // Without `out=`, a trace stays in memory; with it, the command's dump is written too.
    let write_out = match options {
        Some(o) => o.get_item("out")?.is_some_and(|v| !v.is_none()),
        None => false,
    };
    let handle = model.get();
    match args.precision {
        Precision::F32 => {
            let model_lock = std::sync::Arc::clone(&handle.f32);
            run(py, &args, texts, &model_lock, &model, hooks, (threads, kernels, write_out))
        }
        Precision::F64 => {
            let model_lock = handle.in_f64(py)?;
            run(py, &args, texts, &model_lock, &model, hooks, (threads, kernels, write_out))
        }
    }
}

/// The stages the caller asked for, kept as the pass hands them over (the one copy each makes on
/// its way to Python); between stages, whether the user pressed Ctrl-C.
struct Collect {
    only: Selection,
    stages: Vec<(Stage, Tensor)>,
    no_gradient: Vec<String>,
    interrupt: Mutex<Option<PyErr>>,
}

impl Sink for Collect {
    fn wants(&self, stage: &Stage) -> bool {
        let mut interrupt = self.interrupt.lock().expect("not poisoned");
        if interrupt.is_none() {
            if let Err(error) = Python::attach(|py| py.check_signals()) {
                *interrupt = Some(error);
            }
        }
        // An interrupted pass is stopped at the next stage handed over.
        interrupt.is_some() || self.only.keeps(stage)
    }

    fn emit(&mut self, stage: Stage, tensor: TensorView<'_>) -> bert_core::Result<()> {
        if self.interrupt.lock().expect("not poisoned").is_some() {
            return Err(BertError::Interrupted);
        }
        self.stages.push((stage, tensor.to_owned()));
        Ok(())
    }

    fn unreached(&mut self, parameters: &[String]) -> bert_core::Result<()> {
        self.no_gradient = parameters.to_vec();
        Ok(())
    }
}

fn run<F: Float>(
    py: Python<'_>,
    args: &bert_trace::cli::TraceArgs,
    texts: Vec<String>,
    model_lock: &std::sync::Arc<Mutex<BertModel<F>>>,
    handle: &Py<Model>,
    hooks: Option<&Bound<'_, PyDict>>,
    (threads, kernels, write_out): (usize, bert_core::Kernels, bool),
) -> PyResult<Trace> {
    let mut model = model_lock.lock().expect("not poisoned");
    model.kernels = kernels;
    let prepared = trace_cmd::prepare(args, texts, &model).or_raise(py)?;
    let kept = trace_cmd::kept_bytes(&model, &prepared);
    memory::check(kept, "to keep the stages as numpy arrays").or_raise(py)?;
    let mut functions = HashMap::new();
    for (name, function) in hooks.into_iter().flat_map(|h| h.iter()) {
        let name: String = name.extract()?;
        let stage = model.resolve_stop(&name, prepared.objectives).or_raise(py)?;
        if stage.of != bert_core::stage::Of::Value {
            return Err(raise(
                py,
                "InputError",
                format!("hooks: `{name}` is a gradient; a hook changes the values the forward pass computes"),
            ));
        }
        if stage.name() != name {
            return Err(raise(
                py,
                "InputError",
                format!("hooks: `{name}` is a group of stages; name one stage, such as {stage}"),
            ));
        }
        if !function.is_callable() {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!("hooks[\"{name}\"] is not callable")));
        }
        functions.insert(stage, function.unbind());
    }
    let mut py_hooks = PyHooks::new(functions);
    let Prepared { inputs, batch, stop, only, mut interventions, .. } = prepared;
    let mut collect =
        Collect { only: only.clone(), stages: Vec::new(), no_gradient: Vec::new(), interrupt: Mutex::new(None) };
    let model_ref: &BertModel<F> = &model;
    let traced = py.detach(|| {
        let mut chain = Chain(Vec::new());
        if !interventions.is_empty() {
            chain.0.push(&mut interventions as &mut dyn Hook);
        }
        if !py_hooks.is_empty() {
            chain.0.push(&mut py_hooks as &mut dyn Hook);
        }
        let hook = (!chain.0.is_empty()).then_some(&mut chain as &mut dyn Hook);
        let pass = Pass { stop_after: stop, hook, lens: args.lens, backward: args.backward };
        model_ref.trace_with(&batch, &mut collect, pass).map(|t| t.stopped_at)
    });
    if let Some(error) = py_hooks.error.take() {
        return Err(error);
    }
    if let Some(error) = collect.interrupt.lock().expect("not poisoned").take() {
        return Err(error);
    }
    let stopped_at = traced.or_raise(py)?;
    let manifest = Manifest {
        format: FORMAT.into(),
        producer: serde_json::json!({
            "name": "bert-trace", "version": env!("CARGO_PKG_VERSION"), "threads": threads, "kernels": kernels.name(),
            "via": "python",
        }),
        model: handle.get().name.clone(),
        inputs,
        stages: collect.stages.iter().map(|(stage, t)| entry(stage, t)).collect(),
        only_stages: (!args.only.is_empty()).then(|| args.only.clone()),
        stopped_at: stopped_at.map(|s| s.name()),
        archive: None,
        model_fingerprint: Some(handle.get().fingerprint(&model)),
        interventions: interventions.records(),
        lens: args.lens,
        no_gradient: collect.no_gradient.clone(),
    };
    drop(model);
    let arrays =
        collect.stages.into_iter().map(|(_, tensor)| crate::result::to_numpy(py, tensor)).collect::<PyResult<_>>()?;
    let mut trace = Trace::new(manifest, arrays, Some(handle.clone_ref(py)), None);
    trace.top_k = args.top_k;
    // `out=` writes the command's dump, as the command does (without it, nothing is written).
    if write_out {
        trace.write(py, args.out.clone(), args.force, args.npz)?;
        trace.remember(args.out.clone());
    }
    if let Some(reference) = &args.reference {
        let tolerance = ToleranceArgs { atol: args.tolerance.atol, rtol: args.tolerance.rtol };
        let reference = py.detach(|| bert_core::Dump::open(reference)).or_raise(py)?;
        let (dump, _scratch) = crate::report::open_trace(py, &trace)?;
        trace.report = Some(Py::new(py, crate::report::compare(py, &reference, &dump, tolerance, None, None)?)?);
    }
    Ok(trace)
}

/// A stage's manifest entry, as the dump writer makes it.
fn entry(stage: &Stage, tensor: &Tensor) -> ManifestStage {
    let mut entry = ManifestStage::new(stage, tensor.shape().to_vec());
    entry.dtype = tensor.view().dtype().numpy_name().into();
    entry
}
