//! The logit lens for an encoder (`bert-trace lens`). BERT normalises every layer's output
//! (post-norm), so each is on the scale the MLM head was trained on and can go straight through
//! it: one prediction per layer, from the embeddings to the last, whose prediction is the
//! model's own. The pass computes them as the `lens.*` stages; this reads them at the positions
//! asked for.

use ndarray::{Axis, Ix3};
use serde::Serialize;

use super::readout::Readout;
use crate::error::Result;
use crate::io::tokenizer::Batch;
use crate::model::{BertModel, Pass};
use crate::ops::{self, Float};
use crate::pass::{Sink, TensorView};
use crate::stage::{Part, Stage};

/// One layer's guess at one position.
#[derive(Clone, Debug, Serialize)]
pub struct LensRow {
    /// `lens.embeddings.logits` or `lens.layer{i}.logits`.
    pub stage: String,
    /// The `k` most probable words: (id, probability).
    pub top: Vec<(u32, f64)>,
    /// The target's probability and rank (None when not finite), when there is a target.
    pub target: Option<(f64, Option<usize>)>,
}

/// Every layer's guess at one position, the embeddings first.
#[derive(Clone, Debug, Serialize)]
pub struct LensAt {
    /// (sequence, position)
    pub position: (usize, usize),
    pub rows: Vec<LensRow>,
}

/// Keeps the lens stages' rows at the positions asked for, and nothing else.
struct LensRows<'a> {
    positions: &'a [(usize, usize)],
    /// `[position][layer]`
    readouts: Vec<Vec<(Stage, Readout)>>,
}

impl Sink for LensRows<'_> {
    fn wants(&self, stage: &Stage) -> bool {
        stage.info().part == Part::Lens
    }

    fn emit(&mut self, stage: Stage, tensor: TensorView<'_>) -> Result<()> {
        for (at, &(seq, pos)) in self.positions.iter().enumerate() {
            let row = match &tensor {
                TensorView::F32(logits) => logits
                    .view()
                    .into_dimensionality::<Ix3>()
                    .map(|l| ops::log_softmax_rows(l.index_axis(Axis(0), seq).row(pos).insert_axis(Axis(0)))),
                TensorView::F64(logits) => logits
                    .view()
                    .into_dimensionality::<Ix3>()
                    .map(|l| ops::log_softmax_rows(l.index_axis(Axis(0), seq).row(pos).insert_axis(Axis(0)))),
                TensorView::I64(_) => unreachable!("the lens's logits are floats"),
            }
            .expect("the lens's logits are [B,T,V]");
            self.readouts[at].push((stage, Readout { log_probs: row.row(0).to_owned() }));
        }
        Ok(())
    }
}

impl<F: Float> BertModel<F> {
    /// Every layer's `k` best guesses at each of `positions` (sequence, position), and the
    /// target's probability and rank there when `target` is given.
    pub fn lens(
        &self,
        batch: &Batch,
        positions: &[(usize, usize)],
        k: usize,
        target: Option<u32>,
    ) -> Result<Vec<LensAt>> {
        let mut sink = LensRows { positions, readouts: vec![Vec::new(); positions.len()] };
        self.trace_with(batch, &mut sink, Pass { lens: true, ..Pass::default() })?;
        let lens = positions.iter().zip(sink.readouts).map(|(&position, readouts)| LensAt {
            position,
            rows: readouts
                .into_iter()
                .map(|(stage, readout)| LensRow {
                    stage: stage.name(),
                    top: readout.top(k),
                    target: target.map(|id| (readout.log_prob(id).exp(), readout.rank(id))),
                })
                .collect(),
        });
        Ok(lens.collect())
    }
}
