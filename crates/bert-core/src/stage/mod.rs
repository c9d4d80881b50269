//! The names of every traced tensor, in execution order: the stage table and its vocabulary.
//!
//! The table is the one list that the tracer, the CLI (`--stop-at`, `stages`), the manifest, the
//! diff and the walkthrough all read. The names are a contract with `scripts/dump_reference.py`
//! and with users' numpy code, so they never appear as string literals anywhere else. This file
//! holds the words the table is written in (a stage's kind, part, shape, dtype and needs); the
//! table's rows are in `table.rs`, a concrete stage and its names in `name.rs`, which stages a
//! pass produces in `plan.rs`, choosing stages by name in `select.rs`, and what each stage is
//! computed from in `inputs.rs`.
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
//! part, of kind [`StageKind::Param`]) name the parameters as transformers'
//! `BertForPreTraining.named_parameters()` does. The `lens.*` stages exist only when a run asks
//! for the logit lens (`bert-trace lens`): the MLM head applied to the embeddings' and every
//! layer's output.

pub mod inputs;

mod name;
mod plan;
mod select;
mod table;

pub use name::{execution_key, parse, Of, Stage};
pub use plan::{backward_plan, parameters, plan, OutputHeads};
pub use select::{in_group, suggestions};
pub use table::STAGES;

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
        use Part::*;
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

/// Every kind of stage, in the order of the table's rows (and so of the forward pass). A layer's
/// stages (`Attn*`, `Ffn*`) repeat once per encoder layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StageKind {
    InputOriginalIds,
    InputIds,
    InputTokenTypeIds,
    InputAttentionMask,
    InputLabels,
    InputNextSentenceLabel,
    InputClassLabels,
    EmbWord,
    EmbPosition,
    EmbTokenType,
    EmbSum,
    EmbLayerNorm,
    EmbDropoutMask,
    EmbDropout,
    AttnQuery,
    AttnKey,
    AttnValue,
    AttnScores,
    AttnProbs,
    AttnProbsDropoutMask,
    AttnProbsDropout,
    AttnContext,
    AttnOutput,
    AttnOutputDropoutMask,
    AttnOutputDropout,
    AttnResidual,
    AttnLayerNorm,
    FfnIntermediate,
    FfnActivation,
    FfnOutput,
    FfnOutputDropoutMask,
    FfnOutputDropout,
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
    ClassifierDropoutMask,
    ClassifierDropout,
    ClassifierLogits,
    ClassifierLosses,
    ClassifierLoss,
    Loss,
    SentencePooled,
    LensEmbeddings,
    LensLayer,
    /// A parameter, whose gradient a backward pass gives; after every other kind, as the
    /// parameters' rows come after every other row of the table.
    Param(ParamKind),
}

/// Every parameter of `BertForPreTraining`, in the order of its `named_parameters()`: the
/// embeddings', one encoder layer's (repeated per layer), then the pooler's and the heads'.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ParamKind {
    WordEmbeddings,
    PositionEmbeddings,
    TokenTypeEmbeddings,
    EmbLayerNormWeight,
    EmbLayerNormBias,
    QueryWeight,
    QueryBias,
    KeyWeight,
    KeyBias,
    ValueWeight,
    ValueBias,
    AttnOutputWeight,
    AttnOutputBias,
    AttnLayerNormWeight,
    AttnLayerNormBias,
    IntermediateWeight,
    IntermediateBias,
    FfnOutputWeight,
    FfnOutputBias,
    FfnLayerNormWeight,
    FfnLayerNormBias,
    PoolerWeight,
    PoolerBias,
    MlmBias,
    MlmTransformWeight,
    MlmTransformBias,
    MlmLayerNormWeight,
    MlmLayerNormBias,
    NspWeight,
    NspBias,
    ClassifierWeight,
    ClassifierBias,
}

impl ParamKind {
    /// Whether this is one of the embeddings' parameters, which come before the layers'.
    pub fn is_embeddings(self) -> bool {
        use ParamKind::*;
        matches!(
            self,
            WordEmbeddings | PositionEmbeddings | TokenTypeEmbeddings | EmbLayerNormWeight | EmbLayerNormBias
        )
    }

    /// Whether this is one of an encoder layer's parameters, which repeat once per layer.
    pub fn per_layer(self) -> bool {
        StageKind::Param(self).per_layer()
    }
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
    /// Labels for a classifier's loss (`--label`).
    ClassLabels,
    /// Labels for any loss.
    AnyLabels,
    /// A run that asks for the logit lens.
    Lens,
    /// A backward pass.
    Backward,
    /// A training pass with dropout (`train` and `finetune`, unless `--dropout 0`).
    Dropout,
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
    /// Every sequence has a classifier's label (its class).
    pub class_labels: bool,
    /// The run reads every layer's guess through the MLM head (the logit lens).
    pub lens: bool,
    /// The run computes gradients (a backward pass).
    pub backward: bool,
    /// The pass drops out as BERT trains (a training step): the dropout masks and what they
    /// leave are stages of their own.
    pub dropout: bool,
}

impl Objectives {
    /// Every objective at once, for listing every stage a model could produce.
    pub const ALL: Objectives = Objectives {
        masked: true,
        mlm_labels: true,
        nsp_labels: true,
        class_labels: true,
        lens: true,
        backward: true,
        dropout: true,
    };
}

impl Objectives {
    /// Whether the input has labels for any loss.
    pub fn any_labels(self) -> bool {
        self.mlm_labels || self.nsp_labels || self.class_labels
    }
}

impl Needs {
    /// Whether `objectives` provide what this needs.
    pub fn met_by(self, objectives: Objectives) -> bool {
        match self {
            Needs::Nothing => true,
            Needs::Masking => objectives.masked,
            Needs::MlmLabels => objectives.mlm_labels,
            Needs::NspLabels => objectives.nsp_labels,
            Needs::ClassLabels => objectives.class_labels,
            Needs::AnyLabels => objectives.any_labels(),
            Needs::Lens => objectives.lens,
            Needs::Backward => objectives.backward,
            Needs::Dropout => objectives.dropout,
        }
    }
}

/// How closely two correct float32 implementations (PyTorch's and ours) agree on a stage: what
/// its arithmetic lets rounding do. `diff` turns each into a tolerance
/// (`crate::divergence::Tolerance::of`), measured against PyTorch on the goldens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agreement {
    /// Ids, labels, table lookups and dropout masks: nothing is rounded.
    Exact,
    /// One or two additions (the embeddings' sum).
    Sum,
    /// Probabilities, from a softmax.
    Probability,
    /// A loss: a log-sum-exp of logits, then a mean.
    Loss,
    /// Anything else: dot products, normalisations and activations, whose rounding grows with
    /// the length of the sums and the size of the values.
    Rounded,
}

/// The operation that computes a stage from what it reads: the table's `op` column. What
/// recomputes a stage (`recompute.rs`, for isolation and step) and what explains one of its
/// elements (`explanation/element.rs`) each implement the operations, not the kinds: a new kind of
/// an existing operation is one row of the table. The module an operation runs (which dense
/// layer, which LayerNorm) is the one whose weight and bias the row names (`params`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// An input of the pass: given, not computed.
    Given,
    /// A dropout mask: drawn from the training step's seed.
    Drawn,
    /// A parameter: read from the checkpoint.
    Param,
    /// `word_embeddings[input.ids]`.
    WordLookup,
    /// `position_embeddings[0..T]`.
    PositionLookup,
    /// `token_type_embeddings[input.token_type_ids]`.
    TokenTypeLookup,
    /// `(word + token_type) + position`, in Hugging Face's order.
    EmbeddingSum,
    /// LayerNorm with the row's scale and shift.
    LayerNorm,
    /// What it drops times its mask.
    Dropout,
    /// A projection of the layer's input by the row's dense layer, split into heads.
    HeadProjection,
    /// `query · keyᵀ · hs^-0.5` plus the additive mask.
    Scores,
    /// Softmax over the keys.
    Softmax,
    /// `probs · value`, the heads merged.
    Context,
    /// `x · Wᵀ + b` by the row's dense layer, over the last axis.
    Dense,
    /// A block's output plus its input.
    Residual,
    /// The config's `hidden_act`.
    Activation,
    /// The row's dense layer on the last hidden state at `[CLS]`.
    ClsDense,
    /// `tanh`.
    Tanh,
    /// `-log_softmax(logits)[label]` per labelled position.
    CrossEntropy,
    /// The mean over the labelled positions.
    MeanLoss,
    /// The sum of the losses computed.
    TotalLoss,
    /// The mean over the real tokens (sentence-transformers' pooling).
    MeanPooling,
    /// The MLM head on an earlier hidden state.
    Lens,
}

/// How the backward pass computes a stage's gradient from what its row's `grad_reads` lists:
/// the table's gradient column, which recomputing a gradient (`recompute.rs`) and explaining one
/// (`explanation/gradient.rs`) dispatch on. A gradient's rule follows what reads the stage, so the
/// module it runs backward is the reader's (the last of the row's `grad_reads`). In a pass that
/// dropped out, the gradient of a stage a dropout stage drops is that stage's times the mask,
/// whatever its rule here (`stage::inputs::through_dropout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradOp {
    /// What the backward pass does not reach: the inputs, the dropout masks, the sentence
    /// pooling and the lens.
    None,
    /// A parameter's gradient, a sum over every token: not recomputed alone.
    ParamSum,
    /// `d loss / d loss = 1`.
    One,
    /// A loss's gradient is the total loss's, one number.
    LossTerm,
    /// A term of a sum gets the sum's gradient.
    SumTerm,
    /// A mean over the labelled positions: `1 / count` at each, times the mean's gradient.
    MeanInput,
    /// `(softmax(logits) - onehot(label)) / count` at each labelled token (`[B,T,V]`).
    TokenCrossEntropy,
    /// The same per sequence (`[B,C]`).
    SequenceCrossEntropy,
    /// A dense layer's input: `d out · W`, by the reader's dense layer.
    DenseInput,
    /// The MLM decoder's input: `d logits · word_embeddings` (the tied decoder).
    DecoderInput,
    /// A LayerNorm's input, by the reader's LayerNorm.
    LayerNormInput,
    /// An activation's input: `d out ⊙ hidden_act'(x)`.
    ActivationInput,
    /// The pooler's dense output: `d out ⊙ (1 - tanh²)`.
    TanhInput,
    /// The pooler's output: the shares of the heads on it (NSP, a classifier).
    HeadsOnPooler,
    /// A layer's output (or the embeddings'): the next layer's attention block's input, or after
    /// the last layer the heads'.
    LayerOutput,
    /// The attention block's output: the FFN's input and its residual.
    FfnInput,
    /// The probabilities: `d context · valueᵀ`, per head.
    ContextProbs,
    /// The value: `probsᵀ · d context`, per head.
    ContextValue,
    /// The scores: softmax' of the probabilities' gradient.
    SoftmaxInput,
    /// The query: `d scores · key · hs^-0.5`.
    QueryFromScores,
    /// The key: `d scoresᵀ · query · hs^-0.5`.
    KeyFromScores,
}

/// The weight and bias one stage reads, by their rows in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamKinds {
    pub weight: ParamKind,
    pub bias: ParamKind,
}

/// Which of config.json's dropout probabilities a dropout stage draws its mask with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropoutRate {
    /// `hidden_dropout_prob`: after the embeddings, and each block's output before its residual.
    Hidden,
    /// `attention_probs_dropout_prob`: on the attention probabilities.
    Attention,
    /// `classifier_dropout` (else `hidden_dropout_prob`): on the pooled vector a classifier reads.
    Classifier,
}

/// What a dropout stage drops: the stage it reads, the mask drawn for it (the row before it)
/// and the probability the mask is drawn with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drops {
    pub input: StageKind,
    pub mask: StageKind,
    pub rate: DropoutRate,
}

/// One input of a stage, said relative to the stage that reads it: the table's `reads` and
/// `grad_reads` columns are lists of these, and `stage/inputs.rs` turns them into the stages of
/// one pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// The stage of this kind: in the reader's layer when the kind repeats once per layer.
    At(StageKind),
    /// What the stage of this kind hands on to the stages after it: its dropout stage in a pass
    /// that dropped out, else itself.
    HandedOn(StageKind),
    /// The gradient of the stage of this kind.
    Grad(StageKind),
    /// The layer's input: what the embeddings hand on for layer 0, the previous layer's output
    /// after that.
    LayerInput,
    /// The last hidden state, which the heads read.
    LastHidden,
    /// The gradients of what reads the reader, a layer's output: the next layer's attention block
    /// (its residual and its query, key and value projections) or, after the last layer, the
    /// heads' (those the loss used).
    Readers,
    /// The mask of the dropout stage that drops the reader, in a pass that dropped out; nothing
    /// otherwise. A gradient's reads that name it handle dropout themselves (the pooler's output,
    /// which the NSP head reads undropped); any other stage before a dropout stage gets its
    /// gradient as the dropout stage's times the mask.
    DroppedMask,
    /// The inputs after this are alternatives, of which a dump needs one or more (the losses
    /// `loss` sums, the heads whose gradients the pooler's output adds).
    AnyOf,
}

impl StageKind {
    /// The dropout stage that drops this one in a training pass, if any.
    pub fn dropped_by(self) -> Option<StageKind> {
        STAGES.iter().find(|row| row.drops.is_some_and(|d| d.input == self)).map(|row| row.kind)
    }

    /// The dropout stage whose mask this is, if it is a mask.
    pub fn mask_for(self) -> Option<StageKind> {
        STAGES.iter().find(|row| row.drops.is_some_and(|d| d.mask == self)).map(|row| row.kind)
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
    /// How closely two correct implementations agree on it, which is its tolerance in `diff`.
    pub agreement: Agreement,
    /// The operation that computes it.
    pub op: Op,
    /// The weight and bias it reads: a dense layer's, or a LayerNorm's scale and shift.
    pub params: Option<ParamKinds>,
    /// For a dropout stage: what it drops, with which mask and probability.
    pub drops: Option<Drops>,
    /// What it is computed from, in the order its recomputation takes them (a dropout stage:
    /// what it drops and its mask). Empty for the inputs, the masks and the parameters, which
    /// nothing computes from other stages.
    pub reads: &'static [Read],
    /// How its gradient is computed from what `grad_reads` lists.
    pub grad_op: GradOp,
    /// What its gradient is computed from by the backward pass, in the order its recomputation
    /// takes them: the forward values the rule reads, then the gradients after it. Empty for
    /// `grad.loss` (1), for the parameters' gradients (which sum over every token and are not
    /// recomputed alone) and for what has no gradient.
    pub grad_reads: &'static [Read],
    /// The Hugging Face module or output this equals; `{i}` is the layer index, `{i+1}` the one after.
    pub hf: &'static str,
    /// One line of math, in the names of earlier stages.
    pub formula: &'static str,
    /// The backward rule: how d loss / d this stage (or parameter) is computed, in the names of
    /// the gradients of later stages (`d x` is `grad.x`). Empty for what has no gradient.
    pub backward: &'static str,
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
        use Dim::*;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What a new kind of stage must provide besides its row's words: the row's agreement (the
    /// macro will not take a row without one) agrees with its dtype; what it is computed from
    /// (`stage/inputs.rs`), with and without dropout, for every stage that is computed; and the
    /// parameters of every module reach a row, so that each is loaded, explained and given its
    /// gradient under the table's name. (Its recomputation and explanation are held by the
    /// goldens' isolation and explain tests, which run every stage of every golden.)
    #[test]
    fn every_kind_provides_what_the_passes_ask_of_it() {
        use inputs::{inputs, Wiring};
        for info in STAGES {
            let stage = match info.kind.per_layer() {
                true => Stage::layer(0, info.kind),
                false => Stage::new(info.kind),
            };
            if info.dtype == DType::I64 {
                assert_eq!(info.agreement, Agreement::Exact, "{}: integers agree exactly", info.pattern);
            }
            let drawn = info.kind.mask_for().is_some();
            let computed = !matches!(info.part, Part::Input | Part::Param) && !drawn;
            for dropout in [false, true] {
                let read = inputs(stage, Wiring { n_layers: 2, dropout });
                assert_eq!(!read.is_empty(), computed, "{}: what it is computed from ({read:?})", info.pattern);
            }
            // A gradient the backward pass computes says what it is computed from (`grad.loss`
            // is 1, and a parameter's sums over every token).
            let has_gradient = !info.backward.is_empty() && !matches!(info.kind, StageKind::Loss | StageKind::Param(_));
            assert_eq!(
                !info.grad_reads.is_empty(),
                has_gradient,
                "{}: what its gradient is computed from",
                info.pattern
            );
            // Its gradient's rule: none exactly when the backward pass does not reach it.
            assert_eq!(info.grad_op == GradOp::None, info.backward.is_empty(), "{}: {:?}", info.pattern, info.grad_op);
            let module_backward = matches!(info.grad_op, GradOp::DenseInput | GradOp::LayerNormInput);
            if module_backward {
                // The module run backward is the reader's: the row of the last gradient it reads.
                let reader = info.grad_reads.last().and_then(|read| match read {
                    Read::Grad(kind) => kind.info().params,
                    _ => None,
                });
                assert!(reader.is_some(), "{}: {:?} reads no module's gradient last", info.pattern, info.grad_op);
            }
            if has_gradient {
                for n_layers in [0, 1, 2] {
                    let read = inputs(stage.grad(), Wiring { n_layers, dropout: false });
                    assert!(
                        !read.is_empty(),
                        "{}: what its gradient is computed from, {n_layers} layers",
                        info.pattern
                    );
                }
            }
        }
        // A dropout stage's mask is the row right before it, and both exist only in a pass that
        // drops out.
        for (at, info) in STAGES.iter().enumerate() {
            if let Some(drops) = info.drops {
                assert_eq!(STAGES[at - 1].kind, drops.mask, "{}: its mask is the row before it", info.pattern);
                assert_eq!(drops.input.dropped_by(), Some(info.kind), "{}: one dropout per stage", info.pattern);
            }
            let dropout = info.drops.is_some() || info.kind.mask_for().is_some();
            assert_eq!(
                info.needs == Needs::Dropout,
                dropout,
                "{}: a dropout stage or mask needs dropout",
                info.pattern
            );
        }
        // A row's operation agrees with what the row says it reads: a dense layer or LayerNorm
        // names its weight and bias, a dropout stage what it drops, an input and a mask nothing.
        for info in STAGES {
            let with_module = matches!(info.op, Op::Dense | Op::LayerNorm | Op::HeadProjection | Op::ClsDense);
            assert_eq!(info.params.is_some(), with_module, "{}: {:?} and its weight and bias", info.pattern, info.op);
            assert_eq!(info.drops.is_some(), info.op == Op::Dropout, "{}: {:?}", info.pattern, info.op);
            assert_eq!(info.kind.mask_for().is_some(), info.op == Op::Drawn, "{}: {:?}", info.pattern, info.op);
            assert_eq!(info.part == Part::Input, info.op == Op::Given, "{}: {:?}", info.pattern, info.op);
            assert_eq!(info.part == Part::Param, info.op == Op::Param, "{}: {:?}", info.pattern, info.op);
        }
        // The three embedding tables are looked up by id, not read as a weight and bias.
        let looked_up = [ParamKind::WordEmbeddings, ParamKind::PositionEmbeddings, ParamKind::TokenTypeEmbeddings];
        for info in STAGES.iter().filter(|info| info.part == Part::Param) {
            let StageKind::Param(param) = info.kind else { unreachable!("a parameter's row") };
            let read = STAGES.iter().any(|row| row.params.is_some_and(|p| p.weight == param || p.bias == param));
            assert!(read || looked_up.contains(&param), "{}: no stage's row reads it", info.pattern);
        }
    }

    #[test]
    fn every_gradient_has_its_backward_rule_and_parses_back() {
        let all = OutputHeads { pooler: true, mlm: true, nsp: true, classifier: false, sentence: false };
        let stages = plan(2, all, Objectives::ALL);
        let grads: Vec<&Stage> = stages.iter().filter(|s| s.is_grad()).collect();
        // The loss; the MLM head's 6 and the NSP head's 5 (with the pooler); 2 layers × 14 stages
        // and 3 dropout stages; the embeddings' 5 and their dropout; 5 + 2 × 16 + 9 parameters.
        // (A dropout mask has no gradient: it is drawn, not computed.)
        assert_eq!(grads.len(), 1 + 6 + 5 + 2 * (14 + 3) + 5 + 1 + 46, "{grads:?}");
        let without_dropout = plan(2, all, Objectives { dropout: false, ..Objectives::ALL });
        let dropped = stages.len() - without_dropout.len();
        // Each dropout stage and its mask (the embeddings' and 3 per layer), and each one's gradient.
        assert_eq!(dropped, 2 * (1 + 3 * 2) + (1 + 3 * 2), "{stages:?}");
        for stage in grads {
            assert!(!stage.formula().is_empty(), "{stage} has no backward rule");
            assert_eq!(parse(&stage.name()), Some(*stage), "parse({stage})");
        }
    }
}
