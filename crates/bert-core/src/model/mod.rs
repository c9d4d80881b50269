//! BERT itself: [`BertModel`] and one file per Hugging Face module, in the order the forward
//! pass runs them.
//!
//! | file | HF module | chapter |
//! | --- | --- | --- |
//! | `embeddings.rs` | `BertEmbeddings` | 3 |
//! | `layer_norm.rs` | `nn.LayerNorm` | 4 |
//! | `attention.rs` | `BertAttention` (`BertSelfAttention`, `BertSelfOutput`) | 5, 6, 7 |
//! | `feed_forward.rs`, `activation.rs` | `BertIntermediate`, `BertOutput` | 8 |
//! | `layer.rs` | `BertLayer` | 9 |
//! | `pooler.rs` | `BertPooler` | 10 |
//! | `mlm.rs` | `BertOnlyMLMHead` (`cls.predictions`) | 11 |
//! | `nsp.rs`, `classifier.rs` | `cls.seq_relationship`, `classifier` | 10, 11 |
//! | `losses.rs` | the losses of `BertForPreTraining` | 13 |
//! | `sentence_pooling.rs` | sentence-transformers' mean pooling | 10 |
//!
//! The arithmetic is done by [`crate::ops`]; the checkpoint's files are read by [`crate::io`]
//! and put together into a model by `load.rs` (new weights for a config, and heads a checkpoint
//! lacks, by `init.rs`); a batch with the pretraining labels its inputs ask for is made by
//! `encode.rs`; what is checked before a pass (the stop stage, the ids, memory, the heads labels
//! need) is in `preflight.rs`.

pub mod activation;
pub mod attention;
pub(crate) mod backward;
pub mod classifier;
pub mod dropout;
pub mod embeddings;
mod encode;
pub mod feed_forward;
pub mod gradients;
mod init;
mod labelled_rows;
pub mod layer;
pub mod layer_norm;
pub mod linear;
pub mod load;
pub mod losses;
pub mod mlm;
mod modules;
pub mod nsp;
pub mod parameters;
pub mod pooler;
mod preflight;
pub mod sentence_pooling;
pub mod size;

use std::path::PathBuf;

use ndarray::{Array2, Array3, Array4};

use self::classifier::ClassifierHead;
use self::dropout::Dropout;
use self::embeddings::BertEmbeddings;
use self::gradients::{Grads, Record};
use self::layer::BertLayer;
use self::mlm::MlmHead;
use self::nsp::NspHead;
use self::pooler::BertPooler;
use self::sentence_pooling::SentencePooling;
use crate::error::{BertError, Result};
use crate::io::config::BertConfig;
use crate::io::tokenizer::{Batch, BertTokenizer};
use crate::ops::{self, Float, Kernels};
use crate::pass::hook::Hook;
use crate::pass::{Halt, Sink, Tee, Tracer};
use crate::stage::{self, Dims, Objectives, OutputHeads, Stage, StageKind::*};

/// A loaded checkpoint: the encoder, whichever heads its weights have, and its tokenizer. `F`
/// is the element type the whole pass runs in: f32, BERT's own, or f64 (`--precision f64`),
/// with the same code.
pub struct BertModel<F: Float = f32> {
    pub config: BertConfig,
    pub embeddings: BertEmbeddings<F>,
    pub layers: Vec<BertLayer<F>>,
    pub pooler: Option<BertPooler<F>>,
    pub mlm: Option<MlmHead<F>>,
    pub nsp: Option<NspHead<F>>,
    pub classifier: Option<ClassifierHead<F>>,
    /// sentence-transformers' mean pooling, when the directory has `1_Pooling/config.json`.
    pub sentence_pooling: Option<SentencePooling>,
    pub tokenizer: BertTokenizer,
    /// Where the model came from, for messages and manifests.
    pub source: PathBuf,
    /// Which implementation of the operations [`BertModel::trace`] runs.
    pub kernels: Kernels,
}

/// What the forward pass returns besides the traced stages.
pub struct Outputs<F: Float = f32> {
    /// `[B,T,H]`, the last layer's output.
    pub last_hidden: Option<Array3<F>>,
    /// `[B,H]`
    pub pooled: Option<Array2<F>>,
    /// `[B,T,V]`; None for a pass that ran the MLM head at the labelled positions only.
    pub mlm_logits: Option<Array3<F>>,
    /// `[B,2]`
    pub nsp_logits: Option<Array2<F>>,
    /// `[B,C]`, one score per class
    pub classifier_logits: Option<Array2<F>>,
    /// `[B,H]`, the sentence embedding of a sentence-transformers model.
    pub sentence: Option<Array2<F>>,
    /// `mlm.loss`, `nsp.loss`, `classifier.loss` and `loss`, when the batch has labels for them.
    pub mlm_loss: Option<F>,
    pub nsp_loss: Option<F>,
    pub classifier_loss: Option<F>,
    pub loss: Option<F>,
}

impl<F: Float> Default for Outputs<F> {
    fn default() -> Outputs<F> {
        Outputs {
            last_hidden: None,
            pooled: None,
            mlm_logits: None,
            nsp_logits: None,
            classifier_logits: None,
            sentence: None,
            mlm_loss: None,
            nsp_loss: None,
            classifier_loss: None,
            loss: None,
        }
    }
}

impl<F: Float> Outputs<F> {
    /// The same outputs in f32, for what prints them (the predictions of an f64 pass).
    pub fn to_f32(&self) -> Outputs<f32> {
        let narrow = |v: F| v.to_f32().unwrap_or(f32::NAN);
        Outputs {
            last_hidden: self.last_hidden.as_ref().map(|a| a.mapv(narrow)),
            pooled: self.pooled.as_ref().map(|a| a.mapv(narrow)),
            mlm_logits: self.mlm_logits.as_ref().map(|a| a.mapv(narrow)),
            nsp_logits: self.nsp_logits.as_ref().map(|a| a.mapv(narrow)),
            classifier_logits: self.classifier_logits.as_ref().map(|a| a.mapv(narrow)),
            sentence: self.sentence.as_ref().map(|a| a.mapv(narrow)),
            mlm_loss: self.mlm_loss.map(narrow),
            nsp_loss: self.nsp_loss.map(narrow),
            classifier_loss: self.classifier_loss.map(narrow),
            loss: self.loss.map(narrow),
        }
    }
}

/// What a pass is asked for besides its stages.
#[derive(Default)]
pub struct Pass<'h> {
    /// Stop after this stage: nothing after it is computed.
    pub stop_after: Option<Stage>,
    /// Changes stages as they are computed (an ablated head, a patched stage), before they are
    /// recorded and before the rest of the pass reads them.
    pub hook: Option<&'h mut dyn Hook>,
    /// Also read every layer's guess through the MLM head: the `lens.*` stages, after the rest.
    pub lens: bool,
    /// Then run the backward pass: the `grad.*` stages, after the rest. Needs a loss.
    pub backward: bool,
    /// With MLM labels, run the MLM head at the labelled positions only (`labelled_rows.rs`):
    /// its stages are then `[1,M,..]` for the M labelled positions, not `[B,T,..]`, there are no
    /// `mlm_logits` in the outputs, and the loss and gradients are the same up to float rounding
    /// (the order of some sums). For a training step whose head stages nobody reads.
    pub labelled_only: bool,
    /// Drop out as BERT trains (a training step, transformers' `model.train()`): the masks and
    /// what they leave are stages of their own. None: dropout is the identity, as in `eval()`.
    pub dropout: Option<Dropout>,
}

/// What [`BertModel::trace_with`]'s forward pass is asked for, besides its stages.
#[derive(Clone, Copy)]
struct Asked<'d> {
    lens: bool,
    labelled_only: bool,
    dropout: Option<&'d Dropout>,
}

/// The result of one traced forward pass.
pub struct Traced<F: Float = f32> {
    /// The stop stage, if the pass stopped there before its end.
    pub stopped_at: Option<Stage>,
    pub outputs: Outputs<F>,
    /// d loss / d every parameter the loss reached, after a backward pass.
    pub gradients: Option<Grads<F>>,
    /// The inputs the pass read, as its hooks left them (a patched `input.labels`, say): what
    /// its losses are the losses of. None when it stopped among the inputs.
    pub batch: Option<Batch>,
}

/// `[B,1,1,T]`: HF's extended attention mask, 0 for a real key and the most negative float
/// for padding (`torch.finfo(dtype).min`, the simulated format's in a simulated pass), added to
/// every head's scores for every query. None without padding: HF then adds nothing.
pub fn additive_mask<F: Float>(attention_mask: &Array2<i64>) -> Option<Array4<F>> {
    attention_mask.iter().any(|&m| m == 0).then(|| {
        let lowest = ops::lowest::<F>();
        let (b, t) = attention_mask.dim();
        let additive = attention_mask.mapv(|m| if m == 0 { lowest } else { F::zero() });
        additive.into_shape_with_order((b, 1, 1, t)).expect("B·T values")
    })
}

impl<F: Float> BertModel<F> {
    /// Which output heads (pooler, MLM, NSP, classifier, sentence embedding) this checkpoint has.
    pub fn output_heads(&self) -> OutputHeads {
        OutputHeads {
            pooler: self.pooler.is_some(),
            mlm: self.mlm.is_some(),
            nsp: self.nsp.is_some(),
            classifier: self.classifier.is_some(),
            sentence: self.sentence_pooling.is_some(),
        }
    }

    /// Every stage this model produces for an input with these objectives, in execution order.
    pub fn plan(&self, objectives: Objectives) -> Vec<Stage> {
        stage::plan(self.config.num_hidden_layers, self.output_heads(), objectives)
    }

    /// The sizes of the symbolic dimensions for a batch of `batch` × `tokens`.
    pub fn dims(&self, batch: usize, tokens: usize) -> Dims {
        let n_labels = self.classifier.as_ref().map_or(0, |c| c.labels.len());
        self.config.dims(batch, tokens, n_labels)
    }

    /// Tokenizes `texts` (with sentence B from `pairs`) for this model.
    pub fn encode(&self, texts: &[String], pairs: Option<&[String]>, truncate: bool) -> Result<Batch> {
        self.tokenizer.encode(texts, pairs, self.config.max_position_embeddings, truncate)
    }

    /// Runs the forward pass on `batch`, handing every stage to `sink` in execution order, and
    /// stops after `stop_after` if given: nothing after it is computed.
    pub fn trace(&self, batch: &Batch, sink: &mut dyn Sink, stop_after: Option<Stage>) -> Result<Traced<F>> {
        self.trace_with(batch, sink, Pass { stop_after, ..Pass::default() })
    }

    /// [`BertModel::trace`], with a hook that changes stages and the logit lens when `pass`
    /// asks for them.
    pub fn trace_with(&self, batch: &Batch, sink: &mut dyn Sink, pass: Pass) -> Result<Traced<F>> {
        self.check(batch)?;
        if pass.lens && self.mlm.is_none() {
            return Err(BertError::MissingHead {
                path: self.source.clone(),
                wanted: "the logit lens".into(),
                weights: "cls.predictions.*".into(),
            });
        }
        if pass.backward {
            self.check_backward(batch)?;
        }
        let mut hook = pass.hook;
        // The backward reads the forward's stages: a record keeps them, only when it will.
        let mut record = Record::new();
        let mut outputs = Outputs::default();
        let mut used = None;
        let stopped_at = {
            let mut tee = Tee { sink: &mut *sink, record: pass.backward.then_some(&mut record as &mut dyn Sink) };
            // The hook may outlive the sink; the tracer holds both for the shorter time.
            let mut tracer = Tracer::new(&mut tee, pass.stop_after, hook.as_deref_mut().map(|h| h as &mut dyn Hook));
            let run = ops::with_kernels(self.kernels, || {
                let asked =
                    Asked { lens: pass.lens, labelled_only: pass.labelled_only, dropout: pass.dropout.as_ref() };
                self.run(batch, asked, &mut tracer, &mut outputs, &mut used)
            });
            match run {
                Ok(()) => None,
                Err(Halt::Stopped(stage)) => Some(stage),
                Err(Halt::Failed(e)) => return Err(e),
            }
        };
        let mut gradients = None;
        if let (true, None, Some(used)) = (pass.backward, stopped_at, &used) {
            let mut tracer = Tracer::new(&mut *sink, None, hook.map(|h| h as &mut dyn Hook));
            tracer.set_attention_mask(&used.attention_mask);
            let backward =
                ops::with_kernels(self.kernels, || self.backward(used, &record, pass.labelled_only, &mut tracer));
            gradients = Some(backward.map_err(|halt| match halt {
                Halt::Failed(e) => e,
                Halt::Stopped(_) => unreachable!("the backward pass has no stop stage"),
            })?);
        }
        sink.finish()?;
        Ok(Traced { stopped_at, outputs, gradients, batch: used })
    }

    /// Refuses a backward pass that has no loss.
    pub fn check_backward(&self, batch: &Batch) -> Result<()> {
        // Labels for a head the model lacks are refused by the checks of every pass, which say so.
        self.check(batch)?;
        self.check_backward_memory(batch)?;
        let mlm = batch.labels.mlm.is_some() && self.mlm.is_some();
        let nsp = batch.labels.nsp.is_some() && self.nsp.is_some() && self.pooler.is_some();
        let class = batch.labels.class.is_some() && self.classifier.is_some() && self.pooler.is_some();
        if !mlm && !nsp && !class {
            let losses = match self.classifier {
                Some(_) => "‹label›, ‹mlm_target›, ‹mask_prob› or ‹nsp_label›",
                None => "‹mlm_target›, ‹mask_prob› or ‹nsp_label› (or ‹label› on a classifier)",
            };
            return Err(BertError::Labels(format!("a backward pass needs a loss: give {losses}")));
        }
        Ok(())
    }

    /// The forward pass: inputs, embeddings, the layers, then whichever heads the model has,
    /// and the lens when asked for.
    fn run(
        &self,
        batch: &Batch,
        Asked { lens, labelled_only, dropout }: Asked,
        tracer: &mut Tracer,
        outputs: &mut Outputs<F>,
        used: &mut Option<Batch>,
    ) -> Result<(), Halt> {
        // The input stages are the arrays the model reads: a hook that changes one changes the pass.
        let mut inputs = batch.clone();
        self.trace_inputs(&mut inputs, tracer)?;
        if inputs != *batch {
            self.check_ids(&inputs)?;
        }
        tracer.set_attention_mask(&inputs.attention_mask);
        *used = Some(inputs.clone());
        let batch = &inputs;
        let additive_mask = additive_mask(&batch.attention_mask);

        let mut hidden = self.embeddings.forward(batch, dropout, tracer)?;
        // The lens reads each layer's output after the pass, so it keeps them: [B,T,H] each.
        let mut layer_outputs = Vec::new();
        for (layer_idx, layer) in self.layers.iter().enumerate() {
            if lens {
                layer_outputs.push(hidden.clone());
            }
            hidden = layer.forward(layer_idx, &hidden, additive_mask.as_ref(), dropout, tracer)?;
        }
        if lens {
            layer_outputs.push(hidden.clone());
        }

        if let Some(pooler) = &self.pooler {
            outputs.pooled = Some(pooler.forward(&hidden, tracer)?);
        }
        match (&self.mlm, &batch.labels.mlm) {
            (Some(mlm), Some(labels)) if labelled_only => {
                let (rows, row_labels) = labelled_rows::gather(hidden.view(), labels);
                let logits = mlm.forward(&rows, tracer)?;
                outputs.mlm_loss = Some(losses::mlm_loss(&logits, &row_labels, tracer)?);
            }
            (Some(mlm), labels) => {
                let logits = mlm.forward(&hidden, tracer)?;
                if let Some(labels) = labels {
                    outputs.mlm_loss = Some(losses::mlm_loss(&logits, labels, tracer)?);
                }
                outputs.mlm_logits = Some(logits);
            }
            (None, _) => {}
        }
        if let (Some(nsp), Some(pooled)) = (&self.nsp, &outputs.pooled) {
            let logits = nsp.forward(pooled, tracer)?;
            if let Some(labels) = &batch.labels.nsp {
                outputs.nsp_loss = Some(losses::nsp_loss(&logits, labels, tracer)?);
            }
            outputs.nsp_logits = Some(logits);
        }
        if let (Some(classifier), Some(pooled)) = (&self.classifier, &outputs.pooled) {
            let logits = classifier.forward(pooled, dropout, tracer)?;
            if let Some(labels) = &batch.labels.class {
                outputs.classifier_loss = Some(losses::classifier_loss(&logits, labels, tracer)?);
            }
            outputs.classifier_logits = Some(logits);
        }
        let parts = [outputs.mlm_loss, outputs.nsp_loss, outputs.classifier_loss];
        if parts.iter().any(Option::is_some) {
            outputs.loss = Some(losses::total_loss(&parts, tracer)?);
        }
        if let Some(pooling) = &self.sentence_pooling {
            outputs.sentence = Some(pooling.forward(&hidden, &batch.attention_mask, tracer)?);
        }
        outputs.last_hidden = Some(hidden);
        if let Some(mlm) = self.mlm.as_ref().filter(|_| lens) {
            self.trace_lens(mlm, layer_outputs, tracer)?;
        }
        Ok(())
    }

    /// The logit lens: BERT normalises every layer's output, so each can go straight through
    /// the MLM head, which shows what the model would predict if it stopped there. The head's
    /// own stages are not traced again; its logits are, once per layer.
    fn trace_lens(&self, mlm: &MlmHead<F>, layer_outputs: Vec<Array3<F>>, tracer: &mut Tracer) -> Result<(), Halt> {
        for (idx, hidden) in layer_outputs.into_iter().enumerate() {
            let mut logits = mlm.logits_of(&hidden);
            let stage = match idx {
                0 => Stage::new(LensEmbeddings),
                _ => Stage::layer(idx - 1, LensLayer),
            };
            tracer.float(stage, &mut logits)?;
        }
        Ok(())
    }

    /// The encoder layers from `first` on, each reading the one before: `[B,T,H]` -> `[B,T,H]`.
    /// The experiments call it to run only the layers an intervention changes.
    pub(crate) fn layers_from(
        &self,
        first: usize,
        mut hidden: Array3<F>,
        additive_mask: Option<&Array4<F>>,
        tracer: &mut Tracer,
    ) -> Result<Array3<F>, Halt> {
        for (layer_idx, layer) in self.layers.iter().enumerate().skip(first) {
            hidden = layer.forward(layer_idx, &hidden, additive_mask, None, tracer)?;
        }
        Ok(hidden)
    }

    /// The input stages, in the table's order: what the tokenizer gave, what the model sees, and
    /// the labels, when there are any.
    fn trace_inputs(&self, batch: &mut Batch, tracer: &mut Tracer) -> Result<(), Halt> {
        if let Some(original) = &mut batch.labels.original_ids {
            tracer.i64(Stage::new(InputOriginalIds), original)?;
        }
        tracer.i64(Stage::new(InputIds), &mut batch.ids)?;
        tracer.i64(Stage::new(InputTokenTypeIds), &mut batch.token_type_ids)?;
        tracer.i64(Stage::new(InputAttentionMask), &mut batch.attention_mask)?;
        if let Some(labels) = &mut batch.labels.mlm {
            tracer.i64(Stage::new(InputLabels), labels)?;
        }
        if let Some(labels) = &mut batch.labels.nsp {
            tracer.i64(Stage::new(InputNextSentenceLabel), labels)?;
        }
        if let Some(labels) = &mut batch.labels.class {
            tracer.i64(Stage::new(InputClassLabels), labels)?;
        }
        Ok(())
    }
}
