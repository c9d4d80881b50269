//! One element of each kind of gradient, explained: the chain rule's terms with their values,
//! read from the forward values and the gradients after it that the backward reads (the table of
//! `stage/inputs.rs`). The arithmetic shown is in f64; the value the gradient really has is the
//! backward function's (`recompute.rs`).

use ndarray::{arr1, arr2, ArrayView1};

use super::element::{Operands, Parts};
use crate::model::{attention, pooler};
use crate::objectives::IGNORE;
use crate::ops::{self, BackMoments, Float, Moments, SoftmaxRow};
use crate::stage::inputs::{inputs, through_dropout};
use crate::stage::{GradOp, ParamKind, Stage};

/// The element `index` of the gradient `stage`, explained into `p`; why not, when it cannot be.
pub fn explain<F: Float>(
    ops: &mut Operands<'_, F>,
    p: &mut Parts,
    stage: Stage,
    index: &[usize],
) -> Result<(), String> {
    let config = &ops.model.config;
    let (h, nh) = (config.hidden_size, config.num_attention_heads);
    let hs = h / nh;
    let wiring = ops.wiring();
    let reads = inputs(stage, wiring);
    let layer = stage.layer;
    let name = stage.name();
    let last = index.len().saturating_sub(1);
    let grad_op = stage.info().grad_op;
    match grad_op {
        GradOp::ParamSum => {
            return Err(format!("{name} sums over every token: a parameter's gradient is not explained"))
        }
        // What a dropout stage drops, in a training step that dropped out.
        _ if through_dropout(stage, wiring) => {
            let d = p.read(ops, reads[0], index)?;
            let mask = p.read(ops, reads[1], index)?;
            p.formula = format!(
                "{} · {} = {} · {} = {} (dropout's mask: 0 where dropped; in f64)",
                reads[0].name(),
                reads[1].name(),
                p.n(d),
                p.n(mask),
                p.n(d * mask)
            );
        }
        GradOp::One => p.formula = "d loss / d loss = 1".into(),
        // A term of a sum gets the sum's gradient.
        GradOp::LossTerm | GradOp::SumTerm => {
            let value = p.read(ops, reads[0], index)?;
            p.formula =
                format!("{name} = {} (a term of a sum gets the sum's gradient) = {}", reads[0].name(), p.n(value));
        }
        GradOp::MeanInput => {
            let labels = labelled(p, ops, reads[0])?;
            let label = peek(ops, reads[0], index)?;
            let g = p.read(ops, reads[1], &[])?;
            let count = p.step("count", labels as f64);
            p.formula = match label as i64 == IGNORE {
                true => format!("{}{index:?} is -100: not in the mean, so 0", reads[0].name()),
                false => format!("d loss / d its mean · 1 / count = {} / {} = {}", p.n(g), p.n(count), p.n(g / count)),
            };
        }
        GradOp::TokenCrossEntropy | GradOp::SequenceCrossEntropy => {
            let (row_at, v) = index.split_at(last);
            let v = v[0];
            let logits = p.row(ops, reads[0], row_at)?;
            let count = labelled(p, ops, reads[1])?;
            let label = peek(ops, reads[1], row_at)?;
            let count = p.step("count", count as f64);
            if label as i64 == IGNORE {
                p.formula = format!("{}{row_at:?} is -100: this position is not in the loss, so 0", reads[1].name());
            } else {
                let SoftmaxRow { max, exps, sum } = ops::softmax_row(ArrayView1::from(&logits[..]));
                p.step("max", max);
                let sum_exp = p.step("sum_exp", sum);
                let prob = p.step("p", exps[v] / sum_exp);
                let onehot = if v == label as usize { 1.0 } else { 0.0 };
                p.formula = format!(
                    "(softmax(logits)[{v}] - [{v} is the label {label}]) / count = ({} - {onehot}) / {} = {} (in f64)",
                    p.n(prob),
                    p.n(count),
                    p.n((prob - onehot) / count)
                );
            }
        }
        // The pooler's output: each head's share, Σ_o d logits[o] · W[o, i], from the heads the
        // loss used.
        GradOp::HeadsOnPooler => {
            let (row_at, i) = index.split_at(last);
            let i = i[0];
            let heads = [(reads[1], ParamKind::NspWeight), (reads[2], ParamKind::ClassifierWeight)];
            let present: Vec<(Stage, ParamKind)> = heads.into_iter().filter(|(d, _)| ops.tensor(*d).is_ok()).collect();
            if present.is_empty() {
                return Err(format!("the dump has neither {} nor {}", reads[1].name(), reads[2].name()));
            }
            let mut shares = Vec::new();
            for (d_out, weight) in present {
                let mut share = dense_input(p, ops, d_out, row_at, weight, layer, i)?;
                // A training step dropped the classifier's input out: its share through the mask.
                if let (Some(&mask), ParamKind::ClassifierWeight) = (reads.get(3), weight) {
                    share *= p.read(ops, mask, index)?;
                }
                shares.push((d_out, share));
            }
            let terms: Vec<String> = shares.iter().map(|(d, _)| format!("Σ_o {}[o] · W[o, {i}]", d.name())).collect();
            let values: Vec<String> = shares.iter().map(|(_, share)| p.n(*share)).collect();
            let total = shares.iter().map(|(_, share)| share).sum::<f64>();
            p.formula = match shares.len() {
                1 => format!("{} = {} (the head's weight; the sum in f64)", terms[0], p.n(total)),
                _ => format!(
                    "{} = {} = {} (each head's weight; the sums in f64)",
                    terms.join(" + "),
                    values.join(" + "),
                    p.n(total)
                ),
            };
        }
        // A dense layer's input: Σ_o d out[o] · W[o, i].
        GradOp::DenseInput | GradOp::DecoderInput => {
            let (row_at, i) = index.split_at(last);
            let i = i[0];
            // The weight of the dense layer that reads this stage, from that layer's row.
            let d_out = reads[1];
            let weight = weight_of(d_out)?;
            let sum = dense_input(p, ops, d_out, row_at, weight, layer, i)?;
            p.formula = format!(
                "Σ_o {}[o] · W[o, {i}] = {} (the layer's weight {}; the sum in f64)",
                d_out.name(),
                p.n(sum),
                p.inputs.last().map(|w| w.stage.clone()).unwrap_or_default()
            );
        }
        // A LayerNorm's input.
        GradOp::LayerNormInput => {
            let (row_at, i) = index.split_at(last);
            let i = i[0];
            // The scale of the LayerNorm that reads this stage, from that LayerNorm's row.
            let gamma = weight_of(reads[1])?;
            let x = p.row(ops, reads[0], row_at)?;
            let d_out = p.row(ops, reads[1], row_at)?;
            let gamma: Vec<f64> = (0..x.len()).map(|j| p.param(ops, gamma, layer, &[j])).collect::<Result<_, _>>()?;
            let Moments { mean, variance, std } = ops::moments(ArrayView1::from(&x[..]), config.layer_norm_eps);
            let mean = p.step("mean", mean);
            p.step("variance", variance);
            p.step("eps", config.layer_norm_eps);
            let rstd = p.step("rstd", 1.0 / std);
            let x_hat: Vec<f64> = x.iter().map(|v| (v - mean) * rstd).collect();
            p.step("x_hat", x_hat[i]);
            let g: Vec<f64> = d_out.iter().zip(&gamma).map(|(d, g)| d * g).collect();
            let BackMoments { g_mean, gx_mean } =
                ops::back_moments(ArrayView1::from(&g[..]), ArrayView1::from(&x_hat[..]));
            let (g_mean, gx_mean) = (p.step("g_mean", g_mean), p.step("gx_mean", gx_mean));
            let value = rstd * (g[i] - g_mean - x_hat[i] * gx_mean);
            p.formula = format!(
                "rstd · (g[{i}] - mean(g) - x̂[{i}] · mean(g ⊙ x̂)), g = d out ⊙ γ = {} · ({} - {} - {} · {}) = {} \
                 (x: {}, d out: {}; in f64)",
                p.n(rstd),
                p.n(g[i]),
                p.n(g_mean),
                p.n(x_hat[i]),
                p.n(gx_mean),
                p.n(value),
                reads[0].name(),
                reads[1].name()
            );
        }
        // An activation's input: d out · act'(x), the derivative by the backward's own function.
        GradOp::ActivationInput => {
            let x = p.read(ops, reads[0], index)?;
            let d_out = p.read(ops, reads[1], index)?;
            p.step("input", x);
            let derivative =
                p.step("derivative", config.activation().backward(arr1(&[x]).view(), arr1(&[1.0]).view())[0]);
            p.formula = format!(
                "d out · {}'(x) = {} · {} = {} (in f64)",
                config.hidden_act,
                p.n(d_out),
                p.n(derivative),
                p.n(d_out * derivative)
            );
        }
        GradOp::TanhInput => {
            let y = p.read(ops, reads[0], index)?;
            let d_out = p.read(ops, reads[1], index)?;
            let derivative =
                p.step("derivative", pooler::output_backward(arr2(&[[y]]).view(), arr2(&[[1.0]]).view())[[0, 0]]);
            p.formula = format!(
                "d pooler.output · (1 - tanh²) = {} · (1 - {}²) = {} (in f64)",
                p.n(d_out),
                p.n(y),
                p.n(d_out * derivative)
            );
        }
        GradOp::LayerOutput if reads.len() == 3 => {
            // The last hidden state: the MLM head's transform at every token, the pooler at [CLS].
            let (b, t, i) = (index[0], index[1], index[2]);
            let mut total = 0.0;
            let mut parts = Vec::new();
            if ops.tensor(reads[1]).is_ok() {
                let sum = dense_input(p, ops, reads[1], &[b, t], ParamKind::MlmTransformWeight, None, i)?;
                parts.push(format!("Σ_o {}[o] · W[o, {i}] = {}", reads[1].name(), p.n(sum)));
                total += sum;
            }
            if t == 0 && ops.tensor(reads[2]).is_ok() {
                let sum = dense_input(p, ops, reads[2], &[b], ParamKind::PoolerWeight, None, i)?;
                parts.push(format!("Σ_o {}[o] · W[o, {i}] = {}", reads[2].name(), p.n(sum)));
                total += sum;
            }
            p.step("sum", total);
            p.formula = match parts.len() {
                0 => format!(
                    "0: no head the loss uses reads token {t} (the pooler reads [CLS], position 0, alone, and the \
                     loss has no MLM term)"
                ),
                1 => format!("{} (the head's share; the sum in f64)", parts[0]),
                _ => format!("{} = {} (the heads' shares; sums in f64)", parts.join(" + "), p.n(total)),
            };
        }
        GradOp::LayerOutput => {
            // A layer's input: the next layer's residual and its three projections.
            let (b, t, i) = (index[0], index[1], index[2]);
            let next = reads[1].layer.unwrap_or(0);
            let residual = p.read(ops, reads[1], index)?;
            p.step("residual", residual);
            let mut total = residual;
            let mut sums = Vec::new();
            for (d_proj, weight) in [
                (reads[2], ParamKind::QueryWeight),
                (reads[3], ParamKind::KeyWeight),
                (reads[4], ParamKind::ValueWeight),
            ] {
                let mut sum = 0.0;
                for o in 0..h {
                    let d = p.read(ops, d_proj, &[b, o / hs, t, o % hs])?;
                    sum += d * p.param(ops, weight, Some(next), &[o, i])?;
                }
                sums.push(p.n(sum));
                total += sum;
            }
            p.step("sum", total);
            p.formula = format!(
                "d residual + Σ_o (d query[o] · Wq[o, {i}] + d key[o] · Wk[o, {i}] + d value[o] · Wv[o, {i}]) = {} + {} + {} + {} = {} \
                 (layer {next}'s attention; sums in f64)",
                p.n(residual),
                sums[0],
                sums[1],
                sums[2],
                p.n(total)
            );
        }
        GradOp::FfnInput => {
            let (row_at, i) = index.split_at(last);
            let residual = p.read(ops, reads[1], index)?;
            p.step("residual", residual);
            let sum = dense_input(p, ops, reads[2], row_at, ParamKind::IntermediateWeight, layer, i[0])?;
            p.formula = format!(
                "d ffn.residual + Σ_o d ffn.intermediate[o] · W1[o, {}] = {} + {} = {} (the sum in f64)",
                i[0],
                p.n(residual),
                p.n(sum),
                p.n(residual + sum)
            );
        }
        GradOp::ContextProbs => {
            let (b, n, i, j) = (index[0], index[1], index[2], index[3]);
            let first_d = p.inputs.len();
            let d_context: Vec<f64> =
                (0..hs).map(|d| p.read(ops, reads[2], &[b, i, n * hs + d])).collect::<Result<_, _>>()?;
            let first_v = p.inputs.len();
            let v: Vec<f64> = (0..hs).map(|d| p.read(ops, reads[1], &[b, n, j, d])).collect::<Result<_, _>>()?;
            let sum = p.sum_of_products(&d_context, &v, first_d, first_v);
            p.step("sum", sum);
            p.formula = format!("Σ_d d context[{i}, head {n}, d] · value[{j}, d] = {} (the sum in f64)", p.n(sum));
        }
        GradOp::ContextValue => {
            let (b, n, j, d) = (index[0], index[1], index[2], index[3]);
            let t = ops.tensor(reads[0])?.shape()[2];
            let first_p = p.inputs.len();
            let probs: Vec<f64> = (0..t).map(|i| p.read(ops, reads[0], &[b, n, i, j])).collect::<Result<_, _>>()?;
            let first_d = p.inputs.len();
            let d_context: Vec<f64> =
                (0..t).map(|i| p.read(ops, reads[2], &[b, i, n * hs + d])).collect::<Result<_, _>>()?;
            let sum = p.sum_of_products(&probs, &d_context, first_p, first_d);
            p.step("sum", sum);
            p.formula = format!("Σ_i probs[i, {j}] · d context[i, head {n}, {d}] = {} (the sum in f64)", p.n(sum));
        }
        GradOp::SoftmaxInput => {
            let (row_at, j) = index.split_at(3);
            let j = j[0];
            let probs = p.row(ops, reads[0], row_at)?;
            let first_d = p.inputs.len();
            let d_probs = p.row(ops, reads[1], row_at)?;
            let dot = p.sum_of_products(&probs, &d_probs, 0, first_d);
            p.step("dot", dot);
            p.formula = format!(
                "p[{j}] · (d p[{j}] - Σ_k p[k] · d p[k]) = {} · ({} - {}) = {} (in f64)",
                p.n(probs[j]),
                p.n(d_probs[j]),
                p.n(dot),
                p.n(probs[j] * (d_probs[j] - dot))
            );
        }
        GradOp::QueryFromScores | GradOp::KeyFromScores => {
            let (b, n, at, d) = (index[0], index[1], index[2], index[3]);
            let t = ops.tensor(reads[2])?.shape()[3];
            // d query[i] = scale · Σ_j d scores[i, j] · key[j]; d key[j] = scale · Σ_i d scores[i, j] · query[i].
            let (other, scores_at): (_, Box<dyn Fn(usize) -> [usize; 4]>) = match grad_op {
                GradOp::QueryFromScores => (reads[1], Box::new(move |k| [b, n, at, k])),
                _ => (reads[0], Box::new(move |k| [b, n, k, at])),
            };
            let first_s = p.inputs.len();
            let d_scores: Vec<f64> = (0..t).map(|k| p.read(ops, reads[2], &scores_at(k))).collect::<Result<_, _>>()?;
            let first_o = p.inputs.len();
            let rows: Vec<f64> = (0..t).map(|k| p.read(ops, other, &[b, n, k, d])).collect::<Result<_, _>>()?;
            let sum = p.sum_of_products(&d_scores, &rows, first_s, first_o);
            p.step("sum", sum);
            let scale = p.step("scale", attention::scale::<f64>(hs));
            p.formula = format!(
                "scale · Σ_k d scores · {}[k, {d}] = {} · {} = {} (head {n}; the sum in f64)",
                other.name(),
                p.n(scale),
                p.n(sum),
                p.n(scale * sum)
            );
        }
        GradOp::None => return Err(format!("{name} is not a gradient the backward computes")),
    }
    Ok(())
}

/// The weight (a dense layer's matrix, a LayerNorm's scale) of the stage whose gradient `read`
/// is, as the table's row for it says.
fn weight_of(read: Stage) -> Result<ParamKind, String> {
    read.kind.info().params.map(|params| params.weight).ok_or_else(|| format!("{} reads no weight", read.name()))
}

/// Σ_o d_out[row_at, o] · W[o, i]: a dense layer's input's share, its products as terms.
fn dense_input<F: Float>(
    p: &mut Parts,
    ops: &mut Operands<'_, F>,
    d_out: Stage,
    row_at: &[usize],
    weight: ParamKind,
    layer: Option<usize>,
    i: usize,
) -> Result<f64, String> {
    let first_d = p.inputs.len();
    let d = p.row(ops, d_out, row_at)?;
    let first_w = p.inputs.len();
    let w: Vec<f64> = (0..d.len()).map(|o| p.param(ops, weight, layer, &[o, i])).collect::<Result<_, _>>()?;
    Ok(p.sum_of_products(&d, &w, first_d, first_w))
}

/// How many positions of `labels` are labelled (not -100), every label listed as an input.
fn labelled<F: Float>(p: &mut Parts, ops: &mut Operands<'_, F>, labels: Stage) -> Result<usize, String> {
    let shape = ops.tensor(labels)?.shape().to_vec();
    let mut count = 0;
    let total: usize = shape.iter().product();
    for flat in 0..total {
        let mut index = vec![0; shape.len()];
        let mut rest = flat;
        for (axis, &n) in shape.iter().enumerate().rev() {
            index[axis] = rest % n;
            rest /= n;
        }
        if p.read(ops, labels, &index)? as i64 != IGNORE {
            count += 1;
        }
    }
    Ok(count)
}

/// The value of `stage` at `index`, not listed as an input (it already is, among others).
fn peek<F: Float>(ops: &mut Operands<'_, F>, stage: Stage, index: &[usize]) -> Result<f64, String> {
    let values = ops.tensor(stage)?.to_f64();
    values.get(ndarray::IxDyn(index)).copied().ok_or_else(|| format!("{} has no element {index:?}", stage.name()))
}
