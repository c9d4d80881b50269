//! What each stage is computed from, in one pass: the stage table's `reads` and `grad_reads`
//! columns made concrete, which isolation (`crate::divergence::isolate`) and `explain` read to
//! recompute a stage from a dump's own values of its inputs, a gradient (`grad.<stage>`) as well
//! as a value. The forward and backward passes do
//! not read it (they stay the plain code of `model/`); a test holds them together by isolating
//! bert-trace's own dumps of every golden, where every stage's own error must be at rounding level.

use crate::stage::{Read, Stage, StageKind, StageKind::*};

/// How a dump's pass is wired, as far as what a stage reads depends on it: the model's depth, and
/// whether the pass dropped out (a training step), when a stage reads what dropout left of
/// the one before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wiring {
    pub n_layers: usize,
    pub dropout: bool,
}

impl Wiring {
    /// What `stage` hands on to the stages after it: its dropout stage in a pass that dropped
    /// out, else itself.
    pub fn handed_on(self, stage: Stage) -> Stage {
        match (self.dropout, stage.kind.dropped_by()) {
            (true, Some(dropped)) => Stage { kind: dropped, ..stage },
            _ => stage,
        }
    }

    /// The last hidden state, which the heads read.
    fn last_hidden(self) -> Stage {
        match self.n_layers {
            0 => self.handed_on(Stage::new(EmbLayerNorm)),
            n => Stage::layer(n - 1, FfnLayerNorm),
        }
    }
}

/// The stages `stage` reads, in the order its recomputation takes them, in a pass wired as
/// `wiring`: the table's `reads` (or, for a gradient, `grad_reads`) column made concrete. Empty for
/// the inputs, the dropout masks and the parameters, which nothing computes from other stages.
/// `loss` reads whichever of `mlm.loss`, `nsp.loss` and `classifier.loss` a dump has; it is
/// listed with all three.
pub fn inputs(stage: Stage, wiring: Wiring) -> Vec<Stage> {
    resolve(stage, wiring).0
}

/// Where `stage`'s inputs (as [`inputs`] lists them) start to be alternatives, of which a dump
/// needs only one or more: `loss` sums whichever of the losses there are, and the pooler's output
/// and the last hidden state's gradients add whichever heads the loss used. None: every input is
/// needed.
pub fn alternatives_from(stage: Stage, wiring: Wiring) -> Option<usize> {
    resolve(stage, wiring).1
}

/// Whether the gradient of `stage` (a `grad.*` stage) is, in a pass wired as `wiring`, the
/// gradient of the dropout stage that drops it times that stage's mask: in a pass that dropped
/// out, for a stage a dropout stage drops, unless its row says how it meets dropout
/// (`DroppedMask`, the pooler's output, which the NSP head reads undropped).
pub fn through_dropout(stage: Stage, wiring: Wiring) -> bool {
    let value = Stage { of: super::Of::Value, ..stage };
    stage.is_grad() && wiring.handed_on(value) != value && !stage.kind.info().grad_reads.contains(&Read::DroppedMask)
}

/// The row's reads made concrete, and where alternatives start among them.
fn resolve(stage: Stage, wiring: Wiring) -> (Vec<Stage>, Option<usize>) {
    let info = stage.kind.info();
    let value = Stage { of: super::Of::Value, ..stage };
    let reads = match stage.is_grad() {
        true => info.grad_reads,
        false => info.reads,
    };
    // In a pass that dropped out, the gradient of a stage before a dropout stage is the dropout
    // stage's times the mask, unless its row says how it meets dropout (`DroppedMask`).
    let dropped = wiring.handed_on(value);
    if through_dropout(stage, wiring) {
        let mask = Stage { kind: crate::model::dropout::mask_of(dropped.kind), ..value };
        return (vec![dropped.grad(), mask], None);
    }
    // A stage of `kind` in the reader's layer, when the kind repeats per layer.
    let at = |kind: StageKind| match kind.per_layer() {
        true => Stage::layer(stage.layer.unwrap_or(0), kind),
        false => Stage::new(kind),
    };
    let (mut stages, mut alternatives) = (Vec::with_capacity(reads.len() + 3), None);
    for read in reads {
        match *read {
            Read::At(kind) => stages.push(at(kind)),
            Read::HandedOn(kind) => stages.push(wiring.handed_on(at(kind))),
            Read::Grad(kind) => stages.push(at(kind).grad()),
            // A layer's input: the embeddings for layer 0, the previous layer's output after that.
            Read::LayerInput => stages.push(match stage.layer {
                Some(0) | None => wiring.handed_on(Stage::new(EmbLayerNorm)),
                Some(i) => Stage::layer(i - 1, FfnLayerNorm),
            }),
            Read::LastHidden => stages.push(wiring.last_hidden()),
            Read::Readers => {
                // The reader is the embeddings' output (layer 0's input) or layer i's output
                // (layer i + 1's input); after the last layer, the heads read it.
                let next = match stage.kind {
                    FfnLayerNorm => stage.layer.unwrap_or(0) + 1,
                    _ => 0,
                };
                if next == wiring.n_layers {
                    alternatives = Some(stages.len());
                    stages.extend([Stage::new(MlmTransform).grad(), Stage::new(PoolerDense).grad()]);
                } else {
                    let there = |kind| Stage::layer(next, kind).grad();
                    stages.extend([there(AttnResidual), there(AttnQuery), there(AttnKey), there(AttnValue)]);
                }
            }
            Read::DroppedMask => {
                if dropped != value {
                    stages.push(Stage { kind: crate::model::dropout::mask_of(dropped.kind), ..value });
                }
            }
            Read::AnyOf => alternatives = Some(stages.len()),
        }
    }
    (stages, alternatives)
}
