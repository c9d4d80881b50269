//! Training BERT: the loop `bert-trace train` (pretraining) and `bert-trace finetune` (a
//! classifier) run. Each step takes a batch of the training text (`corpus.rs`; a labelled file
//! is read by `labelled.rs`), masks it as BERT's pretraining does or gives it its classes, runs
//! the forward and the backward pass (`model/backward.rs`), and changes every parameter by AdamW
//! (`adamw.rs`) at the rate the schedule gives (`schedule.rs`). `save.rs` saves the model and
//! the optimizer's state, so that transformers loads the model and a resumed run continues
//! exactly; `held_out.rs` measures a classifier on held-out examples.
//!
//! Each step drops out as transformers' `model.train()` does, at the rates of the model's
//! config.json unless the run's `dropout` option sets them (`model/dropout.rs`), with masks
//! drawn from the run's seed and the step, so that a run is repeated exactly; every other pass
//! of this tool (a trace, an evaluation) is `model.eval()`'s, without dropout. The gradients are
//! clipped only when `max_grad_norm` asks for it (transformers' `Trainer` clips their norm to 1
//! by default; d2l does not).

pub mod adamw;
pub mod corpus;
pub mod documents;
pub mod held_out;
pub mod labelled;
pub mod options;
pub mod run;
pub mod save;
pub mod schedule;

use ndarray::ArrayViewD;
use serde::{Deserialize, Serialize};

use self::adamw::{adamw_step, Moments};
use self::corpus::Corpus;
use self::held_out::Evaluation;
pub use self::options::{TrainOptions, TrainSettings};
use self::schedule::linear_with_warmup;
use crate::error::{BertError, Result};
use crate::io::dump::manifest::Inputs;
use crate::io::files::bytes;
use crate::io::memory;
use crate::io::tokenizer::Batch;
use crate::model::{BertModel, Pass};
use crate::pass::{Sink, TensorView};
use crate::stage::{Stage, StageKind::*};

/// What one step reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepLog {
    /// Counted from 1.
    pub step: usize,
    /// `mlm.loss + nsp.loss`, before the update.
    pub loss: f32,
    pub mlm_loss: Option<f32>,
    pub nsp_loss: Option<f32>,
    /// The learning rate the step used.
    pub lr: f64,
}

/// A training run in progress: the model being trained, the text, and the optimizer's state.
pub struct Trainer {
    pub model: BertModel,
    pub corpus: Corpus,
    pub options: TrainOptions,
    /// The optimizer's state of each parameter, in the order of [`BertModel::parameters`].
    moments: Vec<Moments<f32>>,
    /// How many steps are done.
    pub step: usize,
    /// Every step's report so far.
    pub log: Vec<StepLog>,
    /// The heads made new for this run (`cls.predictions`, ...), which a checkpoint records.
    pub fresh_heads: Vec<String>,
    /// The checkpoint a resumed run continues.
    pub resumed_from: Option<std::path::PathBuf>,
    /// Every evaluation on held-out examples so far (a classifier's).
    pub evals: Vec<Evaluation>,
    /// Where the held-out examples come from (a file of their own; None for a split of the
    /// training file's) and how often they are evaluated: a resumed run keeps both.
    pub eval_file: Option<std::path::PathBuf>,
    /// The SHA-256 of `eval_file`'s bytes.
    pub eval_sha256: Option<String>,
    pub eval_every: Option<usize>,
}

impl Trainer {
    /// A run from step 0. The model must have the heads the text needs (the MLM head, and for
    /// pairs the pooler and the NSP head: see [`BertModel::add_pretraining_heads`]).
    /// The model's weights must be finite: a run never starts from NaN or inf.
    pub fn new(model: BertModel, corpus: Corpus, options: TrainOptions) -> Result<Trainer> {
        model.check_finite(&model.source.join("model.safetensors"))?;
        let moments = model.parameters().iter().map(|(_, p)| Moments::zeros(p.as_slice().len())).collect();
        Trainer::with_state(model, corpus, options, moments, 0, Vec::new())
    }

    /// A run at step `step`, with the optimizer's state as saved ([`Trainer::resume`]).
    fn with_state(
        model: BertModel,
        corpus: Corpus,
        options: TrainOptions,
        moments: Vec<Moments<f32>>,
        step: usize,
        log: Vec<StepLog>,
    ) -> Result<Trainer> {
        options.check()?;
        corpus.check(&model.tokenizer, &options.batching)?;
        let path = || model.source.clone();
        if let Some(classes) = &corpus.classes {
            let n_labels = model.classifier.as_ref().map(|c| c.labels.len());
            if n_labels.is_none() || model.pooler.is_none() {
                return Err(BertError::MissingHead {
                    path: path(),
                    wanted: "a classifier's loss".into(),
                    weights: "bert.pooler.* and classifier.*".into(),
                });
            }
            if n_labels != Some(classes.names.len()) {
                return Err(BertError::Training(format!(
                    "{}: its classifier has {} classes, the data {} ({})",
                    path().display(),
                    n_labels.unwrap_or(0),
                    classes.names.len(),
                    classes.names.join(", ")
                )));
            }
        } else if model.mlm.is_none() {
            return Err(BertError::MissingHead {
                path: path(),
                wanted: "the MLM loss".into(),
                weights: "cls.predictions.*".into(),
            });
        }
        check_pairs_fit(&corpus, &model)?;
        for part in &options.no_decay {
            if !model.parameters().iter().any(|(stage, _)| stage.hf().contains(part.as_str())) {
                return Err(BertError::OptionValue {
                    option: options::NO_DECAY,
                    value: part.clone(),
                    accepted: "a part of a parameter's name, such as bias or LayerNorm: this one is in none".into(),
                });
            }
        }
        if corpus.classes.is_none() && corpus.pairs.is_some() && (model.nsp.is_none() || model.pooler.is_none()) {
            return Err(BertError::MissingHead {
                path: path(),
                wanted: "the NSP loss the sentence pairs ask for".into(),
                weights: "bert.pooler.* and cls.seq_relationship.*".into(),
            });
        }
        // The parameters (copied into memory at the first update), their gradients and the
        // optimizer's two moments: four values per parameter, beside the passes' own memory.
        let values: usize = model.parameters().iter().map(|(_, p)| p.as_slice().len()).sum();
        let state = (values as u64).saturating_mul(4 * 4);
        memory::check(
            state,
            &format!("for the parameters, their gradients and AdamW's state ({} parameters, {})", values, bytes(state)),
        )?;
        Ok(Trainer {
            model,
            corpus,
            options,
            moments,
            step,
            log,
            fresh_heads: Vec::new(),
            resumed_from: None,
            evals: Vec::new(),
            eval_file: None,
            eval_sha256: None,
            eval_every: None,
        })
    }

    /// The batch of the next step, and the inputs that describe it.
    pub fn next_batch(&self) -> Result<(Batch, Inputs)> {
        self.corpus.batch(self.step, &self.model.tokenizer, &self.options.batching)
    }

    /// Whether every step of the run is done.
    pub fn finished(&self) -> bool {
        self.step >= self.options.steps
    }

    /// One step: the next batch forward and backward, then AdamW. `sink` gets the step's trace:
    /// the inputs and every forward stage, every gradient, then each parameter before
    /// (`param.*`) and after (`updated.param.*`) the update, then its `finish`.
    pub fn step(&mut self, sink: &mut dyn Sink) -> Result<StepLog> {
        if self.finished() {
            return Err(BertError::Training(format!("the run's {} steps are done", self.options.steps)));
        }
        let (batch, _) = self.next_batch()?;
        self.step_with(batch, sink)
    }

    /// [`Trainer::step`] on a batch made elsewhere, in place of the corpus's next one: a run's
    /// batches kept apart from its corpus (as `golden/english-small` keeps its first five, so
    /// that a test repeats them without the corpus) give its steps again.
    pub fn step_with(&mut self, batch: Batch, sink: &mut dyn Sink) -> Result<StepLog> {
        if self.finished() {
            return Err(BertError::Training(format!("the run's {} steps are done", self.options.steps)));
        }
        let lr = linear_with_warmup(self.options.lr, self.step, self.options.warmup_steps, self.options.steps);
        // A step whose MLM head nobody reads (every step but one `--dump-step` asks for) runs the
        // head at the labelled positions only, as Google's pretraining does: the same loss and
        // gradients for a fraction of the decoder's arithmetic. A dumped step shows the head at
        // every position, as transformers computes it; its parameters' gradients can then differ
        // from an undumped step's in the last bits (the order of a sum), so a run with a dump
        // follows the same run without one to float rounding, not bit for bit.
        let head = [MlmTransform, MlmActivation, MlmLayerNorm, MlmLogits, MlmLosses].map(Stage::new);
        let labelled_only = !head.iter().any(|stage| sink.wants(stage) || sink.wants(&stage.grad()));
        let dropout = self.options.dropout.with_seed(dropout_seed(self.options.batching.seed, self.step + 1));
        let pass = Pass { backward: true, labelled_only, dropout, ..Pass::default() };
        let traced = self.model.trace_with(&batch, &mut Unfinished(&mut *sink), pass)?;
        // A diverged run stops here, before its parameters take a non-finite step: nothing of
        // this step is applied, and a save of the weights it broke is never written.
        let step = self.step + 1;
        let loss = traced.outputs.loss.expect("a backward pass has a loss");
        let advice = format!("a lower {}, or more {}, may help", options::LR, options::WARMUP_STEPS);
        if !loss.is_finite() {
            return Err(BertError::Diverged {
                step,
                problem: format!("the loss is {loss}: the run has diverged, so the step is not applied ({advice})"),
            });
        }
        let mut grads = traced.gradients.expect("a backward pass has gradients");
        if let Some(max_norm) = self.options.max_grad_norm {
            clip_grad_norm(&mut grads, max_norm);
        }
        emit_parameters(&self.model, sink, |stage| stage)?;
        // PyTorch's AdamW skips a parameter whose `.grad` is None (one the loss does not reach).
        let t = step as u64;
        let (moments, config, no_decay) = (&mut self.moments, self.options.adamw, &self.options.no_decay);
        let mut index = 0;
        self.model
            .update_parameters(|stage, values| {
                let name = stage.hf();
                let config = match no_decay.iter().any(|part| name.contains(part.as_str())) {
                    true => adamw::AdamWConfig { weight_decay: 0.0, ..config },
                    false => config,
                };
                let result = match grads.get(stage) {
                    Some(grad) => {
                        let grad = grad.as_standard_layout();
                        let grad = grad.as_slice().expect("a standard layout has a slice");
                        adamw_step(values, grad, &mut moments[index], &config, lr, t).map_err(|at| (stage, at))
                    }
                    None => Ok(()),
                };
                index += 1;
                result
            })
            .map_err(|(stage, at)| BertError::Diverged {
                step,
                problem: format!(
                "the update made {} {} at element {} of {}: the run has diverged and stops before anything of this \
                 step is saved ({advice}, as may a larger {})",
                if at.array == "value" { "the weight".to_string() } else { format!("AdamW's {}", at.array) },
                at.value,
                at.index,
                stage.hf(),
                options::EPS
            ),
            })?;
        emit_parameters(&self.model, sink, Stage::updated)?;
        sink.finish()?;
        self.step = step;
        let outputs = traced.outputs;
        let log = StepLog { step: self.step, loss, mlm_loss: outputs.mlm_loss, nsp_loss: outputs.nsp_loss, lr };
        debug_assert!(outputs.classifier_loss.is_none() || outputs.classifier_loss == Some(loss));
        self.log.push(log.clone());
        Ok(log)
    }

    /// The optimizer's state, by name: `exp_avg.<name>` and `exp_avg_sq.<name>` of each
    /// parameter, `<name>` as transformers names it.
    pub fn optimizer_state(&self) -> Vec<(String, Vec<usize>, &[f32])> {
        let mut state = Vec::new();
        for ((stage, param), moments) in self.model.parameters().into_iter().zip(&self.moments) {
            state.push((format!("exp_avg.{}", stage.hf()), param.shape().to_vec(), moments.exp_avg.as_slice()));
            state.push((format!("exp_avg_sq.{}", stage.hf()), param.shape().to_vec(), moments.exp_avg_sq.as_slice()));
        }
        state
    }
}

/// The seed of step `step`'s dropout masks: the run's seed and the step mixed by SplitMix64, apart
/// from the seeds of its masking and its new weights.
fn dropout_seed(seed: u64, step: usize) -> u64 {
    const DROPOUT: u64 = 0xD50F_0A7B_57E0_0001;
    crate::objectives::splitmix::SplitMix64::new(seed ^ DROPOUT ^ (step as u64).rotate_left(32)).next_u64()
}

/// Refuses sentence pairs on a model whose token type table has one row: sentence B's tokens are
/// of type 1.
pub(crate) fn check_pairs_fit(corpus: &Corpus, model: &BertModel) -> Result<()> {
    if corpus.pairs.is_some() && model.config.type_vocab_size < 2 {
        return Err(BertError::Corpus {
            path: corpus.path.clone(),
            line: 0,
            problem: format!(
                "sentence pairs, but {} has type_vocab_size {}: sentence B's tokens are of type 1",
                model.source.display(),
                model.config.type_vocab_size
            ),
        });
    }
    Ok(())
}

/// Scales every gradient so that their global ℓ2 norm is at most `max_norm`, as
/// `torch.nn.utils.clip_grad_norm_` does on the CPU: each gradient's norm, the norm of those
/// norms, then the factor `max_norm / (norm + 1e-6)`, at most 1, every step (a factor of 1
/// changes nothing), in float32 as PyTorch's tensors are.
fn clip_grad_norm(grads: &mut crate::model::gradients::Grads<f32>, max_norm: f64) {
    let norms: Vec<f32> = grads
        .by_stage
        .iter()
        .map(|(_, g)| g.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>().sqrt() as f32)
        .collect();
    let total = norms.iter().map(|&n| f64::from(n) * f64::from(n)).sum::<f64>().sqrt() as f32;
    let factor = (max_norm as f32 / (total + 1e-6)).min(1.0);
    for (_, grad) in &mut grads.by_stage {
        grad.mapv_inplace(|v| v * factor);
    }
}

/// Hands every parameter the sink wants to it, as the stage `name_of(param stage)`.
fn emit_parameters(model: &BertModel, sink: &mut dyn Sink, name_of: fn(Stage) -> Stage) -> Result<()> {
    for (stage, param) in model.parameters() {
        let stage = name_of(stage);
        if sink.wants(&stage) {
            let values =
                ArrayViewD::from_shape(param.shape(), param.as_slice()).expect("a parameter's values fill its shape");
            sink.emit(stage, TensorView::F32(values))?;
        }
    }
    Ok(())
}

/// A sink whose `finish` waits: a step's trace goes on after the pass, with the parameters.
struct Unfinished<'a>(&'a mut dyn Sink);

impl Sink for Unfinished<'_> {
    fn wants(&self, stage: &Stage) -> bool {
        self.0.wants(stage)
    }

    fn emit(&mut self, stage: Stage, tensor: TensorView<'_>) -> Result<()> {
        self.0.emit(stage, tensor)
    }

    fn unreached(&mut self, parameters: &[String]) -> Result<()> {
        self.0.unreached(parameters)
    }
}
