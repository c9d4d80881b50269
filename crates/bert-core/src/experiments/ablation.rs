//! Each attention head ablated alone, and what it costs the prediction of a masked word
//! (`bert-trace ablate`). Michel et al., *Are Sixteen Heads Really Better than One?* (2019),
//! measured it this way: most heads can go, a few cannot.
//!
//! Ablating a head of layer L leaves the embeddings and layers 0..L unchanged, so their output
//! is computed once and each ablation runs only layers L.. again: for 12 layers of 12 heads,
//! 936 layer passes instead of 1,728.

use ndarray::Array3;
use serde::Serialize;

use super::intervention::{AblateWith, Ablation, Interventions};
use super::readout::failed;
use crate::error::Result;
use crate::io::tokenizer::Batch;
use crate::model::{additive_mask, BertModel};
use crate::ops::{self, Float};
use crate::pass::hook::Hook;
use crate::pass::{Discard, Tracer};
use crate::words::Choice;

/// The format of `bert-trace ablate --json`, which `bert-trace view` reads.
pub const FORMAT: &str = "bert-trace-ablate/1";

/// One head's ablation.
#[derive(Clone, Debug, Serialize)]
pub struct HeadEffect {
    pub layer: usize,
    pub head: usize,
    /// log p(target) with the head ablated.
    pub log_prob: f64,
    /// The change from the unablated model: negative when the head helped.
    pub change: f64,
    /// The target's rank with the head ablated (1 = the top prediction); None (`null`) when the
    /// prediction is not finite.
    pub rank: Option<usize>,
}

/// Every head's ablation, for one masked position and target.
#[derive(Clone, Debug, Serialize)]
pub struct HeadScan {
    pub format: &'static str,
    pub with: &'static str,
    /// (sequence, position) of the `[MASK]`.
    pub position: (usize, usize),
    pub target: String,
    pub target_id: u32,
    /// log p(target) and its rank in the unablated model (None when not finite).
    pub log_prob: f64,
    pub rank: Option<usize>,
    /// `[layers][heads]`: the change in log p(target) with that head ablated.
    pub grid: Vec<Vec<f64>>,
    /// Every head, the most harmful ablation (the largest fall) first; a head whose change is
    /// not a number last.
    pub heads: Vec<HeadEffect>,
}

impl<F: Float> BertModel<F> {
    /// Ablates each head alone (its slice of the context replaced `with` zeros or its mean) and
    /// reads log p(`target`) at `position`.
    pub fn scan_heads(
        &self,
        batch: &Batch,
        position: (usize, usize),
        target: (&str, u32),
        with: AblateWith,
    ) -> Result<HeadScan> {
        self.check(batch)?;
        ops::with_kernels(self.kernels, || self.scan(batch, position, target, with))
    }

    fn scan(&self, batch: &Batch, position: (usize, usize), target: (&str, u32), with: AblateWith) -> Result<HeadScan> {
        let mask = additive_mask::<F>(&batch.attention_mask);
        let mut discard = Discard;
        let mut plain = Tracer::new(&mut discard, None, None);
        plain.set_attention_mask(&batch.attention_mask);
        // inputs[L]: what layer L reads, unchanged by an ablation in layer L or later.
        let mut inputs: Vec<Array3<F>> = vec![self.embeddings.forward(batch, None, &mut plain).map_err(failed)?];
        for layer_idx in 0..self.layers.len() {
            let next = self.layers[layer_idx].forward(layer_idx, &inputs[layer_idx], mask.as_ref(), None, &mut plain);
            inputs.push(next.map_err(failed)?);
        }
        let unablated = self.readout(inputs.last().expect("the embeddings' output"), position)?;
        let (log_prob, rank) = (unablated.log_prob(target.1), unablated.rank(target.1));

        let n_heads = self.config.num_attention_heads;
        let mut grid = Vec::with_capacity(self.layers.len());
        let mut heads = Vec::new();
        // inputs[L] for each layer L: the last entry is the encoder's output, not a layer's input.
        for (layer, input) in inputs.iter().take(self.layers.len()).enumerate() {
            let mut row = Vec::with_capacity(n_heads);
            for head in 0..n_heads {
                let ablation = Ablation { layer, head: Some(head), with };
                let mut hook = Interventions { ablations: vec![ablation], n_heads, ..Interventions::default() };
                let mut discard = Discard;
                let mut tracer = Tracer::new(&mut discard, None, Some(&mut hook as &mut dyn Hook));
                tracer.set_attention_mask(&batch.attention_mask);
                let hidden = self.layers_from(layer, input.clone(), mask.as_ref(), &mut tracer).map_err(failed)?;
                let readout = self.readout(&hidden, position)?;
                let ablated = readout.log_prob(target.1);
                row.push(ablated - log_prob);
                heads.push(HeadEffect {
                    layer,
                    head,
                    log_prob: ablated,
                    change: ablated - log_prob,
                    rank: readout.rank(target.1),
                });
            }
            grid.push(row);
        }
        heads.sort_by(|a, b| a.change.is_nan().cmp(&b.change.is_nan()).then(a.change.total_cmp(&b.change)));
        Ok(HeadScan {
            format: FORMAT,
            with: with.name(),
            position,
            target: target.0.to_string(),
            target_id: target.1,
            log_prob,
            rank,
            grid,
            heads,
        })
    }
}
