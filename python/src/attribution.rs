//! `bert_trace.attribute`: the command's `attribute`, from Python: which input tokens a
//! prediction rests on, as a report (the command's `--json`, a dict that draws itself in a
//! notebook), made by the library (`bert_commands::attribute`).

use bert_commands::attribute::{AttributeRequest, BASELINE, IG_RULE, METHOD, OCCLUDE_WITH, OF};
use pyo3::prelude::*;

use crate::args::{choice, ints, path, settings, strings};
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
    pub words: Option<Bound<'py, PyAny>>,
    pub threads: Option<usize>,
    pub kernels: Option<String>,
}

/// `attribute(text, model=None, **keywords)`: the report of `bert-trace attribute --json`.
pub fn attribute(
    py: Python<'_>,
    text: &Bound<'_, PyAny>,
    model: Option<&Bound<'_, PyAny>>,
    k: AttributeKeywords<'_>,
) -> PyResult<Py<PyAny>> {
    let request = AttributeRequest {
        texts: strings(Some(text))?,
        file: path(py, k.file.as_ref())?,
        pair: strings(k.pair.as_ref())?,
        model: path(py, model)?,
        method: k.method.as_deref().map(|m| choice(py, METHOD, m)).transpose()?.unwrap_or_default(),
        targets: strings(k.target.as_ref())?,
        labels: strings(k.label.as_ref())?,
        nsp_labels: ints(k.nsp_label.as_ref())?,
        of: k.of.as_deref().map(|of| choice(py, OF, of)).transpose()?.unwrap_or_default(),
        occlude_with: k.occlude_with.as_deref().map(|w| choice(py, OCCLUDE_WITH, w)).transpose()?,
        baseline: k.baseline.as_deref().map(|b| choice(py, BASELINE, b)).transpose()?,
        ig_steps: k.ig_steps,
        ig_rule: k.ig_rule.as_deref().map(|r| choice(py, IG_RULE, r)).transpose()?,
        settings: settings(py, k.threads, k.kernels.as_deref())?,
        words: crate::args::words(py, k.words.as_ref())?,
    };
    let reported = py.detach(|| bert_commands::attribute::attribute(&request, &mut |_, _, _| {})).or_raise(py)?;
    crate::errors::notes(py, &reported.notes);
    crate::report::report_of(py, &reported.report)
}
