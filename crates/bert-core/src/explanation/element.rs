//! One element of each kind of stage, explained: the operands it reads (from the table of what
//! each stage reads, `stage/inputs.rs`, and the model's parameters), the named quantities of its
//! formula, and the largest terms of its sums. The arithmetic shown here is in f64; the value the
//! stage really has is the model's own function's (`recompute.rs`).

use std::collections::HashMap;

use ndarray::{arr1, ArrayView1, IxDyn};

use super::{Number, Operand};
use crate::io::dump::Dump;
use crate::model::{attention, pooler, BertModel};
use crate::objectives::IGNORE;
use crate::ops::{self, Float, Moments, SoftmaxRow};
use crate::pass::Tensor;
use crate::stage::inputs::inputs;
use crate::stage::{DType, Dim, Op, ParamKind, ParamKinds, Stage, StageKind::*};

/// The names of the intermediate quantities, one table for every kind: what `steps` may hold.
pub const STEPS: &[&str] = &[
    "bias",
    "sum",
    "dot",
    "scale",
    "mask",
    "max",
    "sum_exp",
    "log_sum_exp",
    "logit",
    "p",
    "mean",
    "variance",
    "eps",
    "rstd",
    "x_hat",
    "g_mean",
    "gx_mean",
    "count",
    "input",
    "derivative",
    "residual",
];

/// How many of a sum's largest terms are listed.
const TERMS: usize = 5;

/// The dump's stages and the model's parameters, read once each.
pub struct Operands<'a, F: Float> {
    pub(super) model: &'a BertModel<F>,
    dump: &'a Dump,
    read: HashMap<String, Tensor>,
    /// B and T as the first stage read gives them: every other stage must agree.
    batch: Option<usize>,
    tokens: Option<usize>,
}

impl<'a, F: Float> Operands<'a, F> {
    pub fn new(model: &'a BertModel<F>, dump: &'a Dump) -> Operands<'a, F> {
        Operands { model, dump, read: HashMap::new(), batch: None, tokens: None }
    }

    /// The pass the dump holds, for what its stages read (a training step's dropout).
    pub(super) fn wiring(&self) -> crate::stage::inputs::Wiring {
        crate::recompute::wiring_of(self.dump, self.model.config.num_hidden_layers)
    }

    /// Refuses a stage whose shape is not the one bert-trace gives it for this model: a dump
    /// saved in another layout (the query before the head split, a row cut short) is named,
    /// rather than read at indices it does not have. B and T are taken from the first stage
    /// read, and every later one must agree.
    fn check_shape(&mut self, stage: Stage, shape: &[usize]) -> Result<(), String> {
        let symbols = stage.info().shape;
        let n_labels = self.model.classifier.as_ref().map_or(0, |c| c.labels.len());
        let fixed = self.model.config.dims(0, 0, n_labels);
        let expected: Vec<String> = symbols
            .iter()
            .map(|&dim| match dim {
                Dim::B => self.batch.map_or("B".into(), |b| b.to_string()),
                Dim::T => self.tokens.map_or("T".into(), |t| t.to_string()),
                other => fixed.size(other).to_string(),
            })
            .collect();
        let refuse = || {
            format!(
                "{} in the dump is {shape:?}, where bert-trace's {} is [{}] for this model: explain reads a dump \
                 laid out as bert-trace writes it (`bert-trace stages` lists each stage's shape)",
                stage.name(),
                stage.shape_symbols(),
                expected.join(", ")
            )
        };
        if symbols.len() != shape.len() {
            return Err(refuse());
        }
        let (mut batch, mut tokens) = (self.batch, self.tokens);
        for (&dim, &n) in symbols.iter().zip(shape) {
            let seen = match dim {
                Dim::B => &mut batch,
                Dim::T => &mut tokens,
                other if fixed.size(other) == n => continue,
                _ => return Err(refuse()),
            };
            match *seen {
                Some(size) if size != n => return Err(refuse()),
                _ => *seen = Some(n),
            }
        }
        (self.batch, self.tokens) = (batch, tokens);
        Ok(())
    }

    pub(super) fn tensor(&mut self, stage: Stage) -> Result<&Tensor, String> {
        let name = stage.name();
        if !self.read.contains_key(&name) {
            let entry = self.dump.entry(&name).ok_or_else(|| {
                format!("the dump has no {name}, which this element reads (was it left out with ‹only›?)")
            })?;
            let tensor = self.dump.read(entry).map_err(|e| e.to_string())?;
            self.check_shape(stage, tensor.shape())?;
            self.read.insert(name.clone(), tensor);
        }
        Ok(&self.read[&name])
    }
}

/// What an element's explanation is made of, before the value and its recomputation.
#[derive(Default)]
pub struct Parts {
    pub formula: String,
    pub inputs: Vec<Operand>,
    pub steps: Vec<(&'static str, f64)>,
    pub terms: Vec<([usize; 2], f64)>,
    /// The stage's dtype, in which the formula's numbers are written.
    pub(super) dtype: Option<DType>,
}

impl Parts {
    /// The parts of an explanation of an element of `stage`, whose numbers are written in its dtype.
    pub fn of<F: Float>(ops: &mut Operands<'_, F>, stage: Stage) -> Result<Parts, String> {
        Ok(Parts { dtype: Some(ops.tensor(stage)?.dtype()), ..Parts::default() })
    }

    /// Reads `stage` at `index` from the dump, lists it as an input and returns it in f64.
    pub(super) fn read<F: Float>(
        &mut self,
        ops: &mut Operands<'_, F>,
        stage: Stage,
        index: &[usize],
    ) -> Result<f64, String> {
        let tensor = ops.tensor(stage)?;
        let shape = tensor.shape().to_vec();
        if index.len() != shape.len() || index.iter().zip(&shape).any(|(i, n)| i >= n) {
            return Err(format!("{} is {shape:?}, which has no element {index:?}", stage.name()));
        }
        let value = match tensor {
            Tensor::F32(a) => Number::F32(a[IxDyn(index)]),
            Tensor::F64(a) => Number::F64(a[IxDyn(index)]),
            Tensor::I64(a) => Number::I64(a[IxDyn(index)]),
        };
        self.inputs.push(Operand { stage: stage.name(), index: index.to_vec(), value });
        Ok(value.to_f64())
    }

    /// `read` of every element along the last axis of `stage` at `prefix`: a row.
    pub(super) fn row<F: Float>(
        &mut self,
        ops: &mut Operands<'_, F>,
        stage: Stage,
        prefix: &[usize],
    ) -> Result<Vec<f64>, String> {
        let width = *ops.tensor(stage)?.shape().last().ok_or_else(|| format!("{} is a scalar", stage.name()))?;
        (0..width).map(|i| self.read(ops, stage, &[prefix, &[i]].concat())).collect()
    }

    /// Reads the parameter `kind` (of the stage's layer) at `index`, listed as `param.<name>`.
    pub(super) fn param<F: Float>(
        &mut self,
        ops: &Operands<'_, F>,
        kind: ParamKind,
        layer: Option<usize>,
        index: &[usize],
    ) -> Result<f64, String> {
        let stage = match (kind.per_layer(), layer) {
            (true, Some(l)) => Stage::layer(l, Param(kind)),
            _ => Stage::new(Param(kind)),
        };
        let param = ops.model.parameter(stage).ok_or_else(|| format!("the model has no {}", stage.name()))?;
        let values = param.as_slice();
        let shape = param.shape();
        if index.len() != shape.len() || index.iter().zip(shape).any(|(i, n)| i >= n) {
            return Err(format!("{} is {shape:?}, which has no element {index:?}", stage.name()));
        }
        let flat = index.iter().zip(shape).fold(0, |acc, (i, n)| acc * n + i);
        let value = values[flat].to_f64().unwrap_or(f64::NAN);
        self.inputs.push(Operand { stage: stage.name(), index: index.to_vec(), value: self.number(value) });
        Ok(value)
    }

    fn number(&self, value: f64) -> Number {
        Number::of(self.dtype.unwrap_or(DType::F64), value)
    }

    /// A number of the formula, in the stage's dtype.
    pub(super) fn n(&self, value: f64) -> String {
        self.number(value).to_string()
    }

    pub(super) fn step(&mut self, name: &'static str, value: f64) -> f64 {
        debug_assert!(STEPS.contains(&name), "{name} is not in the table of steps");
        self.steps.push((name, value));
        value
    }

    /// Σ `a[i]·b[i]`, by the ops' [`ops::dot`], with the largest products kept as terms; `a`
    /// and `b` are the inputs from `first_a` and `first_b` on.
    pub(super) fn sum_of_products(&mut self, a: &[f64], b: &[f64], first_a: usize, first_b: usize) -> f64 {
        let products: Vec<f64> = a.iter().zip(b).map(|(x, y)| x * y).collect();
        let mut order: Vec<usize> = (0..products.len()).collect();
        order.sort_by(|&i, &j| products[j].abs().total_cmp(&products[i].abs()));
        self.terms = order.iter().take(TERMS).map(|&i| ([first_a + i, first_b + i], products[i])).collect();
        ops::dot(ArrayView1::from(a), ArrayView1::from(b))
    }
}

/// For an attention row whose query is padding: saying so, since no real token reads that row
/// (its values are computed all the same). Empty when the query is real, or the dump has no mask.
fn padding_query<F: Float>(ops: &mut Operands<'_, F>, b: usize, query: usize) -> String {
    let Ok(mask) = ops.tensor(Stage::new(InputAttentionMask)) else { return String::new() };
    let mask = mask.to_f64();
    match mask.get(ndarray::IxDyn(&[b, query])) {
        Some(&0.0) => format!("; query {query} is padding: no real token reads this row"),
        _ => String::new(),
    }
}

/// The element `index` of the forward stage `stage`, explained from the dump's operands; why not,
/// when it cannot be.
pub fn explain<F: Float>(ops: &mut Operands<'_, F>, stage: Stage, index: &[usize]) -> Result<Parts, String> {
    let mut p = Parts::of(ops, stage)?;
    let config = &ops.model.config;
    let reads = inputs(stage, ops.wiring());
    let layer = stage.layer;
    let name = stage.name();
    let op = stage.info().op;
    match op {
        Op::Drawn => {
            return Err(format!(
                "{name} is a dropout mask: drawn from the training step's seed (0 with the dropout probability, \
                 else 1 / (1 - it)), not computed"
            ));
        }
        Op::Dropout => {
            let x = p.read(ops, reads[0], index)?;
            let mask = p.read(ops, reads[1], index)?;
            p.formula = match mask == 0.0 {
                true => format!("{} · {} = 0 (dropped)", p.n(x), p.n(mask)),
                false => {
                    format!("{} · {} = {} (kept, scaled by 1 / (1 - p); in f64)", p.n(x), p.n(mask), p.n(x * mask))
                }
            };
        }
        Op::Given => {
            return Err(format!("{name} is an input of the pass: given, not computed"));
        }
        Op::Param => return Err(format!("{name} is a parameter: read from the checkpoint, not computed")),
        Op::WordLookup | Op::TokenTypeLookup => {
            let (b, t, h) = (index[0], index[1], index[2]);
            let id = p.read(ops, reads[0], &[b, t])?;
            let table = match op {
                Op::WordLookup => ParamKind::WordEmbeddings,
                _ => ParamKind::TokenTypeEmbeddings,
            };
            let value = p.param(ops, table, None, &[id as usize, h])?;
            p.formula = format!("{}[{}={}, {h}] = {}", p.inputs[1].stage, reads[0].name(), id, p.n(value));
        }
        Op::PositionLookup => {
            let (t, h) = (index[1], index[2]);
            let value = p.param(ops, ParamKind::PositionEmbeddings, None, &[t, h])?;
            p.formula = format!("{}[position {t}, {h}] = {}", p.inputs[0].stage, p.n(value));
        }
        Op::EmbeddingSum | Op::Residual => {
            let values: Vec<f64> = reads.iter().map(|&s| p.read(ops, s, index)).collect::<Result<_, _>>()?;
            let sum = values.iter().sum::<f64>();
            let names: Vec<String> = reads.iter().map(|s| s.name()).collect();
            let shown: Vec<String> = values.iter().map(|&v| p.n(v)).collect();
            let (names, shown) = match op {
                // HF's order: (word + token_type) + position.
                Op::EmbeddingSum => (
                    format!("({} + {}) + {}", names[0], names[1], names[2]),
                    format!("({} + {}) + {}", shown[0], shown[1], shown[2]),
                ),
                _ => (names.join(" + "), shown.join(" + ")),
            };
            p.formula = format!("{names} = {shown} = {}", p.n(sum));
        }
        Op::LayerNorm => {
            let (row_at, h) = index.split_at(index.len() - 1);
            let h = h[0];
            let x = p.row(ops, reads[0], row_at)?;
            let ParamKinds { weight, bias } = stage.info().params.expect("a LayerNorm stage has a scale and shift");
            let (gamma, beta) = (p.param(ops, weight, layer, &[h])?, p.param(ops, bias, layer, &[h])?);
            let eps = config.layer_norm_eps;
            let Moments { mean, variance, std } = ops::moments(ArrayView1::from(&x[..]), eps);
            let (mean, variance) = (p.step("mean", mean), p.step("variance", variance));
            let eps = p.step("eps", eps);
            let x_hat = p.step("x_hat", (x[h] - mean) / std);
            p.formula = format!(
                "(x[{h}] - mean) / √(variance + eps) · γ[{h}] + β[{h}] = ({} - {}) / √({} + {}) · {} + {} = {} \
                 (x: {} over its {} features; mean and variance in f64)",
                p.n(x[h]),
                p.n(mean),
                p.n(variance),
                p.n(eps),
                p.n(gamma),
                p.n(beta),
                p.n(x_hat * gamma + beta),
                reads[0].name(),
                x.len()
            );
        }
        Op::HeadProjection | Op::Dense | Op::ClsDense => {
            // The row of the input and the output feature this element is.
            let (row_at, out) = match op {
                Op::HeadProjection => {
                    let hs = config.hidden_size / config.num_attention_heads;
                    (vec![index[0], index[2]], index[1] * hs + index[3])
                }
                Op::ClsDense => (vec![index[0], 0], index[1]),
                _ => (index[..index.len() - 1].to_vec(), index[index.len() - 1]),
            };
            let x = p.row(ops, reads[0], &row_at)?;
            let ParamKinds { weight, bias } = stage.info().params.expect("a dense stage has a weight and bias");
            let w: Vec<f64> = (0..x.len()).map(|i| p.param(ops, weight, layer, &[out, i])).collect::<Result<_, _>>()?;
            let b = p.param(ops, bias, layer, &[out])?;
            p.step("bias", b);
            let sum = p.sum_of_products(&x, &w, 0, x.len());
            p.step("sum", sum);
            p.formula = format!(
                "bias[{out}] + Σ_i x[i] · W[{out}, i] = {} + {} = {} (x: {} at {row_at:?}, {} inputs; the sum in f64)",
                p.n(b),
                p.n(sum),
                p.n(b + sum),
                reads[0].name(),
                x.len()
            );
        }
        Op::Activation => {
            let x = p.read(ops, reads[0], index)?;
            p.step("input", x);
            let activation = config.activation();
            let y = activation.forward(arr1(&[x]))[0];
            p.formula = format!("{}({}) = {} (in f64)", config.hidden_act, p.n(x), p.n(y));
        }
        Op::Tanh => {
            let x = p.read(ops, reads[0], index)?;
            p.step("input", x);
            let y = pooler::output(ndarray::arr2(&[[x]]))[[0, 0]];
            p.formula = format!("tanh({}) = {} (in f64)", p.n(x), p.n(y));
        }
        Op::Scores => {
            let (b, head, i, j) = (index[0], index[1], index[2], index[3]);
            let q = p.row(ops, reads[0], &[b, head, i])?;
            let k = p.row(ops, reads[1], &[b, head, j])?;
            let hs = q.len();
            let mask_value = p.read(ops, reads[2], &[b, j])?;
            let dot = p.sum_of_products(&q, &k, 0, hs);
            p.step("dot", dot);
            let scale = p.step("scale", attention::scale::<f64>(hs));
            // The additive mask exists only when some key of the batch is padding.
            let padded = ops.tensor(reads[2])?.to_f64().iter().any(|&m| m == 0.0);
            let mask = if padded && mask_value == 0.0 { F::min_value().to_f64().unwrap_or(f64::MIN) } else { 0.0 };
            p.step("mask", mask);
            let padding = padding_query(ops, b, i);
            p.formula = format!(
                "Σ_d q[{i}, d] · k[{j}, d] · scale + mask = {} · {} + {} = {} (head {head}; {}; the dot in f64){padding}",
                p.n(dot),
                p.n(scale),
                p.n(mask),
                p.n(dot * scale + mask),
                match (padded, mask_value == 0.0) {
                    (false, _) => "no key of the batch is padding: no mask added".to_string(),
                    (true, true) => format!("key {j} is padding"),
                    (true, false) => format!("key {j} is a real token"),
                }
            );
        }
        Op::Softmax => {
            let (row_at, j) = index.split_at(3);
            let j = j[0];
            let scores = p.row(ops, reads[0], row_at)?;
            let SoftmaxRow { max, exps, sum } = ops::softmax_row(ArrayView1::from(&scores[..]));
            let (max, sum_exp) = (p.step("max", max), p.step("sum_exp", sum));
            let padding = padding_query(ops, row_at[0], row_at[2]);
            p.formula = format!(
                "exp(scores[{j}] - max) / Σ_k exp(scores[k] - max) = exp({} - {}) / {} = {} (the row of {} scores; in f64){padding}",
                p.n(scores[j]),
                p.n(max),
                p.n(sum_exp),
                p.n(exps[j] / sum_exp),
                scores.len()
            );
        }
        Op::Context => {
            let (b, t, h) = (index[0], index[1], index[2]);
            let hs = config.hidden_size / config.num_attention_heads;
            let (head, d) = (h / hs, h % hs);
            let probs = p.row(ops, reads[0], &[b, head, t])?;
            let first_v = p.inputs.len();
            let v: Vec<f64> =
                (0..probs.len()).map(|j| p.read(ops, reads[1], &[b, head, j, d])).collect::<Result<_, _>>()?;
            let sum = p.sum_of_products(&probs, &v, 0, first_v);
            p.step("sum", sum);
            p.formula = format!(
                "Σ_j probs[{t}, j] · value[j, {d}] = {} (head {head}, feature {d} of its {hs}; the sum in f64)",
                p.n(sum)
            );
        }
        Op::CrossEntropy => {
            let logits = p.row(ops, reads[0], index)?;
            let label = p.read(ops, reads[1], index)?;
            if label as i64 == IGNORE {
                p.formula = format!("{}{index:?} is -100: not a labelled position, so 0", reads[1].name());
            } else {
                let label = label as usize;
                if label >= logits.len() {
                    return Err(format!("label {label} is outside the {} classes", logits.len()));
                }
                let SoftmaxRow { max, sum, .. } = ops::softmax_row(ArrayView1::from(&logits[..]));
                let (max, sum_exp) = (p.step("max", max), p.step("sum_exp", sum));
                let log_sum_exp = p.step("log_sum_exp", max + sum_exp.ln());
                let logit = p.step("logit", logits[label]);
                p.formula = format!(
                    "-log softmax(logits)[{label}] = log Σ_k exp(logits[k]) - logits[{label}] = {} - {} = {} \
                     (over {} classes; in f64)",
                    p.n(log_sum_exp),
                    p.n(logit),
                    p.n(log_sum_exp - logit),
                    logits.len()
                );
            }
        }
        Op::MeanLoss => {
            let shape = ops.tensor(reads[0])?.shape().to_vec();
            let mut sum = 0.0;
            let mut count = 0usize;
            for at in all_indices(&shape) {
                let loss = p.read(ops, reads[0], &at)?;
                let label = p.read(ops, reads[1], &at)?;
                if label as i64 != IGNORE {
                    sum += loss;
                    count += 1;
                }
            }
            p.step("sum", sum);
            p.step("count", count as f64);
            p.formula = format!(
                "Σ {} / the labelled positions = {} / {count} = {} (the sum in f64)",
                reads[0].name(),
                p.n(sum),
                p.n(sum / count as f64)
            );
        }
        Op::TotalLoss => {
            let mut terms = Vec::new();
            let mut sum = 0.0;
            for &part in &reads {
                if ops.tensor(part).is_ok() {
                    let value = p.read(ops, part, &[])?;
                    terms.push((part.name(), value));
                    sum += value;
                }
            }
            let names: Vec<String> = terms.iter().map(|(n, _)| n.clone()).collect();
            let shown: Vec<String> = terms.iter().map(|&(_, v)| p.n(v)).collect();
            p.formula = format!("{} = {} = {}", names.join(" + "), shown.join(" + "), p.n(sum));
        }
        Op::MeanPooling => {
            let (b, h) = (index[0], index[1]);
            let t = ops.tensor(reads[1])?.shape()[1];
            let mut sum = 0.0;
            let mut count = 0.0;
            for t in 0..t {
                let mask = p.read(ops, reads[1], &[b, t])?;
                let x = p.read(ops, reads[0], &[b, t, h])?;
                sum += mask * x;
                count += mask;
            }
            p.step("sum", sum);
            p.step("count", count);
            p.formula = format!(
                "Σ_t mask[t] · hidden[t, {h}] / max(Σ_t mask[t], 1e-9) = {} / {} = {} (in f64)",
                p.n(sum),
                p.n(count),
                p.n(sum / count.max(1e-9))
            );
        }
        Op::Lens => {
            let (row_at, word) = index.split_at(2);
            p.row(ops, reads[0], row_at)?;
            let token = ops.model.tokenizer.id_to_token(word[0] as u32).unwrap_or_default();
            p.formula = format!(
                "the MLM head (transform, activation, LayerNorm, decoder) on {}{row_at:?}, at word {} ({token})",
                reads[0].name(),
                word[0]
            );
        }
    }
    Ok(p)
}

/// Every index of an array of `shape`, in row-major order.
fn all_indices(shape: &[usize]) -> Vec<Vec<usize>> {
    shape.iter().fold(vec![Vec::new()], |prefixes, &n| {
        prefixes.into_iter().flat_map(|prefix| (0..n).map(move |i| [prefix.clone(), vec![i]].concat())).collect()
    })
}
