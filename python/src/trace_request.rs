//! `bert_trace.trace`: a trace request built from Python's keyword arguments (the command's
//! options, by the same names and defaults), checked and prepared by the library
//! (`bert_commands::trace`) as the command's is. What is new here is only where the stages go:
//! into memory, as numpy arrays, with the GIL released during the pass.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use bert_commands::trace::{self, Output, Precision, Selection, TraceRequest};
use bert_core::divergence::ToleranceOverride;
use bert_core::experiments::intervention::AblateWith;
use bert_core::io::dump::manifest::{Manifest, ManifestStage};
use bert_core::io::memory;
use bert_core::ops::{Float, Kernels};
use bert_core::pass::hook::Hook;
use bert_core::pass::{Sink, Tensor, TensorView};
use bert_core::precision::{Rounding, SimulationRecord, WeightFormat};
use bert_core::stage::Stage;
use bert_core::words::Opt;
use bert_core::{BertError, BertModel};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::args::{choice, ints, path, path_text, settings, strings};
use crate::errors::{raise, OrRaise};
use crate::hooks::PyHooks;
use crate::model::Model;
use crate::result::Trace;

/// Every keyword of `trace` (the command's options but the model and the texts).
pub struct TraceKeywords<'py> {
    pub file: Option<Bound<'py, PyAny>>,
    pub pair: Option<Bound<'py, PyAny>>,
    pub stop_at: Option<String>,
    pub only: Option<Bound<'py, PyAny>>,
    pub out: Option<Bound<'py, PyAny>>,
    pub mask_prob: Option<f64>,
    pub seed: Option<u64>,
    pub mlm_target: Option<Bound<'py, PyAny>>,
    pub nsp_label: Option<Bound<'py, PyAny>>,
    pub label: Option<Bound<'py, PyAny>>,
    pub kernels: Option<String>,
    pub precision: String,
    pub weights: Option<String>,
    pub no_dump: bool,
    pub npz: bool,
    pub force: bool,
    pub truncate: bool,
    pub head: Option<usize>,
    pub top_k: usize,
    pub threads: Option<usize>,
    pub reference: Option<Bound<'py, PyAny>>,
    pub ablate: Option<Bound<'py, PyAny>>,
    pub ablate_with: String,
    pub patch: Option<Bound<'py, PyAny>>,
    pub lens: bool,
    pub backward: bool,
    pub atol: Option<f64>,
    pub rtol: Option<f64>,
}

impl TraceKeywords<'_> {
    /// The library's request of these keywords and `texts`.
    fn request(&self, py: Python<'_>, texts: Vec<String>, model: Option<PathBuf>) -> PyResult<TraceRequest> {
        let precision = choice::<Precision>(py, trace::PRECISION, &self.precision)?;
        let weights = self.weights.as_deref().map(|w| choice::<WeightFormat>(py, trace::WEIGHTS, w)).transpose()?;
        let ablate_with = choice::<AblateWith>(py, trace::ABLATE_WITH, &self.ablate_with)?;
        for (option, value) in [(Opt("atol"), self.atol), (Opt("rtol"), self.rtol)] {
            if let Some(v) = value.filter(|v| !(v.is_finite() && *v >= 0.0)) {
                return Err(crate::errors::to_py(
                    py,
                    BertError::OptionValue {
                        option,
                        value: format!("{v:?}"),
                        accepted: "a finite number, 0 or more".into(),
                    },
                ));
            }
        }
        // Without `out=`, a trace stays in memory; with it, the command's dump is written too.
        let output = match (path(py, self.out.as_ref())?, self.no_dump) {
            (Some(out), false) => Output::Dump { out, force: self.force, npz: self.npz },
            _ => Output::Nowhere,
        };
        Ok(TraceRequest {
            texts,
            file: path(py, self.file.as_ref())?,
            model,
            pair: strings(self.pair.as_ref())?,
            stop_at: self.stop_at.clone(),
            only: strings(self.only.as_ref())?,
            mask_prob: self.mask_prob,
            seed: self.seed,
            mlm_targets: strings(self.mlm_target.as_ref())?,
            nsp_labels: ints(self.nsp_label.as_ref())?,
            labels: strings(self.label.as_ref())?,
            truncate: self.truncate,
            head: self.head,
            top_k: self.top_k,
            ablate: strings(self.ablate.as_ref())?,
            ablate_with,
            patch: strings(self.patch.as_ref())?,
            lens: self.lens,
            backward: self.backward,
            precision,
            weights,
            settings: settings(py, self.threads, self.kernels.as_deref())?,
            output,
            reference: path(py, self.reference.as_ref())?,
            tolerance: ToleranceOverride { atol: self.atol, rtol: self.rtol },
            explain: None,
            color: false,
        })
    }
}

/// The texts of `text`: a string, or a list of them.
pub(crate) fn texts_of(text: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(one) = text.cast::<PyString>() {
        return Ok(vec![one.to_string()]);
    }
    text.try_iter()?.map(|item| item?.extract::<String>()).collect()
}

/// `trace(text, model=None, *, hooks=None, **keywords)`.
pub fn trace(
    py: Python<'_>,
    text: &Bound<'_, PyAny>,
    model: Option<&Bound<'_, PyAny>>,
    hooks: Option<&Bound<'_, PyDict>>,
    keywords: TraceKeywords<'_>,
) -> PyResult<Trace> {
    let model = match model.filter(|m| !m.is_none()) {
        Some(loaded) if loaded.is_instance_of::<Model>() => loaded.cast::<Model>()?.clone().unbind(),
        // A directory or a hub id, read as the command reads `--model`.
        Some(spec) => Py::new(py, Model::load(py, Some(PathBuf::from(path_text(py, spec)?)))?)?,
        None => Py::new(py, Model::load(py, None)?)?,
    };
    let request = keywords.request(py, texts_of(text)?, model.get().spec.clone())?;
    request.check().or_raise(py)?;
    let (threads, kernels) = request.settings.apply().or_raise(py)?;
    let texts = request.all_texts().or_raise(py)?;
    let handle = model.get();
    let simulation = request.simulation();
    match request.precision {
        _ if !simulation.is_none() && request.precision != Precision::F64 => {
            let model_lock = handle.simulated(py, simulation)?;
            run(py, &request, texts, &model_lock, &model, hooks, (threads, kernels))
        }
        Precision::F32 | Precision::Bf16 | Precision::F16 => {
            let model_lock = std::sync::Arc::clone(&handle.f32);
            run(py, &request, texts, &model_lock, &model, hooks, (threads, kernels))
        }
        Precision::F64 => {
            let model_lock = handle.in_f64_holding(py, request.weights)?;
            run(py, &request, texts, &model_lock, &model, hooks, (threads, kernels))
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
    request: &TraceRequest,
    texts: Vec<String>,
    model_lock: &std::sync::Arc<Mutex<BertModel<F>>>,
    handle: &Py<Model>,
    hooks: Option<&Bound<'_, PyDict>>,
    (threads, kernels): (usize, Kernels),
) -> PyResult<Trace> {
    let simulation = request.simulation();
    let mut model = model_lock.lock().expect("not poisoned");
    model.kernels = kernels;
    let prepared = trace::prepare(request, texts, &model).or_raise(py)?;
    crate::errors::notes(py, &prepared.notes);
    let kept = trace::kept_bytes(&model, &prepared);
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
    let mut prepared = prepared;
    let mut collect = Collect {
        only: prepared.only.clone(),
        stages: Vec::new(),
        no_gradient: Vec::new(),
        interrupt: Mutex::new(None),
    };
    let model_ref: &BertModel<F> = &model;
    let traced = py.detach(|| {
        let extra = (!py_hooks.is_empty()).then_some(&mut py_hooks as &mut dyn Hook);
        prepared.run(model_ref, request, extra, &mut collect).map(|t| t.stopped_at)
    });
    if let Some(error) = py_hooks.error.take() {
        return Err(error);
    }
    if let Some(error) = collect.interrupt.lock().expect("not poisoned").take() {
        return Err(error);
    }
    let stopped_at = traced.or_raise(py)?;
    let mut producer = trace::producer(threads, kernels);
    producer["via"] = "python".into();
    let manifest = Manifest {
        stages: collect.stages.iter().map(|(stage, t)| ManifestStage::of(stage, &t.view())).collect(),
        only_stages: (!request.only.is_empty()).then(|| request.only.clone()),
        stopped_at: stopped_at.map(|s| s.name()),
        model_fingerprint: Some(handle.get().fingerprint(&model, simulation)),
        model_tensors: handle.get().tensor_digests(&model, simulation),
        simulated: (!simulation.is_none()).then(|| SimulationRecord {
            simulation,
            first_non_finite: prepared.rounding.as_ref().and_then(Rounding::first_non_finite),
        }),
        interventions: prepared.interventions.records(),
        lens: request.lens,
        no_gradient: collect.no_gradient.clone(),
        ..Manifest::new(producer, handle.get().name.clone(), prepared.inputs)
    };
    drop(model);
    let arrays =
        collect.stages.into_iter().map(|(_, tensor)| crate::result::to_numpy(py, tensor)).collect::<PyResult<_>>()?;
    let mut trace = Trace::new(manifest, arrays, Some(handle.clone_ref(py)), None);
    trace.top_k = request.top_k;
    // `out=` writes the command's dump, as the command does (without it, nothing is written).
    if let Output::Dump { out, force, npz } = &request.output {
        trace.write(py, out.clone(), *force, *npz)?;
        trace.remember(out.clone());
    }
    if let Some(reference) = &request.reference {
        let reference = py.detach(|| bert_core::Dump::open(reference)).or_raise(py)?;
        let dump = trace.as_dump(py)?;
        let report =
            bert_commands::diff::diff_report(&reference, &dump, request.tolerance.into(), None, None).or_raise(py)?;
        trace.report = Some(Py::new(py, crate::report::DiffReport::of(report))?);
    }
    Ok(trace)
}
