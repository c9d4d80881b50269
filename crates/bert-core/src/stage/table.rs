//! The stage table's rows: every kind of stage with its part, what it needs, its name pattern,
//! shape, dtype, how closely two implementations agree on it, the operation that computes it,
//! the parameters it reads (a dense
//! layer's or a LayerNorm's weight and bias), what a dropout stage drops, what it and its
//! gradient are computed from, the Hugging Face tensor it equals, its formula and its backward
//! rule, in execution order. The vocabulary of the rows is in `stage/mod.rs`; how a
//! row is named, planned and selected is in the files beside this one.

use super::Read::{self, *};
use super::StageKind::*;
use super::{
    Agreement, DType, Dim, DropoutRate, Drops, GradOp, Needs, Op, ParamKind, ParamKinds, Part, StageInfo, StageKind,
};

/// The table from its rows. The stages' rows come first, each written out; the parameters'
/// rows follow, each written as its name in `BertForPreTraining.named_parameters()`, which is
/// also its Hugging Face name and, after `param.`, its stage name: each parameter's name is
/// written once. Every parameter is a float32 of the `Param` part that only a backward pass has.
macro_rules! stage_table {
    (
        stages {
            $( $kind:ident, $part:ident $(+ $needs:ident)?, $pattern:literal, [$($dim:ident),*], $dtype:ident $agreement:ident, op $op:ident,
                $(($weight:ident, $bias:ident),)? $(drops($input:ident, $mask:ident, $rate:ident),)?
                $(reads [$($read:expr),*],)? $(grad $grad_op:ident [$($grad:expr),*],)?
                $hf:literal, $formula:literal $(, backward $backward:literal)?; )*
        }
        parameters {
            $( $param:ident, $name:literal, [$($param_dim:ident),*], $what:literal, backward $param_backward:literal; )*
        }
    ) => {
        /// The table, in execution order, which is also the order of [`StageKind`]:
        /// [`StageKind::index`] is a kind's row.
        pub static STAGES: &[StageInfo] = &[
            $( StageInfo { kind: StageKind::$kind, part: Part::$part, needs: needs!($($needs)?), pattern: $pattern,
                           shape: &[$(Dim::$dim),*], dtype: DType::$dtype, agreement: Agreement::$agreement,
                           op: Op::$op, params: params!($($weight, $bias)?), drops: drops!($($input, $mask, $rate)?),
                           reads: reads!($(drops $input $mask)? $(list $($read),*)?),
                           grad_op: grad_op!($($grad_op)?), grad_reads: &[$($($grad),*)?],
                           hf: $hf, formula: $formula,
                           backward: backward!($($backward)?) }, )*
            $( StageInfo { kind: StageKind::Param(ParamKind::$param), part: Part::Param, needs: Needs::Backward,
                           pattern: concat!("param.", $name), shape: &[$(Dim::$param_dim),*], dtype: DType::F32,
                           agreement: Agreement::Rounded, op: Op::Param, params: None, drops: None, reads: &[],
                           grad_op: GradOp::ParamSum, grad_reads: &[],
                           hf: $name, formula: $what, backward: $param_backward }, )*
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

macro_rules! params {
    () => {
        None
    };
    ($weight:ident, $bias:ident) => {
        Some(ParamKinds { weight: ParamKind::$weight, bias: ParamKind::$bias })
    };
}

macro_rules! drops {
    () => {
        None
    };
    ($input:ident, $mask:ident, $rate:ident) => {
        Some(Drops { input: StageKind::$input, mask: StageKind::$mask, rate: DropoutRate::$rate })
    };
}

/// A row's inputs: a dropout stage reads what it drops and its mask; any other row lists its own.
macro_rules! reads {
    () => {
        &[]
    };
    (drops $input:ident $mask:ident) => {
        &[Read::At(StageKind::$input), Read::At(StageKind::$mask)]
    };
    (list $($read:expr),*) => {
        &[$($read),*]
    };
}

macro_rules! grad_op {
    () => {
        GradOp::None
    };
    ($grad_op:ident) => {
        GradOp::$grad_op
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
    stages {
        InputOriginalIds, Input + Masking, "input.original_ids", [B, T], I64 Exact, op Given,
            "input_ids before masking", "tokenizer(text).input_ids, before BERT's masking";
        InputIds, Input, "input.ids", [B, T], I64 Exact, op Given,
            "input_ids", "tokenizer(text).input_ids, padded to the longest in the batch";
        InputTokenTypeIds, Input, "input.token_type_ids", [B, T], I64 Exact, op Given,
            "token_type_ids", "0 for [CLS] A [SEP], 1 for B [SEP]";
        InputAttentionMask, Input, "input.attention_mask", [B, T], I64 Exact, op Given,
            "attention_mask", "1 for real tokens, 0 for padding";
        InputLabels, Input + MlmLabels, "input.labels", [B, T], I64 Exact, op Given,
            "labels", "the original id where a token is to be predicted, -100 elsewhere";
        InputNextSentenceLabel, Input + NspLabels, "input.next_sentence_label", [B], I64 Exact, op Given,
            "next_sentence_label", "0 when sentence B follows A, 1 when B is random";
        InputClassLabels, Input + ClassLabels, "input.class_labels", [B], I64 Exact, op Given,
            "labels (BertForSequenceClassification)", "each sequence's class, its index in id2label";
        EmbWord, Embeddings, "embeddings.word", [B, T, H], F32 Exact, op WordLookup,
            reads [At(InputIds)], grad SumTerm [Grad(EmbSum)],
            "bert.embeddings.word_embeddings", "word_embeddings[input.ids]",
            backward "d sum; its rows added into word_embeddings' by input.ids (the [PAD] row excluded)";
        EmbPosition, Embeddings, "embeddings.position", [B, T, H], F32 Exact, op PositionLookup,
            reads [At(InputIds)], grad SumTerm [Grad(EmbSum)],
            "bert.embeddings.position_embeddings", "position_embeddings[0..T]",
            backward "d sum; summed over the batch into position_embeddings' rows 0..T";
        EmbTokenType, Embeddings, "embeddings.token_type", [B, T, H], F32 Exact, op TokenTypeLookup,
            reads [At(InputTokenTypeIds)], grad SumTerm [Grad(EmbSum)],
            "bert.embeddings.token_type_embeddings", "token_type_embeddings[input.token_type_ids]",
            backward "d sum; its rows added into token_type_embeddings' by input.token_type_ids";
        EmbSum, Embeddings, "embeddings.sum", [B, T, H], F32 Sum, op EmbeddingSum,
            reads [At(EmbWord), At(EmbTokenType), At(EmbPosition)], grad LayerNormInput [At(EmbSum), Grad(EmbLayerNorm)],
            "bert.embeddings (before LayerNorm)", "(word + token_type) + position",
            backward "LayerNorm': rstd ⊙ (g - mean(g) - x̂ ⊙ mean(g ⊙ x̂)), g = d layernorm ⊙ weight";
        EmbLayerNorm, Embeddings, "embeddings.layernorm", [B, T, H], F32 Rounded, op LayerNorm, (EmbLayerNormWeight, EmbLayerNormBias),
            reads [At(EmbSum)], grad LayerOutput [At(EmbLayerNorm), Readers],
            "hidden_states[0]", "LayerNorm(sum) = (x - mean) / sqrt(var + eps) * weight + bias",
            backward "d layer0's input: its Q, K and V projections' (d · W) + d layer0.attention.residual, ⊙ its dropout mask in training";
        EmbDropoutMask, Embeddings + Dropout, "embeddings.dropout_mask", [B, T, H], F32 Exact, op Drawn,
            "bert.embeddings.dropout's mask (training only)",
            "0 with probability hidden_dropout_prob, else 1 / (1 - hidden_dropout_prob)";
        EmbDropout, Embeddings + Dropout, "embeddings.dropout", [B, T, H], F32 Rounded, op Dropout,
            drops(EmbLayerNorm, EmbDropoutMask, Hidden),
            grad LayerOutput [At(EmbDropout), Readers],
            "bert.embeddings.dropout (training only): hidden_states[0]",
            "layernorm ⊙ dropout_mask, what layer 0 reads in training",
            backward "d layer0's input: its Q, K and V projections' (d · W) + d layer0.attention.residual";
        AttnQuery, Attention, "layer{i}.attention.query", [B, Nh, T, Hs], F32 Rounded, op HeadProjection, (QueryWeight, QueryBias),
            reads [LayerInput], grad QueryFromScores [At(AttnQuery), At(AttnKey), Grad(AttnScores)],
            "bert.encoder.layer.{i}.attention.self.query", "split_heads(x @ Wq^T + bq)",
            backward "d scores · key · hs^-0.5";
        AttnKey, Attention, "layer{i}.attention.key", [B, Nh, T, Hs], F32 Rounded, op HeadProjection, (KeyWeight, KeyBias),
            reads [LayerInput], grad KeyFromScores [At(AttnQuery), At(AttnKey), Grad(AttnScores)],
            "bert.encoder.layer.{i}.attention.self.key", "split_heads(x @ Wk^T + bk)",
            backward "d scores^T · query · hs^-0.5";
        AttnValue, Attention, "layer{i}.attention.value", [B, Nh, T, Hs], F32 Rounded, op HeadProjection, (ValueWeight, ValueBias),
            reads [LayerInput], grad ContextValue [HandedOn(AttnProbs), At(AttnValue), Grad(AttnContext)],
            "bert.encoder.layer.{i}.attention.self.value", "split_heads(x @ Wv^T + bv)",
            backward "probs^T · d context, per head";
        AttnScores, Attention, "layer{i}.attention.scores", [B, Nh, T, T], F32 Rounded, op Scores,
            reads [At(AttnQuery), At(AttnKey), At(InputAttentionMask)], grad SoftmaxInput [At(AttnProbs), Grad(AttnProbs)],
            "eager_attention_forward: attn_weights before softmax", "query @ key^T * hs^-0.5 + (1 - attention_mask) * f32::MIN",
            backward "softmax': probs ⊙ (d probs - Σ_keys probs ⊙ d probs); 0 at a padding key";
        AttnProbs, Attention, "layer{i}.attention.probs", [B, Nh, T, T], F32 Probability, op Softmax,
            reads [At(AttnScores)], grad ContextProbs [HandedOn(AttnProbs), At(AttnValue), Grad(AttnContext)],
            "attentions[{i}]", "softmax(scores, over keys)",
            backward "d context (split into heads) · value^T, ⊙ its dropout mask in training";
        AttnProbsDropoutMask, Attention + Dropout, "layer{i}.attention.probs_dropout_mask", [B, Nh, T, T], F32 Exact, op Drawn,
            "eager_attention_forward's dropout mask (training only)",
            "0 with probability attention_probs_dropout_prob, else 1 / (1 - attention_probs_dropout_prob)";
        AttnProbsDropout, Attention + Dropout, "layer{i}.attention.probs_dropout", [B, Nh, T, T], F32 Probability, op Dropout,
            drops(AttnProbs, AttnProbsDropoutMask, Attention),
            grad ContextProbs [HandedOn(AttnProbs), At(AttnValue), Grad(AttnContext)],
            "eager_attention_forward: attn_weights after dropout (training only)",
            "probs ⊙ probs_dropout_mask, what the context reads in training",
            backward "d context (split into heads) · value^T";
        AttnContext, Attention, "layer{i}.attention.context", [B, T, H], F32 Rounded, op Context,
            reads [HandedOn(AttnProbs), At(AttnValue)], grad DenseInput [At(AttnContext), Grad(AttnOutput)],
            "bert.encoder.layer.{i}.attention.self", "merge_heads(probs @ value)",
            backward "d output · Wo";
        AttnOutput, Attention, "layer{i}.attention.output", [B, T, H], F32 Rounded, op Dense, (AttnOutputWeight, AttnOutputBias),
            reads [At(AttnContext)], grad SumTerm [Grad(AttnResidual)],
            "bert.encoder.layer.{i}.attention.output.dense", "context @ Wo^T + bo",
            backward "d residual, ⊙ its dropout mask in training";
        AttnOutputDropoutMask, Attention + Dropout, "layer{i}.attention.output_dropout_mask", [B, T, H], F32 Exact, op Drawn,
            "bert.encoder.layer.{i}.attention.output.dropout's mask (training only)",
            "0 with probability hidden_dropout_prob, else 1 / (1 - hidden_dropout_prob)";
        AttnOutputDropout, Attention + Dropout, "layer{i}.attention.output_dropout", [B, T, H], F32 Rounded, op Dropout,
            drops(AttnOutput, AttnOutputDropoutMask, Hidden),
            grad SumTerm [Grad(AttnResidual)],
            "bert.encoder.layer.{i}.attention.output.dropout (training only)",
            "output ⊙ output_dropout_mask, what the residual adds in training",
            backward "d residual";
        AttnResidual, Attention, "layer{i}.attention.residual", [B, T, H], F32 Rounded, op Residual,
            reads [HandedOn(AttnOutput), LayerInput], grad LayerNormInput [At(AttnResidual), Grad(AttnLayerNorm)],
            "bert.encoder.layer.{i}.attention.output (before LayerNorm)", "output + layer input",
            backward "LayerNorm' of d attention.layernorm";
        AttnLayerNorm, Attention, "layer{i}.attention.layernorm", [B, T, H], F32 Rounded, op LayerNorm, (AttnLayerNormWeight, AttnLayerNormBias),
            reads [At(AttnResidual)], grad FfnInput [At(AttnLayerNorm), Grad(FfnResidual), Grad(FfnIntermediate)],
            "bert.encoder.layer.{i}.attention.output.LayerNorm", "LayerNorm(residual)",
            backward "d intermediate · W1 + d ffn.residual";
        FfnIntermediate, Ffn, "layer{i}.ffn.intermediate", [B, T, I], F32 Rounded, op Dense, (IntermediateWeight, IntermediateBias),
            reads [At(AttnLayerNorm)], grad ActivationInput [At(FfnIntermediate), Grad(FfnActivation)],
            "bert.encoder.layer.{i}.intermediate.dense", "attention.layernorm @ W1^T + b1",
            backward "d activation ⊙ hidden_act'(intermediate), gelu' = Φ(x) + x ⊙ φ(x)";
        FfnActivation, Ffn, "layer{i}.ffn.activation", [B, T, I], F32 Rounded, op Activation,
            reads [At(FfnIntermediate)], grad DenseInput [At(FfnActivation), Grad(FfnOutput)],
            "bert.encoder.layer.{i}.intermediate.intermediate_act_fn", "hidden_act(intermediate), gelu = x * (1 + erf(x / sqrt 2)) / 2",
            backward "d output · W2";
        FfnOutput, Ffn, "layer{i}.ffn.output", [B, T, H], F32 Rounded, op Dense, (FfnOutputWeight, FfnOutputBias),
            reads [At(FfnActivation)], grad SumTerm [Grad(FfnResidual)],
            "bert.encoder.layer.{i}.output.dense", "activation @ W2^T + b2",
            backward "d residual, ⊙ its dropout mask in training";
        FfnOutputDropoutMask, Ffn + Dropout, "layer{i}.ffn.output_dropout_mask", [B, T, H], F32 Exact, op Drawn,
            "bert.encoder.layer.{i}.output.dropout's mask (training only)",
            "0 with probability hidden_dropout_prob, else 1 / (1 - hidden_dropout_prob)";
        FfnOutputDropout, Ffn + Dropout, "layer{i}.ffn.output_dropout", [B, T, H], F32 Rounded, op Dropout,
            drops(FfnOutput, FfnOutputDropoutMask, Hidden),
            grad SumTerm [Grad(FfnResidual)],
            "bert.encoder.layer.{i}.output.dropout (training only)",
            "output ⊙ output_dropout_mask, what the residual adds in training",
            backward "d residual";
        FfnResidual, Ffn, "layer{i}.ffn.residual", [B, T, H], F32 Rounded, op Residual,
            reads [HandedOn(FfnOutput), At(AttnLayerNorm)], grad LayerNormInput [At(FfnResidual), Grad(FfnLayerNorm)],
            "bert.encoder.layer.{i}.output (before LayerNorm)", "output + attention.layernorm",
            backward "LayerNorm' of d ffn.layernorm";
        FfnLayerNorm, Ffn, "layer{i}.ffn.layernorm", [B, T, H], F32 Rounded, op LayerNorm, (FfnLayerNormWeight, FfnLayerNormBias),
            reads [At(FfnResidual)], grad LayerOutput [At(FfnLayerNorm), Readers],
            "hidden_states[{i+1}]", "LayerNorm(residual)",
            backward "d the next layer's input (for the last layer: the heads')";
        PoolerDense, Pooler, "pooler.dense", [B, H], F32 Rounded, op ClsDense, (PoolerWeight, PoolerBias),
            reads [LastHidden], grad TanhInput [At(PoolerOutput), Grad(PoolerOutput)],
            "bert.pooler.dense", "last_hidden_state[:, 0] @ Wp^T + bp",
            backward "d output ⊙ (1 - output²)";
        PoolerOutput, Pooler, "pooler.output", [B, H], F32 Rounded, op Tanh,
            reads [At(PoolerDense)], grad HeadsOnPooler [At(PoolerOutput), AnyOf, Grad(NspLogits), Grad(ClassifierLogits), DroppedMask],
            "pooler_output", "tanh(dense)",
            backward "d nsp.logits · Wnsp + d classifier.logits · Wc (those computed; the classifier's ⊙ its dropout mask in training)";
        MlmTransform, Mlm, "mlm.transform", [B, T, H], F32 Rounded, op Dense, (MlmTransformWeight, MlmTransformBias),
            reads [LastHidden], grad ActivationInput [At(MlmTransform), Grad(MlmActivation)],
            "cls.predictions.transform.dense", "last_hidden_state @ Wt^T + bt",
            backward "d activation ⊙ hidden_act'(transform)";
        MlmActivation, Mlm, "mlm.activation", [B, T, H], F32 Rounded, op Activation,
            reads [At(MlmTransform)], grad LayerNormInput [At(MlmActivation), Grad(MlmLayerNorm)],
            "cls.predictions.transform.transform_act_fn", "hidden_act(transform)",
            backward "LayerNorm' of d mlm.layernorm";
        MlmLayerNorm, Mlm, "mlm.layernorm", [B, T, H], F32 Rounded, op LayerNorm, (MlmLayerNormWeight, MlmLayerNormBias),
            reads [At(MlmActivation)], grad DecoderInput [At(MlmLayerNorm), Grad(MlmLogits)],
            "cls.predictions.transform.LayerNorm", "LayerNorm(activation)",
            backward "d logits · word_embeddings (the tied decoder)";
        MlmLogits, Mlm, "mlm.logits", [B, T, V], F32 Rounded, op Dense, (WordEmbeddings, MlmBias),
            reads [At(MlmLayerNorm)], grad TokenCrossEntropy [At(MlmLogits), At(InputLabels)],
            "prediction_logits", "layernorm @ word_embeddings^T + decoder bias (tied decoder)",
            backward "(softmax(logits) - onehot(label)) / count at each labelled position, 0 elsewhere";
        MlmLosses, Mlm + MlmLabels, "mlm.losses", [B, T], F32 Loss, op CrossEntropy,
            reads [At(MlmLogits), At(InputLabels)], grad MeanInput [At(InputLabels), Grad(MlmLoss)],
            "CrossEntropyLoss(reduction='none')(prediction_logits, labels)",
            "-log_softmax(mlm.logits)[input.labels], 0 where input.labels = -100",
            backward "1 / count at each labelled position, 0 elsewhere";
        MlmLoss, Mlm + MlmLabels, "mlm.loss", [], F32 Loss, op MeanLoss,
            reads [At(MlmLosses), At(InputLabels)], grad LossTerm [Grad(Loss)],
            "masked_lm_loss", "sum(mlm.losses) / count(input.labels != -100)",
            backward "1, from loss = mlm.loss + nsp.loss";
        NspLogits, Nsp, "nsp.logits", [B, Two], F32 Rounded, op Dense, (NspWeight, NspBias),
            reads [At(PoolerOutput)], grad SequenceCrossEntropy [At(NspLogits), At(InputNextSentenceLabel)],
            "seq_relationship_logits", "pooler.output @ Wnsp^T + bnsp",
            backward "(softmax(logits) - onehot(label)) / B";
        NspLosses, Nsp + NspLabels, "nsp.losses", [B], F32 Loss, op CrossEntropy,
            reads [At(NspLogits), At(InputNextSentenceLabel)], grad MeanInput [At(InputNextSentenceLabel), Grad(NspLoss)],
            "CrossEntropyLoss(reduction='none')(seq_relationship_logits, next_sentence_label)",
            "-log_softmax(nsp.logits)[input.next_sentence_label]",
            backward "1 / B";
        NspLoss, Nsp + NspLabels, "nsp.loss", [], F32 Loss, op MeanLoss,
            reads [At(NspLosses), At(InputNextSentenceLabel)], grad LossTerm [Grad(Loss)],
            "next_sentence_loss", "mean(nsp.losses)",
            backward "1, from loss = mlm.loss + nsp.loss";
        ClassifierDropoutMask, Classifier + Dropout, "classifier.dropout_mask", [B, H], F32 Exact, op Drawn,
            "BertForSequenceClassification.dropout's mask (training only)",
            "0 with probability classifier_dropout (else hidden_dropout_prob), else 1 / (1 - that)";
        ClassifierDropout, Classifier + Dropout, "classifier.dropout", [B, H], F32 Rounded, op Dropout,
            drops(PoolerOutput, ClassifierDropoutMask, Classifier),
            grad DenseInput [At(ClassifierDropout), Grad(ClassifierLogits)],
            "BertForSequenceClassification.dropout (training only)",
            "pooler.output ⊙ dropout_mask, what the classifier reads in training",
            backward "d classifier.logits · Wc";
        ClassifierLogits, Classifier, "classifier.logits", [B, Labels], F32 Rounded, op Dense, (ClassifierWeight, ClassifierBias),
            reads [HandedOn(PoolerOutput)], grad SequenceCrossEntropy [At(ClassifierLogits), At(InputClassLabels)],
            "logits", "pooler.output @ Wc^T + bc",
            backward "(softmax(logits) - onehot(label)) / B";
        ClassifierLosses, Classifier + ClassLabels, "classifier.losses", [B], F32 Loss, op CrossEntropy,
            reads [At(ClassifierLogits), At(InputClassLabels)], grad MeanInput [At(InputClassLabels), Grad(ClassifierLoss)],
            "CrossEntropyLoss(reduction='none')(logits, labels)",
            "-log_softmax(classifier.logits)[input.class_labels]",
            backward "1 / B";
        ClassifierLoss, Classifier + ClassLabels, "classifier.loss", [], F32 Loss, op MeanLoss,
            reads [At(ClassifierLosses), At(InputClassLabels)], grad LossTerm [Grad(Loss)],
            "loss (BertForSequenceClassification, single-label)", "mean(classifier.losses)",
            backward "1, from loss = mlm.loss + nsp.loss + classifier.loss";
        Loss, Objective + AnyLabels, "loss", [], F32 Loss, op TotalLoss,
            reads [AnyOf, At(MlmLoss), At(NspLoss), At(ClassifierLoss)], grad One [],
            "loss", "mlm.loss + nsp.loss + classifier.loss (those computed)",
            backward "1: the backward pass starts here";
        SentencePooled, Sentence, "sentence.pooled", [B, H], F32 Rounded, op MeanPooling,
            reads [LastHidden, At(InputAttentionMask)],
            "sentence-transformers 1_Pooling (mean): sentence_embedding, before any 2_Normalize",
            "sum over real tokens (input.attention_mask) of last ffn.layernorm / their count";
        LensEmbeddings, Lens + Lens, "lens.embeddings.logits", [B, T, V], F32 Rounded, op Lens,
            reads [At(EmbLayerNorm)],
            "cls.predictions(hidden_states[0])", "the MLM head applied to embeddings.layernorm";
        LensLayer, Lens + Lens, "lens.layer{i}.logits", [B, T, V], F32 Rounded, op Lens,
            reads [At(FfnLayerNorm)],
            "cls.predictions(hidden_states[{i+1}])", "the MLM head applied to layer{i}.ffn.layernorm";
    }
    parameters {
        WordEmbeddings, "bert.embeddings.word_embeddings.weight", [V, H],
            "the word table; also the MLM decoder's weight (tied)",
            backward "d embeddings.word added into rows by input.ids ([PAD] excluded) + d mlm.logits^T · mlm.layernorm";
        PositionEmbeddings, "bert.embeddings.position_embeddings.weight", [P, H],
            "the position table",
            backward "d embeddings.position summed over the batch, rows 0..T";
        TokenTypeEmbeddings, "bert.embeddings.token_type_embeddings.weight", [Types, H],
            "the token type table",
            backward "d embeddings.token_type added into rows by input.token_type_ids";
        EmbLayerNormWeight, "bert.embeddings.LayerNorm.weight", [H],
            "embeddings.layernorm's scale",
            backward "Σ_tokens d embeddings.layernorm ⊙ x̂";
        EmbLayerNormBias, "bert.embeddings.LayerNorm.bias", [H],
            "embeddings.layernorm's shift",
            backward "Σ_tokens d embeddings.layernorm";
        QueryWeight, "bert.encoder.layer.{i}.attention.self.query.weight", [H, H],
            "Wq",
            backward "Σ_tokens d query (heads merged)^T · layer input";
        QueryBias, "bert.encoder.layer.{i}.attention.self.query.bias", [H],
            "bq",
            backward "Σ_tokens d query (heads merged)";
        KeyWeight, "bert.encoder.layer.{i}.attention.self.key.weight", [H, H],
            "Wk",
            backward "Σ_tokens d key (heads merged)^T · layer input; d bk is 0 in exact arithmetic";
        KeyBias, "bert.encoder.layer.{i}.attention.self.key.bias", [H],
            "bk",
            backward "Σ_tokens d key (heads merged): 0 up to rounding, softmax ignores a constant per row";
        ValueWeight, "bert.encoder.layer.{i}.attention.self.value.weight", [H, H],
            "Wv",
            backward "Σ_tokens d value (heads merged)^T · layer input";
        ValueBias, "bert.encoder.layer.{i}.attention.self.value.bias", [H],
            "bv",
            backward "Σ_tokens d value (heads merged)";
        AttnOutputWeight, "bert.encoder.layer.{i}.attention.output.dense.weight", [H, H],
            "Wo",
            backward "Σ_tokens d attention.output^T · context";
        AttnOutputBias, "bert.encoder.layer.{i}.attention.output.dense.bias", [H],
            "bo",
            backward "Σ_tokens d attention.output";
        AttnLayerNormWeight, "bert.encoder.layer.{i}.attention.output.LayerNorm.weight", [H],
            "attention.layernorm's scale",
            backward "Σ_tokens d attention.layernorm ⊙ x̂";
        AttnLayerNormBias, "bert.encoder.layer.{i}.attention.output.LayerNorm.bias", [H],
            "attention.layernorm's shift",
            backward "Σ_tokens d attention.layernorm";
        IntermediateWeight, "bert.encoder.layer.{i}.intermediate.dense.weight", [I, H],
            "W1",
            backward "Σ_tokens d ffn.intermediate^T · attention.layernorm";
        IntermediateBias, "bert.encoder.layer.{i}.intermediate.dense.bias", [I],
            "b1",
            backward "Σ_tokens d ffn.intermediate";
        FfnOutputWeight, "bert.encoder.layer.{i}.output.dense.weight", [H, I],
            "W2",
            backward "Σ_tokens d ffn.output^T · ffn.activation";
        FfnOutputBias, "bert.encoder.layer.{i}.output.dense.bias", [H],
            "b2",
            backward "Σ_tokens d ffn.output";
        FfnLayerNormWeight, "bert.encoder.layer.{i}.output.LayerNorm.weight", [H],
            "ffn.layernorm's scale",
            backward "Σ_tokens d ffn.layernorm ⊙ x̂";
        FfnLayerNormBias, "bert.encoder.layer.{i}.output.LayerNorm.bias", [H],
            "ffn.layernorm's shift",
            backward "Σ_tokens d ffn.layernorm";
        PoolerWeight, "bert.pooler.dense.weight", [H, H],
            "Wp",
            backward "Σ_batch d pooler.dense^T · last hidden state at [CLS]";
        PoolerBias, "bert.pooler.dense.bias", [H],
            "bp",
            backward "Σ_batch d pooler.dense";
        MlmBias, "cls.predictions.bias", [V],
            "the MLM decoder's bias",
            backward "Σ_tokens d mlm.logits";
        MlmTransformWeight, "cls.predictions.transform.dense.weight", [H, H],
            "Wt",
            backward "Σ_tokens d mlm.transform^T · last hidden state";
        MlmTransformBias, "cls.predictions.transform.dense.bias", [H],
            "bt",
            backward "Σ_tokens d mlm.transform";
        MlmLayerNormWeight, "cls.predictions.transform.LayerNorm.weight", [H],
            "mlm.layernorm's scale",
            backward "Σ_tokens d mlm.layernorm ⊙ x̂";
        MlmLayerNormBias, "cls.predictions.transform.LayerNorm.bias", [H],
            "mlm.layernorm's shift",
            backward "Σ_tokens d mlm.layernorm";
        NspWeight, "cls.seq_relationship.weight", [Two, H],
            "Wnsp",
            backward "Σ_batch d nsp.logits^T · pooler.output";
        NspBias, "cls.seq_relationship.bias", [Two],
            "bnsp",
            backward "Σ_batch d nsp.logits";
        ClassifierWeight, "classifier.weight", [Labels, H],
            "Wc, BertForSequenceClassification's one new matrix",
            backward "Σ_batch d classifier.logits^T · pooler.output";
        ClassifierBias, "classifier.bias", [Labels],
            "bc",
            backward "Σ_batch d classifier.logits";
    }
}

impl StageKind {
    /// This kind's row in [`STAGES`]. The table is in the kinds' order (a test holds it so), so
    /// a binary search finds the row.
    pub fn index(self) -> usize {
        STAGES.binary_search_by(|info| info.kind.cmp(&self)).expect("every kind has its row in the table")
    }

    /// This kind's row of the table.
    pub fn info(self) -> &'static StageInfo {
        &STAGES[self.index()]
    }

    /// Whether this kind repeats once per encoder layer (its name has the layer's index).
    pub fn per_layer(self) -> bool {
        self.info().pattern.contains("{i}")
    }

    /// Whether this kind is computed inside an encoder layer (`layer{i}.*`).
    pub fn in_layer(self) -> bool {
        matches!(self.info().part, Part::Attention | Part::Ffn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_indexed_by_kind() {
        for (idx, info) in STAGES.iter().enumerate() {
            assert_eq!(info.kind.index(), idx, "row {idx} holds {:?}", info.kind);
        }
    }

    #[test]
    fn the_table_is_in_the_kinds_order() {
        for pair in STAGES.windows(2) {
            assert!(pair[0].kind < pair[1].kind, "{:?} comes before {:?} in the table", pair[0].kind, pair[1].kind);
        }
    }
}
