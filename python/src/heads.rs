//! `bert_trace.heads`: the command's `heads`, from Python: which heads matter, as a dict of
//! `[layers][heads]` lists (the command's `--json`), made by the library
//! (`bert_commands::heads`).

use bert_commands::heads::HeadsRequest;
use pyo3::prelude::*;

use crate::args::{ints, path, settings, strings};
use crate::errors::OrRaise;

/// Every keyword of `heads`.
pub struct HeadsKeywords<'py> {
    pub file: Option<Bound<'py, PyAny>>,
    pub pair: Option<Bound<'py, PyAny>>,
    pub mlm_target: Option<Bound<'py, PyAny>>,
    pub nsp_label: Option<Bound<'py, PyAny>>,
    pub label: Option<Bound<'py, PyAny>>,
    pub importance: bool,
    pub statistics: bool,
    pub batch_size: Option<usize>,
    pub threads: Option<usize>,
    pub kernels: Option<String>,
}

/// `heads(text, model=None, **keywords)`: the report of `bert-trace heads --json`, as a dict.
pub fn heads(
    py: Python<'_>,
    text: &Bound<'_, PyAny>,
    model: Option<&Bound<'_, PyAny>>,
    k: HeadsKeywords<'_>,
) -> PyResult<Py<PyAny>> {
    let request = HeadsRequest {
        texts: strings(Some(text))?,
        file: path(py, k.file.as_ref())?,
        model: path(py, model)?,
        pair: strings(k.pair.as_ref())?,
        mlm_targets: strings(k.mlm_target.as_ref())?,
        nsp_labels: ints(k.nsp_label.as_ref())?,
        labels: strings(k.label.as_ref())?,
        importance: k.importance,
        statistics: k.statistics,
        batch_size: k.batch_size,
        settings: settings(py, k.threads, k.kernels.as_deref())?,
    };
    let reported = py.detach(|| bert_commands::heads::heads(&request, &mut |_, _| {})).or_raise(py)?;
    crate::errors::notes(py, &reported.notes);
    report_of(py, &reported.report)
}

/// A command's report as a `bert_trace.Report`: a dict of its fields (what `--json` prints) that
/// draws itself in a notebook.
pub fn report_of(py: Python<'_>, report: &impl bert_commands::Report) -> PyResult<Py<PyAny>> {
    let value = serde_json::to_value(report).expect("a report serialises");
    let dict = python_of(py, &value)?;
    Ok(py.import("bert_trace._reports")?.getattr("Report")?.call1((dict,))?.unbind())
}

/// A JSON value as the Python object `json.loads` makes of it: NaN and the infinities, which
/// JSON has not, are None there as here.
fn python_of<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    use pyo3::types::{PyDict, PyList};
    use serde_json::Value;
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.into_pyobject(py)?.into_any(),
            (None, Some(u), _) => u.into_pyobject(py)?.into_any(),
            (None, None, f) => f.unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => s.into_pyobject(py)?.into_any(),
        Value::Array(items) => {
            PyList::new(py, items.iter().map(|item| python_of(py, item)).collect::<PyResult<Vec<_>>>()?)?.into_any()
        }
        Value::Object(fields) => {
            let dict = PyDict::new(py);
            for (key, item) in fields {
                dict.set_item(key, python_of(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

/// `_picture(json)`: the SVG `bert-trace view` draws of a command's JSON report.
#[pyfunction]
pub fn _picture(py: Python<'_>, json: &str) -> PyResult<String> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| crate::errors::raise(py, "InputError", format!("not a report: {e}")))?;
    bert_commands::view::svg_of_report(&value).or_raise(py)
}
