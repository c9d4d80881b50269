//! `bert_trace.explain(dump, stage, index)` and `Trace.explain(stage, index)`: the library's
//! explanation of one element, or of a row (`slice(None)` on one axis), as objects with the
//! fields of `bert-trace explain --json`. Nothing is computed here.

use std::path::PathBuf;

use bert_commands::explain::{self as command, ExplainRequest};
use bert_commands::render::text_table::{html_escape, html_table};
use bert_core::explanation::{self, Axis, Number, Target};
use bert_core::stage::DType;
use bert_core::Dump;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PySlice};

use crate::args::path_text;
use crate::errors::{guarded, raise, OrRaise};
use crate::model::Model;

/// One element explained: its formula with its operands' values, the value the dump holds, the
/// value its stage's own function gives from the dump's operands, and every element it reads.
#[pyclass(module = "bert_trace", frozen)]
pub struct Explanation {
    inner: explanation::Explanation,
}

/// A number as Python holds it: a float, an int, or None when not finite.
fn number(py: Python<'_>, value: Number) -> Py<PyAny> {
    match value {
        Number::I64(v) => v.into_pyobject(py).expect("an int").into_any().unbind(),
        other if other.to_f64().is_finite() => other.to_f64().into_pyobject(py).expect("a float").into_any().unbind(),
        _ => py.None(),
    }
}

#[pymethods]
impl Explanation {
    #[getter]
    fn stage(&self) -> &str {
        &self.inner.stage
    }

    #[getter]
    fn index(&self) -> Vec<usize> {
        self.inner.index.clone()
    }

    #[getter]
    fn value(&self, py: Python<'_>) -> Py<PyAny> {
        number(py, self.inner.value)
    }

    #[getter]
    fn dtype(&self) -> &str {
        self.inner.dtype
    }

    #[getter]
    fn recomputed(&self, py: Python<'_>) -> Py<PyAny> {
        number(py, self.inner.recomputed)
    }

    #[getter]
    fn formula(&self) -> &str {
        &self.inner.formula
    }

    /// Every scalar the element reads: dicts of `stage`, `index` and `value`.
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.inner
            .inputs
            .iter()
            .map(|input| {
                let dict = PyDict::new(py);
                dict.set_item("stage", &input.stage)?;
                dict.set_item("index", input.index.clone())?;
                dict.set_item("value", number(py, input.value))?;
                Ok(dict)
            })
            .collect()
    }

    /// The named intermediate quantities: dicts of `name` and `value`.
    #[getter]
    fn steps<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.inner
            .steps
            .iter()
            .map(|step| {
                let dict = PyDict::new(py);
                dict.set_item("name", step.name)?;
                dict.set_item("value", number(py, step.value))?;
                Ok(dict)
            })
            .collect()
    }

    /// The largest terms of a sum: dicts of `inputs` (two positions in `inputs`) and `value`.
    #[getter]
    fn terms<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.inner
            .terms
            .iter()
            .map(|term| {
                let dict = PyDict::new(py);
                dict.set_item("inputs", term.inputs.to_vec())?;
                dict.set_item("value", number(py, term.value))?;
                Ok(dict)
            })
            .collect()
    }

    fn __repr__(&self) -> String {
        command::text(&self.inner)
    }

    fn _repr_html_(&self) -> String {
        let e = &self.inner;
        let index: Vec<String> = e.index.iter().map(ToString::to_string).collect();
        let mut html = format!(
            "<p><b>{}[{}]</b> = {} ({})</p>\n<p>{}</p>\n<p>recomputed {} by the stage's own function (own error {:.3e})</p>\n",
            html_escape(&e.stage),
            index.join(","),
            e.value,
            e.dtype,
            html_escape(&e.formula),
            e.recomputed,
            e.own_error()
        );
        if !e.steps.is_empty() {
            let steps: Vec<Vec<String>> =
                e.steps.iter().map(|s| vec![s.name.to_string(), s.value.to_string()]).collect();
            html += &html_table(&["step", "value"], &steps);
        }
        // The operands as a small table: each stage's first elements, then how many more.
        let mut rows = Vec::new();
        for (idx, input) in e.inputs.iter().enumerate() {
            let before = e.inputs[..idx].iter().filter(|i| i.stage == input.stage).count();
            if before < 8 {
                rows.push(vec![input.stage.clone(), format!("{:?}", input.index), input.value.to_string()]);
            } else if before == 8 {
                let total = e.inputs.iter().filter(|i| i.stage == input.stage).count();
                rows.push(vec![input.stage.clone(), format!("... {} more", total - 8), String::new()]);
            }
        }
        html + &html_table(&["reads", "index", "value"], &rows)
    }
}

/// `stage` and a tuple of indices as numpy reads them (ints, negative ones from the end; a slice
/// `a:b` on one axis, `slice(None)` for the whole axis) as a target.
fn target(py: Python<'_>, stage: &str, index: &Bound<'_, PyAny>) -> PyResult<Target> {
    let items: Vec<Bound<'_, PyAny>> = match index.extract::<Vec<Bound<'_, PyAny>>>() {
        Ok(items) => items,
        Err(_) => vec![index.clone()],
    };
    let bad = |problem: String| -> PyResult<Target> { Err(raise(py, "InputError", problem)) };
    let mut axes = Vec::new();
    for item in &items {
        if let Ok(slice) = item.cast::<PySlice>() {
            // As numpy: None or an int at each end; a step other than 1 is not taken.
            let end = |name: &str| -> PyResult<Option<i64>> {
                let value = slice.getattr(name)?;
                if value.is_none() {
                    return Ok(None);
                }
                if value.is_instance_of::<pyo3::types::PyBool>() {
                    return Err(raise(py, "InputError", format!("index={}: a bool is not an index", index.repr()?)));
                }
                value.extract::<i64>().map(Some).map_err(|_| {
                    raise(
                        py,
                        "InputError",
                        format!(
                            "index={}: a slice's ends must be ints or None",
                            index.repr().map(|r| r.to_string()).unwrap_or_default()
                        ),
                    )
                })
            };
            let step = end("step")?;
            if step.is_some_and(|s| s != 1) {
                return bad(format!("index={}: a slice with a step is not taken; give a:b", index.repr()?));
            }
            axes.push(Axis::Slice { start: end("start")?, stop: end("stop")? });
            continue;
        }
        // A bool is an int to Python, but numpy reads it as a mask, not as an index.
        if item.is_instance_of::<pyo3::types::PyBool>() {
            return bad(format!("index={}: a bool is not an index; give ints", index.repr()?));
        }
        match item.extract::<i64>() {
            Ok(i) => axes.push(Axis::At(i)),
            Err(_) => {
                return bad(format!(
                    "index={}: expected a tuple of ints (negative ones count from the end), with a slice on one axis",
                    index.repr()?
                ))
            }
        }
    }
    let text: Vec<String> = axes.iter().map(|a| a.to_string()).collect();
    let text = format!("{stage}[{}]", text.join(","));
    let parsed = Target::parse(&text).or_raise(py)?;
    Ok(Target { index: axes, ..parsed })
}

/// One explanation, or a list of them for a row.
fn result(py: Python<'_>, explanations: Vec<explanation::Explanation>, row: bool) -> PyResult<Py<PyAny>> {
    let mut objects =
        explanations.into_iter().map(|inner| Py::new(py, Explanation { inner })).collect::<PyResult<Vec<_>>>()?;
    match row {
        true => Ok(objects.into_pyobject(py)?.into_any().unbind()),
        false => Ok(objects.remove(0).into_any()),
    }
}

/// `bert_trace.explain(dump, stage, index, model=None)`.
pub fn explain_dump(
    py: Python<'_>,
    dump: &Bound<'_, PyAny>,
    stage: &str,
    index: &Bound<'_, PyAny>,
    model: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    guarded(py, || {
        let target = target(py, stage, index)?;
        let request = ExplainRequest {
            dump: PathBuf::from(path_text(py, dump)?),
            target: target.text.clone(),
            model: model.filter(|m| !m.is_none()).map(|m| path_text(py, m).map(PathBuf::from)).transpose()?,
        };
        let report = py.detach(|| command::explain(&request)).or_raise(py)?;
        result(py, report.explanations, report.row)
    })
}

/// `Trace.explain(stage, index)`: the trace in memory, with the model that made it.
pub fn explain_trace(
    py: Python<'_>,
    dump: Dump,
    model: &Model,
    stage: &str,
    index: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    guarded(py, || {
        let target = target(py, stage, index)?;
        let row = target.is_row();
        let explanations = match dump.float_dtype() {
            DType::F64 => {
                let double = model.in_f64(py)?;
                let double = double.lock().expect("not poisoned");
                py.detach(|| explanation::explain(&double, &dump, &target)).or_raise(py)?
            }
            _ => {
                let single = model.f32.lock().expect("not poisoned");
                py.detach(|| explanation::explain(&single, &dump, &target)).or_raise(py)?
            }
        };
        result(py, explanations, row)
    })
}
