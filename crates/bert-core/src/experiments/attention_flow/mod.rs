//! Attention rollout and attention flow (Abnar and Zuidema 2020, "Quantifying Attention Flow in
//! Transformers"): what each position of a layer's output reads from the input tokens, through
//! every layer below it, rather than from the layer just below. Both start from each layer's
//! attention with the residual connection folded in,
//!
//! Â_l = rows_normalised((1 - r) · fuse_heads(A_l) + r · I),
//!
//! with the heads averaged and r = 0.5 by default (the paper's A + I, normalised). Rollout
//! multiplies them from the first layer up, R_0 = Â_0 and R_l = Â_l · R_{l-1}; flow treats the
//! layers as a network whose edges carry Â's weights as capacities, and takes for every position
//! of layer l and every input token the maximum flow between them, each row normalised to sum
//! to 1. Both are float64, read from the `layer{i}.attention.probs` of one sequence that a dump
//! or a pass kept, on its real tokens only (padding is neither a reader nor read).

mod max_flow;

use ndarray::{s, Array2, Array3, Axis};
use serde::Serialize;

use std::path::Path;

use crate::error::{BertError, Result};
use crate::io::dump::Dump;
use crate::pass::{Memory, Sink, Tensor, TensorView};
use crate::stage::{Stage, StageKind};
use crate::words::Opt;

use max_flow::Network;

/// How one layer's heads become one matrix.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HeadFusion {
    /// Their mean, as the paper's code does.
    #[default]
    Mean,
    /// Each entry's largest over the heads.
    Max,
    /// Each entry's smallest over the heads.
    Min,
}

crate::choice!(HeadFusion { Mean => "mean", Max => "max", Min => "min" });

/// The `format` of `bert-trace rollout --json`, by which `view` knows what it draws.
pub const FORMAT: &str = "bert-trace-rollout/1";

/// The residual connection's weight r in (1 - r) · A + r · I: the paper's 0.5.
pub const RESIDUAL_DEFAULT: f64 = 0.5;

/// Attention flow takes one maximum flow per layer and pair of real tokens, each through up to
/// every layer's n² edges: 44 tokens of MiniLM's 6 layers took 2.6 s on one core of a Zen 3, and
/// the cost grows about as n³ and with the depth. A longer sequence is refused before anything
/// is computed.
pub const FLOW_TOKENS_MAX: usize = 48;

pub const RESIDUAL: Opt = Opt("residual");
pub const HEADS: Opt = Opt("heads");
pub const SEQ: Opt = Opt("seq");
pub const FLOW: Opt = Opt("flow");

/// What to compute, of which sequence of the dump.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RolloutOptions {
    pub seq: usize,
    pub residual: f64,
    pub heads: HeadFusion,
    /// Attention flow as well as rollout.
    pub flow: bool,
}

impl Default for RolloutOptions {
    fn default() -> RolloutOptions {
        RolloutOptions { seq: 0, residual: RESIDUAL_DEFAULT, heads: HeadFusion::Mean, flow: false }
    }
}

/// Rollout (and flow) of one sequence: per layer, an n × n matrix over its real tokens, row
/// `i` the position `positions[i]` of that layer's output, column `j` the input token at
/// `positions[j]`; each row sums to 1.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Rollout {
    pub seq: usize,
    pub residual: f64,
    pub heads: HeadFusion,
    /// The real tokens' positions in the sequence.
    pub positions: Vec<usize>,
    /// Per layer, from the first: what its output reads from the input, through every layer up
    /// to it.
    pub rollout: Vec<Vec<Vec<f64>>>,
    /// Per layer, the same by maximum flow; None unless asked for.
    pub flow: Option<Vec<Vec<Vec<f64>>>>,
}

/// Rollout (and flow, when `options.flow`) of `dump`'s sequence `options.seq`.
pub fn rollout(dump: &Dump, options: &RolloutOptions) -> Result<Rollout> {
    let read = |stage: Stage| dump.entry(&stage.name()).map(|entry| dump.read(entry)).transpose();
    rollout_from(&read, &dump.dir, options, options.seq)
}

/// Rollout (and flow) of the sequence `options.seq` of a pass kept in `memory`; `origin` names
/// the pass in messages.
pub fn rollout_of_pass(memory: &Memory, origin: &Path, options: &RolloutOptions) -> Result<Rollout> {
    let read = |stage: Stage| Ok(memory.get(&stage.name()).cloned());
    rollout_from(&read, origin, options, options.seq)
}

/// Rollout (never flow) of every sequence of `dump`, each layer's probabilities read and made
/// float64 once: what the page of a dump shows. `options.seq` is ignored.
pub fn rollout_of_every_sequence(dump: &Dump, options: &RolloutOptions) -> Result<Vec<Rollout>> {
    let mut kept = std::collections::HashMap::new();
    let mask = Stage::new(StageKind::InputAttentionMask);
    let mut batch = None;
    for stage in std::iter::once(mask).chain((0..).map(|i| Stage::layer(i, StageKind::AttnProbs))) {
        let Some(entry) = dump.entry(&stage.name()) else {
            match stage == mask {
                true => continue,
                false => break,
            }
        };
        batch = batch.or(entry.shape.first().copied());
        kept.insert(stage, dump.read(entry)?.to_f64());
    }
    (0..batch.unwrap_or(1))
        .map(|seq| {
            // Each read hands over only this sequence's slice, `[1, …]`, so that a batch's
            // rollouts cost what one sequence's does, not B copies of the batch. A tensor
            // without that sequence (a malformed dump) is handed over whole, so that the
            // checks of one sequence's rollout name what is wrong with it.
            let sliced = kept.values().all(|tensor| tensor.shape().first().is_some_and(|&b| seq < b));
            let read = |stage: Stage| {
                Ok(kept.get(&stage).map(|tensor| match sliced {
                    true => Tensor::F64(tensor.slice_axis(Axis(0), (seq..seq + 1).into()).to_owned()),
                    false => Tensor::F64(tensor.clone()),
                }))
            };
            let index = if sliced { 0 } else { seq };
            rollout_from(&read, &dump.dir, &RolloutOptions { seq, flow: false, ..*options }, index)
        })
        .collect()
}

/// A sink for a fresh pass that rollout reads: it keeps what rollout and flow read, every
/// layer's attention probabilities and the attention mask (which tokens are real), and nothing
/// else, so that a long text's pass holds one `[B,nh,T,T]` tensor a layer rather than every
/// stage. Its memory is what [`rollout_of_pass`] takes.
#[derive(Default)]
pub struct AttentionKept(pub Memory);

impl Sink for AttentionKept {
    fn wants(&self, stage: &Stage) -> bool {
        matches!(stage.kind, StageKind::AttnProbs | StageKind::InputAttentionMask) && !stage.is_grad()
    }

    fn emit(&mut self, stage: Stage, tensor: TensorView<'_>) -> Result<()> {
        self.0.emit(stage, tensor)
    }
}

/// A stage's tensor, where the stages are kept; None when they lack it.
type Read<'a> = dyn Fn(Stage) -> Result<Option<Tensor>> + 'a;

/// Rollout of the sequence `options.seq`, which is sequence `index` of the tensors `read` gives
/// (the same, unless they are that sequence's slice alone); messages name `options.seq`.
fn rollout_from(read: &Read<'_>, origin: &Path, options: &RolloutOptions, index: usize) -> Result<Rollout> {
    let bad = |problem: String| BertError::Dump { path: origin.into(), problem };
    if !(options.residual.is_finite() && (0.0..=1.0).contains(&options.residual)) {
        return Err(BertError::OptionValue {
            option: RESIDUAL,
            value: options.residual.to_string(),
            accepted: "a number from 0 to 1".into(),
        });
    }
    let layers = attention_of(read, origin, options.seq, index)?;
    let positions = layers.positions.clone();
    let n = positions.len();
    if options.flow && n > FLOW_TOKENS_MAX {
        return Err(bad(format!(
            "sequence {} has {n} real tokens, and {} takes at most {FLOW_TOKENS_MAX}: one maximum flow per layer and \
             pair of tokens",
            options.seq,
            FLOW.on()
        )));
    }
    let augmented: Vec<Array2<f64>> = layers
        .probs
        .iter()
        .map(|probs| with_residual(&fuse(probs, options.heads), options.residual))
        .collect::<std::result::Result<_, _>>()
        .map_err(bad)?;
    let mut rolled = Vec::with_capacity(augmented.len());
    for a in &augmented {
        let next = match rolled.last() {
            None => a.clone(),
            Some(below) => a.dot(below),
        };
        rolled.push(next);
    }
    let flow = options.flow.then(|| flow(&augmented));
    Ok(Rollout {
        seq: options.seq,
        residual: options.residual,
        heads: options.heads,
        positions,
        rollout: rolled.iter().map(rows).collect(),
        flow: flow.map(|layers| layers.iter().map(rows).collect()),
    })
}

impl Rollout {
    /// The `k` input tokens row `row` of `layer` reads most (indices into `positions`, with their
    /// shares), the largest first; ties by position.
    pub fn top(matrix: &[Vec<f64>], row: usize, k: usize) -> Vec<(usize, f64)> {
        let mut ranked: Vec<(usize, f64)> = matrix[row].iter().copied().enumerate().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked.truncate(k);
        ranked
    }
}

/// Every layer's attention probabilities `[nh, n, n]` of one sequence, on its real tokens, as
/// float64.
struct Attention {
    positions: Vec<usize>,
    probs: Vec<Array3<f64>>,
}

fn attention_of(read: &Read<'_>, origin: &Path, seq: usize, index: usize) -> Result<Attention> {
    let bad = |problem: String| BertError::Dump { path: origin.into(), problem };
    let mut probs = Vec::new();
    loop {
        let stage = Stage::layer(probs.len(), StageKind::AttnProbs);
        let Some(tensor) = read(stage)? else { break };
        let tensor = tensor.to_f64();
        let name = &stage.name();
        let tensor = tensor
            .into_dimensionality::<ndarray::Ix4>()
            .map_err(|_| bad(format!("{name} is not of 4 axes [B, nh, T, T]")))?;
        let (b, _, t, t2) = tensor.dim();
        if t != t2 {
            return Err(bad(format!("{name} is {:?}: its last two axes are not both T", tensor.shape())));
        }
        if index >= b {
            return Err(BertError::OptionValue {
                option: SEQ,
                value: seq.to_string(),
                accepted: match b.checked_sub(1) {
                    Some(last) => format!("a sequence of the dump's batch of {b}: 0 to {last}"),
                    None => format!("a sequence of the dump's batch, and {name} has none"),
                },
            });
        }
        probs.push(tensor.index_axis_move(Axis(0), index));
    }
    let Some(first) = probs.first() else {
        let name = Stage::layer(0, StageKind::AttnProbs).name();
        return Err(bad(format!("it has no {name}: rollout reads every layer's attention probabilities")));
    };
    let t = first.dim().1;
    if let Some(other) = probs.iter().position(|p| p.dim().1 != t || p.dim().0 != first.dim().0) {
        return Err(bad(format!("layer {other}'s attention is not of the shape of layer 0's")));
    }
    let mask_name = Stage::new(StageKind::InputAttentionMask).name();
    let positions: Vec<usize> = match read(Stage::new(StageKind::InputAttentionMask))? {
        None => (0..t).collect(),
        Some(mask) => {
            let mask = mask.to_f64();
            if mask.ndim() != 2 || mask.shape()[1] != t || index >= mask.shape()[0] {
                return Err(bad(format!("{mask_name} is {:?}, the attention's T is {t}", mask.shape())));
            }
            (0..t).filter(|&j| mask[[index, j]] != 0.0).collect()
        }
    };
    if positions.is_empty() {
        return Err(bad(format!("sequence {seq} has no real token")));
    }
    let probs = probs.into_iter().map(|p| p.select(Axis(1), &positions).select(Axis(2), &positions)).collect();
    Ok(Attention { positions, probs })
}

/// `[nh, n, n]` → `[n, n]`: the heads fused as `how` says.
fn fuse(probs: &Array3<f64>, how: HeadFusion) -> Array2<f64> {
    let fold = |pick: fn(f64, f64) -> f64| {
        let mut heads = probs.outer_iter();
        let first = heads.next().map(|h| h.to_owned()).unwrap_or_else(|| Array2::zeros((0, 0)));
        heads.fold(first, |mut acc, head| {
            acc.zip_mut_with(&head, |a, &h| *a = pick(*a, h));
            acc
        })
    };
    match how {
        HeadFusion::Mean => probs.mean_axis(Axis(0)).unwrap_or_else(|| Array2::zeros((0, 0))),
        HeadFusion::Max => fold(f64::max),
        HeadFusion::Min => fold(f64::min),
    }
}

/// (1 - r) · A + r · I, each row divided by its sum; refuses a value that is not finite or a
/// row with nothing in it.
fn with_residual(a: &Array2<f64>, r: f64) -> std::result::Result<Array2<f64>, String> {
    if let Some(bad) = a.iter().find(|v| !v.is_finite()) {
        return Err(format!("an attention probability is {bad}: rollout of a value that is not finite is not taken"));
    }
    let mut out = a * (1.0 - r);
    out.diag_mut().iter_mut().for_each(|d| *d += r);
    for mut row in out.rows_mut() {
        let sum: f64 = row.sum();
        if sum <= 0.0 {
            return Err("a row of attention is all zero: there is nothing to follow".into());
        }
        row.mapv_inplace(|v| v / sum);
    }
    Ok(out)
}

/// Per layer l, for each of its positions and each input token, the maximum flow between them
/// through the layers' network (edges from layer j's position a to layer j-1's position b,
/// capacity Â_{j-1}[a, b]), each row normalised to sum to 1.
fn flow(augmented: &[Array2<f64>]) -> Vec<Array2<f64>> {
    let n = augmented.first().map_or(0, |a| a.nrows());
    let node = |layer: usize, position: usize| layer * n + position;
    let mut network = Network::new((augmented.len() + 1) * n);
    for (below, a) in augmented.iter().enumerate() {
        for ((from, to), &capacity) in a.indexed_iter() {
            if capacity > 0.0 {
                network.add_edge(node(below + 1, from), node(below, to), capacity);
            }
        }
    }
    (1..=augmented.len())
        .map(|layer| {
            let mut flows = Array2::<f64>::zeros((n, n));
            for position in 0..n {
                for token in 0..n {
                    flows[[position, token]] = network.max_flow(node(layer, position), node(0, token));
                }
                let mut row = flows.slice_mut(s![position, ..]);
                let sum: f64 = row.sum();
                if sum > 0.0 {
                    row.mapv_inplace(|v| v / sum);
                }
            }
            flows
        })
        .collect()
}

fn rows(matrix: &Array2<f64>) -> Vec<Vec<f64>> {
    matrix.rows().into_iter().map(|row| row.to_vec()).collect()
}
