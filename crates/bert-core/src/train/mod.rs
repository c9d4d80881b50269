//! Pretraining BERT: the loop `bert-trace train` runs. Each step takes a batch of the training
//! text (`corpus.rs`), masks it as BERT's pretraining does, runs the forward and the backward
//! pass (`model/backward.rs`), and changes every parameter by AdamW (`adamw.rs`) at the rate the
//! schedule gives (`schedule.rs`). `checkpoint.rs` saves the model and the optimizer's state, so
//! that transformers loads the model and a resumed run continues exactly.
//!
//! Dropout stays off, as in every pass of this tool: a step here is the step PyTorch takes in
//! `model.eval()` mode, so that the two can be compared number for number. Nothing clips the
//! gradients (transformers' `Trainer` clips their norm to 1 by default; d2l does not).

pub mod adamw;
pub mod corpus;
pub mod options;
pub mod run;
pub mod save;
pub mod schedule;

use ndarray::ArrayViewD;
use serde::{Deserialize, Serialize};

use self::adamw::{adamw_step, Moments};
use self::corpus::Corpus;
pub use self::options::{TrainOptions, TrainSettings};
use self::schedule::linear_with_warmup;
use crate::error::{BertError, Result};
use crate::io::dump::manifest::Inputs;
use crate::io::files::bytes;
use crate::io::memory;
use crate::io::tokenizer::Batch;
use crate::model::{BertModel, Pass};
use crate::pass::{Sink, TensorView};
use crate::stage::Stage;

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
        if model.mlm.is_none() {
            return Err(BertError::MissingHead {
                path: path(),
                wanted: "the MLM loss".into(),
                weights: "cls.predictions.*".into(),
            });
        }
        if corpus.pairs.is_some() && (model.nsp.is_none() || model.pooler.is_none()) {
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
        Ok(Trainer { model, corpus, options, moments, step, log, fresh_heads: Vec::new(), resumed_from: None })
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
        let lr = linear_with_warmup(self.options.lr, self.step, self.options.warmup_steps, self.options.steps);
        let traced =
            self.model.trace_with(&batch, &mut Unfinished(&mut *sink), Pass { backward: true, ..Pass::default() })?;
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
        let grads = traced.gradients.expect("a backward pass has gradients");
        emit_parameters(&self.model, sink, |stage| stage)?;
        // PyTorch's AdamW skips a parameter whose `.grad` is None (one the loss does not reach).
        let t = step as u64;
        let (moments, config) = (&mut self.moments, self.options.adamw);
        let mut index = 0;
        self.model
            .update_parameters(|stage, values| {
                let result = match grads.get(&stage.hf()) {
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
