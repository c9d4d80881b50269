//! Whose error is it? Each stage of a dump recomputed with bert-trace's operations from *that
//! same dump's* values of its inputs (`stage/inputs.rs` names them), and compared with the
//! dump's own value of the stage: the difference is the stage's **own error**, whatever it
//! inherited from the stages before. A dump with one wrong stage in the middle has one stage
//! with a large own error, and after it stages that only inherit it.
//!
//! The recomputation is one line per stage, calling the same modules and operations as the
//! forward pass; the forward pass itself is not an interpreter of the table.

use ndarray::{Array2, ArrayD, Axis, Ix2, Ix3, Ix4};
use serde::Serialize;

use crate::diff::{compare_tensors, default_tolerance, StageReport};
use crate::error::{BertError, Result};
use crate::io::dump::Dump;
use crate::model::BertModel;
use crate::objectives::IGNORE;
use crate::ops;
use crate::pass::Tensor;
use crate::stage::inputs::inputs;
use crate::stage::{self, Part, Stage, StageKind::*};

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
    /// Isolates every stage of both dumps with `model`, which must be both dumps' model.
    /// The two dumps must be of the same input, when both say which (their `input.ids`): a
    /// stage recomputed from another input's values would blame the inputs on the stages.
    pub fn of(model: &BertModel, reference: &Dump, trace: &Dump) -> Result<Isolation> {
        if reference.entry("input.ids").is_some() && trace.entry("input.ids").is_some() {
            crate::io::dump::same_input(reference, trace)?;
        }
        let (reference, trace) = (own_errors(model, reference)?, own_errors(model, trace)?);
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
/// the dump's word embeddings from the dump's ids.
pub fn own_errors(model: &BertModel, dump: &Dump) -> Result<Vec<(String, Own)>> {
    check_model(model, dump)?;
    let n_layers = model.config.num_hidden_layers;
    let mask = dump.attention_mask()?;
    let mut owns = Vec::new();
    for entry in &dump.manifest.stages {
        let Some(stage) = stage::parse(&entry.name) else { continue };
        // The inputs are given, not computed; gradients and parameters are not recomputed from
        // a dump's forward stages (a gradient reads the whole backward after it).
        if stage.info().part == Part::Input || stage.info().part == Part::Param || stage.is_grad() {
            continue;
        }
        let own = match recompute_from(model, dump, stage, n_layers)? {
            Ok(recomputed) => {
                let value = dump.read(entry)?;
                let report =
                    compare_tensors(&entry.name, &value, &recomputed, default_tolerance(stage.kind), mask.as_ref());
                own_of(&report)
            }
            Err(reason) => Own::NotIsolated { reason },
        };
        owns.push((entry.name.clone(), own));
    }
    Ok(owns)
}

fn own_of(report: &StageReport) -> Own {
    match &report.stats {
        Some(stats) => Own::Isolated { max_abs: stats.max_abs, passed: report.status == crate::diff::Status::Pass },
        None => Own::NotIsolated {
            reason: format!(
                "recomputed as {:?}, the dump holds {:?}",
                report.trace_shape.as_deref().unwrap_or_default(),
                report.reference_shape.as_deref().unwrap_or_default()
            ),
        },
    }
}

/// Refuses a model that does not give the dump's embeddings from the dump's ids: every own
/// error would then be the model's difference, not the dump's. A dump without its ids or its
/// word embeddings cannot be checked, and is not refused.
fn check_model(model: &BertModel, dump: &Dump) -> Result<()> {
    let stage = Stage::new(EmbWord);
    let Some(entry) = dump.entry(&stage.name()) else { return Ok(()) };
    let mismatch = |detail: String| BertError::Dump {
        path: dump.dir.clone(),
        problem: format!("the model {} does not match this dump: {detail}", model.source.display()),
    };
    match recompute_from(model, dump, stage, model.config.num_hidden_layers)? {
        Ok(recomputed) => {
            let report =
                compare_tensors(&entry.name, &dump.read(entry)?, &recomputed, default_tolerance(EmbWord), None);
            match (&report.stats, report.status == crate::diff::Status::Pass) {
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
        // Without its ids (a learner's partial dump) there is nothing to check the model with;
        // each stage is then isolated where its own inputs are there.
        Err(_) => Ok(()),
    }
}

/// `stage` recomputed from the dump's values of its inputs: Ok(Err(reason)) when it cannot be
/// (an input absent, or not of a shape the operation takes).
fn recompute_from(
    model: &BertModel,
    dump: &Dump,
    stage: Stage,
    n_layers: usize,
) -> Result<std::result::Result<Tensor, String>> {
    let needed = inputs(stage, n_layers);
    let mut values = Vec::with_capacity(needed.len());
    for input in &needed {
        match dump.entry(&input.name()) {
            Some(entry) => values.push(Some(dump.read(entry)?)),
            None => values.push(None),
        }
    }
    // `loss` sums whichever losses the dump has; every other stage needs all its inputs.
    let absent: Vec<String> = needed.iter().zip(&values).filter(|(_, v)| v.is_none()).map(|(s, _)| s.name()).collect();
    if stage.kind == Loss && absent.len() < needed.len() {
        return Ok(ops::with_kernels(model.kernels, || recompute(model, stage, &values)));
    }
    if !absent.is_empty() {
        return Ok(Err(format!("inputs absent ({})", absent.join(", "))));
    }
    Ok(ops::with_kernels(model.kernels, || recompute(model, stage, &values)))
}

fn f32_of<D: ndarray::Dimension>(
    value: &Option<Tensor>,
    what: &str,
) -> std::result::Result<ndarray::Array<f32, D>, String> {
    let tensor = value.as_ref().ok_or_else(|| format!("{what} absent"))?;
    let shape = tensor.shape().to_vec();
    tensor
        .to_f32()
        .ok_or_else(|| format!("{what} holds integers"))?
        .into_dimensionality::<D>()
        .map_err(|_| format!("{what} is {shape:?}"))
}

fn ids_of(value: &Option<Tensor>, what: &str) -> std::result::Result<Array2<i64>, String> {
    let tensor = value.as_ref().ok_or_else(|| format!("{what} absent"))?;
    let shape = tensor.shape().to_vec();
    tensor
        .to_f64()
        .mapv(|v| v as i64)
        .into_dimensionality::<Ix2>()
        .map_err(|_| format!("{what} is {shape:?}, not [B,T]"))
}

/// One stage from its inputs (in the order of `stage/inputs.rs`), as the forward pass computes
/// it, one line per stage.
fn recompute(model: &BertModel, stage: Stage, x: &[Option<Tensor>]) -> std::result::Result<Tensor, String> {
    let layer = || model.layers.get(stage.layer.unwrap_or(0)).ok_or("a layer the model does not have".to_string());
    let head = |present: bool, what: &str| if present { Ok(()) } else { Err(format!("the model has no {what}")) };
    let table_rows = |table: ndarray::ArrayView2<'_, f32>, ids: &Array2<i64>| {
        if ids.iter().all(|&id| id >= 0 && (id as usize) < table.nrows()) {
            Ok(ops::embedding(table, ids.view()))
        } else {
            Err(format!("an id outside the table of {} rows", table.nrows()))
        }
    };
    let out: ArrayD<f32> = match stage.kind {
        Param(_) => return Err("a parameter is read, not computed by the forward pass".into()),
        EmbWord => table_rows(model.embeddings.word_embeddings.view2(), &ids_of(&x[0], "input.ids")?)?.into_dyn(),
        EmbPosition => {
            let ids = ids_of(&x[0], "input.ids")?;
            let positions = Array2::from_shape_fn(ids.dim(), |(_, i)| i as i64);
            table_rows(model.embeddings.position_embeddings.view2(), &positions)?.into_dyn()
        }
        EmbTokenType => {
            table_rows(model.embeddings.token_type_embeddings.view2(), &ids_of(&x[0], "input.token_type_ids")?)?
                .into_dyn()
        }
        EmbSum => {
            let (w, t, p) =
                (f32_of::<Ix3>(&x[0], "word")?, f32_of::<Ix3>(&x[1], "token_type")?, f32_of::<Ix3>(&x[2], "position")?);
            same(&[w.shape(), t.shape(), p.shape()])?;
            (w + &t + &p).into_dyn()
        }
        EmbLayerNorm => model.embeddings.layer_norm.forward(hidden(&x[0], "sum", model)?).into_dyn(),
        AttnQuery | AttnKey | AttnValue => {
            let attention = &layer()?.attention.self_attention;
            let linear = match stage.kind {
                AttnQuery => &attention.query,
                AttnKey => &attention.key,
                _ => &attention.value,
            };
            let input = f32_of::<Ix3>(&x[0], "the layer's input")?;
            width(input.shape(), model.config.hidden_size)?;
            ops::split_heads(linear.forward(&input), attention.n_heads).into_dyn()
        }
        AttnScores => {
            let (q, k) = (f32_of::<Ix4>(&x[0], "query")?, f32_of::<Ix4>(&x[1], "key")?);
            same(&[q.shape(), k.shape()])?;
            let hs = q.dim().3;
            let scale = (hs as f64).powf(-0.5) as f32;
            let mut scores = ops::scaled_matmul(q.view(), ops::transpose(k.view()), scale);
            let mask = ids_of(&x[2], "input.attention_mask")?;
            let (b, _, t, _) = q.dim();
            if mask.dim() != (b, t) {
                return Err(format!("input.attention_mask is {:?}, the scores [{b}, _, {t}, {t}]", mask.shape()));
            }
            if mask.iter().any(|&m| m == 0) {
                let additive = mask.mapv(|m| if m == 0 { f32::MIN } else { 0.0 }).into_shape_with_order((b, 1, 1, t));
                scores += &additive.map_err(|e| e.to_string())?;
            }
            scores.into_dyn()
        }
        AttnProbs => ops::softmax_rows(f32_of::<Ix4>(&x[0], "scores")?).into_dyn(),
        AttnContext => {
            let (p, v) = (f32_of::<Ix4>(&x[0], "probs")?, f32_of::<Ix4>(&x[1], "value")?);
            if p.dim().3 != v.dim().2 || p.dim().0 != v.dim().0 || p.dim().1 != v.dim().1 {
                return Err(format!("probs {:?} and value {:?} do not multiply", p.shape(), v.shape()));
            }
            ops::merge_heads(ops::matmul(p.view(), v.view())).into_dyn()
        }
        AttnOutput => {
            let context = f32_of::<Ix3>(&x[0], "context")?;
            width(context.shape(), model.config.hidden_size)?;
            layer()?.attention.output.dense.forward(&context).into_dyn()
        }
        AttnResidual | FfnResidual => {
            let (output, input) = (f32_of::<Ix3>(&x[0], "output")?, f32_of::<Ix3>(&x[1], "the block's input")?);
            same(&[output.shape(), input.shape()])?;
            (output + &input).into_dyn()
        }
        AttnLayerNorm => layer()?.attention.output.layer_norm.forward(hidden(&x[0], "residual", model)?).into_dyn(),
        FfnIntermediate => {
            let input = f32_of::<Ix3>(&x[0], "attention.layernorm")?;
            width(input.shape(), model.config.hidden_size)?;
            layer()?.feed_forward.intermediate.forward(&input).into_dyn()
        }
        FfnActivation => layer()?.feed_forward.activation.forward(f32_of::<Ix3>(&x[0], "intermediate")?).into_dyn(),
        FfnOutput => {
            let input = f32_of::<Ix3>(&x[0], "activation")?;
            width(input.shape(), model.config.intermediate_size)?;
            layer()?.feed_forward.output.forward(&input).into_dyn()
        }
        FfnLayerNorm => layer()?.feed_forward.layer_norm.forward(hidden(&x[0], "residual", model)?).into_dyn(),
        PoolerDense => {
            let pooler = model.pooler.as_ref().ok_or("the model has no pooler")?;
            let hidden = f32_of::<Ix3>(&x[0], "the last hidden state")?;
            width(hidden.shape(), model.config.hidden_size)?;
            if hidden.dim().1 == 0 {
                return Err("no tokens".into());
            }
            pooler.dense.forward(&hidden.index_axis(Axis(1), 0)).into_dyn()
        }
        PoolerOutput => f32_of::<ndarray::IxDyn>(&x[0], "pooler.dense")?.mapv_into(f32::tanh),
        LensEmbeddings | LensLayer => {
            // The whole MLM head, on a layer's output instead of the last one.
            let mlm = model.mlm.as_ref().ok_or("the model has no MLM head")?;
            let input = f32_of::<Ix3>(&x[0], "its input")?;
            width(input.shape(), model.config.hidden_size)?;
            let normed = mlm.layer_norm.forward(mlm.activation.forward(mlm.transform.forward(&input)));
            mlm.decoder.forward(&normed).into_dyn()
        }
        MlmTransform | MlmActivation | MlmLayerNorm | MlmLogits => {
            let mlm = model.mlm.as_ref().ok_or("the model has no MLM head")?;
            let input = f32_of::<Ix3>(&x[0], "its input")?;
            width(input.shape(), model.config.hidden_size)?;
            match stage.kind {
                MlmTransform => mlm.transform.forward(&input).into_dyn(),
                MlmActivation => mlm.activation.forward(input).into_dyn(),
                MlmLayerNorm => mlm.layer_norm.forward(input).into_dyn(),
                _ => mlm.decoder.forward(&input).into_dyn(),
            }
        }
        MlmLosses | NspLosses => {
            let logits = f32_of::<ndarray::IxDyn>(&x[0], "logits")?;
            let labels = x[1].as_ref().ok_or("labels absent")?.to_f64().mapv(|v| v as i64);
            if logits.ndim() != labels.ndim() + 1 || logits.shape()[..labels.ndim()] != labels.shape()[..] {
                return Err(format!("logits {:?} and labels {:?} do not go together", logits.shape(), labels.shape()));
            }
            let classes = *logits.shape().last().unwrap_or(&0);
            if labels.iter().any(|&l| l != IGNORE && (l < 0 || l as usize >= classes)) {
                return Err(format!("a label outside the {classes} classes"));
            }
            let rows = logits.len() / classes.max(1);
            let flat = logits
                .as_standard_layout()
                .into_owned()
                .into_shape_with_order((rows, classes))
                .map_err(|e| e.to_string())?;
            let flat_labels =
                labels.as_standard_layout().into_owned().into_shape_with_order(rows).map_err(|e| e.to_string())?;
            let losses = ops::cross_entropy(flat.view(), flat_labels.view(), IGNORE).mapv(|l| l as f32);
            losses.into_shape_with_order(labels.shape()).map_err(|e| e.to_string())?
        }
        MlmLoss | NspLoss => {
            let losses = f32_of::<ndarray::IxDyn>(&x[0], "losses")?;
            let labels = x[1].as_ref().ok_or("labels absent")?.to_f64();
            let labelled = labels.iter().filter(|&&l| l as i64 != IGNORE).count();
            let sum: f64 = losses.iter().map(|&v| v as f64).sum();
            ndarray::arr0((sum / labelled as f64) as f32).into_dyn()
        }
        Loss => {
            let part =
                |value: &Option<Tensor>| value.as_ref().and_then(|t| t.to_f32()).and_then(|a| a.iter().next().copied());
            ndarray::arr0(part(&x[0]).unwrap_or(0.0) + part(&x[1]).unwrap_or(0.0)).into_dyn()
        }
        NspLogits | ClassifierLogits => {
            let pooled = f32_of::<Ix2>(&x[0], "pooler.output")?;
            width(pooled.shape(), model.config.hidden_size)?;
            match stage.kind {
                NspLogits => {
                    head(model.nsp.is_some(), "NSP head")?;
                    model.nsp.as_ref().map(|h| h.dense.forward(&pooled)).unwrap_or_default().into_dyn()
                }
                _ => {
                    head(model.classifier.is_some(), "classifier")?;
                    model.classifier.as_ref().map(|h| h.dense.forward(&pooled)).unwrap_or_default().into_dyn()
                }
            }
        }
        SentencePooled => {
            let hidden = f32_of::<Ix3>(&x[0], "the last hidden state")?;
            let mask = ids_of(&x[1], "input.attention_mask")?.mapv(|m| if m != 0 { 1.0f32 } else { 0.0 });
            if mask.dim() != (hidden.dim().0, hidden.dim().1) {
                return Err(format!(
                    "input.attention_mask {:?} and the hidden state {:?}",
                    mask.shape(),
                    hidden.shape()
                ));
            }
            let mask = mask.insert_axis(Axis(2));
            let sums = (&hidden * &mask).sum_axis(Axis(1));
            let counts = mask.sum_axis(Axis(1)).mapv(|n| n.max(1e-9));
            (sums / &counts).into_dyn()
        }
        InputOriginalIds | InputIds | InputTokenTypeIds | InputAttentionMask | InputLabels | InputNextSentenceLabel => {
            return Err("an input, which nothing computes".into())
        }
    };
    Ok(Tensor::F32(out))
}

/// A `[B,T,H]` input of the model's hidden size.
fn hidden(value: &Option<Tensor>, what: &str, model: &BertModel) -> std::result::Result<ndarray::Array3<f32>, String> {
    let input = f32_of::<Ix3>(value, what)?;
    width(input.shape(), model.config.hidden_size)?;
    Ok(input)
}

/// Refuses operands of different shapes (which ndarray would broadcast or refuse with a panic).
fn same(shapes: &[&[usize]]) -> std::result::Result<(), String> {
    if shapes.windows(2).all(|pair| pair[0] == pair[1]) {
        Ok(())
    } else {
        Err(format!("its inputs' shapes differ: {shapes:?}"))
    }
}

/// Refuses an input whose last axis is not the `width` the model's weights take.
fn width(shape: &[usize], width: usize) -> std::result::Result<(), String> {
    match shape.last() {
        Some(&w) if w == width => Ok(()),
        _ => Err(format!("its input is {shape:?}, the model's weights take a last axis of {width}")),
    }
}
