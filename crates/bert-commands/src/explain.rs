//! `explain`: why one element of a dump's stage is what it is (`bert_core::explanation`), with the
//! dump's own model, as text or JSON.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use bert_core::explanation::{self, Explanation, Target};
use bert_core::io::dump::Dump;
use bert_core::stage::DType;

use crate::error::Result;
use crate::source::{self, Builtin, MODEL};

/// One element (or row) of one dump to explain.
#[derive(Clone, Debug)]
pub struct ExplainRequest {
    pub dump: PathBuf,
    /// `STAGE[INDEX]`, `:` on one axis for a whole row.
    pub target: String,
    /// The dump's model; None: the model its manifest names.
    pub model: Option<PathBuf>,
}

/// The explanations, as the command prints them (`text`) and as `--json` gives them.
#[derive(Clone, Debug)]
pub struct ExplainReport {
    /// What the caller should know about how far the model was checked.
    pub notes: Vec<String>,
    pub text: String,
    pub explanations: Vec<Explanation>,
    /// Whether the target named a whole row (`:`): then the JSON is an array.
    pub row: bool,
}

impl ExplainReport {
    /// The JSON: one object, or an array of them for a row. Written straight from the values
    /// (not through `serde_json::Value`, which would widen an f32 to the f64 digits of it).
    pub fn to_json(&self) -> String {
        let json = match self.row {
            true => serde_json::to_string_pretty(&self.explanations),
            false => serde_json::to_string_pretty(&self.explanations[0]),
        };
        json.expect("an explanation is JSON")
    }
}

/// Explains what `request` names.
pub fn explain(request: &ExplainRequest) -> Result<ExplainReport> {
    let target = Target::parse(&request.target)?;
    let dump = Dump::open(&request.dump)?;
    // A pass in a narrower format is explained by the exact arithmetic of its weights: each
    // element's own error is then its rounding.
    let exact = dump.float_dtype() == DType::F64 || !dump.simulation().is_none();
    let explanations = match exact {
        true => explanation::explain(&model_for::<f64>(&dump, request.model.as_deref())?, &dump, &target)?,
        false => explanation::explain(&model_for::<f32>(&dump, request.model.as_deref())?, &dump, &target)?,
    };
    Ok(report(&dump, &target, explanations))
}

/// The report of `explanations` of `target` in `dump`.
pub(crate) fn report(dump: &Dump, target: &Target, explanations: Vec<Explanation>) -> ExplainReport {
    let text: String = explanations.iter().map(text).collect();
    let mut notes: Vec<String> = bert_core::divergence::isolate::model_check_note(dump).into_iter().collect();
    let simulation = dump.simulation();
    if !simulation.is_none() {
        notes.push(format!(
            "note: {} is a pass {}: each element is recomputed exactly (in float64) from the dump's operands, so its \
             own error is its rounding",
            dump.dir.display(),
            simulation.describe()
        ));
    }
    ExplainReport { notes, text, row: target.is_row(), explanations }
}

/// The model that explains `dump`, loaded in precision `F`: `model` when given, else the one its
/// manifest names (see [`model_of`]), with the weights of the dump's pass when it held them in a
/// narrower format ([`Dump::simulation`]).
pub(crate) fn model_for<F: bert_core::ops::Float>(
    dump: &Dump,
    model: Option<&Path>,
) -> Result<bert_core::BertModel<F>> {
    let which = model_of(dump, model)?;
    // A model the manifest names (not one the caller gave) that cannot be loaded is the
    // manifest's to answer for: the message names it, and the option that overrides it.
    let mut loaded = which.load::<F>().map_err(|error| match model {
        Some(_) => error,
        None => crate::Error::Request(format!(
            "{}: its manifest names the model {}, which is not a directory next to the dump or here, nor one that \
             loads ({error}): give the model it was made with, with {MODEL}",
            dump.dir.join("manifest.json").display(),
            which
        )),
    })?;
    dump.simulation().apply_to_weights(&mut loaded);
    Ok(loaded)
}

/// Which model explains a dump: one a path or hub id names (the caller's, or the manifest's), or
/// a model built into bert-trace, which the manifest names by its directory.
enum Which {
    Named(PathBuf),
    Builtin(&'static Builtin),
}

impl Which {
    fn load<F: bert_core::ops::Float>(&self) -> Result<bert_core::BertModel<F>> {
        match self {
            Which::Named(spec) => Ok(source::load_as::<F>(Some(spec))?.model),
            Which::Builtin(builtin) => Ok(builtin.load_as()?),
        }
    }
}

impl std::fmt::Display for Which {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Which::Named(spec) => write!(f, "{}", spec.display()),
            Which::Builtin(builtin) => write!(f, "{}", builtin.dir),
        }
    }
}

/// The model to explain `dump` with: `model` when given, else the one its manifest names, as a
/// directory next to the dump, then here, then a model built into bert-trace (by the directory
/// its manifest gives it, whatever directories are here), then as a hub id. Whichever it is,
/// `explain` checks it against the fingerprint the dump recorded.
fn model_of(dump: &Dump, model: Option<&Path>) -> Result<Which> {
    if let Some(model) = model {
        return Ok(Which::Named(model.to_path_buf()));
    }
    let named = dump.manifest.model.trim();
    if named.is_empty() {
        return Err(crate::Error::Request(format!(
            "{}: its manifest names no model: give the model it was made with, with {MODEL}",
            dump.dir.display()
        )));
    }
    let beside = dump.dir.join(named);
    if beside.is_dir() {
        return Ok(Which::Named(beside));
    }
    if Path::new(named).is_dir() {
        return Ok(Which::Named(PathBuf::from(named)));
    }
    if let Some(builtin) = Builtin::of_manifest(named) {
        return Ok(Which::Builtin(builtin));
    }
    Ok(Which::Named(PathBuf::from(named)))
}

/// One explanation as text: the value, the formula, the recomputation and what it reads.
pub fn text(e: &Explanation) -> String {
    let mut out = String::new();
    render(&mut out, e);
    out
}

fn render(out: &mut String, e: &Explanation) {
    let index: Vec<String> = e.index.iter().map(ToString::to_string).collect();
    let _ = writeln!(out, "{}[{}] = {} ({})", e.stage, index.join(","), e.value, e.dtype);
    let _ = writeln!(out, "  formula:    {}", e.formula);
    if !e.steps.is_empty() {
        let steps: Vec<String> = e.steps.iter().map(|s| format!("{} {}", s.name, s.value)).collect();
        let _ = writeln!(out, "  steps:      {}", steps.join(", "));
    }
    // Five terms of 0 would say nothing: a sum whose terms are all 0 is said to be so.
    if !e.terms.is_empty() && e.terms.iter().all(|t| t.value.to_f64() == 0.0) {
        let _ = writeln!(out, "  largest:    every term is 0");
    }
    for (idx, term) in e.terms.iter().enumerate().filter(|_| e.terms.iter().any(|t| t.value.to_f64() != 0.0)) {
        let (a, b) = (&e.inputs[term.inputs[0]], &e.inputs[term.inputs[1]]);
        let _ = writeln!(
            out,
            "  {:<11} {}{:?} · {}{:?} = {} · {} = {}",
            if idx == 0 { "largest:" } else { "" },
            a.stage,
            a.index,
            b.stage,
            b.index,
            a.value,
            b.value,
            term.value
        );
    }
    let _ = writeln!(
        out,
        "  recomputed: {} by the stage's own function from the dump's operands (own error {:.3e})",
        e.recomputed,
        e.own_error()
    );
    let _ = writeln!(out, "  reads:      {}", reads(e));
}

/// The operands an explanation lists, by stage: each element when there are few, else their
/// count and the first and last index.
pub fn reads(e: &Explanation) -> String {
    let mut groups: Vec<(&str, Vec<&bert_core::explanation::Operand>)> = Vec::new();
    for input in &e.inputs {
        match groups.iter_mut().find(|(stage, _)| *stage == input.stage) {
            Some((_, list)) => list.push(input),
            None => groups.push((&input.stage, vec![input])),
        }
    }
    let parts: Vec<String> = groups
        .iter()
        .map(|(stage, list)| match list.as_slice() {
            [one] => format!("{stage}{:?} = {}", one.index, one.value),
            [first, .., last] => {
                format!("{stage} {} elements, {:?} to {:?}", list.len(), first.index, last.index)
            }
            [] => String::new(),
        })
        .collect();
    parts.join("; ")
}
