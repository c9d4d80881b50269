//! Which heads matter, two ways (`bert-trace heads`).
//!
//! - **Importance**, after Michel et al., *Are Sixteen Heads Really Better than One?* (2019):
//!   put a gate ξ_h = 1 on head h's slice of its layer's `attention.context`; the importance of
//!   the head is |∂L/∂ξ_h|, which the backward pass gives without a gate: the context is what
//!   the gate multiplies, so ∂L/∂ξ_h = Σ over the batch's tokens and the head's hs features of
//!   `grad.layer{i}.attention.context` · `layer{i}.attention.context`. As the paper's code does,
//!   each layer's importances are divided by their ℓ2 norm, the heads ranked once over the whole
//!   model, and the loss measured with the least important k heads masked (their slice of the
//!   context zeroed), k = round(p · N) for p = 0, 10%, ..., 100%: the pruning curve.
//! - **Statistics**, after Clark et al., *What Does BERT Look At?* (2019): how much attention
//!   each head gives `[CLS]`, `[SEP]`, punctuation, the query's own token, the one before and
//!   the one after, and the entropy of its distribution, averaged over the real query tokens.

use ndarray::{ArrayD, Axis, Ix4};
use serde::Serialize;
use unicode_categories::UnicodeCategories;

use super::intervention::{AblateWith, Ablation, Interventions};
use crate::error::{BertError, Result};
use crate::io::tokenizer::{Batch, CLS, SEP};
use crate::model::{BertModel, Pass};
use crate::ops::Float;
use crate::pass::{Sink, TensorView};
use crate::stage::{Stage, StageKind};

/// The format of `bert-trace heads --json`.
pub const FORMAT: &str = "bert-trace-heads/1";

/// The shares of the heads the pruning curve masks: 0, 10%, ..., 100%.
pub const SHARES: [f64; 11] = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];

/// Michel et al.'s importance of every head, for one batch's loss.
#[derive(Clone, Debug, Serialize)]
pub struct Importance {
    /// `[layers][heads]`: |∂L/∂ξ_h|.
    pub raw: Vec<Vec<f64>>,
    /// Each layer's row divided by its ℓ2 norm.
    pub normalized: Vec<Vec<f64>>,
    /// Every head as `[layer, head]`, the least important first (by `normalized`).
    pub order: Vec<[usize; 2]>,
    /// The loss with the least important heads masked.
    pub curve: Vec<PrunePoint>,
}

/// One point of the pruning curve.
#[derive(Clone, Debug, Serialize)]
pub struct PrunePoint {
    /// The share of the heads masked.
    pub share: f64,
    pub masked: usize,
    pub loss: f64,
}

/// Clark et al.'s statistics of every head, each `[layers][heads]`, averaged over the batch's
/// real query tokens.
#[derive(Clone, Debug, Serialize)]
pub struct Statistics {
    /// Attention to `[CLS]`.
    pub cls: Vec<Vec<f64>>,
    /// Attention to `[SEP]`.
    pub sep: Vec<Vec<f64>>,
    /// Attention to tokens made of punctuation alone (`.`, `,`, `。`, `，`).
    pub punctuation: Vec<Vec<f64>>,
    /// Attention to the query's own position.
    #[serde(rename = "self")]
    pub own: Vec<Vec<f64>>,
    /// Attention to the previous token (0 for the first).
    pub previous: Vec<Vec<f64>>,
    /// Attention to the next real token (0 for the last).
    pub next: Vec<Vec<f64>>,
    /// −Σ p ln p of each query's distribution, in nats.
    pub entropy: Vec<Vec<f64>>,
}

/// Keeps every layer's context and its gradient, or its attention probabilities.
struct Keep {
    kinds: &'static [(StageKind, bool)],
    kept: Vec<(Stage, ArrayD<f64>)>,
}

impl Sink for Keep {
    fn wants(&self, stage: &Stage) -> bool {
        self.kinds.iter().any(|&(kind, grad)| stage.kind == kind && stage.is_grad() == grad)
    }

    fn emit(&mut self, stage: Stage, tensor: TensorView<'_>) -> Result<()> {
        let values = match tensor {
            TensorView::F32(a) => a.mapv(f64::from),
            TensorView::F64(a) => a.to_owned(),
            TensorView::I64(_) => unreachable!("only float stages are kept"),
        };
        self.kept.push((stage, values));
        Ok(())
    }
}

impl Keep {
    fn get(&self, kind: StageKind, layer: usize, grad: bool) -> &ArrayD<f64> {
        let found = self.kept.iter().find(|(s, _)| s.kind == kind && s.layer == Some(layer) && s.is_grad() == grad);
        &found.unwrap_or_else(|| panic!("the pass computed layer{layer}'s {kind:?}")).1
    }
}

impl<F: Float> BertModel<F> {
    /// Michel et al.'s importance of every head for the loss of `batches` (their labels say
    /// which: an MLM target, an NSP label, a classifier's label), and the pruning curve. As the
    /// paper's code does, each batch's |∂L/∂ξ| is taken, then their mean, and the curve's loss is
    /// the mean of the batches' losses. `progress` hears (passes done, passes in all).
    pub fn head_importance(&self, batches: &[Batch], progress: &mut dyn FnMut(usize, usize)) -> Result<Importance> {
        if batches.is_empty() {
            return Err(BertError::Labels("no text to measure the heads on".into()));
        }
        for batch in batches {
            self.check_backward(batch)?;
        }
        let (n_layers, n_heads) = (self.layers.len(), self.config.num_attention_heads);
        let hs = self.config.hidden_size / n_heads;
        let passes = batches.len() * (1 + SHARES.len());
        let mut raw = vec![vec![0.0; n_heads]; n_layers];
        for (done, batch) in batches.iter().enumerate() {
            let mut keep =
                Keep { kinds: &[(StageKind::AttnContext, false), (StageKind::AttnContext, true)], kept: Vec::new() };
            self.trace_with(batch, &mut keep, Pass { backward: true, ..Pass::default() })?;
            for (layer, row) in raw.iter_mut().enumerate() {
                let context = keep.get(StageKind::AttnContext, layer, false);
                let grad = keep.get(StageKind::AttnContext, layer, true);
                for (head, importance) in row.iter_mut().enumerate() {
                    let columns = ndarray::s![.., .., head * hs..(head + 1) * hs];
                    let (c, g) = (context.slice(columns), grad.slice(columns));
                    *importance += c.iter().zip(g.iter()).map(|(c, g)| c * g).sum::<f64>().abs() / batches.len() as f64;
                }
            }
            progress(done + 1, passes);
        }
        if let Some((layer, head)) = heads(&raw).find(|&(l, h)| !raw[l][h].is_finite()) {
            return Err(BertError::Diverged {
                step: 0,
                problem: format!(
                    "the importance of {} is {}: the loss is not finite",
                    super::AttentionHead { layer, head },
                    raw[layer][head]
                ),
            });
        }
        let normalized: Vec<Vec<f64>> = raw
            .iter()
            .map(|row| {
                let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
                row.iter().map(|v| if norm > 0.0 { v / norm } else { 0.0 }).collect()
            })
            .collect();
        let mut order: Vec<[usize; 2]> = heads(&normalized).map(|(l, h)| [l, h]).collect();
        // Least important first; ties keep the model's order, so that the ranking is one.
        order.sort_by(|a, b| normalized[a[0]][a[1]].total_cmp(&normalized[b[0]][b[1]]));
        let mut curve = Vec::new();
        for (point, share) in SHARES.into_iter().enumerate() {
            let masked = (share * order.len() as f64).round() as usize;
            let mut loss = 0.0;
            for (i, batch) in batches.iter().enumerate() {
                loss += self.loss_without(batch, &order[..masked])? / batches.len() as f64;
                progress(batches.len() * (1 + point) + i + 1, passes);
            }
            if !loss.is_finite() {
                return Err(BertError::Diverged {
                    step: 0,
                    problem: format!(
                        "the loss with {masked} heads masked is {loss}: not a number to draw a curve with"
                    ),
                });
            }
            curve.push(PrunePoint { share, masked, loss });
        }
        Ok(Importance { raw, normalized, order, curve })
    }

    /// `batch`'s loss with the heads `masked` (`[layer, head]`) zeroed in their layer's context.
    pub fn loss_without(&self, batch: &Batch, masked: &[[usize; 2]]) -> Result<f64> {
        let ablations =
            masked.iter().map(|&[layer, head]| Ablation { layer, head: Some(head), with: AblateWith::Zero });
        let mut hook = Interventions {
            patches: Vec::new(),
            ablations: ablations.collect(),
            n_heads: self.config.num_attention_heads,
        };
        let mut discard = crate::pass::Discard;
        let pass = Pass { hook: Some(&mut hook as &mut dyn crate::pass::hook::Hook), ..Pass::default() };
        let traced = self.trace_with(batch, &mut discard, pass)?;
        Ok(traced.outputs.loss.expect("a batch with labels has a loss").to_f64().unwrap_or(f64::NAN))
    }

    /// Clark et al.'s statistics of every head over `batches`, averaged over all their real
    /// query tokens.
    pub fn head_statistics(&self, batches: &[Batch]) -> Result<Statistics> {
        let (n_layers, n_heads) = (self.layers.len(), self.config.num_attention_heads);
        // [layers][heads][7]: the sums over every real query token, divided once at the end.
        let mut sums = vec![vec![[0.0f64; 7]; n_heads]; n_layers];
        let mut queries = 0usize;
        for batch in batches {
            self.check(batch)?;
            queries += self.add_statistics(batch, &mut sums)?;
        }
        if let Some((layer, head)) = heads(&sums).find(|&(l, h)| sums[l][h].iter().any(|v| !v.is_finite())) {
            return Err(BertError::Diverged {
                step: 0,
                problem: format!(
                    "{}'s attention is not finite: no statistic to give",
                    super::AttentionHead { layer, head }
                ),
            });
        }
        let grid = |which: usize| -> Vec<Vec<f64>> {
            sums.iter().map(|row| row.iter().map(|s| s[which] / queries.max(1) as f64).collect()).collect()
        };
        Ok(Statistics {
            cls: grid(0),
            sep: grid(1),
            punctuation: grid(2),
            own: grid(3),
            previous: grid(4),
            next: grid(5),
            entropy: grid(6),
        })
    }

    /// Adds `batch`'s sums of the seven statistics into `sums`; returns its real query tokens.
    fn add_statistics(&self, batch: &Batch, sums: &mut [Vec<[f64; 7]>]) -> Result<usize> {
        let mut keep = Keep { kinds: &[(StageKind::AttnProbs, false)], kept: Vec::new() };
        self.trace_with(batch, &mut keep, Pass::default())?;
        let token = |id: i64| self.tokenizer.id_to_token(id as u32).unwrap_or_default();
        let (cls, sep) =
            (self.tokenizer.token_to_id(CLS).map(i64::from), self.tokenizer.token_to_id(SEP).map(i64::from));
        let punctuation = |id: i64| {
            let text = token(id);
            !text.is_empty() && text.chars().all(|c| c.is_ascii_punctuation() || c.is_punctuation())
        };
        let (b, t) = batch.dims();
        let real = |seq: usize, pos: usize| batch.attention_mask[[seq, pos]] == 1;
        let queries = (0..b).flat_map(|seq| (0..t).map(move |pos| (seq, pos))).filter(|&(s, p)| real(s, p)).count();
        for (layer, row) in sums.iter_mut().enumerate() {
            let probs = keep.get(StageKind::AttnProbs, layer, false);
            let probs = probs.view().into_dimensionality::<Ix4>().expect("[B,nh,T,T] probabilities");
            for (head, sums) in row.iter_mut().enumerate() {
                for seq in 0..b {
                    let p = probs.index_axis(Axis(0), seq);
                    let p = p.index_axis(Axis(0), head);
                    let ids = batch.ids.row(seq);
                    for q in (0..t).filter(|&q| real(seq, q)) {
                        let row = p.row(q);
                        let to =
                            |keep: &dyn Fn(usize) -> bool| (0..t).filter(|&k| keep(k)).map(|k| row[k]).sum::<f64>();
                        sums[0] += to(&|k| Some(ids[k]) == cls);
                        sums[1] += to(&|k| Some(ids[k]) == sep);
                        sums[2] += to(&|k| real(seq, k) && punctuation(ids[k]));
                        sums[3] += row[q];
                        sums[4] += if q > 0 { row[q - 1] } else { 0.0 };
                        sums[5] += if q + 1 < t && real(seq, q + 1) { row[q + 1] } else { 0.0 };
                        sums[6] -= row.iter().filter(|&&v| v > 0.0).map(|&v| v * v.ln()).sum::<f64>();
                    }
                }
            }
        }
        Ok(queries)
    }
}

/// Every `(layer, head)` of a `[layers][heads]` grid, in the model's order.
fn heads<T>(grid: &[Vec<T>]) -> impl Iterator<Item = (usize, usize)> + '_ {
    grid.iter().enumerate().flat_map(|(layer, row)| (0..row.len()).map(move |head| (layer, head)))
}
