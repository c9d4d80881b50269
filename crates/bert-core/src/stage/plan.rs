//! Which stages a pass produces, in its order: [`plan`] for a model's heads and an input's
//! objectives, the forward pass's stages ([`forward_plan`]), then, for a backward pass, the
//! gradients in the order the backward computes them ([`backward_plan`]), the parameters last
//! in the order of `named_parameters()` ([`parameters`]).

use super::{Objectives, ParamKind, Part, Stage, StageKind, StageKind::*, STAGES};

/// Which optional output heads a model has (not its attention heads, which `heads` ranks);
/// decides which stages follow the encoder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct OutputHeads {
    pub pooler: bool,
    pub mlm: bool,
    pub nsp: bool,
    pub classifier: bool,
    /// sentence-transformers' mean pooling, from `1_Pooling/config.json`.
    pub sentence: bool,
}

/// Every stage a model with `n_layers` layers and these heads produces for an input with these
/// objectives, in execution order.
pub fn plan(n_layers: usize, heads: OutputHeads, objectives: Objectives) -> Vec<Stage> {
    let forward = forward_plan(n_layers, heads, objectives);
    if objectives.backward && objectives.any_labels() {
        let grads = backward_plan(&forward, n_layers, heads, objectives);
        return forward.into_iter().chain(grads).collect();
    }
    forward
}

/// The forward pass's stages alone.
fn forward_plan(n_layers: usize, heads: OutputHeads, objectives: Objectives) -> Vec<Stage> {
    let mut stages = Vec::new();
    for info in STAGES {
        let has_part = match info.part {
            Part::Input | Part::Embeddings => true,
            Part::Attention | Part::Ffn => false,
            Part::Pooler => heads.pooler,
            Part::Mlm => heads.mlm,
            Part::Nsp => heads.nsp,
            Part::Objective => {
                (heads.mlm && objectives.mlm_labels)
                    || (heads.nsp && objectives.nsp_labels)
                    || (heads.classifier && heads.pooler && objectives.class_labels)
            }
            Part::Classifier => heads.classifier,
            Part::Sentence => heads.sentence,
            Part::Lens => heads.mlm,
            // The parameters are listed by `backward_plan`, as gradients.
            Part::Param => false,
        };
        let present = has_part && info.needs.met_by(objectives);
        if present && info.kind.per_layer() && !info.kind.in_layer() {
            stages.extend((0..n_layers).map(|layer_idx| Stage::layer(layer_idx, info.kind)));
        } else if present {
            stages.push(Stage::new(info.kind));
        }
        // The encoder layers go right after the embeddings' last stage.
        if info.kind == EmbDropout {
            for layer_idx in 0..n_layers {
                for layer_info in STAGES.iter().filter(|s| s.kind.in_layer() && s.needs.met_by(objectives)) {
                    stages.push(Stage::layer(layer_idx, layer_info.kind));
                }
            }
        }
    }
    stages
}

/// The parameters of a model with `n_layers` layers and these heads, in the order of
/// transformers' `BertForPreTraining.named_parameters()`: the embeddings, each layer's, then
/// the pooler's and the heads'.
pub fn parameters(n_layers: usize, heads: OutputHeads) -> Vec<Stage> {
    let params = || {
        STAGES.iter().filter_map(|info| match info.kind {
            StageKind::Param(param) => Some(param),
            _ => None,
        })
    };
    let has = |param: ParamKind| match param {
        ParamKind::PoolerWeight | ParamKind::PoolerBias => heads.pooler,
        ParamKind::MlmBias
        | ParamKind::MlmTransformWeight
        | ParamKind::MlmTransformBias
        | ParamKind::MlmLayerNormWeight
        | ParamKind::MlmLayerNormBias => heads.mlm,
        ParamKind::NspWeight | ParamKind::NspBias => heads.nsp,
        ParamKind::ClassifierWeight | ParamKind::ClassifierBias => heads.classifier,
        _ => true,
    };
    let stage = |param| Stage::new(StageKind::Param(param));
    let mut stages: Vec<Stage> = params().filter(|p| p.is_embeddings()).map(stage).collect();
    for layer_idx in 0..n_layers {
        stages.extend(params().filter(|p| p.per_layer()).map(|p| Stage::layer(layer_idx, StageKind::Param(p))));
    }
    // The pooler's and the heads': neither the embeddings' nor a layer's.
    stages.extend(params().filter(|&p| !p.is_embeddings() && !p.per_layer() && has(p)).map(stage));
    stages
}

/// The gradient stages a backward pass gives, in the order it computes them, for the forward
/// stages `forward` (a plan): d loss / d the losses, the heads, each layer from the last, the
/// embeddings, then every parameter the loss reaches.
pub fn backward_plan(forward: &[Stage], n_layers: usize, heads: OutputHeads, objectives: Objectives) -> Vec<Stage> {
    let has = |kind: StageKind| forward.iter().any(|s| s.kind == kind);
    let mut grads: Vec<Stage> = Vec::new();
    let mut push = |kinds: &[StageKind]| grads.extend(kinds.iter().filter(|&&k| has(k)).map(|&k| Stage::new(k).grad()));
    push(&[Loss]);
    if objectives.mlm_labels {
        push(&[MlmLoss, MlmLosses, MlmLogits, MlmLayerNorm, MlmActivation, MlmTransform]);
    }
    if objectives.nsp_labels {
        push(&[NspLoss, NspLosses, NspLogits]);
    }
    if objectives.class_labels {
        push(&[ClassifierLoss, ClassifierLosses, ClassifierLogits, ClassifierDropout]);
    }
    // The pooler's gradient sums what the NSP head and the classifier give it.
    if objectives.nsp_labels || objectives.class_labels {
        push(&[PoolerOutput, PoolerDense]);
    }
    let layer_order = [
        FfnLayerNorm,
        FfnResidual,
        FfnOutputDropout,
        FfnOutput,
        FfnActivation,
        FfnIntermediate,
        AttnLayerNorm,
        AttnResidual,
        AttnOutputDropout,
        AttnOutput,
        AttnContext,
        AttnProbsDropout,
        AttnProbs,
        AttnScores,
        AttnValue,
        AttnKey,
        AttnQuery,
    ];
    // A dropout stage is there only in a training pass, which the plan of the forward says.
    let dropout = objectives.dropout;
    let kept = |kind: &&StageKind| dropout || kind.info().needs != super::Needs::Dropout;
    for layer_idx in (0..n_layers).rev() {
        grads.extend(layer_order.iter().filter(kept).map(|&k| Stage::layer(layer_idx, k).grad()));
    }
    let embeddings = [EmbDropout, EmbLayerNorm, EmbSum, EmbWord, EmbPosition, EmbTokenType];
    grads.extend(embeddings.iter().filter(kept).map(|&k| Stage::new(k).grad()));
    // The pooler is reached by the NSP and the classifier's losses, each head's own parameters
    // only by its loss (the MLM decoder's weight is the word table, which every loss reaches).
    let reached = OutputHeads {
        pooler: heads.pooler && (objectives.nsp_labels || objectives.class_labels),
        nsp: heads.nsp && objectives.nsp_labels,
        classifier: heads.classifier && objectives.class_labels,
        mlm: heads.mlm && objectives.mlm_labels,
        ..heads
    };
    grads.extend(parameters(n_layers, reached).into_iter().map(Stage::grad));
    grads
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_orders_layers_between_embeddings_and_heads() {
        let heads = OutputHeads { pooler: true, mlm: true, ..OutputHeads::default() };
        let names: Vec<String> = plan(2, heads, Objectives::default()).iter().map(Stage::name).collect();
        assert_eq!(names[7], "embeddings.layernorm");
        assert_eq!(names[8], "layer0.attention.query");
        assert_eq!(names[8 + 14], "layer1.attention.query");
        assert_eq!(names[8 + 28], "pooler.dense");
        assert_eq!(names.last().unwrap(), "mlm.logits");
    }

    #[test]
    fn sentence_pooling_is_last_and_only_when_the_model_has_it() {
        let sentence = OutputHeads { sentence: true, ..OutputHeads::default() };
        let all = OutputHeads { pooler: true, mlm: true, nsp: true, classifier: true, sentence: true };
        // (heads, whether the plan ends with sentence.pooled)
        let cases = [(OutputHeads::default(), false), (sentence, true), (all, true)];
        for (heads, want) in cases {
            let names: Vec<String> = plan(1, heads, Objectives::default()).iter().map(Stage::name).collect();
            let got = names.last().map(String::as_str) == Some("sentence.pooled");
            assert_eq!(got, want, "{heads:?}: expected sentence.pooled last: {want}, got {names:?}");
            assert_eq!(names.iter().filter(|n| n.starts_with("sentence.")).count(), usize::from(want), "{heads:?}");
        }
    }

    #[test]
    fn the_pretraining_stages_need_labels_and_the_head() {
        let heads = OutputHeads { pooler: true, mlm: true, nsp: true, ..OutputHeads::default() };
        let names = |heads, objectives| -> Vec<String> { plan(1, heads, objectives).iter().map(Stage::name).collect() };
        let none = names(heads, Objectives::default());
        assert!(!none.iter().any(|n| n.contains("loss") || n.contains("label") || n.contains("original")), "{none:?}");
        let mlm_only = Objectives { mlm_labels: true, ..Objectives::default() };
        let got = names(heads, mlm_only);
        for want in ["input.labels", "mlm.losses", "mlm.loss", "loss"] {
            assert!(got.contains(&want.to_string()), "{want} missing from {got:?}");
        }
        assert!(!got.iter().any(|n| n.starts_with("nsp.loss") || n == "input.next_sentence_label"), "{got:?}");
        let all = names(heads, Objectives::ALL);
        let position = |name: &str| all.iter().position(|n| n == name).unwrap_or_else(|| panic!("{name} in {all:?}"));
        assert!(position("input.original_ids") < position("input.ids"));
        assert!(position("mlm.logits") < position("mlm.losses") && position("mlm.loss") < position("nsp.logits"));
        assert!(position("nsp.loss") < position("loss"));
        // Labels for a head the model lacks give neither its loss nor the sum.
        let no_mlm = OutputHeads { mlm: false, ..heads };
        assert!(!names(no_mlm, mlm_only).iter().any(|n| n.contains("loss")));
    }
}
