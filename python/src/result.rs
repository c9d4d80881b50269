//! What `trace` and `load` return: a mapping from stage name to numpy array, in execution
//! order, with the tokens, the predictions at each `[MASK]`, each stage's formula and
//! statistics, and `save`, `view` and an HTML table for notebooks.

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use bert_commands::render::predictions::mask_predictions;
use bert_commands::render::text_table::{html_escape, html_table, num};
use bert_core::io::dump::manifest::Manifest;
use bert_core::io::dump::{self, DumpWriter};
use bert_core::io::tokenizer::MASK;
use bert_core::pass::summary::Summary;
use bert_core::pass::{Sink, Tensor, TensorView};
use bert_core::stage::{self, Stage};
use numpy::{IntoPyArray, PyArrayDyn, PyArrayMethods};
use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyDict, PyList};

use crate::errors::{guarded, raise, OrRaise};
use crate::model::Model;

/// One row of the stage table.
#[derive(Clone)]
pub struct Row {
    pub name: String,
    pub shape: Vec<usize>,
    pub min: f64,
    pub mean: f64,
    pub std: f64,
    pub max: f64,
}

impl Row {
    /// The stage table's row of one array, summarised as the command's stage table does.
    fn of(name: &str, array: &Bound<'_, PyAny>) -> PyResult<Row> {
        let summary = if let Ok(a) = array.cast::<PyArrayDyn<f32>>() {
            let a = a.readonly();
            match a.as_slice() {
                Ok(values) => Summary::of_f32(values),
                Err(_) => Summary::of_f32(&a.as_array().iter().copied().collect::<Vec<f32>>()),
            }
        } else if let Ok(a) = array.cast::<PyArrayDyn<f64>>() {
            Summary::of_f64(&a.readonly().as_array().iter().copied().collect::<Vec<f64>>())
        } else if let Ok(a) = array.cast::<PyArrayDyn<i64>>() {
            Summary::of_i64(&a.readonly().as_array().iter().copied().collect::<Vec<i64>>())
        } else {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "{name}: not a float32, float64 or int64 array"
            )));
        };
        let shape: Vec<usize> = array.getattr("shape")?.extract()?;
        let Summary { min, mean, std, max } = summary;
        Ok(Row { name: name.to_string(), shape, min, mean, std, max })
    }
}

/// A tensor moved into a numpy array (no copy), made read-only: the array is the trace's record.
pub fn to_numpy(py: Python<'_>, tensor: Tensor) -> PyResult<Py<PyAny>> {
    let array = match tensor {
        Tensor::F32(a) => a.into_pyarray(py).into_any(),
        Tensor::F64(a) => a.into_pyarray(py).into_any(),
        Tensor::I64(a) => a.into_pyarray(py).into_any(),
    };
    array.call_method("setflags", (), Some(&[("write", false)].into_py_dict(py)?))?;
    Ok(array.unbind())
}

/// A trace: `t["layer0.attention.probs"]` is that stage as a read-only numpy array (the
/// array the pass computed, moved into numpy without a copy; `.copy()` it to change it).
/// Stages are in execution order.
#[pyclass(name = "Trace", module = "bert_trace", frozen, mapping)]
pub struct Trace {
    manifest: Manifest,
    arrays: Vec<Py<PyAny>>,
    /// The stage table's rows, computed when first asked for (a trace is not slowed by them).
    rows: OnceLock<Vec<Row>>,
    /// The model that made the trace (or that `load` was given): it names predicted tokens.
    model: Option<Py<Model>>,
    /// The dump directory this trace was read from or last saved to.
    dir: Mutex<Option<PathBuf>>,
    /// How many guesses `predictions()` gives by default (`top_k=`, as the command shows).
    pub(crate) top_k: usize,
    /// The diff against `reference=`, when the trace was asked for one.
    pub(crate) report: Option<Py<crate::report::DiffReport>>,
}

impl Trace {
    pub fn new(manifest: Manifest, arrays: Vec<Py<PyAny>>, model: Option<Py<Model>>, dir: Option<PathBuf>) -> Trace {
        Trace { manifest, arrays, rows: OnceLock::new(), model, dir: Mutex::new(dir), top_k: 5, report: None }
    }

    /// The model that made the trace, or that `load` was given.
    pub(crate) fn made_with(&self, py: Python<'_>) -> Option<Py<Model>> {
        self.model.as_ref().map(|m| m.clone_ref(py))
    }

    /// The stage table's rows.
    fn rows(&self, py: Python<'_>) -> PyResult<&[Row]> {
        if self.rows.get().is_none() {
            let rows = self
                .manifest
                .stages
                .iter()
                .zip(&self.arrays)
                .map(|(entry, array)| Row::of(&entry.name, array.bind(py)))
                .collect::<PyResult<Vec<Row>>>()?;
            let _ = self.rows.set(rows);
        }
        Ok(self.rows.get().expect("set above"))
    }

    /// Reads the dump at `dir` (ours, `dump_reference.py`'s or a numpy user's); `model` names
    /// the tokens of its predictions.
    pub fn load(py: Python<'_>, dir: PathBuf, model: Option<Py<Model>>) -> PyResult<Trace> {
        let dump = py.detach(|| bert_core::Dump::open(&dir)).or_raise(py)?;
        let mut arrays = Vec::new();
        for entry in &dump.manifest.stages {
            let tensor = py.detach(|| dump.read(entry)).or_raise(py)?;
            arrays.push(to_numpy(py, tensor)?);
        }
        Ok(Trace::new(dump.manifest.clone(), arrays, model, Some(dump.dir.clone())))
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.manifest.stages.iter().position(|s| s.name == name)
    }

    /// The dump directory holding exactly this trace, if there is one.
    pub fn dir(&self) -> Option<PathBuf> {
        self.dir.lock().expect("not poisoned").clone().filter(|d| d.join("manifest.json").is_file())
    }

    /// Writes the trace as the CLI writes a dump, under the same rules.
    pub fn write(&self, py: Python<'_>, dir: PathBuf, force: bool, npz: bool) -> PyResult<()> {
        let m = &self.manifest;
        let mut stages = Vec::new();
        for entry in &m.stages {
            let stage = stage::parse(&entry.name).ok_or_else(|| {
                raise(
                    py,
                    "InputError",
                    format!("{}: not a stage of bert-trace's table, so not saved in its dump format", entry.name),
                )
            })?;
            stages.push(stage);
        }
        let options = dump::Options { force, npz, ..dump::Options::default() };
        let mut writer =
            DumpWriter::create(&dir, m.producer.clone(), m.model.clone(), m.inputs.clone(), options).or_raise(py)?;
        writer.set_stopped_at(m.stopped_at.as_deref().and_then(stage::parse));
        if let Some(fingerprint) = &m.model_fingerprint {
            writer.set_model_identity(fingerprint.clone(), m.model_tensors.clone());
        }
        writer.set_interventions(m.interventions.clone());
        writer.set_lens(m.lens);
        if let Some(only) = &m.only_stages {
            writer.set_only_stages(only.clone());
        }
        for (stage, array) in stages.into_iter().zip(&self.arrays) {
            emit(&mut writer, stage, array.bind(py)).or_raise(py)?;
        }
        writer.unreached(&m.no_gradient).or_raise(py)?;
        writer.finish().or_raise(py)
    }

    /// Remembers that `dir` holds this trace.
    pub fn remember(&self, dir: PathBuf) {
        *self.dir.lock().expect("not poisoned") = Some(dir);
    }

    /// The trace as a dump that a diff or a page reads, as it is in memory: each array copied
    /// once into the library's tensors, nothing written anywhere.
    pub fn as_dump(&self, py: Python<'_>) -> PyResult<bert_core::Dump> {
        let tensors = self.arrays.iter().map(|array| tensor_of(array.bind(py))).collect::<PyResult<Vec<_>>>()?;
        let name = self.dir().map_or_else(|| "(trace in memory)".to_string(), |d| d.display().to_string());
        bert_core::Dump::in_memory(&name, self.manifest.clone(), tensors).or_raise(py)
    }
}

/// One array as the library's tensor (a copy).
fn tensor_of(array: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    if let Ok(a) = array.cast::<PyArrayDyn<f32>>() {
        return Ok(Tensor::F32(a.readonly().as_array().to_owned()));
    }
    if let Ok(a) = array.cast::<PyArrayDyn<f64>>() {
        return Ok(Tensor::F64(a.readonly().as_array().to_owned()));
    }
    if let Ok(a) = array.cast::<PyArrayDyn<i64>>() {
        return Ok(Tensor::I64(a.readonly().as_array().to_owned()));
    }
    Err(pyo3::exceptions::PyTypeError::new_err("not a float32, float64 or int64 array"))
}

/// Hands one array to the writer as the tensor it holds.
fn emit(writer: &mut DumpWriter, stage: Stage, array: &Bound<'_, PyAny>) -> bert_commands::Result<()> {
    if let Ok(a) = array.cast::<PyArrayDyn<f32>>() {
        return Ok(writer.emit(stage, TensorView::F32(a.readonly().as_array()))?);
    }
    if let Ok(a) = array.cast::<PyArrayDyn<f64>>() {
        return Ok(writer.emit(stage, TensorView::F64(a.readonly().as_array()))?);
    }
    if let Ok(a) = array.cast::<PyArrayDyn<i64>>() {
        return Ok(writer.emit(stage, TensorView::I64(a.readonly().as_array()))?);
    }
    Err(bert_commands::Error::Request(format!("{stage}: not a float32, float64 or int64 array")))
}

#[pymethods]
impl Trace {
    /// The stage `name` as a read-only numpy array (no copy).
    fn __getitem__(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        match self.index(name) {
            Some(i) => Ok(self.arrays[i].clone_ref(py)),
            None => {
                let names: Vec<Stage> = self.manifest.stages.iter().filter_map(|s| stage::parse(&s.name)).collect();
                let hint = stage::suggestions(name, &names);
                let hint = if hint.is_empty() { String::new() } else { format!("; did you mean {}?", hint.join(", ")) };
                Err(PyKeyError::new_err(format!("no stage `{name}` in this trace{hint}")))
            }
        }
    }

    fn __contains__(&self, name: &str) -> bool {
        self.index(name).is_some()
    }

    fn __len__(&self) -> usize {
        self.arrays.len()
    }

    fn __iter__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(PyList::new(py, self.keys())?.try_iter()?.into_any().unbind())
    }

    /// The stage names, in execution order.
    fn keys(&self) -> Vec<String> {
        self.manifest.stages.iter().map(|s| s.name.clone()).collect()
    }

    /// The arrays, in execution order (each the read-only array `t[name]` gives).
    fn values(&self, py: Python<'_>) -> Vec<Py<PyAny>> {
        self.arrays.iter().map(|a| a.clone_ref(py)).collect()
    }

    /// (name, array) pairs, in execution order.
    fn items(&self, py: Python<'_>) -> Vec<(String, Py<PyAny>)> {
        self.keys().into_iter().zip(self.values(py)).collect()
    }

    /// `t[name]`, or `default` when the trace has no such stage.
    #[pyo3(signature = (name, default = None))]
    fn get(&self, py: Python<'_>, name: &str, default: Option<Py<PyAny>>) -> Option<Py<PyAny>> {
        self.index(name).map(|i| self.arrays[i].clone_ref(py)).or(default)
    }

    /// Each sequence's tokens as the model sees them (after masking), padding included.
    #[getter]
    fn tokens(&self) -> Vec<Vec<String>> {
        self.manifest.inputs.tokens.clone().unwrap_or_default()
    }

    /// The manifest of the trace (what `save` writes as manifest.json), as a dict.
    #[getter]
    fn manifest(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let text = serde_json::to_string(&self.manifest).expect("a manifest serialises");
        Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
    }

    /// Why one element of a stage is what it is: `stage` and `index`, a tuple of ints as numpy
    /// reads them, with a slice on one axis (then a list, one per element). The formula with its
    /// operands, the value recomputed by the stage's own function, and every element it reads;
    /// `model=` when the trace has none (one read with `load`).
    #[pyo3(signature = (stage, index, *, model = None))]
    fn explain(
        &self,
        py: Python<'_>,
        stage: &str,
        index: &Bound<'_, PyAny>,
        model: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let model = match (model.filter(|m| !m.is_none()), &self.model) {
            (Some(m), _) if m.is_instance_of::<Model>() => m.cast::<Model>()?.clone().unbind(),
            (Some(m), _) => Py::new(py, Model::load(py, Some(PathBuf::from(crate::args::path_text(py, m)?)))?)?,
            (None, Some(model)) => model.clone_ref(py),
            (None, None) => {
                return Err(raise(
                    py,
                    "InputError",
                    "this trace has no model: give the one it was made with, model=".into(),
                ))
            }
        };
        let dump = self.as_dump(py)?;
        crate::explained::explain_trace(py, dump, model.get(), stage, index)
    }

    /// The `k` most likely tokens at every `[MASK]`, from `mlm.logits`: a list of
    /// `{"sequence", "position", "top": [{"token", "id", "probability"}]}`. `k` defaults to the
    /// trace's `top_k` (5).
    #[pyo3(signature = (k = None))]
    fn predictions(&self, py: Python<'_>, k: Option<usize>) -> PyResult<Vec<Py<PyAny>>> {
        let k = k.unwrap_or(self.top_k);
        guarded(py, || {
            let (Some(ids), Some(logits)) = (self.index("input.ids"), self.index("mlm.logits")) else {
                return Err(raise(
                    py,
                    "InputError",
                    "this trace has no mlm.logits (and input.ids) to predict from".into(),
                ));
            };
            let ids = self.arrays[ids].bind(py).cast::<PyArrayDyn<i64>>().map_err(PyErr::from)?.readonly();
            let logits = self.arrays[logits].bind(py).call_method1("astype", ("float32",))?;
            let logits = logits.cast::<PyArrayDyn<f32>>().map_err(PyErr::from)?.readonly();
            let (ids, logits) = (ids.as_array(), logits.as_array());
            let ids = ids
                .into_dimensionality::<ndarray::Ix2>()
                .map_err(|e| raise(py, "InputError", format!("input.ids: {e}")))?;
            let logits = logits
                .into_dimensionality::<ndarray::Ix3>()
                .map_err(|e| raise(py, "InputError", format!("mlm.logits: {e}")))?;
            let model = self.model.as_ref().map(|m| m.get().f32.lock().expect("not poisoned"));
            let tokenizer = model.as_ref().map(|m| &m.tokenizer);
            let mask_id = tokenizer.and_then(|t| t.token_to_id(MASK)).map(i64::from);
            // Without a vocabulary, the [MASK] is found by the token strings the manifest gives.
            let tokens = self.tokens();
            let mask_id = mask_id.or_else(|| {
                ids.indexed_iter()
                    .find(|((b, t), _)| tokens.get(*b).and_then(|row| row.get(*t)).is_some_and(|s| s == MASK))
                    .map(|(_, &id)| id)
            });
            let name = |id: usize| tokenizer.and_then(|t| t.id_to_token(id as u32)).unwrap_or_else(|| format!("#{id}"));
            let mut out = Vec::new();
            for p in mask_predictions(ids, logits, mask_id, k, &name) {
                let top = PyList::empty(py);
                for (token, id, probability) in p.top {
                    let row = PyDict::new(py);
                    row.set_item("token", token)?;
                    row.set_item("id", id)?;
                    row.set_item("probability", probability)?;
                    top.append(row)?;
                }
                let item = PyDict::new(py);
                item.set_item("sequence", p.seq)?;
                item.set_item("position", p.pos)?;
                item.set_item("top", top)?;
                out.push(item.into_any().unbind());
            }
            Ok(out)
        })
    }

    /// The stage's formula, as the stage table gives it (its backward rule, for a gradient).
    fn formula(&self, py: Python<'_>, stage: &str) -> PyResult<String> {
        match stage::parse(stage) {
            Some(s) => Ok(s.formula().to_string()),
            None => Err(raise(py, "InputError", format!("unknown stage `{stage}` (bert_trace.stages() lists them)"))),
        }
    }

    /// One dict per stage: name, shape, dtype, min, mean, std, max (numpy's), formula and the
    /// Hugging Face module it equals.
    fn stage_table(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let mut out = Vec::new();
        for (row, entry) in self.rows(py)?.iter().zip(&self.manifest.stages) {
            let d = PyDict::new(py);
            d.set_item("name", &row.name)?;
            d.set_item("shape", row.shape.clone())?;
            d.set_item("dtype", &entry.dtype)?;
            d.set_item("min", row.min)?;
            d.set_item("mean", row.mean)?;
            d.set_item("std", row.std)?;
            d.set_item("max", row.max)?;
            let parsed = stage::parse(&row.name);
            d.set_item("formula", parsed.map(|s| s.formula().to_string()).unwrap_or_else(|| entry.formula.clone()))?;
            d.set_item("hf", parsed.map(|s| s.hf()).unwrap_or_else(|| entry.hf.clone()))?;
            out.push(d.into_any().unbind());
        }
        Ok(out)
    }

    /// Writes the trace into `dir` in the CLI's dump format (manifest.json and one .npy per
    /// stage, or one trace.npz with `npz=True`), by the CLI's rules: a directory holding anything
    /// else is refused unless `force=True`, and a file of someone else's is never replaced.
    #[pyo3(signature = (dir, *, force = false, npz = false))]
    fn save(&self, py: Python<'_>, dir: &Bound<'_, PyAny>, force: bool, npz: bool) -> PyResult<()> {
        let dir = PathBuf::from(crate::args::path_text(py, dir)?);
        guarded(py, || {
            self.write(py, dir.clone(), force, npz)?;
            self.remember(dir);
            Ok(())
        })
    }

    /// The page `bert-trace view` writes for this trace, shown inline in a notebook (it makes no
    /// network request).
    fn view(&self, py: Python<'_>) -> PyResult<crate::report::Page> {
        guarded(py, || {
            let dump = self.as_dump(py)?;
            let model = self.model.as_ref().map(|m| m.get().f32.lock().expect("not poisoned"));
            crate::report::Page::of(py, &dump, model.as_deref())
        })
    }

    /// Serves this trace's page from this machine, as `bert_trace.serve` serves a dump: a click
    /// on any cell explains it, and the pass can be stepped through and changed, with the model
    /// that made the trace (or `model=`). Returns a `Server`: `url` opens the page, `stop()`
    /// ends it. Nothing is written.
    #[pyo3(signature = (*, model = None, host = "127.0.0.1", port = 0, heatmap = None))]
    fn serve(
        &self,
        py: Python<'_>,
        model: Option<&Bound<'_, PyAny>>,
        host: &str,
        port: u16,
        heatmap: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<crate::serving::Server> {
        let model = match model.filter(|m| !m.is_none()) {
            Some(m) if m.is_instance_of::<Model>() => m.cast::<Model>()?.get().spec.clone(),
            Some(m) => Some(PathBuf::from(crate::args::path_text(py, m)?)),
            None => self.made_with(py).and_then(|m| m.get().spec.clone()),
        };
        let request = crate::serving::request(model, host, port, heatmap)?;
        let dump = self.as_dump(py)?;
        crate::serving::serve_open(py, dump, request)
    }

    /// The diff against the dump the trace was given as `reference=`, or None.
    #[getter]
    fn report(&self, py: Python<'_>) -> Option<Py<crate::report::DiffReport>> {
        self.report.as_ref().map(|r| r.clone_ref(py))
    }

    /// The model that made the trace, if it is loaded here.
    #[getter]
    fn model(&self, py: Python<'_>) -> Option<Py<Model>> {
        self.made_with(py)
    }

    fn _repr_html_(&self, py: Python<'_>) -> PyResult<String> {
        let rows: Vec<Vec<String>> = self
            .rows(py)?
            .iter()
            .map(|r| {
                let formula = stage::parse(&r.name).map(|s| s.formula().to_string()).unwrap_or_default();
                vec![r.name.clone(), format!("{:?}", r.shape), num(r.min), num(r.mean), num(r.std), num(r.max), formula]
            })
            .collect();
        let title = format!(
            "<p><b>bert_trace.Trace</b> of {} ({} stages)</p>\n",
            html_escape(&self.manifest.model),
            self.arrays.len()
        );
        Ok(title + &html_table(&["stage", "shape", "min", "mean", "std", "max", "formula"], &rows))
    }

    fn __repr__(&self) -> String {
        format!(
            "bert_trace.Trace({} stages of {:?}: {:?})",
            self.arrays.len(),
            self.manifest.model,
            self.manifest.inputs.texts
        )
    }
}
