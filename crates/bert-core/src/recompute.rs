//! One stage recomputed from a dump's values of its inputs (`stage/inputs.rs` names them), by
//! the model's own function for that stage, the one the forward pass calls: what isolation
//! (`divergence/isolate.rs`) and `explain` share. This file only reads the operands and checks
//! their shapes and ranges; every formula is in `model/`.

use ndarray::{Array, Array2, Array3, ArrayD, Axis, Ix1, Ix2, Ix3, Ix4, IxDyn};

use crate::error::Result;
use crate::io::dump::Dump;
use crate::model::gradients::Grads;
use crate::model::{
    additive_mask, attention, backward, dropout, embeddings, losses, pooler, sentence_pooling, BertModel,
};
use crate::objectives::IGNORE;
use crate::ops::{self, Float};
use crate::pass::Tensor;
use crate::stage::inputs::{alternatives_from, inputs, through_dropout, Wiring};
use crate::stage::{GradOp, Op, Stage, StageKind::*};

/// `stage` recomputed from the dump's values of its inputs: Ok(Err(reason)) when it cannot be
/// (an input absent, or not of a shape the operation takes).
pub fn recompute_from<F: Float>(
    model: &BertModel<F>,
    dump: &Dump,
    stage: Stage,
    n_layers: usize,
) -> Result<std::result::Result<Tensor, String>> {
    let wiring = wiring_of(dump, n_layers);
    let needed = inputs(stage, wiring);
    let mut values = Vec::with_capacity(needed.len());
    for input in &needed {
        match dump.entry(&input.name()) {
            Some(entry) => values.push(Some(dump.read(entry)?)),
            None => values.push(None),
        }
    }
    // Every input is needed, but of alternatives (the losses `loss` sums, the heads the last
    // hidden state's gradient adds) one is enough.
    let absent = |range: std::ops::Range<usize>| -> Vec<String> {
        range.filter(|&i| values[i].is_none()).map(|i| needed[i].name()).collect()
    };
    let split = alternatives_from(stage, wiring).unwrap_or(needed.len()).min(needed.len());
    let (required, alternatives) = (absent(0..split), absent(split..needed.len()));
    if !required.is_empty() || (split < needed.len() && alternatives.len() == needed.len() - split) {
        let mut missing = required;
        missing.extend(alternatives);
        return Ok(Err(format!("inputs absent ({})", missing.join(", "))));
    }
    Ok(ops::with_kernels(model.kernels, || match stage.is_grad() {
        true => recompute_grad(model, stage, wiring, &values),
        false => recompute(model, stage, &values),
    }))
}

/// The pass `dump` holds, for what its stages read: a training step that dropped out has the
/// embeddings' dropout mask.
pub fn wiring_of(dump: &Dump, n_layers: usize) -> Wiring {
    Wiring { n_layers, dropout: dump.entry(&Stage::new(EmbDropoutMask).name()).is_some() }
}

/// A gradient `grad.<stage>` from its inputs (in the order of `stage/inputs.rs`: the forward
/// values its rule reads, then the gradients after it), by the backward functions of `model/`
/// that the backward pass calls, chosen by the row's gradient rule (`GradOp`) and run on the
/// module of the stage that reads this one; parameters' gradients found on the way are thrown
/// away.
fn recompute_grad<F: Float>(
    model: &BertModel<F>,
    stage: Stage,
    wiring: Wiring,
    x: &[Option<Tensor>],
) -> std::result::Result<Tensor, String> {
    let mut scratch = Grads::new();
    let h = model.config.hidden_size;
    let scalar = |value: &Option<Tensor>, what: &str| -> std::result::Result<F, String> {
        let value = float_of::<F, IxDyn>(value, what)?;
        value.iter().next().copied().filter(|_| value.len() == 1).ok_or(format!("{what} is not one number"))
    };
    // The stage whose module the rule runs backward: what reads this one, the last gradient
    // its row lists (`grad.ffn.output` for `grad.ffn.activation`), as a value.
    let reader = || {
        let read = inputs(stage, wiring).last().copied().ok_or("nothing reads it")?;
        Ok::<Stage, String>(Stage { of: crate::stage::Of::Value, ..read })
    };
    let absent = |of: Stage| match of.layer {
        Some(i) if i >= model.layers.len() => "a layer the model does not have".to_string(),
        _ => format!("the model has no {}", of.info().part.weights()),
    };
    // In a pass that dropped out, a stage a dropout stage drops: d stage = d dropout ⊙ mask.
    if through_dropout(stage, wiring) {
        let d_dropped = float_of::<F, IxDyn>(&x[0], "the dropout stage's gradient")?;
        let mask = float_of::<F, IxDyn>(&x[1], "the dropout mask")?;
        same(&[d_dropped.shape(), mask.shape()])?;
        return Ok(Tensor::of_float(dropout::dropout_backward(d_dropped, &mask)));
    }
    let out: ArrayD<F> = match stage.info().grad_op {
        GradOp::None => return Err("this stage has no gradient".into()),
        GradOp::ParamSum => return Err("a parameter's gradient sums over every token: not recomputed alone".into()),
        GradOp::One => ndarray::arr0(F::one()).into_dyn(),
        GradOp::LossTerm => ndarray::arr0(scalar(&x[0], "grad.loss")?).into_dyn(),
        // The gradient of a sum's term is the sum's.
        GradOp::SumTerm => float_of::<F, IxDyn>(&x[0], "the sum's gradient")?,
        GradOp::MeanInput => {
            let labels = ints_of::<IxDyn>(&x[0], "labels")?;
            losses::mean_backward::<F, IxDyn>(&labels) * scalar(&x[1], "the loss's gradient")?
        }
        GradOp::TokenCrossEntropy => {
            let (logits, labels) = (float_of::<F, Ix3>(&x[0], "mlm.logits")?, ints_of::<Ix2>(&x[1], "input.labels")?);
            labels_fit(&labels.view().into_dyn(), &logits.view().into_dyn())?;
            losses::mlm_loss_backward(logits.view(), &labels).into_dyn()
        }
        GradOp::SequenceCrossEntropy => {
            let (logits, labels) = (float_of::<F, Ix2>(&x[0], "logits")?, ints_of::<Ix1>(&x[1], "labels")?);
            labels_fit(&labels.view().into_dyn(), &logits.view().into_dyn())?;
            losses::sequence_loss_backward(logits.view(), &labels).into_dyn()
        }
        GradOp::DenseInput => {
            let reader = reader()?;
            let dense = model.linear_of(reader).ok_or_else(|| absent(reader))?;
            let value = float_of::<F, IxDyn>(&x[0], "its value")?;
            let d_out = float_of::<F, IxDyn>(&x[1], "the gradient after it")?;
            width(value.shape(), dense.weight.shape()[1])?;
            let rows = |shape: &[usize]| shape[..shape.len() - 1].to_vec();
            if rows(value.shape()) != rows(d_out.shape()) || d_out.shape().last() != Some(&dense.out_features()) {
                return Err(format!("its value {:?} and its gradient {:?}", value.shape(), d_out.shape()));
            }
            dense.backward(&value, &d_out, &mut scratch)
        }
        GradOp::DecoderInput => {
            let mlm = model.mlm.as_ref().ok_or("the model has no MLM head")?;
            let normed = wide::<F>(&x[0], "mlm.layernorm", h)?;
            let d_logits = float_of::<F, Ix3>(&x[1], "grad.mlm.logits")?;
            let (b, t, _) = normed.dim();
            if d_logits.dim() != (b, t, mlm.decoder.out_features()) {
                return Err(format!("grad.mlm.logits is {:?}, mlm.layernorm {:?}", d_logits.shape(), normed.shape()));
            }
            mlm.decoder_backward(normed.view(), &d_logits, &mut scratch).into_dyn()
        }
        GradOp::LayerNormInput => {
            let reader = reader()?;
            let layer_norm = model.layer_norm_of(reader).ok_or_else(|| absent(reader))?;
            let (value, d_out) = (wide::<F>(&x[0], "its value", h)?, wide::<F>(&x[1], "the gradient after it", h)?);
            same(&[value.shape(), d_out.shape()])?;
            layer_norm.backward(value.view(), d_out.view(), &mut scratch).into_dyn()
        }
        GradOp::ActivationInput => {
            let (value, d_out) =
                (float_of::<F, IxDyn>(&x[0], "its value")?, float_of::<F, IxDyn>(&x[1], "the gradient after it")?);
            same(&[value.shape(), d_out.shape()])?;
            model.config.activation().backward(value.view(), d_out.view())
        }
        GradOp::TanhInput => {
            let (pooled, d_pooled) =
                (float_of::<F, Ix2>(&x[0], "pooler.output")?, float_of::<F, Ix2>(&x[1], "grad.pooler.output")?);
            same(&[pooled.shape(), d_pooled.shape()])?;
            pooler::output_backward(pooled.view(), d_pooled.view()).into_dyn()
        }
        GradOp::HeadsOnPooler => {
            // The shares of the heads on the pooler whose gradients the dump has, summed.
            let pooled = wide_of::<F, Ix2>(&x[0], "pooler.output", h)?;
            let mut d_pooled = Array2::<F>::zeros(pooled.dim());
            let heads = [
                ("grad.nsp.logits", model.nsp.as_ref().map(|nsp| &nsp.dense), "the NSP head"),
                ("grad.classifier.logits", model.classifier.as_ref().map(|c| &c.dense), "a classifier"),
            ];
            for ((name, dense, head), d_logits) in heads.into_iter().zip(&x[1..3]) {
                if d_logits.is_none() {
                    continue;
                }
                let dense = dense.ok_or(format!("the model has no {head}"))?;
                let d_logits = float_of::<F, Ix2>(d_logits, name)?;
                if d_logits.dim() != (pooled.dim().0, dense.out_features()) {
                    return Err(format!("{name} is {:?}", d_logits.shape()));
                }
                let mut share = dense.backward(&pooled, &d_logits, &mut scratch);
                // A pass that dropped out dropped the classifier's input: its share through the mask.
                if let (Some(mask), "grad.classifier.logits") = (x.get(3), name) {
                    let mask = float_of::<F, Ix2>(mask, "classifier.dropout_mask")?;
                    same(&[mask.shape(), share.shape()])?;
                    share = dropout::dropout_backward(share, &mask);
                }
                d_pooled += &share;
            }
            d_pooled.into_dyn()
        }
        GradOp::LayerOutput if alternatives_from(stage, wiring).is_some() => {
            // The last hidden state: the heads' shares.
            let hidden = wide::<F>(&x[0], "the last hidden state", h)?;
            let from_mlm = match &x[1] {
                Some(_) => {
                    let mlm = model.mlm.as_ref().ok_or("the model has no MLM head")?;
                    let d_transform = wide::<F>(&x[1], "grad.mlm.transform", h)?;
                    same(&[hidden.shape(), d_transform.shape()])?;
                    Some(mlm.transform.backward(&hidden, &d_transform, &mut scratch))
                }
                None => None,
            };
            let from_cls = match &x[2] {
                Some(_) => {
                    let pooler = model.pooler.as_ref().ok_or("the model has no pooler")?;
                    let d_dense = wide_of::<F, Ix2>(&x[2], "grad.pooler.dense", h)?;
                    if d_dense.dim().0 != hidden.dim().0 || hidden.dim().1 == 0 {
                        return Err(format!("grad.pooler.dense is {:?}", d_dense.shape()));
                    }
                    Some(pooler.dense.backward(&hidden.index_axis(Axis(1), 0), &d_dense, &mut scratch))
                }
                None => None,
            };
            backward::hidden_backward(hidden.raw_dim(), from_mlm, from_cls).into_dyn()
        }
        GradOp::LayerOutput => {
            // A layer's input, from the next layer's attention block: the layer of the residual
            // gradient it reads.
            let next = inputs(stage, wiring).get(1).and_then(|read| read.layer).unwrap_or(0);
            let attention = &model.layers.get(next).ok_or("a layer the model does not have")?.attention;
            let x_in = wide::<F>(&x[0], "the layer's input", h)?;
            let d_residual = wide::<F>(&x[1], "grad.attention.residual", h)?;
            let heads = |i: usize, what: &str| float_of::<F, Ix4>(&x[i], what);
            let d_projections =
                [heads(2, "grad.attention.query")?, heads(3, "grad.attention.key")?, heads(4, "grad.attention.value")?];
            same(&[x_in.shape(), d_residual.shape()])?;
            let merged = x_in.dim().0 * x_in.dim().1 * h;
            if d_projections.iter().any(|d| d.len() != merged) {
                return Err("the projections' gradients are not of the layer's input's size".into());
            }
            attention.self_attention.input_backward(&x_in, d_residual, d_projections, &mut scratch).into_dyn()
        }
        GradOp::FfnInput => {
            let feed_forward = &model.layers.get(stage.layer.unwrap_or(0)).ok_or_else(|| absent(stage))?.feed_forward;
            let value = wide::<F>(&x[0], "attention.layernorm", h)?;
            let (d_residual, d_intermediate) =
                (wide::<F>(&x[1], "grad.ffn.residual", h)?, float_of::<F, Ix3>(&x[2], "grad.ffn.intermediate")?);
            same(&[value.shape(), d_residual.shape()])?;
            width(d_intermediate.shape(), feed_forward.intermediate.out_features())?;
            feed_forward.input_backward(&value, &d_intermediate, &d_residual, &mut scratch).into_dyn()
        }
        GradOp::ContextProbs | GradOp::ContextValue => {
            let (probs, v) = (float_of::<F, Ix4>(&x[0], "probs")?, float_of::<F, Ix4>(&x[1], "value")?);
            let d_context = wide::<F>(&x[2], "grad.attention.context", h)?;
            if probs.dim().3 != v.dim().2 || d_context.dim().1 != probs.dim().2 || v.dim().1 * v.dim().3 != h {
                return Err(format!(
                    "probs {:?}, value {:?} and grad.attention.context {:?}",
                    probs.shape(),
                    v.shape(),
                    d_context.shape()
                ));
            }
            let (d_probs, d_v) = attention::context_backward(probs.view(), v.view(), d_context);
            match stage.info().grad_op {
                GradOp::ContextProbs => d_probs.into_dyn(),
                _ => d_v.into_dyn(),
            }
        }
        GradOp::SoftmaxInput => {
            let (probs, d_probs) =
                (float_of::<F, Ix4>(&x[0], "probs")?, float_of::<F, Ix4>(&x[1], "grad.attention.probs")?);
            same(&[probs.shape(), d_probs.shape()])?;
            attention::probs_backward(probs.view(), d_probs.view()).into_dyn()
        }
        GradOp::QueryFromScores | GradOp::KeyFromScores => {
            let (q, k) = (float_of::<F, Ix4>(&x[0], "query")?, float_of::<F, Ix4>(&x[1], "key")?);
            let d_scores = float_of::<F, Ix4>(&x[2], "grad.attention.scores")?;
            same(&[q.shape(), k.shape()])?;
            let (b, nh, t, _) = q.dim();
            if d_scores.dim() != (b, nh, t, t) {
                return Err(format!("grad.attention.scores is {:?}, the query {:?}", d_scores.shape(), q.shape()));
            }
            let (d_q, d_k) = attention::scores_backward(q.view(), k.view(), d_scores.view());
            match stage.info().grad_op {
                GradOp::QueryFromScores => d_q.into_dyn(),
                _ => d_k.into_dyn(),
            }
        }
    };
    Ok(Tensor::of_float(out))
}

/// Refuses labels that are not one per row of the logits, or outside their classes.
fn labels_fit<F: Float>(
    labels: &ndarray::ArrayViewD<'_, i64>,
    logits: &ndarray::ArrayViewD<'_, F>,
) -> std::result::Result<(), String> {
    if logits.ndim() != labels.ndim() + 1 || logits.shape()[..labels.ndim()] != labels.shape()[..] {
        return Err(format!("logits {:?} and labels {:?} do not go together", logits.shape(), labels.shape()));
    }
    let classes = *logits.shape().last().unwrap_or(&0);
    if labels.iter().any(|&l| l != IGNORE && (l < 0 || l as usize >= classes)) {
        return Err(format!("a label outside the {classes} classes"));
    }
    Ok(())
}

/// Refuses an input whose last axis is not `width`.
fn width(shape: &[usize], width: usize) -> std::result::Result<(), String> {
    match shape.last() {
        Some(&w) if w == width => Ok(()),
        _ => Err(format!("its input is {shape:?}, the model's weights take a last axis of {width}")),
    }
}

/// A float input as an array of the model's float type and of dimension `D`.
fn float_of<F: Float, D: ndarray::Dimension>(
    value: &Option<Tensor>,
    what: &str,
) -> std::result::Result<ndarray::Array<F, D>, String> {
    let tensor = value.as_ref().ok_or_else(|| format!("{what} absent"))?;
    let shape = tensor.shape().to_vec();
    tensor
        .to_float::<F>()
        .ok_or_else(|| format!("{what} holds integers"))?
        .into_dimensionality::<D>()
        .map_err(|_| format!("{what} is {shape:?}"))
}

/// An integer input (ids, labels, a mask) of dimension `D`.
fn ints_of<D: ndarray::Dimension>(value: &Option<Tensor>, what: &str) -> std::result::Result<Array<i64, D>, String> {
    let tensor = value.as_ref().ok_or_else(|| format!("{what} absent"))?;
    let shape = tensor.shape().to_vec();
    tensor
        .to_f64()
        .mapv(|v| v as i64)
        .into_dimensionality::<D>()
        .map_err(|_| format!("{what} is {shape:?}, not of {} axes", D::NDIM.unwrap_or(0)))
}

/// One stage from its inputs (in the order of `stage/inputs.rs`), by the function of `model/`
/// that the forward pass calls for it, chosen by the stage's operation (the table's `op`
/// column), on the module its row names; this file only checks the operands' shapes and ranges.
fn recompute<F: Float>(
    model: &BertModel<F>,
    stage: Stage,
    x: &[Option<Tensor>],
) -> std::result::Result<Tensor, String> {
    let h = model.config.hidden_size;
    // The module of a layer the model has, or of a head it has.
    let absent = || match stage.layer {
        Some(i) if i >= model.layers.len() => "a layer the model does not have".to_string(),
        _ => format!("the model has no {}", stage.info().part.weights()),
    };
    let within = |table: &[usize], ids: &Array2<i64>| {
        if ids.iter().all(|&id| id >= 0 && (id as usize) < table[0]) {
            Ok(())
        } else {
            Err(format!("an id outside the table of {} rows", table[0]))
        }
    };
    let embeddings = &model.embeddings;
    let out: ArrayD<F> = match stage.info().op {
        Op::Given => return Err("an input, which nothing computes".into()),
        Op::Drawn => return Err("a dropout mask, drawn from the step's seed, not computed from other stages".into()),
        Op::Param => return Err("a parameter is read, not computed by the forward pass".into()),
        Op::WordLookup => {
            let ids = ints_of::<Ix2>(&x[0], "input.ids")?;
            within(embeddings.word_embeddings.shape(), &ids)?;
            embeddings.word(ids.view()).into_dyn()
        }
        Op::PositionLookup => {
            let ids = ints_of::<Ix2>(&x[0], "input.ids")?;
            if ids.dim().1 > embeddings.position_embeddings.shape()[0] {
                return Err(format!("more positions than the table's {}", embeddings.position_embeddings.shape()[0]));
            }
            embeddings.position(ids.dim()).into_dyn()
        }
        Op::TokenTypeLookup => {
            let ids = ints_of::<Ix2>(&x[0], "input.token_type_ids")?;
            within(embeddings.token_type_embeddings.shape(), &ids)?;
            embeddings.token_type(ids.view()).into_dyn()
        }
        Op::EmbeddingSum => {
            let (w, t, p) = (
                float_of::<F, Ix3>(&x[0], "word")?,
                float_of::<F, Ix3>(&x[1], "token_type")?,
                float_of::<F, Ix3>(&x[2], "position")?,
            );
            same(&[w.shape(), t.shape(), p.shape()])?;
            embeddings::sum(w, &t, &p).into_dyn()
        }
        Op::LayerNorm => {
            let layer_norm = model.layer_norm_of(stage).ok_or_else(absent)?;
            layer_norm.forward(wide_of::<F, IxDyn>(&x[0], "its input", h)?)
        }
        Op::Dense => {
            let dense = model.linear_of(stage).ok_or_else(absent)?;
            dense.forward(&wide_of::<F, IxDyn>(&x[0], "its input", dense.weight.shape()[1])?)
        }
        Op::HeadProjection => {
            let layer = model.layers.get(stage.layer.unwrap_or(0)).ok_or_else(absent)?;
            let input = wide::<F>(&x[0], "the layer's input", h)?;
            layer.attention.self_attention.project(stage.kind, &input).into_dyn()
        }
        Op::Scores => {
            let (q, k) = (float_of::<F, Ix4>(&x[0], "query")?, float_of::<F, Ix4>(&x[1], "key")?);
            same(&[q.shape(), k.shape()])?;
            let mask = ints_of::<Ix2>(&x[2], "input.attention_mask")?;
            let (b, _, t, _) = q.dim();
            if mask.dim() != (b, t) {
                return Err(format!("input.attention_mask is {:?}, the scores [{b}, _, {t}, {t}]", mask.shape()));
            }
            attention::scores(q.view(), k.view(), additive_mask::<F>(&mask).as_ref()).into_dyn()
        }
        Op::Softmax => attention::probs(float_of::<F, Ix4>(&x[0], "scores")?).into_dyn(),
        Op::Context => {
            let (p, v) = (float_of::<F, Ix4>(&x[0], "probs")?, float_of::<F, Ix4>(&x[1], "value")?);
            if p.dim().3 != v.dim().2 || p.dim().0 != v.dim().0 || p.dim().1 != v.dim().1 {
                return Err(format!("probs {:?} and value {:?} do not multiply", p.shape(), v.shape()));
            }
            attention::context(p.view(), v.view()).into_dyn()
        }
        Op::Residual => {
            let (output, input) =
                (float_of::<F, Ix3>(&x[0], "output")?, float_of::<F, Ix3>(&x[1], "the block's input")?);
            same(&[output.shape(), input.shape()])?;
            attention::residual(output, &input).into_dyn()
        }
        Op::Activation => model.config.activation().forward(float_of::<F, IxDyn>(&x[0], "its input")?),
        Op::ClsDense => {
            let pooler = model.pooler.as_ref().ok_or_else(absent)?;
            let hidden = wide::<F>(&x[0], "the last hidden state", h)?;
            if hidden.dim().1 == 0 {
                return Err("no tokens".into());
            }
            pooler.dense_of(&hidden).into_dyn()
        }
        Op::Tanh => pooler::output(float_of::<F, Ix2>(&x[0], "pooler.dense")?).into_dyn(),
        Op::Lens => {
            let mlm = model.mlm.as_ref().ok_or_else(absent)?;
            mlm.logits_of(&wide::<F>(&x[0], "its input", h)?).into_dyn()
        }
        Op::CrossEntropy => {
            let logits = float_of::<F, IxDyn>(&x[0], "logits")?;
            let labels = ints_of::<IxDyn>(&x[1], "labels")?;
            labels_fit(&labels.view(), &logits.view())?;
            losses::losses(logits.view(), labels.view())
        }
        Op::MeanLoss => {
            let per_label = float_of::<F, IxDyn>(&x[0], "losses")?;
            let labels = ints_of::<IxDyn>(&x[1], "labels")?;
            same(&[per_label.shape(), labels.shape()])?;
            ndarray::arr0(losses::mean(per_label.view(), labels.view())).into_dyn()
        }
        Op::TotalLoss => {
            let part = |value: &Option<Tensor>| value.as_ref().and_then(|t| t.to_float::<F>()?.iter().next().copied());
            ndarray::arr0(losses::total(&[part(&x[0]), part(&x[1]), part(&x[2])])).into_dyn()
        }
        Op::MeanPooling => {
            let hidden = float_of::<F, Ix3>(&x[0], "the last hidden state")?;
            let mask = ints_of::<Ix2>(&x[1], "input.attention_mask")?;
            if mask.dim() != (hidden.dim().0, hidden.dim().1) {
                return Err(format!(
                    "input.attention_mask {:?} and the hidden state {:?}",
                    mask.shape(),
                    hidden.shape()
                ));
            }
            sentence_pooling::mean_pool(&hidden, &mask).into_dyn()
        }
        Op::Dropout => {
            let (kept, mask) = (float_of::<F, IxDyn>(&x[0], "its input")?, float_of::<F, IxDyn>(&x[1], "its mask")?);
            same(&[kept.shape(), mask.shape()])?;
            dropout::dropout(kept, &mask)
        }
    };
    Ok(Tensor::of_float(out))
}

/// A `[B,T,width]` input: the last axis must be the `width` the model's weights take.
fn wide<F: Float>(value: &Option<Tensor>, what: &str, width: usize) -> std::result::Result<Array3<F>, String> {
    wide_of::<F, Ix3>(value, what, width)
}

/// An input of dimension `D` whose last axis is the `width` the model's weights take.
fn wide_of<F: Float, D: ndarray::Dimension>(
    value: &Option<Tensor>,
    what: &str,
    width: usize,
) -> std::result::Result<Array<F, D>, String> {
    let input = float_of::<F, D>(value, what)?;
    match input.shape().last() {
        Some(&w) if w == width => Ok(input),
        _ => Err(format!("its input is {:?}, the model's weights take a last axis of {width}", input.shape())),
    }
}

/// Refuses operands of different shapes (which ndarray would broadcast or refuse with a panic).
fn same(shapes: &[&[usize]]) -> std::result::Result<(), String> {
    if shapes.windows(2).all(|pair| pair[0] == pair[1]) {
        Ok(())
    } else {
        Err(format!("its inputs' shapes differ: {shapes:?}"))
    }
}
