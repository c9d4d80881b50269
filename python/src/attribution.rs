//! `bert_trace.attribute`: the command's `attribute`, from Python: which input tokens a
//! prediction rests on, as a report (the command's `--json`, a dict that draws itself in a
//! notebook), made by the library (`bert_commands::attribute`).

use bert_commands::attribute::{AttributeRequest, Method, OccludeWith};
use bert_core::experiments::attribute::integrated::Baseline;
use bert_core::experiments::attribute::{Of, Rule};
use pyo3::prelude::*;

use crate::args::{path, settings, strings};
use crate::errors::OrRaise;

/// Every keyword of `attribute`.
pub struct AttributeKeywords<'py> {
    pub file: Option<Bound<'py, PyAny>>,
    pub pair: Option<Bound<'py, PyAny>>,
    /// None: occlusion, as the command.
    pub method: Option<String>,
    pub target: Option<Bound<'py, PyAny>>,
    pub label: Option<Bound<'py, PyAny>>,
    pub nsp_label: Option<Bound<'py, PyAny>>,
    /// None: logprob, as the command.
    pub of: Option<String>,
    pub occlude_with: Option<String>,
    pub baseline: Option<String>,
    pub ig_steps: Option<usize>,
    pub ig_rule: Option<String>,
    pub threads: Option<usize>,
    pub kernels: Option<String>,
}

/// One of `choices` (the command's values), or the keyword named in the error.
fn choice<T: Copy>(py: Python<'_>, keyword: &str, given: &str, choices: &[(&str, T)]) -> PyResult<T> {
    match choices.iter().find(|(name, _)| *name == given) {
        Some(&(_, value)) => Ok(value),
        None => {
            let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
            let message = format!("{keyword}={given:?}: expected one of {}", names.join(", "));
            Err(crate::errors::raise(py, "InputError", message))
        }
    }
}

/// `attribute(text, model=None, **keywords)`: the report of `bert-trace attribute --json`.
pub fn attribute(
    py: Python<'_>,
    text: &Bound<'_, PyAny>,
    model: Option<&Bound<'_, PyAny>>,
    k: AttributeKeywords<'_>,
) -> PyResult<Py<PyAny>> {
    let nsp_labels = match k.nsp_label.as_ref().filter(|v| !v.is_none()) {
        None => Vec::new(),
        Some(one) if one.extract::<i64>().is_ok() => vec![one.extract()?],
        Some(many) => many.try_iter()?.map(|item| item?.extract::<i64>()).collect::<PyResult<_>>()?,
    };
    let method = [
        ("occlusion", Method::Occlusion),
        ("integrated-gradients", Method::IntegratedGradients),
        ("grad-input", Method::GradInput),
    ];
    let request = AttributeRequest {
        texts: strings(Some(text))?,
        file: path(py, k.file.as_ref())?,
        pair: strings(k.pair.as_ref())?,
        model: path(py, model)?,
        method: choice(py, "method", k.method.as_deref().unwrap_or("occlusion"), &method)?,
        targets: strings(k.target.as_ref())?,
        labels: strings(k.label.as_ref())?,
        nsp_labels,
        of: choice(py, "of", k.of.as_deref().unwrap_or("logprob"), &[("logprob", Of::Logprob), ("logit", Of::Logit)])?,
        occlude_with: k
            .occlude_with
            .map(|w| choice(py, "occlude_with", &w, &[("mask", OccludeWith::Mask), ("unk", OccludeWith::Unk)]))
            .transpose()?,
        baseline: k
            .baseline
            .map(|b| choice(py, "baseline", &b, &[("pad", Baseline::Pad), ("zero", Baseline::Zero)]))
            .transpose()?,
        ig_steps: k.ig_steps,
        ig_rule: k
            .ig_rule
            .map(|r| {
                choice(py, "ig_rule", &r, &[("gauss-legendre", Rule::GaussLegendre), ("midpoint", Rule::Midpoint)])
            })
            .transpose()?,
        json: true,
        settings: settings(py, k.threads, k.kernels.as_deref())?,
    };
    let (_, report) = py.detach(|| bert_commands::attribute::attribute(&request, &mut |_, _, _| {})).or_raise(py)?;
    crate::errors::notes(py, &report.notes);
    crate::heads::report_of(py, &report.text)
}
