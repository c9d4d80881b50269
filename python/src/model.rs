//! `bert_trace.Model`: a checkpoint loaded once, for many traces (a notebook's loop).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bert_core::BertModel;
use bert_trace::cli::ModelArgs;
use bert_trace::model_source;
use pyo3::prelude::*;

use crate::errors::{guarded, OrRaise};

/// A model loaded once: a directory (config.json, model.safetensors, vocab.txt or
/// tokenizer.json), a Hugging Face model id (from the cache, or downloaded into it, as the CLI
/// does), or None for the tiny random model built into bert-trace. `Model(...).trace(text, ...)`
/// takes the options of `bert_trace.trace`.
#[pyclass(name = "Model", module = "bert_trace", frozen)]
pub struct Model {
    pub args: ModelArgs,
    /// The name manifests give it: the directory as given, `org/name@commit`, or golden/tiny.
    pub name: String,
    pub embedded: bool,
    pub f32: Arc<Mutex<BertModel>>,
    /// The same checkpoint loaded in f64, for `precision="f64"`, loaded when first asked for.
    pub f64: Mutex<Option<Arc<Mutex<BertModel<f64>>>>>,
    /// The checkpoint's fingerprint (the SHA-256 of its position table), computed once.
    fingerprint: std::sync::OnceLock<String>,
}

// The passes run with the GIL released, on this thread, while Python goes on: the model must
// be safe to hand across threads.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<BertModel>();
    send_sync::<BertModel<f64>>();
};

impl Model {
    /// Loads the model `--model` names (None: the built-in tiny model).
    pub fn load(py: Python<'_>, spec: Option<PathBuf>) -> PyResult<Model> {
        let args = ModelArgs { model: spec };
        let (model, embedded) = py.detach(|| model_source::load(&args)).or_raise(py)?;
        let name = model_source::name(&args, &model);
        let fingerprint = std::sync::OnceLock::new();
        Ok(Model { args, name, embedded, f32: Arc::new(Mutex::new(model)), f64: Mutex::new(None), fingerprint })
    }

    /// The checkpoint's fingerprint, which every manifest records: the same for its f32 and its
    /// f64 model (it hashes the table as f32).
    pub fn fingerprint<F: bert_core::ops::Float>(&self, model: &BertModel<F>) -> String {
        self.fingerprint.get_or_init(|| model.fingerprint()).clone()
    }

    /// The model in f64, loaded from the same files the first time.
    pub fn in_f64(&self, py: Python<'_>) -> PyResult<Arc<Mutex<BertModel<f64>>>> {
        let mut slot = self.f64.lock().expect("not poisoned");
        if let Some(model) = slot.as_ref() {
            return Ok(Arc::clone(model));
        }
        let (model, _) = py.detach(|| model_source::load_as::<f64>(&self.args)).or_raise(py)?;
        let model = Arc::new(Mutex::new(model));
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

    /// Traces `text` with this model: see `bert_trace.trace` for the options.
    #[pyo3(signature = (text, *, hooks = None, **options))]
    fn trace(
        slf: &Bound<'_, Model>,
        text: &Bound<'_, PyAny>,
        hooks: Option<&Bound<'_, pyo3::types::PyDict>>,
        options: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<crate::result::Trace> {
        let py = slf.py();
        guarded(py, || crate::run::trace_with_model(py, text, slf.clone().unbind(), hooks, options, None))
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
