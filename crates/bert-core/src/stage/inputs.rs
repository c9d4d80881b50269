//! What each stage is computed from, by stage name: the one table that isolation
//! (`crate::diff::isolate`) reads to recompute a stage from a dump's own values of its inputs. The
//! forward pass does not read it (it stays the plain code of `model/`); a test holds the two
//! together by isolating bert-trace's own dumps of every golden, where every stage's own error
//! must be at rounding level.

use crate::stage::{Stage, StageKind::*};

/// The stages `stage` reads, in the order its recomputation takes them, for a model of
/// `n_layers` layers. Empty for the inputs, which nothing computes. `loss` reads whichever of
/// `mlm.loss` and `nsp.loss` a dump has; it is listed with both.
pub fn inputs(stage: Stage, n_layers: usize) -> Vec<Stage> {
    let at = |kind| Stage::new(kind);
    let here = |kind| Stage::layer(stage.layer.unwrap_or(0), kind);
    // A layer's input: the embeddings for layer 0, the previous layer's output after that.
    let layer_input = || match stage.layer {
        Some(0) | None => Stage::new(EmbLayerNorm),
        Some(i) => Stage::layer(i - 1, FfnLayerNorm),
    };
    let last_hidden =
        || if n_layers == 0 { Stage::new(EmbLayerNorm) } else { Stage::layer(n_layers - 1, FfnLayerNorm) };
    match stage.kind {
        InputOriginalIds | InputIds | InputTokenTypeIds | InputAttentionMask | InputLabels | InputNextSentenceLabel => {
            Vec::new()
        }
        EmbWord | EmbPosition => vec![at(InputIds)],
        EmbTokenType => vec![at(InputTokenTypeIds)],
        EmbSum => vec![at(EmbWord), at(EmbTokenType), at(EmbPosition)],
        EmbLayerNorm => vec![at(EmbSum)],
        AttnQuery | AttnKey | AttnValue => vec![layer_input()],
        AttnScores => vec![here(AttnQuery), here(AttnKey), at(InputAttentionMask)],
        AttnProbs => vec![here(AttnScores)],
        AttnContext => vec![here(AttnProbs), here(AttnValue)],
        AttnOutput => vec![here(AttnContext)],
        AttnResidual => vec![here(AttnOutput), layer_input()],
        AttnLayerNorm => vec![here(AttnResidual)],
        FfnIntermediate => vec![here(AttnLayerNorm)],
        FfnActivation => vec![here(FfnIntermediate)],
        FfnOutput => vec![here(FfnActivation)],
        FfnResidual => vec![here(FfnOutput), here(AttnLayerNorm)],
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
        Loss => vec![at(MlmLoss), at(NspLoss)],
        ClassifierLogits => vec![at(PoolerOutput)],
        SentencePooled => vec![last_hidden(), at(InputAttentionMask)],
        LensEmbeddings => vec![at(EmbLayerNorm)],
        LensLayer => vec![here(FfnLayerNorm)],
        // A parameter is read, not computed.
        Param(_) => Vec::new(),
    }
}
