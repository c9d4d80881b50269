//! `trace(..., hooks={stage: fn})`: a Python function changes a stage as the pass computes it
//! (TransformerLens's `run_with_hooks`). It gets the stage as a numpy array (a copy) and returns
//! the value the model is to use, or None after changing the array it was given.

use std::collections::HashMap;

use bert_core::pass::hook::{Hook, TensorViewMut};
use bert_core::stage::Stage;
use bert_core::BertError;
use ndarray::ArrayView2;
use numpy::{IntoPyArray, PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::IntoPyDict;

/// The functions, by the stage each changes.
pub struct PyHooks {
    functions: HashMap<Stage, Py<PyAny>>,
    /// The exception a function raised, re-raised once the pass has stopped.
    pub error: Option<PyErr>,
}

impl PyHooks {
    pub fn new(functions: HashMap<Stage, Py<PyAny>>) -> PyHooks {
        PyHooks { functions, error: None }
    }

    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }
}

/// Calls `function` with a copy of `values` and writes what it returns back into `values`.
fn call<T: numpy::Element + Copy>(
    py: Python<'_>,
    stage: Stage,
    function: &Py<PyAny>,
    mut values: ndarray::ArrayViewMutD<'_, T>,
) -> PyResult<()> {
    let given = values.to_owned().into_pyarray(py);
    let returned = function.call1(py, (given.clone(),))?;
    let returned = if returned.is_none(py) { given.into_any() } else { returned.into_bound(py) };
    // Whatever numpy can read as the stage's dtype: an array, a list, another float width.
    let kwargs = [("dtype", numpy::dtype::<T>(py).into_any())].into_py_dict(py)?;
    let array = py.import("numpy")?.call_method("asarray", (returned,), Some(&kwargs))?;
    let array = array.cast_into::<PyArrayDyn<T>>().map_err(PyErr::from)?;
    if array.shape() != values.shape() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "hooks[\"{stage}\"]: the function returned shape {:?}; the stage's shape is {:?}",
            array.shape(),
            values.shape()
        )));
    }
    values.assign(&array.readonly().as_array());
    Ok(())
}

impl Hook for PyHooks {
    fn wants(&self, stage: &Stage) -> bool {
        self.error.is_none() && self.functions.contains_key(stage)
    }

    fn apply(&mut self, stage: Stage, tensor: TensorViewMut<'_>, _: ArrayView2<'_, i64>) -> bert_core::Result<()> {
        let function = &self.functions[&stage];
        let result = Python::attach(|py| match tensor {
            TensorViewMut::F32(values) => call(py, stage, function, values),
            TensorViewMut::F64(values) => call(py, stage, function, values),
            TensorViewMut::I64(values) => call(py, stage, function, values),
        });
        result.map_err(|error| {
            let message = format!("hooks[\"{stage}\"]: {error}");
            self.error = Some(error);
            BertError::Intervention { spec: format!("hooks[\"{stage}\"]"), problem: message }
        })
    }
}
