//! `bert_trace.Model`: a checkpoint loaded once, for many traces (a notebook's loop).

use bert_core::precision::{Simulation, WeightFormat};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bert_commands::source;
use bert_core::BertModel;
use pyo3::prelude::*;

use crate::errors::{guarded, OrRaise};

/// A model loaded once: a directory (config.json, model.safetensors, vocab.txt or
/// tokenizer.json), a Hugging Face model id (from the cache, or downloaded into it, as the CLI
/// does), or None for english-small, the model built into bert-trace. `Model(...).trace(text, ...)`
/// takes the options of `bert_trace.trace`.
#[pyclass(name = "Model", module = "bert_trace", frozen)]
pub struct Model {
    /// The directory or hub id it was loaded from; None for the built-in model.
    pub spec: Option<PathBuf>,
    /// The name manifests give it: the directory as given, `org/name@commit`, or a built-in model's directory.
    pub name: String,
    pub embedded: bool,
    pub f32: Arc<Mutex<BertModel>>,
    /// The same checkpoint loaded in f64, for `precision="f64"`, loaded when first asked for.
    pub f64: Mutex<Option<Arc<Mutex<BertModel<f64>>>>>,
    /// The checkpoint as simulated deployments hold it (`precision="bf16"`, `weights="int8"`),
    /// each made when first asked for.
    simulated: Mutex<Vec<(Simulation, Arc<Mutex<BertModel>>)>>,
    /// The checkpoint's fingerprint (the SHA-256 of its position table), computed once.
    fingerprint: std::sync::OnceLock<String>,
    /// Its tensors' digests, computed once.
    tensor_digests: std::sync::OnceLock<BTreeMap<String, String>>,
}

// The passes run with the GIL released, on this thread, while Python goes on: the model must
// be safe to hand across threads.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<BertModel>();
    send_sync::<BertModel<f64>>();
};

impl Model {
    /// Loads the model `--model` names (None: the built-in english-small).
    pub fn load(py: Python<'_>, spec: Option<PathBuf>) -> PyResult<Model> {
        let loaded = py.detach(|| source::load(spec.as_deref())).or_raise(py)?;
        crate::errors::notes(py, &loaded.notes);
        let fingerprint = std::sync::OnceLock::new();
        Ok(Model {
            spec,
            name: loaded.name,
            embedded: loaded.embedded,
            f32: Arc::new(Mutex::new(loaded.model)),
            f64: Mutex::new(None),
            simulated: Mutex::new(Vec::new()),
            fingerprint,
            tensor_digests: std::sync::OnceLock::new(),
        })
    }

    /// The checkpoint's fingerprint, which every manifest records: the same for its f32 and its
    /// f64 model (it hashes the table as f32); a simulated model's own (its weights differ).
    pub fn fingerprint<F: bert_core::ops::Float>(&self, model: &BertModel<F>, simulation: Simulation) -> String {
        match simulation.is_none() {
            true => self.fingerprint.get_or_init(|| model.fingerprint()).clone(),
            false => model.fingerprint(),
        }
    }

    /// Its tensors' digests (`bert_core::io::fingerprint`), computed once; a simulated model's
    /// own.
    pub fn tensor_digests<F: bert_core::ops::Float>(
        &self,
        model: &BertModel<F>,
        simulation: Simulation,
    ) -> BTreeMap<String, String> {
        match simulation.is_none() {
            true => self.tensor_digests.get_or_init(|| model.tensor_digests()).clone(),
            false => model.tensor_digests(),
        }
    }

    /// The model as `simulation` holds it, made from the same files the first time.
    pub fn simulated(&self, py: Python<'_>, simulation: Simulation) -> PyResult<Arc<Mutex<BertModel>>> {
        let made = |list: &Vec<(Simulation, Arc<Mutex<BertModel>>)>| {
            list.iter().find(|(s, _)| *s == simulation).map(|(_, model)| Arc::clone(model))
        };
        if let Some(model) = made(&self.simulated.lock().expect("not poisoned")) {
            return Ok(model);
        }
        // Loaded without the lock held: the GIL is let go meanwhile, and another thread may ask.
        let mut loaded = py.detach(|| source::load(self.spec.as_deref())).or_raise(py)?;
        simulation.apply_to_weights(&mut loaded.model);
        let mut list = self.simulated.lock().expect("not poisoned");
        if let Some(model) = made(&list) {
            return Ok(model);
        }
        let model = Arc::new(Mutex::new(loaded.model));
        list.push((simulation, Arc::clone(&model)));
        Ok(model)
    }

    /// The model in f64, loaded from the same files the first time; with `weights`, a copy with
    /// its dense layers' weights held so (not kept).
    pub fn in_f64_holding(
        &self,
        py: Python<'_>,
        weights: Option<WeightFormat>,
    ) -> PyResult<Arc<Mutex<BertModel<f64>>>> {
        match weights {
            None => self.in_f64(py),
            Some(_) => Ok(Arc::new(Mutex::new(self.simulated_f64(py, Simulation { format: None, weights })?))),
        }
    }

    /// A copy in f64 with the weights `simulation` holds (not kept): the exact result of a
    /// simulated pass's weights, for `diff(isolate=True)`.
    pub fn simulated_f64(&self, py: Python<'_>, simulation: Simulation) -> PyResult<BertModel<f64>> {
        let mut loaded = py.detach(|| source::load_as::<f64>(self.spec.as_deref())).or_raise(py)?;
        simulation.apply_to_weights(&mut loaded.model);
        Ok(loaded.model)
    }

    /// The model in f64, loaded from the same files the first time.
    pub fn in_f64(&self, py: Python<'_>) -> PyResult<Arc<Mutex<BertModel<f64>>>> {
        let mut slot = self.f64.lock().expect("not poisoned");
        if let Some(model) = slot.as_ref() {
            return Ok(Arc::clone(model));
        }
        let loaded = py.detach(|| source::load_as::<f64>(self.spec.as_deref())).or_raise(py)?;
        let model = Arc::new(Mutex::new(loaded.model));
        *slot = Some(Arc::clone(&model));
        Ok(model)
    }
}

#[pymethods]
impl Model {
    #[new]
    #[pyo3(signature = (path_or_id = None))]
    fn new(py: Python<'_>, path_or_id: Option<PathBuf>) -> PyResult<Model> {
        guarded(py, || Model::load(py, path_or_id))
    }

    /// Traces `text` with this model: `bert_trace.trace(text, model=self, **keywords)` (see it
    /// for the keywords).
    #[pyo3(signature = (text, **keywords))]
    fn trace(
        slf: &Bound<'_, Model>,
        text: &Bound<'_, PyAny>,
        keywords: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        if keywords.is_some_and(|k| k.contains("model").unwrap_or(false)) {
            return Err(crate::errors::raise(
                py,
                "InputError",
                "model= is given twice: as the Model and as a keyword".into(),
            ));
        }
        // The module's `trace` reads the keywords (its signature is the one list of them).
        let function = py.import("bert_trace._bert_trace")?.getattr("trace")?;
        Ok(function.call((text, slf), keywords)?.unbind())
    }

    /// Where the model came from.
    #[getter]
    fn source(&self) -> String {
        self.name.clone()
    }

    fn __repr__(&self) -> String {
        let model = self.f32.lock().expect("not poisoned");
        let c = &model.config;
        format!(
            "bert_trace.Model({:?}: {} layers, hidden {}, {} heads, vocab {})",
            self.name, c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.vocab_size
        )
    }
}
