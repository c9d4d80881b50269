//! `bert_trace.diff`: the command's diff of two dumps, either of which may be a trace in memory
//! (read as it is, with nothing written).

use std::path::PathBuf;

use bert_commands::diff;
use bert_core::diff::isolate::{own_errors, Isolation};
use bert_core::diff::truth::against_truth;
use bert_core::diff::ToleranceOverride;
use bert_core::stage::DType;
use bert_core::Dump;
use pyo3::prelude::*;

use crate::args::path_text;
use crate::errors::{guarded, OrRaise};
use crate::model::Model;
use crate::report::DiffReport;
use crate::result::Trace;

/// A trace or a dump directory (or .npz), as a dump.
fn open(py: Python<'_>, side: &Bound<'_, PyAny>) -> PyResult<Dump> {
    if let Ok(trace) = side.cast::<Trace>() {
        return trace.get().as_dump(py);
    }
    let path = PathBuf::from(path_text(py, side)?);
    py.detach(|| Dump::open(&path)).or_raise(py)
}

/// `diff(reference, trace, atol=None, rtol=None, isolate=False, truth=None, model=None)`.
pub fn diff(
    py: Python<'_>,
    reference: &Bound<'_, PyAny>,
    trace: &Bound<'_, PyAny>,
    tolerance: ToleranceOverride,
    isolate: bool,
    truth: Option<&Bound<'_, PyAny>>,
    model: Option<&Bound<'_, PyAny>>,
) -> PyResult<DiffReport> {
    guarded(py, || {
        let (reference, trace) = (open(py, reference)?, open(py, trace)?);
        let isolation = if isolate {
            let model = match model.filter(|m| !m.is_none()) {
                Some(m) if m.is_instance_of::<Model>() => m.cast::<Model>()?.clone().unbind(),
                Some(m) => Py::new(py, Model::load(py, Some(PathBuf::from(path_text(py, m)?)))?)?,
                None => Py::new(py, Model::load(py, None)?)?,
            };
            let model = model.get();
            // Each dump is recomputed in its own precision: an f64 dump with the model in f64.
            let double = match (reference.float_dtype(), trace.float_dtype()) {
                (DType::F64, _) | (_, DType::F64) => Some(model.in_f64(py)?),
                _ => None,
            };
            let single = model.f32.lock().expect("not poisoned");
            let own = |dump: &Dump| match (&double, dump.float_dtype()) {
                (Some(double), DType::F64) => own_errors(&double.lock().expect("not poisoned"), dump),
                _ => own_errors(&single, dump),
            };
            Some(py.detach(|| Isolation::of(&reference, &trace, own)).or_raise(py)?)
        } else {
            None
        };
        let truth = match truth {
            Some(t) => {
                let dump = open(py, t)?;
                Some(py.detach(|| against_truth(&reference, &trace, &dump)).or_raise(py)?)
            }
            None => None,
        };
        let report = diff::render(&reference, &trace, tolerance, isolation.as_ref(), truth.as_deref()).or_raise(py)?;
        Ok(DiffReport::of(report))
    })
}
