//! One stage recomputed from a dump's values of its inputs (`stage/inputs.rs` names them), by
//! the model's own function for that stage, the one the forward pass calls: what isolation
//! (`diff/isolate.rs`) and `explain` share. This file only reads the operands and checks their
//! shapes and ranges; every formula is in `model/`.

use ndarray::{Array, Array2, Array3, ArrayD, Ix2, Ix3, Ix4, IxDyn};

use crate::error::Result;
use crate::io::dump::Dump;
use crate::model::{additive_mask, attention, embeddings, losses, pooler, sentence_pooling, BertModel};
use crate::objectives::IGNORE;
use crate::ops::{self, Float};
use crate::pass::Tensor;
use crate::stage::inputs::inputs;
use crate::stage::{Stage, StageKind::*};

/// `stage` recomputed from the dump's values of its inputs: Ok(Err(reason)) when it cannot be
/// (an input absent, or not of a shape the operation takes).
pub fn recompute_from<F: Float>(
    model: &BertModel<F>,
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
/// that the forward pass calls for it; this file only checks the operands' shapes and ranges.
fn recompute<F: Float>(
    model: &BertModel<F>,
    stage: Stage,
    x: &[Option<Tensor>],
) -> std::result::Result<Tensor, String> {
    let layer = || model.layers.get(stage.layer.unwrap_or(0)).ok_or("a layer the model does not have".to_string());
    let h = model.config.hidden_size;
    let within = |table: &[usize], ids: &Array2<i64>| {
        if ids.iter().all(|&id| id >= 0 && (id as usize) < table[0]) {
            Ok(())
        } else {
            Err(format!("an id outside the table of {} rows", table[0]))
        }
    };
    let embeddings = &model.embeddings;
    let out: ArrayD<F> = match stage.kind {
        Param(_) => return Err("a parameter is read, not computed by the forward pass".into()),
        EmbWord => {
            let ids = ints_of::<Ix2>(&x[0], "input.ids")?;
            within(embeddings.word_embeddings.shape(), &ids)?;
            embeddings.word(ids.view()).into_dyn()
        }
        EmbPosition => {
            let ids = ints_of::<Ix2>(&x[0], "input.ids")?;
            if ids.dim().1 > embeddings.position_embeddings.shape()[0] {
                return Err(format!("more positions than the table's {}", embeddings.position_embeddings.shape()[0]));
            }
            embeddings.position(ids.dim()).into_dyn()
        }
        EmbTokenType => {
            let ids = ints_of::<Ix2>(&x[0], "input.token_type_ids")?;
            within(embeddings.token_type_embeddings.shape(), &ids)?;
            embeddings.token_type(ids.view()).into_dyn()
        }
        EmbSum => {
            let (w, t, p) = (
                float_of::<F, Ix3>(&x[0], "word")?,
                float_of::<F, Ix3>(&x[1], "token_type")?,
                float_of::<F, Ix3>(&x[2], "position")?,
            );
            same(&[w.shape(), t.shape(), p.shape()])?;
            embeddings::sum(w, &t, &p).into_dyn()
        }
        EmbLayerNorm => embeddings.layer_norm.forward(wide::<F>(&x[0], "sum", h)?).into_dyn(),
        AttnQuery | AttnKey | AttnValue => {
            let input = wide::<F>(&x[0], "the layer's input", h)?;
            layer()?.attention.self_attention.project(stage.kind, &input).into_dyn()
        }
        AttnScores => {
            let (q, k) = (float_of::<F, Ix4>(&x[0], "query")?, float_of::<F, Ix4>(&x[1], "key")?);
            same(&[q.shape(), k.shape()])?;
            let mask = ints_of::<Ix2>(&x[2], "input.attention_mask")?;
            let (b, _, t, _) = q.dim();
            if mask.dim() != (b, t) {
                return Err(format!("input.attention_mask is {:?}, the scores [{b}, _, {t}, {t}]", mask.shape()));
            }
            attention::scores(q.view(), k.view(), additive_mask::<F>(&mask).as_ref()).into_dyn()
        }
        AttnProbs => attention::probs(float_of::<F, Ix4>(&x[0], "scores")?).into_dyn(),
        AttnContext => {
            let (p, v) = (float_of::<F, Ix4>(&x[0], "probs")?, float_of::<F, Ix4>(&x[1], "value")?);
            if p.dim().3 != v.dim().2 || p.dim().0 != v.dim().0 || p.dim().1 != v.dim().1 {
                return Err(format!("probs {:?} and value {:?} do not multiply", p.shape(), v.shape()));
            }
            attention::context(p.view(), v.view()).into_dyn()
        }
        AttnOutput => layer()?.attention.output.dense.forward(&wide::<F>(&x[0], "context", h)?).into_dyn(),
        AttnResidual | FfnResidual => {
            let (output, input) =
                (float_of::<F, Ix3>(&x[0], "output")?, float_of::<F, Ix3>(&x[1], "the block's input")?);
            same(&[output.shape(), input.shape()])?;
            attention::residual(output, &input).into_dyn()
        }
        AttnLayerNorm => layer()?.attention.output.layer_norm.forward(wide::<F>(&x[0], "residual", h)?).into_dyn(),
        FfnIntermediate => {
            layer()?.feed_forward.intermediate.forward(&wide::<F>(&x[0], "attention.layernorm", h)?).into_dyn()
        }
        FfnActivation => {
            layer()?.feed_forward.activation.forward(float_of::<F, Ix3>(&x[0], "intermediate")?).into_dyn()
        }
        FfnOutput => {
            let input = wide::<F>(&x[0], "activation", model.config.intermediate_size)?;
            layer()?.feed_forward.output.forward(&input).into_dyn()
        }
        FfnLayerNorm => layer()?.feed_forward.layer_norm.forward(wide::<F>(&x[0], "residual", h)?).into_dyn(),
        PoolerDense => {
            let pooler = model.pooler.as_ref().ok_or("the model has no pooler")?;
            let hidden = wide::<F>(&x[0], "the last hidden state", h)?;
            if hidden.dim().1 == 0 {
                return Err("no tokens".into());
            }
            pooler.dense_of(&hidden).into_dyn()
        }
        PoolerOutput => pooler::output(float_of::<F, Ix2>(&x[0], "pooler.dense")?).into_dyn(),
        LensEmbeddings | LensLayer => {
            let mlm = model.mlm.as_ref().ok_or("the model has no MLM head")?;
            mlm.logits_of(&wide::<F>(&x[0], "its input", h)?).into_dyn()
        }
        MlmTransform | MlmActivation | MlmLayerNorm | MlmLogits => {
            let mlm = model.mlm.as_ref().ok_or("the model has no MLM head")?;
            let input = wide::<F>(&x[0], "its input", h)?;
            match stage.kind {
                MlmTransform => mlm.transform.forward(&input).into_dyn(),
                MlmActivation => mlm.activation.forward(input).into_dyn(),
                MlmLayerNorm => mlm.layer_norm.forward(input).into_dyn(),
                _ => mlm.decoder.forward(&input).into_dyn(),
            }
        }
        MlmLosses | NspLosses => {
            let logits = float_of::<F, IxDyn>(&x[0], "logits")?;
            let labels = ints_of::<IxDyn>(&x[1], "labels")?;
            if logits.ndim() != labels.ndim() + 1 || logits.shape()[..labels.ndim()] != labels.shape()[..] {
                return Err(format!("logits {:?} and labels {:?} do not go together", logits.shape(), labels.shape()));
            }
            let classes = *logits.shape().last().unwrap_or(&0);
            if labels.iter().any(|&l| l != IGNORE && (l < 0 || l as usize >= classes)) {
                return Err(format!("a label outside the {classes} classes"));
            }
            losses::losses(logits.view(), labels.view())
        }
        MlmLoss | NspLoss => {
            let per_label = float_of::<F, IxDyn>(&x[0], "losses")?;
            let labels = ints_of::<IxDyn>(&x[1], "labels")?;
            same(&[per_label.shape(), labels.shape()])?;
            ndarray::arr0(losses::mean(per_label.view(), labels.view())).into_dyn()
        }
        Loss => {
            let part = |value: &Option<Tensor>| value.as_ref().and_then(|t| t.to_float::<F>()?.iter().next().copied());
            ndarray::arr0(losses::total(part(&x[0]), part(&x[1]))).into_dyn()
        }
        NspLogits | ClassifierLogits => {
            let pooled = wide_of::<F, Ix2>(&x[0], "pooler.output", h)?;
            let dense = match stage.kind {
                NspLogits => &model.nsp.as_ref().ok_or("the model has no NSP head")?.dense,
                _ => &model.classifier.as_ref().ok_or("the model has no classifier")?.dense,
            };
            dense.forward(&pooled).into_dyn()
        }
        SentencePooled => {
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
        InputOriginalIds | InputIds | InputTokenTypeIds | InputAttentionMask | InputLabels | InputNextSentenceLabel => {
            return Err("an input, which nothing computes".into())
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
