//! What each stage is computed from, by stage name: the one table that isolation
//! (`crate::diff::isolate`) and `explain` read to recompute a stage from a dump's own values of
//! its inputs, a gradient (`grad.<stage>`) as well as a value. The forward and backward passes do
//! not read it (they stay the plain code of `model/`); a test holds them together by isolating
//! bert-trace's own dumps of every golden, where every stage's own error must be at rounding level.

use crate::stage::{Stage, StageKind::*};

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

/// The stages `stage` reads, in the order its recomputation takes them, in `pass`. Empty for
/// the inputs and the dropout masks, which nothing computes from other stages. `loss` reads
/// whichever of `mlm.loss`, `nsp.loss` and `classifier.loss` a dump has; it is listed with all
/// three.
pub fn inputs(stage: Stage, wiring: Wiring) -> Vec<Stage> {
    if stage.is_grad() {
        return grad_inputs(stage, wiring);
    }
    let at = |kind| Stage::new(kind);
    let here = |kind| Stage::layer(stage.layer.unwrap_or(0), kind);
    // A layer's input: the embeddings for layer 0, the previous layer's output after that.
    let layer_input = || match stage.layer {
        Some(0) | None => wiring.handed_on(Stage::new(EmbLayerNorm)),
        Some(i) => Stage::layer(i - 1, FfnLayerNorm),
    };
    let last_hidden = || wiring.last_hidden();
    match stage.kind {
        InputOriginalIds
        | InputIds
        | InputTokenTypeIds
        | InputAttentionMask
        | InputLabels
        | InputNextSentenceLabel
        | InputClassLabels => Vec::new(),
        EmbWord | EmbPosition => vec![at(InputIds)],
        EmbTokenType => vec![at(InputTokenTypeIds)],
        EmbSum => vec![at(EmbWord), at(EmbTokenType), at(EmbPosition)],
        EmbLayerNorm => vec![at(EmbSum)],
        EmbDropoutMask
        | AttnProbsDropoutMask
        | AttnOutputDropoutMask
        | FfnOutputDropoutMask
        | ClassifierDropoutMask => Vec::new(),
        // What the row says it drops, and its mask.
        EmbDropout | AttnProbsDropout | AttnOutputDropout | FfnOutputDropout | ClassifierDropout => {
            let drops = stage.info().drops.expect("a dropout stage's row says what it drops");
            vec![Stage { kind: drops.input, ..stage }, Stage { kind: drops.mask, ..stage }]
        }
        AttnQuery | AttnKey | AttnValue => vec![layer_input()],
        AttnScores => vec![here(AttnQuery), here(AttnKey), at(InputAttentionMask)],
        AttnProbs => vec![here(AttnScores)],
        AttnContext => vec![wiring.handed_on(here(AttnProbs)), here(AttnValue)],
        AttnOutput => vec![here(AttnContext)],
        AttnResidual => vec![wiring.handed_on(here(AttnOutput)), layer_input()],
        AttnLayerNorm => vec![here(AttnResidual)],
        FfnIntermediate => vec![here(AttnLayerNorm)],
        FfnActivation => vec![here(FfnIntermediate)],
        FfnOutput => vec![here(FfnActivation)],
        FfnResidual => vec![wiring.handed_on(here(FfnOutput)), here(AttnLayerNorm)],
        FfnLayerNorm => vec![here(FfnResidual)],
        PoolerDense => vec![last_hidden()],
        PoolerOutput => vec![at(PoolerDense)],
        MlmTransform => vec![last_hidden()],
        MlmActivation => vec![at(MlmTransform)],
        MlmLayerNorm => vec![at(MlmActivation)],
        MlmLogits => vec![at(MlmLayerNorm)],
        MlmLosses => vec![at(MlmLogits), at(InputLabels)],
        MlmLoss => vec![at(MlmLosses), at(InputLabels)],
        NspLogits => vec![at(PoolerOutput)],
        NspLosses => vec![at(NspLogits), at(InputNextSentenceLabel)],
        NspLoss => vec![at(NspLosses), at(InputNextSentenceLabel)],
        ClassifierLogits => vec![wiring.handed_on(at(PoolerOutput))],
        ClassifierLosses => vec![at(ClassifierLogits), at(InputClassLabels)],
        ClassifierLoss => vec![at(ClassifierLosses), at(InputClassLabels)],
        Loss => vec![at(MlmLoss), at(NspLoss), at(ClassifierLoss)],
        SentencePooled => vec![last_hidden(), at(InputAttentionMask)],
        LensEmbeddings => vec![at(EmbLayerNorm)],
        LensLayer => vec![here(FfnLayerNorm)],
        // A parameter is read, not computed.
        Param(_) => Vec::new(),
    }
}

/// The stages a gradient `grad.<stage>` is computed from by the backward pass, in the order its
/// recomputation takes them: the forward values the rule reads, then the gradients after it.
/// Empty for `grad.loss` (1) and for the parameters' gradients, which sum over every token and
/// are not recomputed alone. In a pass that dropped out, the gradient of a stage before a
/// dropout stage is the dropout stage's times the mask.
fn grad_inputs(stage: Stage, wiring: Wiring) -> Vec<Stage> {
    let at = |kind| Stage::new(kind);
    let grad = |kind| Stage::new(kind).grad();
    let here = |kind| Stage::layer(stage.layer.unwrap_or(0), kind);
    let d_here = |kind| here(kind).grad();
    let value = Stage { of: super::Of::Value, ..stage };
    let dropped = wiring.handed_on(value);
    if dropped != value {
        // d stage = d dropout ⊙ mask.
        let mask = Stage { kind: crate::model::dropout::mask_of(dropped.kind), ..value };
        return match stage.kind {
            // The pooler's output also gets the NSP head's share, which dropout does not touch.
            PoolerOutput => vec![at(PoolerOutput), grad(NspLogits), grad(ClassifierLogits), mask],
            _ => vec![dropped.grad(), mask],
        };
    }
    let last_hidden = wiring.last_hidden();
    // A layer's input (embeddings.layernorm or layer i-1's output) gets its gradient from the
    // layer after it: the attention block's residual and its three projections.
    let next_layer = |next: usize| {
        let there = |kind| Stage::layer(next, kind).grad();
        vec![there(AttnResidual), there(AttnQuery), there(AttnKey), there(AttnValue)]
    };
    match stage.kind {
        Loss | Param(_) => Vec::new(),
        // What the next stage read was the dropout stage: its gradient is computed as the
        // undropped stage's would be without dropout.
        EmbDropout if value != last_hidden => [vec![value], next_layer(0)].concat(),
        AttnOutputDropout => vec![d_here(AttnResidual)],
        FfnOutputDropout => vec![d_here(FfnResidual)],
        ClassifierDropout => vec![at(ClassifierDropout), grad(ClassifierLogits)],
        MlmLoss | NspLoss | ClassifierLoss => vec![grad(Loss)],
        MlmLosses => vec![at(InputLabels), grad(MlmLoss)],
        NspLosses => vec![at(InputNextSentenceLabel), grad(NspLoss)],
        ClassifierLosses => vec![at(InputClassLabels), grad(ClassifierLoss)],
        MlmLogits => vec![at(MlmLogits), at(InputLabels)],
        NspLogits => vec![at(NspLogits), at(InputNextSentenceLabel)],
        ClassifierLogits => vec![at(ClassifierLogits), at(InputClassLabels)],
        MlmLayerNorm => vec![at(MlmLayerNorm), grad(MlmLogits)],
        MlmActivation => vec![at(MlmActivation), grad(MlmLayerNorm)],
        MlmTransform => vec![at(MlmTransform), grad(MlmActivation)],
        // The pooler's output: from the NSP head and the classifier, those the loss used.
        PoolerOutput => vec![at(PoolerOutput), grad(NspLogits), grad(ClassifierLogits)],
        PoolerDense => vec![at(PoolerOutput), grad(PoolerOutput)],
        // The last hidden state: from the heads.
        FfnLayerNorm | EmbLayerNorm | EmbDropout if value == last_hidden => {
            vec![last_hidden, grad(MlmTransform), grad(PoolerDense)]
        }
        FfnLayerNorm => [vec![value], next_layer(stage.layer.unwrap_or(0) + 1)].concat(),
        EmbLayerNorm => [vec![value], next_layer(0)].concat(),
        FfnResidual => vec![here(FfnResidual), d_here(FfnLayerNorm)],
        FfnOutput => vec![d_here(FfnResidual)],
        FfnActivation => vec![here(FfnActivation), d_here(FfnOutput)],
        FfnIntermediate => vec![here(FfnIntermediate), d_here(FfnActivation)],
        AttnLayerNorm => vec![here(AttnLayerNorm), d_here(FfnResidual), d_here(FfnIntermediate)],
        AttnResidual => vec![here(AttnResidual), d_here(AttnLayerNorm)],
        AttnOutput => vec![d_here(AttnResidual)],
        AttnContext => vec![here(AttnContext), d_here(AttnOutput)],
        // The context read the probabilities dropout left, in a pass that dropped out.
        AttnProbs | AttnProbsDropout | AttnValue => {
            vec![wiring.handed_on(here(AttnProbs)), here(AttnValue), d_here(AttnContext)]
        }
        AttnScores => vec![here(AttnProbs), d_here(AttnProbs)],
        AttnQuery | AttnKey => vec![here(AttnQuery), here(AttnKey), d_here(AttnScores)],
        EmbSum => vec![at(EmbSum), grad(EmbLayerNorm)],
        EmbWord | EmbPosition | EmbTokenType => vec![grad(EmbSum)],
        // No other stage has a gradient.
        _ => Vec::new(),
    }
}

/// Where `stage`'s inputs (as [`inputs`] lists them) start to be alternatives, of which a dump
/// needs only one or more: `loss` sums whichever of the losses there are, and the pooler's output
/// and the last hidden state's gradients add whichever heads the loss used. None: every input is
/// needed.
pub fn alternatives_from(stage: Stage, wiring: Wiring) -> Option<usize> {
    let last_hidden = wiring.last_hidden();
    let value = Stage { of: super::Of::Value, ..stage };
    match stage.kind {
        Loss if !stage.is_grad() => Some(0),
        PoolerOutput if stage.is_grad() => Some(1),
        FfnLayerNorm | EmbLayerNorm | EmbDropout if stage.is_grad() && value == last_hidden => Some(1),
        _ => None,
    }
}
