//! `bert_trace.diff`: the command's diff of two dumps, either of which may be a trace in memory
//! (read as it is, with nothing written).

use bert_core::divergence::measured_tolerance::ToleranceFile;
use std::path::PathBuf;

use bert_commands::diff;
use bert_core::divergence::ToleranceOverride;
use bert_core::stage::DType;
use bert_core::Dump;
use pyo3::prelude::*;

use crate::args::path_text;
use crate::errors::{guarded, OrRaise};
use crate::model::Model;
use crate::report::DiffReport;
use crate::result::Trace;

/// A trace or a dump directory (or .npz), as a dump.
pub(crate) fn open(py: Python<'_>, side: &Bound<'_, PyAny>) -> PyResult<Dump> {
    if let Ok(trace) = side.cast::<Trace>() {
        return trace.get().as_dump(py);
    }
    let path = PathBuf::from(path_text(py, side)?);
    py.detach(|| Dump::open(&path)).or_raise(py)
}

/// `diff(reference, trace, atol=None, rtol=None, isolate=False, truth=None, model=None)`: the
/// command's own comparison (`bert_commands::diff::diff_report`). `isolate` needs the model both
/// dumps were made with, as the command does: `model=`, or the model of a trace in memory.
#[allow(clippy::too_many_arguments)]
pub fn diff(
    py: Python<'_>,
    reference: &Bound<'_, PyAny>,
    trace: &Bound<'_, PyAny>,
    tolerance: ToleranceOverride,
    isolate: bool,
    truth: Option<&Bound<'_, PyAny>>,
    model: Option<&Bound<'_, PyAny>>,
    tolerances: Option<PathBuf>,
) -> PyResult<DiffReport> {
    guarded(py, || {
        let (reference_dump, trace_dump) = (open(py, reference)?, open(py, trace)?);
        // The model given, else the one a trace in memory was made with (the trace's first).
        let model = match model.filter(|m| !m.is_none()) {
            Some(m) if m.is_instance_of::<Model>() => Some(m.cast::<Model>()?.clone().unbind()),
            Some(m) => Some(Py::new(py, Model::load(py, Some(PathBuf::from(path_text(py, m)?)))?)?),
            None => {
                [trace, reference].iter().find_map(|side| side.cast::<Trace>().ok().and_then(|t| t.get().made_with(py)))
            }
        };
        diff::check_isolate(isolate, model.is_some()).or_raise(py)?;
        let truth = truth.map(|t| open(py, t)).transpose()?;
        let model = model.as_ref().filter(|_| isolate).map(|m| m.get());
        // Each dump is recomputed in its own precision: an f64 dump with the model in f64.
        let f64_needed = [&reference_dump, &trace_dump].iter().any(|d| d.float_dtype() == DType::F64);
        let double = match (model, f64_needed) {
            (Some(model), true) => Some(model.in_f64(py)?),
            _ => None,
        };
        // A dump of a pass in a narrower format: the model in f64 with the same weights.
        let mut made = Vec::new();
        if let Some(model) = model {
            for simulation in [&reference_dump, &trace_dump].iter().map(|d| d.simulation()) {
                if !simulation.is_none() && !made.iter().any(|(s, _)| *s == simulation) {
                    made.push((simulation, model.simulated_f64(py, simulation)?));
                }
            }
        }
        let single = model.map(|m| m.f32.lock().expect("not poisoned"));
        let double_guard = double.as_ref().map(|d| d.lock().expect("not poisoned"));
        let with = single.as_ref().map(|single| diff::IsolateWith::Loaded {
            single,
            double: double_guard.as_deref(),
            simulated: made.iter().map(|(s, model)| (*s, model)).collect(),
        });
        let report = py
            .detach(|| {
                let measured = tolerances.as_deref().map(ToleranceFile::read).transpose()?;
                let tolerances = diff::Tolerances { overrides: tolerance, measured: measured.as_ref() };
                diff::diff_report(&reference_dump, &trace_dump, tolerances, with, truth.as_ref())
            })
            .or_raise(py)?;
        Ok(DiffReport::of(report))
    })
}
