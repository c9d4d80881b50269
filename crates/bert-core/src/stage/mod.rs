//! The names of every traced tensor, in execution order.
//!
//! This is the one table that the tracer, the CLI (`--stop-at`, `stages`), the manifest, the diff
//! and the walkthrough all read. The names are a contract with `scripts/dump_reference.py` and with
//! users' numpy code, so they never appear as string literals anywhere else.
//!
//! Shapes use one vocabulary: B batch, T tokens, H hidden, nh heads, hs head size (H / nh),
//! I intermediate, V vocab; `2` for the NSP head and `C` for a classifier's classes (its labels).
//!
//! Some stages exist only for some models or inputs: a head's stages need its weights, the
//! pretraining stages (`input.labels`, `mlm.loss`, ...) need labels, and the last part,
//! `sentence`, is not BERT's: it is sentence-transformers' mean pooling, present only when the
//! model directory has a `1_Pooling/config.json` that asks for it.
//!
//! A backward pass adds gradients: `grad.<stage>` is d loss / d that stage (a [`Stage`] whose
//! `of` is [`Of::Grad`]), and `grad.param.<name>` d loss / d a parameter, whose rows (the `Param`
//! part) name the parameters as transformers' `BertForPreTraining.named_parameters()` does. The `lens.*` stages exist
//! only when a run asks for the logit lens (`bert-trace lens`): the MLM head applied to the
//! embeddings' and every layer's output.

pub mod inputs;

use std::fmt;

/// One symbolic dimension of a stage's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dim {
    B,
    T,
    H,
    Nh,
    Hs,
    I,
    V,
    Two,
    Labels,
    /// max_position_embeddings, the rows of the position table.
    P,
    /// type_vocab_size, the rows of the token type table.
    Types,
}

impl Dim {
    /// The letter used in docs and shape comments.
    pub fn symbol(self) -> &'static str {
        match self {
            Dim::B => "B",
            Dim::T => "T",
            Dim::H => "H",
            Dim::Nh => "nh",
            Dim::Hs => "hs",
            Dim::I => "I",
            Dim::V => "V",
            Dim::Two => "2",
            Dim::Labels => "C",
            Dim::P => "P",
            Dim::Types => "types",
        }
    }
}

/// The element type of a traced tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    F32,
    F64,
    I64,
}

impl DType {
    /// The numpy name, as written in the manifest.
    pub fn numpy_name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::I64 => "int64",
        }
    }

    /// The dtype a manifest names, if it is one of ours.
    pub fn from_numpy_name(name: &str) -> Option<DType> {
        match name {
            "float32" => Some(DType::F32),
            "float64" => Some(DType::F64),
            "int64" => Some(DType::I64),
            _ => None,
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }
}

/// Which part of the model a stage belongs to; also the first component of its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Input,
    Embeddings,
    Attention,
    Ffn,
    Pooler,
    Mlm,
    Nsp,
    /// The sum of the pretraining losses.
    Objective,
    Classifier,
    Sentence,
    /// The logit lens: the MLM head read off every layer's output.
    Lens,
    /// The parameters, whose gradients a backward pass gives (`grad.param.*`).
    Param,
}

impl Part {
    /// The weights (or file) a model needs for this part's stages, for messages.
    pub fn weights(self) -> &'static str {
        match self {
            Input | Embeddings => "bert.embeddings.*",
            Attention | Ffn => "bert.encoder.layer.*",
            Pooler => "pooler (bert.pooler.*)",
            Mlm => "MLM head (cls.predictions.*)",
            Nsp => "NSP head (cls.seq_relationship.*)",
            Objective => "MLM head (cls.predictions.*) or NSP head (cls.seq_relationship.*)",
            Classifier => "classifier (classifier.*)",
            Sentence => "mean pooling (1_Pooling/config.json)",
            Lens => "MLM head (cls.predictions.*)",
            Param => "bert.*",
        }
    }
}

/// Every kind of stage. A layer's stages (`Attn*`, `Ffn*`) repeat once per encoder layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StageKind {
    InputOriginalIds,
    InputIds,
    InputTokenTypeIds,
    InputAttentionMask,
    InputLabels,
    InputNextSentenceLabel,
    EmbWord,
    EmbPosition,
    EmbTokenType,
    EmbSum,
    EmbLayerNorm,
    AttnQuery,
    AttnKey,
    AttnValue,
    AttnScores,
    AttnProbs,
    AttnContext,
    AttnOutput,
    AttnResidual,
    AttnLayerNorm,
    FfnIntermediate,
    FfnActivation,
    FfnOutput,
    FfnResidual,
    FfnLayerNorm,
    PoolerDense,
    PoolerOutput,
    MlmTransform,
    MlmActivation,
    MlmLayerNorm,
    MlmLogits,
    MlmLosses,
    MlmLoss,
    NspLogits,
    NspLosses,
    NspLoss,
    Loss,
    ClassifierLogits,
    SentencePooled,
    LensEmbeddings,
    LensLayer,
    ParamWordEmbeddings,
    ParamPositionEmbeddings,
    ParamTokenTypeEmbeddings,
    ParamEmbLayerNormWeight,
    ParamEmbLayerNormBias,
    ParamQueryWeight,
    ParamQueryBias,
    ParamKeyWeight,
    ParamKeyBias,
    ParamValueWeight,
    ParamValueBias,
    ParamAttnOutputWeight,
    ParamAttnOutputBias,
    ParamAttnLayerNormWeight,
    ParamAttnLayerNormBias,
    ParamIntermediateWeight,
    ParamIntermediateBias,
    ParamFfnOutputWeight,
    ParamFfnOutputBias,
    ParamFfnLayerNormWeight,
    ParamFfnLayerNormBias,
    ParamPoolerWeight,
    ParamPoolerBias,
    ParamMlmBias,
    ParamMlmTransformWeight,
    ParamMlmTransformBias,
    ParamMlmLayerNormWeight,
    ParamMlmLayerNormBias,
    ParamNspWeight,
    ParamNspBias,
}

/// What a stage needs besides its part's weights: the pretraining stages exist only when the
/// input carries masking or labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    Nothing,
    /// Random masking (`--mask-prob`).
    Masking,
    /// Labels for the MLM loss (`--mask-prob` or `--mlm-target`).
    MlmLabels,
    /// Labels for the NSP loss (`--nsp-label`).
    NspLabels,
    /// Labels for either loss.
    AnyLabels,
    /// A run that asks for the logit lens.
    Lens,
    /// A backward pass.
    Backward,
}

/// What the input carries for the pretraining objectives, and what the run asks for beyond the
/// forward pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Objectives {
    /// Tokens were masked at random, so the ids before masking are a stage of their own.
    pub masked: bool,
    /// Some positions have an MLM label.
    pub mlm_labels: bool,
    /// Every sequence has an NSP label.
    pub nsp_labels: bool,
    /// The run reads every layer's guess through the MLM head (the logit lens).
    pub lens: bool,
    /// The run computes gradients (a backward pass).
    pub backward: bool,
}

impl Objectives {
    /// Every objective at once, for listing every stage a model could produce.
    pub const ALL: Objectives =
        Objectives { masked: true, mlm_labels: true, nsp_labels: true, lens: true, backward: true };
}

impl Needs {
    /// Whether `objectives` provide what this needs.
    pub fn met_by(self, objectives: Objectives) -> bool {
        match self {
            Needs::Nothing => true,
            Needs::Masking => objectives.masked,
            Needs::MlmLabels => objectives.mlm_labels,
            Needs::NspLabels => objectives.nsp_labels,
            Needs::AnyLabels => objectives.mlm_labels || objectives.nsp_labels,
            Needs::Lens => objectives.lens,
            Needs::Backward => objectives.backward,
        }
    }
}

/// What the table says about one kind of stage.
#[derive(Debug)]
pub struct StageInfo {
    pub kind: StageKind,
    pub part: Part,
    /// What the input must carry for the stage to exist.
    pub needs: Needs,
    /// The stage name; `{i}` stands for the layer index.
    pub pattern: &'static str,
    pub shape: &'static [Dim],
    pub dtype: DType,
    /// The Hugging Face module or output this equals; `{i}` is the layer index, `{i+1}` the one after.
    pub hf: &'static str,
    /// One line of math, in the names of earlier stages.
    pub formula: &'static str,
    /// The backward rule: how d loss / d this stage (or parameter) is computed, in the names of
    /// the gradients of later stages (`d x` is `grad.x`). Empty for what has no gradient.
    pub backward: &'static str,
}

use Dim::*;
use Part::*;
use StageKind::*;

macro_rules! stage_table {
    ($( $kind:ident, $part:ident $(+ $needs:ident)?, $pattern:literal, [$($dim:ident),*], $dtype:ident, $hf:literal,
        $formula:literal $(, backward $backward:literal)?; )*) => {
        /// The table, in execution order; `StageKind as usize` indexes it.
        pub static STAGES: &[StageInfo] = &[
            $( StageInfo { kind: $kind, part: $part, needs: needs!($($needs)?), pattern: $pattern,
                           shape: &[$($dim),*], dtype: DType::$dtype, hf: $hf, formula: $formula,
                           backward: backward!($($backward)?) }, )*
        ];
    };
}

macro_rules! backward {
    () => {
        ""
    };
    ($backward:literal) => {
        $backward
    };
}

macro_rules! needs {
    () => {
        Needs::Nothing
    };
    ($needs:ident) => {
        Needs::$needs
    };
}

stage_table! {
    InputOriginalIds, Input + Masking, "input.original_ids", [B, T], I64,
        "input_ids before masking", "tokenizer(text).input_ids, before BERT's masking";
    InputIds, Input, "input.ids", [B, T], I64,
        "input_ids", "tokenizer(text).input_ids, padded to the longest in the batch";
    InputTokenTypeIds, Input, "input.token_type_ids", [B, T], I64,
        "token_type_ids", "0 for [CLS] A [SEP], 1 for B [SEP]";
    InputAttentionMask, Input, "input.attention_mask", [B, T], I64,
        "attention_mask", "1 for real tokens, 0 for padding";
    InputLabels, Input + MlmLabels, "input.labels", [B, T], I64,
        "labels", "the original id where a token is to be predicted, -100 elsewhere";
    InputNextSentenceLabel, Input + NspLabels, "input.next_sentence_label", [B], I64,
        "next_sentence_label", "0 when sentence B follows A, 1 when B is random";
    EmbWord, Embeddings, "embeddings.word", [B, T, H], F32,
        "bert.embeddings.word_embeddings", "word_embeddings[input.ids]",
        backward "d sum; its rows added into word_embeddings' by input.ids (the [PAD] row excluded)";
    EmbPosition, Embeddings, "embeddings.position", [B, T, H], F32,
        "bert.embeddings.position_embeddings", "position_embeddings[0..T]",
        backward "d sum; summed over the batch into position_embeddings' rows 0..T";
    EmbTokenType, Embeddings, "embeddings.token_type", [B, T, H], F32,
        "bert.embeddings.token_type_embeddings", "token_type_embeddings[input.token_type_ids]",
        backward "d sum; its rows added into token_type_embeddings' by input.token_type_ids";
    EmbSum, Embeddings, "embeddings.sum", [B, T, H], F32,
        "bert.embeddings (before LayerNorm)", "(word + token_type) + position",
        backward "LayerNorm': rstd · (g - mean(g) - x̂ · mean(g · x̂)), g = d layernorm · weight";
    EmbLayerNorm, Embeddings, "embeddings.layernorm", [B, T, H], F32,
        "hidden_states[0]", "LayerNorm(sum) = (x - mean) / sqrt(var + eps) * weight + bias",
        backward "d layer0's input: its Q, K and V projections' (d · W) + d layer0.attention.residual";
    AttnQuery, Attention, "layer{i}.attention.query", [B, Nh, T, Hs], F32,
        "bert.encoder.layer.{i}.attention.self.query", "split_heads(x @ Wq^T + bq)",
        backward "d scores · key · hs^-0.5";
    AttnKey, Attention, "layer{i}.attention.key", [B, Nh, T, Hs], F32,
        "bert.encoder.layer.{i}.attention.self.key", "split_heads(x @ Wk^T + bk)",
        backward "d scores^T · query · hs^-0.5";
    AttnValue, Attention, "layer{i}.attention.value", [B, Nh, T, Hs], F32,
        "bert.encoder.layer.{i}.attention.self.value", "split_heads(x @ Wv^T + bv)",
        backward "probs^T · d context, per head";
    AttnScores, Attention, "layer{i}.attention.scores", [B, Nh, T, T], F32,
        "eager_attention_forward: attn_weights before softmax", "query @ key^T * hs^-0.5 + (1 - attention_mask) * f32::MIN",
        backward "softmax': probs · (d probs - Σ_keys probs · d probs); 0 at a padding key";
    AttnProbs, Attention, "layer{i}.attention.probs", [B, Nh, T, T], F32,
        "attentions[{i}]", "softmax(scores, over keys)",
        backward "d context (split into heads) · value^T";
    AttnContext, Attention, "layer{i}.attention.context", [B, T, H], F32,
        "bert.encoder.layer.{i}.attention.self", "merge_heads(probs @ value)",
        backward "d output · Wo";
    AttnOutput, Attention, "layer{i}.attention.output", [B, T, H], F32,
        "bert.encoder.layer.{i}.attention.output.dense", "context @ Wo^T + bo",
        backward "d residual";
    AttnResidual, Attention, "layer{i}.attention.residual", [B, T, H], F32,
        "bert.encoder.layer.{i}.attention.output (before LayerNorm)", "output + layer input",
        backward "LayerNorm' of d attention.layernorm";
    AttnLayerNorm, Attention, "layer{i}.attention.layernorm", [B, T, H], F32,
        "bert.encoder.layer.{i}.attention.output.LayerNorm", "LayerNorm(residual)",
        backward "d intermediate · W1 + d ffn.residual";
    FfnIntermediate, Ffn, "layer{i}.ffn.intermediate", [B, T, I], F32,
        "bert.encoder.layer.{i}.intermediate.dense", "attention.layernorm @ W1^T + b1",
        backward "d activation · hidden_act'(intermediate), gelu' = Φ(x) + x · φ(x)";
    FfnActivation, Ffn, "layer{i}.ffn.activation", [B, T, I], F32,
        "bert.encoder.layer.{i}.intermediate.intermediate_act_fn", "hidden_act(intermediate), gelu = x * (1 + erf(x / sqrt 2)) / 2",
        backward "d output · W2";
    FfnOutput, Ffn, "layer{i}.ffn.output", [B, T, H], F32,
        "bert.encoder.layer.{i}.output.dense", "activation @ W2^T + b2",
        backward "d residual";
    FfnResidual, Ffn, "layer{i}.ffn.residual", [B, T, H], F32,
        "bert.encoder.layer.{i}.output (before LayerNorm)", "output + attention.layernorm",
        backward "LayerNorm' of d ffn.layernorm";
    FfnLayerNorm, Ffn, "layer{i}.ffn.layernorm", [B, T, H], F32,
        "hidden_states[{i+1}]", "LayerNorm(residual)",
        backward "d the next layer's input (for the last layer: the heads')";
    PoolerDense, Pooler, "pooler.dense", [B, H], F32,
        "bert.pooler.dense", "last_hidden_state[:, 0] @ Wp^T + bp",
        backward "d output · (1 - output²)";
    PoolerOutput, Pooler, "pooler.output", [B, H], F32,
        "pooler_output", "tanh(dense)",
        backward "d nsp.logits · Wnsp";
    MlmTransform, Mlm, "mlm.transform", [B, T, H], F32,
        "cls.predictions.transform.dense", "last_hidden_state @ Wt^T + bt",
        backward "d activation · hidden_act'(transform)";
    MlmActivation, Mlm, "mlm.activation", [B, T, H], F32,
        "cls.predictions.transform.transform_act_fn", "hidden_act(transform)",
        backward "LayerNorm' of d mlm.layernorm";
    MlmLayerNorm, Mlm, "mlm.layernorm", [B, T, H], F32,
        "cls.predictions.transform.LayerNorm", "LayerNorm(activation)",
        backward "d logits · word_embeddings (the tied decoder)";
    MlmLogits, Mlm, "mlm.logits", [B, T, V], F32,
        "prediction_logits", "layernorm @ word_embeddings^T + decoder bias (tied decoder)",
        backward "(softmax(logits) - onehot(label)) / count at each labelled position, 0 elsewhere";
    MlmLosses, Mlm + MlmLabels, "mlm.losses", [B, T], F32,
        "CrossEntropyLoss(reduction='none')(prediction_logits, labels)",
        "-log_softmax(mlm.logits)[input.labels], 0 where input.labels = -100",
        backward "1 / count at each labelled position, 0 elsewhere";
    MlmLoss, Mlm + MlmLabels, "mlm.loss", [], F32,
        "masked_lm_loss", "sum(mlm.losses) / count(input.labels != -100)",
        backward "1, from loss = mlm.loss + nsp.loss";
    NspLogits, Nsp, "nsp.logits", [B, Two], F32,
        "seq_relationship_logits", "pooler.output @ Wnsp^T + bnsp",
        backward "(softmax(logits) - onehot(label)) / B";
    NspLosses, Nsp + NspLabels, "nsp.losses", [B], F32,
        "CrossEntropyLoss(reduction='none')(seq_relationship_logits, next_sentence_label)",
        "-log_softmax(nsp.logits)[input.next_sentence_label]",
        backward "1 / B";
    NspLoss, Nsp + NspLabels, "nsp.loss", [], F32,
        "next_sentence_loss", "mean(nsp.losses)",
        backward "1, from loss = mlm.loss + nsp.loss";
    Loss, Objective + AnyLabels, "loss", [], F32,
        "loss", "mlm.loss + nsp.loss (those computed)",
        backward "1: the backward pass starts here";
    ClassifierLogits, Classifier, "classifier.logits", [B, Labels], F32,
        "logits", "pooler.output @ Wc^T + bc";
    SentencePooled, Sentence, "sentence.pooled", [B, H], F32,
        "sentence-transformers 1_Pooling (mean): sentence_embedding, before any 2_Normalize",
        "sum over real tokens (input.attention_mask) of last ffn.layernorm / their count";
    LensEmbeddings, Lens + Lens, "lens.embeddings.logits", [B, T, V], F32,
        "cls.predictions(hidden_states[0])", "the MLM head applied to embeddings.layernorm";
    LensLayer, Lens + Lens, "lens.layer{i}.logits", [B, T, V], F32,
        "cls.predictions(hidden_states[{i+1}])", "the MLM head applied to layer{i}.ffn.layernorm";
    ParamWordEmbeddings, Param + Backward, "param.bert.embeddings.word_embeddings.weight", [V, H], F32,
        "bert.embeddings.word_embeddings.weight", "the word table; also the MLM decoder's weight (tied)",
        backward "d embeddings.word added into rows by input.ids ([PAD] excluded) + d mlm.logits^T · mlm.layernorm";
    ParamPositionEmbeddings, Param + Backward, "param.bert.embeddings.position_embeddings.weight", [P, H], F32,
        "bert.embeddings.position_embeddings.weight", "the position table",
        backward "d embeddings.position summed over the batch, rows 0..T";
    ParamTokenTypeEmbeddings, Param + Backward, "param.bert.embeddings.token_type_embeddings.weight", [Types, H], F32,
        "bert.embeddings.token_type_embeddings.weight", "the token type table",
        backward "d embeddings.token_type added into rows by input.token_type_ids";
    ParamEmbLayerNormWeight, Param + Backward, "param.bert.embeddings.LayerNorm.weight", [H], F32,
        "bert.embeddings.LayerNorm.weight", "embeddings.layernorm's scale",
        backward "Σ_tokens d embeddings.layernorm · x̂";
    ParamEmbLayerNormBias, Param + Backward, "param.bert.embeddings.LayerNorm.bias", [H], F32,
        "bert.embeddings.LayerNorm.bias", "embeddings.layernorm's shift",
        backward "Σ_tokens d embeddings.layernorm";
    ParamQueryWeight, Param + Backward, "param.bert.encoder.layer.{i}.attention.self.query.weight", [H, H], F32,
        "bert.encoder.layer.{i}.attention.self.query.weight", "Wq",
        backward "Σ_tokens d query (heads merged)^T · layer input";
    ParamQueryBias, Param + Backward, "param.bert.encoder.layer.{i}.attention.self.query.bias", [H], F32,
        "bert.encoder.layer.{i}.attention.self.query.bias", "bq",
        backward "Σ_tokens d query (heads merged)";
    ParamKeyWeight, Param + Backward, "param.bert.encoder.layer.{i}.attention.self.key.weight", [H, H], F32,
        "bert.encoder.layer.{i}.attention.self.key.weight", "Wk",
        backward "Σ_tokens d key (heads merged)^T · layer input; d bk is 0 in exact arithmetic";
    ParamKeyBias, Param + Backward, "param.bert.encoder.layer.{i}.attention.self.key.bias", [H], F32,
        "bert.encoder.layer.{i}.attention.self.key.bias", "bk",
        backward "Σ_tokens d key (heads merged): 0 up to rounding, softmax ignores a constant per row";
    ParamValueWeight, Param + Backward, "param.bert.encoder.layer.{i}.attention.self.value.weight", [H, H], F32,
        "bert.encoder.layer.{i}.attention.self.value.weight", "Wv",
        backward "Σ_tokens d value (heads merged)^T · layer input";
    ParamValueBias, Param + Backward, "param.bert.encoder.layer.{i}.attention.self.value.bias", [H], F32,
        "bert.encoder.layer.{i}.attention.self.value.bias", "bv",
        backward "Σ_tokens d value (heads merged)";
    ParamAttnOutputWeight, Param + Backward, "param.bert.encoder.layer.{i}.attention.output.dense.weight", [H, H], F32,
        "bert.encoder.layer.{i}.attention.output.dense.weight", "Wo",
        backward "Σ_tokens d attention.output^T · context";
    ParamAttnOutputBias, Param + Backward, "param.bert.encoder.layer.{i}.attention.output.dense.bias", [H], F32,
        "bert.encoder.layer.{i}.attention.output.dense.bias", "bo",
        backward "Σ_tokens d attention.output";
    ParamAttnLayerNormWeight, Param + Backward, "param.bert.encoder.layer.{i}.attention.output.LayerNorm.weight", [H], F32,
        "bert.encoder.layer.{i}.attention.output.LayerNorm.weight", "attention.layernorm's scale",
        backward "Σ_tokens d attention.layernorm · x̂";
    ParamAttnLayerNormBias, Param + Backward, "param.bert.encoder.layer.{i}.attention.output.LayerNorm.bias", [H], F32,
        "bert.encoder.layer.{i}.attention.output.LayerNorm.bias", "attention.layernorm's shift",
        backward "Σ_tokens d attention.layernorm";
    ParamIntermediateWeight, Param + Backward, "param.bert.encoder.layer.{i}.intermediate.dense.weight", [I, H], F32,
        "bert.encoder.layer.{i}.intermediate.dense.weight", "W1",
        backward "Σ_tokens d ffn.intermediate^T · attention.layernorm";
    ParamIntermediateBias, Param + Backward, "param.bert.encoder.layer.{i}.intermediate.dense.bias", [I], F32,
        "bert.encoder.layer.{i}.intermediate.dense.bias", "b1",
        backward "Σ_tokens d ffn.intermediate";
    ParamFfnOutputWeight, Param + Backward, "param.bert.encoder.layer.{i}.output.dense.weight", [H, I], F32,
        "bert.encoder.layer.{i}.output.dense.weight", "W2",
        backward "Σ_tokens d ffn.output^T · ffn.activation";
    ParamFfnOutputBias, Param + Backward, "param.bert.encoder.layer.{i}.output.dense.bias", [H], F32,
        "bert.encoder.layer.{i}.output.dense.bias", "b2",
        backward "Σ_tokens d ffn.output";
    ParamFfnLayerNormWeight, Param + Backward, "param.bert.encoder.layer.{i}.output.LayerNorm.weight", [H], F32,
        "bert.encoder.layer.{i}.output.LayerNorm.weight", "ffn.layernorm's scale",
        backward "Σ_tokens d ffn.layernorm · x̂";
    ParamFfnLayerNormBias, Param + Backward, "param.bert.encoder.layer.{i}.output.LayerNorm.bias", [H], F32,
        "bert.encoder.layer.{i}.output.LayerNorm.bias", "ffn.layernorm's shift",
        backward "Σ_tokens d ffn.layernorm";
    ParamPoolerWeight, Param + Backward, "param.bert.pooler.dense.weight", [H, H], F32,
        "bert.pooler.dense.weight", "Wp",
        backward "Σ_batch d pooler.dense^T · last hidden state at [CLS]";
    ParamPoolerBias, Param + Backward, "param.bert.pooler.dense.bias", [H], F32,
        "bert.pooler.dense.bias", "bp",
        backward "Σ_batch d pooler.dense";
    ParamMlmBias, Param + Backward, "param.cls.predictions.bias", [V], F32,
        "cls.predictions.bias", "the MLM decoder's bias",
        backward "Σ_tokens d mlm.logits";
    ParamMlmTransformWeight, Param + Backward, "param.cls.predictions.transform.dense.weight", [H, H], F32,
        "cls.predictions.transform.dense.weight", "Wt",
        backward "Σ_tokens d mlm.transform^T · last hidden state";
    ParamMlmTransformBias, Param + Backward, "param.cls.predictions.transform.dense.bias", [H], F32,
        "cls.predictions.transform.dense.bias", "bt",
        backward "Σ_tokens d mlm.transform";
    ParamMlmLayerNormWeight, Param + Backward, "param.cls.predictions.transform.LayerNorm.weight", [H], F32,
        "cls.predictions.transform.LayerNorm.weight", "mlm.layernorm's scale",
        backward "Σ_tokens d mlm.layernorm · x̂";
    ParamMlmLayerNormBias, Param + Backward, "param.cls.predictions.transform.LayerNorm.bias", [H], F32,
        "cls.predictions.transform.LayerNorm.bias", "mlm.layernorm's shift",
        backward "Σ_tokens d mlm.layernorm";
    ParamNspWeight, Param + Backward, "param.cls.seq_relationship.weight", [Two, H], F32,
        "cls.seq_relationship.weight", "Wnsp",
        backward "Σ_batch d nsp.logits^T · pooler.output";
    ParamNspBias, Param + Backward, "param.cls.seq_relationship.bias", [Two], F32,
        "cls.seq_relationship.bias", "bnsp",
        backward "Σ_batch d nsp.logits";
}

impl StageKind {
    /// This kind's row of the table.
    pub fn info(self) -> &'static StageInfo {
        &STAGES[self as usize]
    }

    /// Whether this kind repeats once per encoder layer (its name has the layer's index).
    pub fn per_layer(self) -> bool {
        self.info().pattern.contains("{i}")
    }

    /// Whether this kind is computed inside an encoder layer (`layer{i}.*`).
    pub fn in_layer(self) -> bool {
        matches!(self.info().part, Attention | Ffn)
    }
}

/// Whether a stage is the value the forward pass computed or d loss / d that value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Of {
    #[default]
    Value,
    /// d loss / d the value, from a backward pass: the name gets `grad.` in front.
    Grad,
    /// A parameter after an optimizer's step (`bert-trace train`): the name gets `updated.` in
    /// front. Only the parameter rows have it.
    Updated,
}

/// The rule of a parameter's update, the formula of every `updated.param.*` stage: AdamW as
/// `torch.optim.AdamW` computes it (`train/adamw.rs`).
const ADAMW_RULE: &str = "θ·(1 − lr·λ) − lr/(1 − β1^t) · m / (√v / √(1 − β2^t) + ε)";

/// One concrete stage: a kind, for per-layer kinds the layer index, and whether it is the value
/// or its gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stage {
    pub kind: StageKind,
    pub layer: Option<usize>,
    pub of: Of,
}

impl Stage {
    /// A stage outside the encoder layers.
    pub fn new(kind: StageKind) -> Stage {
        debug_assert!(!kind.per_layer(), "{kind:?} needs a layer index");
        Stage { kind, layer: None, of: Of::Value }
    }

    /// A stage of encoder layer `layer_idx`.
    pub fn layer(layer_idx: usize, kind: StageKind) -> Stage {
        debug_assert!(kind.per_layer(), "{kind:?} is not a per-layer stage");
        Stage { kind, layer: Some(layer_idx), of: Of::Value }
    }

    /// d loss / d this stage.
    pub fn grad(self) -> Stage {
        Stage { of: Of::Grad, ..self }
    }

    /// A parameter's value after the optimizer's step.
    pub fn updated(self) -> Stage {
        debug_assert!(self.info().part == Param, "only a parameter is updated");
        Stage { of: Of::Updated, ..self }
    }

    /// Whether this is a gradient.
    pub fn is_grad(&self) -> bool {
        self.of == Of::Grad
    }

    /// Whether this is the value the forward pass computes for a stage of `kind`: not its
    /// gradient, nor a parameter after an update. A reader that wants, say, attention
    /// probabilities asks this, since `grad.layer0.attention.probs` has the same kind.
    pub fn is_value_of(&self, kind: StageKind) -> bool {
        self.of == Of::Value && self.kind == kind
    }

    pub fn info(&self) -> &'static StageInfo {
        self.kind.info()
    }

    /// The stage name, e.g. `layer3.ffn.layernorm`, or `grad.layer3.ffn.layernorm` for its
    /// gradient.
    pub fn name(&self) -> String {
        match self.of {
            Of::Value => self.fill(self.info().pattern),
            Of::Grad => format!("grad.{}", self.fill(self.info().pattern)),
            Of::Updated => format!("updated.{}", self.fill(self.info().pattern)),
        }
    }

    /// The `.npy` file name inside a dump directory.
    pub fn file_name(&self) -> String {
        format!("{}.npy", self.name())
    }

    /// The Hugging Face module or output this stage equals (`.grad` of it, for a gradient).
    pub fn hf(&self) -> String {
        match self.of {
            Of::Value => self.fill(self.info().hf),
            Of::Grad => format!("{}.grad", self.fill(self.info().hf)),
            Of::Updated => format!("{} after optimizer.step()", self.fill(self.info().hf)),
        }
    }

    /// The concrete shape for the given dimensions.
    pub fn shape(&self, dims: &Dims) -> Vec<usize> {
        self.info().shape.iter().map(|&d| dims.size(d)).collect()
    }

    /// The one line of math the stage table shows: the forward formula of a value, the backward
    /// rule of a gradient.
    pub fn formula(&self) -> &'static str {
        match self.of {
            Of::Value => self.info().formula,
            Of::Grad => self.info().backward,
            Of::Updated => ADAMW_RULE,
        }
    }

    /// The symbolic shape, e.g. `[B,nh,T,hs]`.
    pub fn shape_symbols(&self) -> String {
        let symbols: Vec<&str> = self.info().shape.iter().map(|d| d.symbol()).collect();
        format!("[{}]", symbols.join(","))
    }

    fn fill(&self, pattern: &str) -> String {
        match self.layer {
            Some(i) => pattern.replace("{i+1}", &(i + 1).to_string()).replace("{i}", &i.to_string()),
            None => pattern.to_string(),
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// The sizes that the symbolic dimensions take for one model and one input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub batch: usize,
    pub tokens: usize,
    pub hidden: usize,
    pub n_heads: usize,
    pub head_size: usize,
    pub intermediate: usize,
    pub vocab: usize,
    pub n_labels: usize,
    pub max_positions: usize,
    pub type_vocab: usize,
}

impl Dims {
    pub fn size(&self, dim: Dim) -> usize {
        match dim {
            B => self.batch,
            T => self.tokens,
            H => self.hidden,
            Nh => self.n_heads,
            Hs => self.head_size,
            I => self.intermediate,
            V => self.vocab,
            Two => 2,
            Labels => self.n_labels,
            P => self.max_positions,
            Types => self.type_vocab,
        }
    }
}

/// Which optional heads a model has; decides which stages follow the encoder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeadSet {
    pub pooler: bool,
    pub mlm: bool,
    pub nsp: bool,
    pub classifier: bool,
    /// sentence-transformers' mean pooling, from `1_Pooling/config.json`.
    pub sentence: bool,
}

/// Every stage a model with `n_layers` layers and these heads produces for an input with these
/// objectives, in execution order.
pub fn plan(n_layers: usize, heads: HeadSet, objectives: Objectives) -> Vec<Stage> {
    let forward = forward_plan(n_layers, heads, objectives);
    if objectives.backward && (objectives.mlm_labels || objectives.nsp_labels) {
        let grads = backward_plan(&forward, n_layers, heads, objectives);
        return forward.into_iter().chain(grads).collect();
    }
    forward
}

/// The forward pass's stages alone.
fn forward_plan(n_layers: usize, heads: HeadSet, objectives: Objectives) -> Vec<Stage> {
    let mut stages = Vec::new();
    for info in STAGES {
        let has_part = match info.part {
            Input | Embeddings => true,
            Attention | Ffn => false,
            Pooler => heads.pooler,
            Mlm => heads.mlm,
            Nsp => heads.nsp,
            Objective => (heads.mlm && objectives.mlm_labels) || (heads.nsp && objectives.nsp_labels),
            Classifier => heads.classifier,
            Sentence => heads.sentence,
            Lens => heads.mlm,
            // The parameters are listed by `backward_plan`, as gradients.
            Param => false,
        };
        let present = has_part && info.needs.met_by(objectives);
        if present && info.kind.per_layer() && !info.kind.in_layer() {
            stages.extend((0..n_layers).map(|layer_idx| Stage::layer(layer_idx, info.kind)));
        } else if present {
            stages.push(Stage::new(info.kind));
        }
        // The encoder layers go right after the embeddings' last stage.
        if info.kind == EmbLayerNorm {
            for layer_idx in 0..n_layers {
                for layer_info in STAGES.iter().filter(|s| s.kind.in_layer()) {
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
pub fn parameters(n_layers: usize, heads: HeadSet) -> Vec<Stage> {
    let rows = || STAGES.iter().filter(|info| info.part == Param);
    let has = |kind: StageKind| match kind {
        ParamPoolerWeight | ParamPoolerBias => heads.pooler,
        ParamMlmBias
        | ParamMlmTransformWeight
        | ParamMlmTransformBias
        | ParamMlmLayerNormWeight
        | ParamMlmLayerNormBias => heads.mlm,
        ParamNspWeight | ParamNspBias => heads.nsp,
        _ => true,
    };
    let mut params: Vec<Stage> = rows().filter(|i| i.kind < ParamQueryWeight).map(|i| Stage::new(i.kind)).collect();
    for layer_idx in 0..n_layers {
        params.extend(rows().filter(|i| i.kind.per_layer()).map(|i| Stage::layer(layer_idx, i.kind)));
    }
    params.extend(
        rows()
            .filter(|i| !i.kind.per_layer() && i.kind > ParamFfnLayerNormBias && has(i.kind))
            .map(|i| Stage::new(i.kind)),
    );
    params
}

/// The gradient stages a backward pass gives, in the order it computes them, for the forward
/// stages `forward` (a plan): d loss / d the losses, the heads, each layer from the last, the
/// embeddings, then every parameter the loss reaches.
pub fn backward_plan(forward: &[Stage], n_layers: usize, heads: HeadSet, objectives: Objectives) -> Vec<Stage> {
    let has = |kind: StageKind| forward.iter().any(|s| s.kind == kind);
    let mut grads: Vec<Stage> = Vec::new();
    let mut push = |kinds: &[StageKind]| grads.extend(kinds.iter().filter(|&&k| has(k)).map(|&k| Stage::new(k).grad()));
    push(&[Loss]);
    if objectives.mlm_labels {
        push(&[MlmLoss, MlmLosses, MlmLogits, MlmLayerNorm, MlmActivation, MlmTransform]);
    }
    if objectives.nsp_labels {
        push(&[NspLoss, NspLosses, NspLogits, PoolerOutput, PoolerDense]);
    }
    let layer_order = [
        FfnLayerNorm,
        FfnResidual,
        FfnOutput,
        FfnActivation,
        FfnIntermediate,
        AttnLayerNorm,
        AttnResidual,
        AttnOutput,
        AttnContext,
        AttnProbs,
        AttnScores,
        AttnValue,
        AttnKey,
        AttnQuery,
    ];
    for layer_idx in (0..n_layers).rev() {
        grads.extend(layer_order.iter().map(|&k| Stage::layer(layer_idx, k).grad()));
    }
    grads.extend([EmbLayerNorm, EmbSum, EmbWord, EmbPosition, EmbTokenType].iter().map(|&k| Stage::new(k).grad()));
    // The pooler and the NSP head are reached only by the NSP loss.
    let reached =
        HeadSet { pooler: heads.pooler && objectives.nsp_labels, nsp: heads.nsp && objectives.nsp_labels, ..heads };
    grads.extend(parameters(n_layers, reached).into_iter().map(Stage::grad));
    grads
}

/// The stage a name denotes (`layer3.ffn.layernorm`, `lens.layer3.logits`), if it is one of the
/// table's.
pub fn parse(name: &str) -> Option<Stage> {
    if let Some(value) = name.strip_prefix("grad.") {
        return parse(value).filter(|s| s.of == Of::Value).map(Stage::grad);
    }
    if let Some(value) = name.strip_prefix("updated.") {
        return parse(value).filter(|s| s.of == Of::Value && s.info().part == Param).map(Stage::updated);
    }
    for info in STAGES {
        if let Some((before, after)) = info.pattern.split_once("{i}") {
            let Some(index) = name.strip_prefix(before).and_then(|rest| rest.strip_suffix(after)) else { continue };
            // `layer03` is not `layer3`: only the canonical spelling names a stage.
            if let Some(layer_idx) = index.parse::<usize>().ok().filter(|i| i.to_string() == index) {
                return Some(Stage::layer(layer_idx, info.kind));
            }
        } else if info.pattern == name {
            return Some(Stage::new(info.kind));
        }
    }
    None
}

/// Orders stage names as the forward pass produces them; names outside the table go last.
pub fn execution_key(name: &str) -> (usize, usize, usize) {
    match parse(name) {
        Some(stage) if stage.info().part == Param => {
            // The parameters in the order of named_parameters(): the embeddings', each layer's,
            // then the pooler's and the heads'; their gradients, then their values before and
            // after a training step.
            let section = match stage.of {
                Of::Grad => 9,
                Of::Value => 10,
                Of::Updated => 11,
            };
            let layer = match stage.layer {
                Some(layer) => layer + 1,
                None if stage.kind < ParamQueryWeight => 0,
                None => usize::MAX,
            };
            (section, layer, stage.kind as usize)
        }
        Some(stage) => {
            if stage.is_grad() {
                // The backward's order: the heads, the layers from the last, the embeddings,
                // then the parameters.
                let (section, layer) = match (stage.info().part, stage.layer) {
                    (Input | Embeddings, _) => (8, 0),
                    (_, Some(layer)) => (7, usize::MAX - layer),
                    (_, None) => (6, 0),
                };
                return (section, layer, usize::MAX - stage.kind as usize);
            }
            let section = match (stage.info().part, stage.layer, stage.kind < StageKind::AttnQuery) {
                (Lens, _, _) => 3,
                (_, None, true) => 0,
                (_, Some(_), _) => 1,
                (_, None, false) => 2,
            };
            // The lens reads the embeddings first, then each layer in turn.
            let layer = stage.layer.map_or(0, |i| i + usize::from(stage.info().part == Lens));
            (section, layer, stage.kind as usize)
        }
        None => (12, 0, 0),
    }
}

/// Whether `name` equals `selector` or lies inside it on a dot boundary
/// (`layer0.attention` holds `layer0.attention.query`; `layer1` does not hold `layer10.ffn.output`).
pub fn in_group(name: &str, selector: &str) -> bool {
    name == selector
        || (name.len() > selector.len() && name.starts_with(selector) && name.as_bytes()[selector.len()] == b'.')
}

/// The valid names (stages and the groups above them) that are closest to `wanted`, best first.
pub fn suggestions(wanted: &str, stages: &[Stage]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for stage in stages {
        let name = stage.name();
        let mut prefix = String::new();
        for (idx, piece) in name.split('.').enumerate() {
            if idx > 0 {
                prefix.push('.');
            }
            prefix.push_str(piece);
            if !names.contains(&prefix) {
                names.push(prefix.clone());
            }
        }
    }
    let mut scored: Vec<(f64, String)> =
        names.into_iter().map(|n| (strsim::jaro_winkler(wanted, &n), n)).filter(|(score, _)| *score > 0.75).collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.into_iter().take(3).map(|(_, n)| n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_indexed_by_kind() {
        for (idx, info) in STAGES.iter().enumerate() {
            assert_eq!(info.kind as usize, idx, "row {idx} holds {:?}", info.kind);
        }
    }

    #[test]
    fn plan_orders_layers_between_embeddings_and_heads() {
        let heads = HeadSet { pooler: true, mlm: true, ..HeadSet::default() };
        let names: Vec<String> = plan(2, heads, Objectives::default()).iter().map(Stage::name).collect();
        assert_eq!(names[7], "embeddings.layernorm");
        assert_eq!(names[8], "layer0.attention.query");
        assert_eq!(names[8 + 14], "layer1.attention.query");
        assert_eq!(names[8 + 28], "pooler.dense");
        assert_eq!(names.last().unwrap(), "mlm.logits");
    }

    #[test]
    fn sentence_pooling_is_last_and_only_when_the_model_has_it() {
        let sentence = HeadSet { sentence: true, ..HeadSet::default() };
        let all = HeadSet { pooler: true, mlm: true, nsp: true, classifier: true, sentence: true };
        // (heads, whether the plan ends with sentence.pooled)
        let cases = [(HeadSet::default(), false), (sentence, true), (all, true)];
        for (heads, want) in cases {
            let names: Vec<String> = plan(1, heads, Objectives::default()).iter().map(Stage::name).collect();
            let got = names.last().map(String::as_str) == Some("sentence.pooled");
            assert_eq!(got, want, "{heads:?}: expected sentence.pooled last: {want}, got {names:?}");
            assert_eq!(names.iter().filter(|n| n.starts_with("sentence.")).count(), usize::from(want), "{heads:?}");
        }
    }

    #[test]
    fn the_pretraining_stages_need_labels_and_the_head() {
        let heads = HeadSet { pooler: true, mlm: true, nsp: true, ..HeadSet::default() };
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
        let no_mlm = HeadSet { mlm: false, ..heads };
        assert!(!names(no_mlm, mlm_only).iter().any(|n| n.contains("loss")));
    }

    #[test]
    fn groups_stop_on_dot_boundaries() {
        let cases = [
            ("layer0.attention.query", "layer0.attention", true),
            ("layer0.attention.query", "layer0", true),
            ("layer10.ffn.output", "layer1", false),
            ("embeddings.sum", "embeddings.sum", true),
            ("embeddings.sum", "embeddings.su", false),
        ];
        for (name, selector, want) in cases {
            assert_eq!(in_group(name, selector), want, "in_group({name}, {selector})");
        }
    }

    #[test]
    fn parse_inverts_name() {
        let all = HeadSet { pooler: true, mlm: true, nsp: true, classifier: true, sentence: true };
        for stage in plan(12, all, Objectives::ALL) {
            assert_eq!(parse(&stage.name()), Some(stage), "parse({})", stage.name());
        }
        for bad in ["layer", "layer03.ffn.output", "layerx.ffn.output", "embeddings", "mlm.logit", "lens.layer.logits"]
        {
            assert_eq!(parse(bad), None, "parse({bad})");
        }
    }

    #[test]
    fn every_gradient_has_its_backward_rule_and_parses_back() {
        let all = HeadSet { pooler: true, mlm: true, nsp: true, classifier: false, sentence: false };
        let stages = plan(2, all, Objectives::ALL);
        let grads: Vec<&Stage> = stages.iter().filter(|s| s.is_grad()).collect();
        // The loss; the MLM head's 6 and the NSP head's 5 (with the pooler); 2 layers × 14 stages;
        // the embeddings' 5; 5 + 2 × 16 + 9 parameters.
        assert_eq!(grads.len(), 1 + 6 + 5 + 28 + 5 + 46, "{grads:?}");
        for stage in grads {
            assert!(!stage.formula().is_empty(), "{stage} has no backward rule");
            assert_eq!(parse(&stage.name()), Some(*stage), "parse({stage})");
        }
    }

    #[test]
    fn hf_names_fill_layer_indices() {
        let stage = Stage::layer(3, FfnLayerNorm);
        assert_eq!(stage.hf(), "hidden_states[4]");
        assert_eq!(stage.name(), "layer3.ffn.layernorm");
    }

    #[test]
    fn suggestions_find_near_misses() {
        let stages = plan(2, HeadSet::default(), Objectives::default());
        let got = suggestions("layer0.atention", &stages);
        assert_eq!(got.first().map(String::as_str), Some("layer0.attention"), "{got:?}");
    }
}
