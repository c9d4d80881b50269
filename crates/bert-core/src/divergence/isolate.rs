//! Whose error is it? Each stage of a dump recomputed with bert-trace's operations from *that
//! same dump's* values of its inputs (`stage/inputs.rs` names them), and compared with the
//! dump's own value of the stage: the difference is the stage's **own error**, whatever it
//! inherited from the stages before. A dump with one wrong stage in the middle has one stage
//! with a large own error, and after it stages that only inherit it.
//!
//! The recomputation (`recompute.rs`) calls the model's own function of each stage, the one the
//! forward pass calls; this file only compares and blames.

use serde::Serialize;

use crate::divergence::{compare_tensors, default_tolerance, stage_tolerance, StageReport, Tolerance};
use crate::error::{BertError, Result};
use crate::io::dump::manifest::InterventionRecord;
use crate::io::dump::Dump;
use crate::model::{dropout, BertModel};
use crate::ops::Float;
use crate::recompute::recompute_from;
use crate::stage::inputs::{inputs, Wiring};
use crate::stage::{self, DType, Part, Stage, StageKind::*};

/// A stage's own error on one side of a diff.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Own {
    /// Recomputed from the dump's own inputs: the largest difference, and whether it is within
    /// the stage's tolerance.
    Isolated { max_abs: f64, passed: bool },
    /// Not recomputed, and why (its inputs are absent from the dump, or of another shape).
    NotIsolated { reason: String },
}

impl Own {
    pub fn failed(&self) -> bool {
        matches!(self, Own::Isolated { passed: false, .. })
    }

    pub fn max_abs(&self) -> Option<f64> {
        match self {
            Own::Isolated { max_abs, .. } => Some(*max_abs),
            Own::NotIsolated { .. } => None,
        }
    }
}

/// Which side of a diff a stage's own error is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    Reference,
    Trace,
}

/// The own errors of both sides of a diff, and the culprit: the first stage, in execution
/// order, whose own error fails its tolerance on either side (the reference's, when both).
#[derive(Clone, Debug, Serialize)]
pub struct Isolation {
    pub reference: Vec<(String, Own)>,
    pub trace: Vec<(String, Own)>,
    pub culprit: Option<(String, Side)>,
}

impl Isolation {
    /// Isolates every stage of both dumps, each with the own errors `own` gives (in practice
    /// [`own_errors`] with the dumps' model, in the dump's precision). The two dumps must be of
    /// the same input, when both say which (their `input.ids`): a stage recomputed from another
    /// input's values would blame the inputs on the stages.
    pub fn of<E: From<BertError>>(
        reference: &Dump,
        trace: &Dump,
        mut own: impl FnMut(&Dump) -> std::result::Result<Vec<(String, Own)>, E>,
    ) -> std::result::Result<Isolation, E> {
        if reference.entry("input.ids").is_some() && trace.entry("input.ids").is_some() {
            crate::io::dump::same_input(reference, trace)?;
        }
        let (reference, trace) = (own(reference)?, own(trace)?);
        let mut failed: Vec<(&str, Side)> = reference
            .iter()
            .filter(|(_, own)| own.failed())
            .map(|(name, _)| (name.as_str(), Side::Reference))
            .chain(trace.iter().filter(|(_, own)| own.failed()).map(|(name, _)| (name.as_str(), Side::Trace)))
            .collect();
        failed.sort_by_key(|(name, side)| (stage::execution_key(name), *side == Side::Trace));
        let culprit = failed.first().map(|(name, side)| (name.to_string(), *side));
        Ok(Isolation { reference, trace, culprit })
    }

    /// The own error of stage `name` on `side`, if that side has the stage.
    pub fn own(&self, name: &str, side: Side) -> Option<&Own> {
        let list = match side {
            Side::Reference => &self.reference,
            Side::Trace => &self.trace,
        };
        list.iter().find(|(n, _)| n == name).map(|(_, own)| own)
    }
}

/// Every stage of `dump` (those in the stage table that are computed, not inputs) with its
/// own error, in the dump's order. First checks that `model` is the dump's model: it must give
/// the dump's word embeddings from the dump's ids. `model` should be in the dump's precision
/// ([`Dump::float_dtype`]): an f64 dump is then held to f64 rounding
/// ([`isolation_tolerance`]). A dump of a pass in a narrower format ([`Dump::simulation`]:
/// bert-trace's `--precision bf16`, PyTorch's `model.to(torch.bfloat16)`) is recomputed by the
/// model in f64 with the same weights (`Simulation::apply_to_weights`): each stage's own error is
/// then its rounding in the format, held to the format's.
pub fn own_errors<F: Float>(model: &BertModel<F>, dump: &Dump) -> Result<Vec<(String, Own)>> {
    check_model(model, dump)?;
    let n_layers = model.config.num_hidden_layers;
    let wiring = crate::recompute::wiring_of(dump, n_layers);
    let mask = dump.attention_mask()?;
    let intervened = intervened(dump);
    let format = dump.simulation().format;
    let mut owns = Vec::new();
    for entry in &dump.manifest.stages {
        let Some(stage) = stage::parse(&entry.name) else { continue };
        // The inputs, the parameters and a training step's dropout masks are given, not computed;
        // a gradient is recomputed from the forward values and the gradients after it, as the
        // backward computes it.
        let given = matches!(stage.info().part, Part::Input | Part::Param) || dropout::is_mask(stage.kind);
        if !stage.is_grad() && given {
            continue;
        }
        if let Some(reason) = changed_by_intervention(stage, &intervened, wiring) {
            owns.push((entry.name.clone(), Own::NotIsolated { reason }));
            continue;
        }
        let own = match recompute_from(model, dump, stage, n_layers)? {
            Ok(recomputed) => {
                let value = dump.read(entry)?;
                let tolerance = match format {
                    Some(format) => format_tolerance(format),
                    None => isolation_tolerance(stage, value.dtype()),
                };
                let report = compare_tensors(&entry.name, &value, &recomputed, tolerance, mask.as_ref());
                own_of(&report)
            }
            Err(reason) => Own::NotIsolated { reason },
        };
        owns.push((entry.name.clone(), own));
    }
    Ok(owns)
}

/// The tolerance of a stage's own error: its own (a value's kind's, or a gradient's) for an f32 dump; for an f64 dump, 1e-10
/// absolute and relative, far above f64 rounding (about 1e-16 relative per operation) and far
/// below any real mistake.
pub fn isolation_tolerance(stage: Stage, dtype: DType) -> Tolerance {
    match dtype {
        DType::F64 => Tolerance { atol: 1e-10, rtol: 1e-10 },
        _ => stage_tolerance(stage),
    }
}

/// The tolerance of a stage's own error in a pass in `format`, against the exact result of its
/// inputs: the unit roundoff u absolute and 2u relative. One rounding of a value x is off by at
/// most u·|x|, and the stages that round inside (the scores, the embeddings' sum) twice or three
/// times; the absolute u covers a sum whose first rounding was of larger terms than the result.
pub fn format_tolerance(format: crate::precision::Format) -> Tolerance {
    let u = format.unit_roundoff();
    Tolerance { atol: u, rtol: 2.0 * u }
}

/// The stages the dump's interventions changed, each with the intervention: an ablation changes
/// its layer's `attention.context`, a patch the stage it names.
pub(crate) fn intervened(dump: &Dump) -> Vec<(Stage, String)> {
    dump.manifest
        .interventions
        .iter()
        .filter_map(|record| {
            let stage = match record {
                InterventionRecord::Ablate { ablate, .. } => {
                    let layer = crate::experiments::intervention::Ablation::layer_of(ablate)?;
                    Stage::layer(layer, AttnContext)
                }
                InterventionRecord::Patch { patch, .. } => stage::parse(patch)?,
                InterventionRecord::Set { set, .. } => stage::parse(set.split('[').next()?)?,
            };
            Some((stage, record.to_string()))
        })
        .collect()
}

/// Why `stage` cannot be isolated in a dump with these interventions, if it cannot: its value is
/// the intervention's, not its inputs' function; or, for a gradient, it reads the gradient of a
/// changed stage, which the intervention's backward changed on its way.
pub(crate) fn changed_by_intervention(stage: Stage, intervened: &[(Stage, String)], wiring: Wiring) -> Option<String> {
    let (changed, record) = intervened.iter().find(|(changed, _)| {
        *changed == stage || (stage.is_grad() && inputs(stage, wiring).contains(&changed.grad()))
    })?;
    Some(match *changed == stage {
        true => format!("changed by an intervention ({record})"),
        false => format!("reads the gradient of {changed}, which an intervention changed ({record})"),
    })
}

fn own_of(report: &StageReport) -> Own {
    match &report.stats {
        Some(stats) => {
            Own::Isolated { max_abs: stats.max_abs, passed: report.status == crate::divergence::Status::Pass }
        }
        None => Own::NotIsolated {
            reason: format!(
                "recomputed as {:?}, the dump holds {:?}",
                report.trace_shape.as_deref().unwrap_or_default(),
                report.reference_shape.as_deref().unwrap_or_default()
            ),
        },
    }
}

/// Refuses a model that is not the dump's: its fingerprint and every tensor's digest, when the
/// manifest records them, must be the model's, and the model must give the dump's word
/// embeddings from the dump's ids (a dump older than format 3 records the fingerprint only:
/// [`model_check_note`] says so).
/// Every own error would otherwise be the models' difference, not the dump's. A dump without its
/// ids or its word embeddings (a learner's partial dump) has nothing to check the embeddings
/// with, and is not refused for that.
/// What a dump written before format 3 lets [`check_model`] check: its position table's
/// fingerprint, where it has one, and its word embeddings, not every weight.
pub fn model_check_note(dump: &Dump) -> Option<String> {
    let older = dump.manifest.format != crate::io::dump::manifest::FORMAT;
    let what = match dump.manifest.model_fingerprint {
        Some(_) => "by the fingerprint of its position table and by its word embeddings",
        None => "by its word embeddings",
    };
    (older && dump.manifest.model_tensors.is_empty()).then(|| {
        format!(
            "note: {} is a {} dump, which records no digest of the model's tensors: the model is checked {what}, \
             not by every weight",
            dump.dir.display(),
            dump.manifest.format
        )
    })
}

pub fn check_model<F: Float>(model: &BertModel<F>, dump: &Dump) -> Result<()> {
    let mismatch = |detail: String| BertError::Dump {
        path: dump.dir.clone(),
        problem: format!("the model {} does not match this dump: {detail}", model.source.display()),
    };
    if let Some(theirs) = &dump.manifest.model_fingerprint {
        let ours = model.fingerprint();
        if *theirs != ours {
            return Err(mismatch(format!("the dump was made with fingerprint {theirs}, the model's is {ours}")));
        }
    }
    if !dump.manifest.model_tensors.is_empty() {
        let ours = model.tensor_digests();
        let differ = crate::io::fingerprint::differing(&ours, &dump.manifest.model_tensors);
        if let Some(first) = differ.first() {
            let more = match differ.len() {
                1 => " differs".to_string(),
                n => format!(" and {} more differ", n - 1),
            };
            return Err(mismatch(format!("its {first}{more} from the weights the dump was made with")));
        }
    }
    let stage = Stage::new(EmbWord);
    let (Some(entry), Some(_)) = (dump.entry(&stage.name()), dump.entry(&Stage::new(InputIds).name())) else {
        return Ok(());
    };
    // A pass whose word embeddings or ids were changed by hand holds embeddings the model does
    // not give from those ids: only the fingerprint can tell its model then.
    if intervened(dump).iter().any(|(changed, _)| [stage, Stage::new(InputIds)].contains(changed)) {
        return Ok(());
    }
    match recompute_from(model, dump, stage, model.config.num_hidden_layers)? {
        Ok(recomputed) => {
            let report =
                compare_tensors(&entry.name, &dump.read(entry)?, &recomputed, default_tolerance(EmbWord), None);
            match (&report.stats, report.status == crate::divergence::Status::Pass) {
                (_, true) => Ok(()),
                (Some(stats), false) => Err(mismatch(format!(
                    "its word embeddings of the dump's input.ids differ from the dump's embeddings.word by up to {:.3e}",
                    stats.max_abs
                ))),
                (None, false) => Err(mismatch(format!(
                    "its embeddings.word would be {:?}, the dump's is {:?}",
                    report.trace_shape.unwrap_or_default(),
                    report.reference_shape.unwrap_or_default()
                ))),
            }
        }
        // The ids are there: a model that cannot look them up (an id past its table) is not
        // the dump's.
        Err(reason) => Err(mismatch(format!("its embeddings of the dump's input.ids: {reason}"))),
    }
}
