//! A run's options: what the caller gives ([`TrainSettings`], each option unset or set), the
//! defaults, the options a resumed run saved, and the one rule each must keep.
//!
//! A resumed run continues exactly only with its own options, so an option given with another
//! value than the saved one is refused; the values are compared as numbers (a saved f64 reads
//! back bit for bit: serde_json's `float_roundtrip`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::adamw::AdamWConfig;
use crate::error::{BertError, Result};
use crate::io::config::BertConfig;
use crate::model::dropout::DropoutRates;
use crate::words::Opt;

/// Everything that decides a run's numbers besides the model and the text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainOptions {
    /// The run's length: the schedule falls to 0 at this step.
    pub steps: usize,
    /// The peak learning rate.
    pub lr: f64,
    pub warmup_steps: usize,
    pub batching: Batching,
    pub adamw: AdamWConfig,
    /// Clip the gradients' global ℓ2 norm to this before each update, as
    /// `torch.nn.utils.clip_grad_norm_` does (HF Trainer's 1.0); None: no clipping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_grad_norm: Option<f64>,
    /// The parameters whose names contain one of these (`bias`, `LayerNorm`) take no weight
    /// decay, as BERT's and HF Trainer's recipes exclude them; empty: every parameter decays.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub no_decay: Vec<String>,
    /// The share of a labelled file held out for evaluation (`eval_split`), when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_split: Option<f64>,
    /// Dropout in every step, as the model's config.json gives it unless `dropout` set it; a
    /// run saved without it (before bert-trace dropped out) had none.
    #[serde(default, skip_serializing_if = "DropoutRates::is_off")]
    pub dropout: DropoutRates,
}

/// The defaults that differ between pretraining and fine-tuning.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Recipe {
    pub lr: f64,
    pub batch_size: usize,
}

/// BERT's pretraining learning rate (Devlin et al., 2018), and this tool's small batches.
pub const PRETRAINING: Recipe = Recipe { lr: DEFAULT_LR, batch_size: DEFAULT_BATCH_SIZE };
/// BERT's fine-tuning recipe: lr 2e-5, batches of 32 (Devlin et al., 2018, appendix A.3).
pub const FINE_TUNING: Recipe = Recipe { lr: 2e-5, batch_size: 32 };

/// How a step's batch is made.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Batching {
    pub batch_size: usize,
    /// Sequences are cut to this many tokens, `[CLS]` and `[SEP]` included.
    pub max_len: usize,
    /// The share of tokens masked for the MLM loss (BERT's 0.15).
    pub mask_prob: f64,
    /// The chance that a pair's sentence B is replaced by another line's (label 1).
    pub nsp_negatives: f64,
    pub seed: u64,
    /// The file is documents (Google's pretraining input), packed into sequences of up to
    /// `max_len` tokens (`documents.rs`), rather than one example a line.
    #[serde(default, skip_serializing_if = "is_false")]
    pub documents: bool,
    /// With `documents`: the packed sequences are sentence pairs, for the NSP loss.
    #[serde(default, skip_serializing_if = "is_false")]
    pub nsp: bool,
}

fn is_false(value: &bool) -> bool {
    !value
}

/// The warm-up as a caller gives it: a number of steps, or a share of the run's steps (a number
/// below 1, as transformers 5 reads `warmup_steps`), which is ⌈share · steps⌉ steps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Warmup {
    Steps(usize),
    Share(f64),
}

impl Warmup {
    /// What `--warmup-steps` and `warmup_steps=` accept.
    pub const ACCEPTED: &'static str =
        "a whole number of steps, or a share of the run's steps below 1 (0.1: the first 10%)";

    /// The warm-up for a value given as a number: whole and at least 1, a count of steps;
    /// from 0 to below 1, a share.
    pub fn from_number(value: f64) -> Result<Warmup> {
        let bad = || BertError::OptionValue {
            option: WARMUP_STEPS,
            value: format!("{value}"),
            accepted: Warmup::ACCEPTED.into(),
        };
        if !(value.is_finite() && value >= 0.0) {
            return Err(bad());
        }
        if value < 1.0 {
            return Ok(Warmup::Share(value));
        }
        if value.fract() != 0.0 || value > usize::MAX as f64 {
            return Err(bad());
        }
        Ok(Warmup::Steps(value as usize))
    }

    /// The warm-up in steps, for a run of `steps` steps.
    pub fn steps(self, steps: usize) -> usize {
        match self {
            Warmup::Steps(n) => n,
            Warmup::Share(share) => (share * steps as f64).ceil() as usize,
        }
    }
}

impl std::str::FromStr for Warmup {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Warmup, String> {
        if let Ok(steps) = text.trim().parse::<usize>() {
            return Ok(Warmup::Steps(steps));
        }
        let bad = || format!("{text:?} is not {}", Warmup::ACCEPTED);
        let value: f64 = text.trim().parse().map_err(|_| bad())?;
        Warmup::from_number(value).map_err(|_| bad())
    }
}

/// The options as a caller gives them: None takes the resumed run's value, else the default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrainSettings {
    pub steps: Option<usize>,
    pub lr: Option<f64>,
    pub warmup_steps: Option<Warmup>,
    pub batch_size: Option<usize>,
    pub max_len: Option<usize>,
    pub mask_prob: Option<f64>,
    pub nsp_negatives: Option<f64>,
    pub seed: Option<u64>,
    pub documents: Option<bool>,
    pub nsp: Option<bool>,
    pub betas: Option<(f64, f64)>,
    pub eps: Option<f64>,
    pub weight_decay: Option<f64>,
    pub max_grad_norm: Option<f64>,
    pub no_decay: Option<Vec<String>>,
    pub eval_split: Option<f64>,
    /// One dropout probability for every place BERT drops out (0: none).
    pub dropout: Option<f64>,
}

/// BERT's pretraining learning rate (Devlin et al., 2018).
pub const DEFAULT_LR: f64 = 1e-4;
pub const DEFAULT_BATCH_SIZE: usize = 8;
/// At most the model's `max_position_embeddings`.
pub const DEFAULT_MAX_LEN: usize = 128;
/// BERT's masking rate.
pub const DEFAULT_MASK_PROB: f64 = 0.15;
/// d2l's share of random sentence Bs.
pub const DEFAULT_NSP_NEGATIVES: f64 = 0.5;

pub const STEPS: Opt = Opt("steps");
pub const LR: Opt = Opt("lr");
pub const WARMUP_STEPS: Opt = Opt("warmup_steps");
pub const BATCH_SIZE: Opt = Opt("batch_size");
pub const MAX_LEN: Opt = Opt("max_len");
pub const MASK_PROB: Opt = Opt("mask_prob");
pub const NSP_NEGATIVES: Opt = Opt("nsp_negatives");
pub const SEED: Opt = Opt("seed");
pub const DOCUMENTS: Opt = Opt("documents");
pub const EACH_TOKEN: Opt = Opt("each_token");
pub const NSP: Opt = Opt("nsp");
pub const BETAS: Opt = Opt("betas");
pub const EPS: Opt = Opt("eps");
pub const WEIGHT_DECAY: Opt = Opt("weight_decay");
pub const MAX_GRAD_NORM: Opt = Opt("max_grad_norm");
pub const NO_DECAY: Opt = Opt("no_decay");
pub const EVAL_SPLIT: Opt = Opt("eval_split");
pub const DROPOUT: Opt = Opt("dropout");

/// Where each option is kept in `trainer_state.json`'s `options`, for messages about a saved
/// run's values.
fn field(option: Opt) -> &'static str {
    match option.0 {
        "steps" => "options.steps",
        "lr" => "options.lr",
        "warmup_steps" => "options.warmup_steps",
        "batch_size" => "options.batching.batch_size",
        "max_len" => "options.batching.max_len",
        "mask_prob" => "options.batching.mask_prob",
        "nsp_negatives" => "options.batching.nsp_negatives",
        "seed" => "options.batching.seed",
        "documents" => "options.batching.documents",
        "nsp" => "options.batching.nsp",
        "betas" => "options.adamw.beta1, options.adamw.beta2",
        "eps" => "options.adamw.eps",
        "weight_decay" => "options.adamw.weight_decay",
        "max_grad_norm" => "options.max_grad_norm",
        "no_decay" => "options.no_decay",
        "eval_split" => "options.eval_split",
        "dropout" => "options.dropout",
        _ => "options",
    }
}

impl TrainSettings {
    /// The run's options: as given, else the resumed run's (`saved`, from the checkpoint `dir`),
    /// else the defaults (the dropout of the model's `config`); each checked against its rule
    /// and against the model's `max_position_embeddings`.
    pub fn resolve(
        &self,
        saved: Option<(&Path, &TrainOptions)>,
        config: &BertConfig,
        recipe: Recipe,
    ) -> Result<TrainOptions> {
        let max_positions = config.max_position_embeddings;
        let old = saved.map(|(_, options)| options);
        let differs = |option: Opt, given: String, theirs: String| {
            let dir = saved.map(|(dir, _)| dir.display().to_string()).unwrap_or_default();
            BertError::Training(format!(
                "{} differs from the run saved in {dir} ({}); leave it out to continue that run",
                option.with(given),
                option.with(theirs)
            ))
        };
        // A value given and a value saved must be the same number.
        fn pick<T: PartialEq + Copy + std::fmt::Debug>(
            option: Opt,
            given: Option<T>,
            saved: Option<T>,
            default: T,
            differs: &dyn Fn(Opt, String, String) -> BertError,
        ) -> Result<T> {
            match (given, saved) {
                (Some(given), Some(saved)) if given != saved => {
                    Err(differs(option, format!("{given:?}"), format!("{saved:?}")))
                }
                (given, saved) => Ok(given.or(saved).unwrap_or(default)),
            }
        }
        let Some(steps) = self.steps.or(old.map(|o| o.steps)) else {
            return Err(BertError::Training(format!("{STEPS} is required: how many optimizer steps the run takes")));
        };
        let steps = pick(STEPS, self.steps, old.map(|o| o.steps), steps, &differs)?;
        let lr = pick(LR, self.lr, old.map(|o| o.lr), recipe.lr, &differs)?;
        let warmup = self.warmup_steps.map(|w| w.steps(steps));
        let warmup_steps = pick(WARMUP_STEPS, warmup, old.map(|o| o.warmup_steps), 0, &differs)?;
        let batching = old.map(|o| o.batching);
        let batch_size =
            pick(BATCH_SIZE, self.batch_size, batching.map(|b| b.batch_size), recipe.batch_size, &differs)?;
        let default_len = DEFAULT_MAX_LEN.min(max_positions);
        let max_len = pick(MAX_LEN, self.max_len, batching.map(|b| b.max_len), default_len, &differs)?;
        let mask_prob = pick(MASK_PROB, self.mask_prob, batching.map(|b| b.mask_prob), DEFAULT_MASK_PROB, &differs)?;
        let nsp_negatives = pick(
            NSP_NEGATIVES,
            self.nsp_negatives,
            batching.map(|b| b.nsp_negatives),
            DEFAULT_NSP_NEGATIVES,
            &differs,
        )?;
        let seed = pick(SEED, self.seed, batching.map(|b| b.seed), 0, &differs)?;
        let documents = pick(DOCUMENTS, self.documents, batching.map(|b| b.documents), false, &differs)?;
        let nsp = pick(NSP, self.nsp, batching.map(|b| b.nsp), false, &differs)?;
        let defaults = AdamWConfig::default();
        let adamw = old.map(|o| o.adamw);
        let (beta1, beta2) = match (self.betas, adamw.map(|a| (a.beta1, a.beta2))) {
            (Some(given), Some(saved)) if given != saved => {
                return Err(differs(
                    BETAS,
                    format!("{:?},{:?}", given.0, given.1),
                    format!("{:?},{:?}", saved.0, saved.1),
                ))
            }
            (given, saved) => given.or(saved).unwrap_or((defaults.beta1, defaults.beta2)),
        };
        let eps = pick(EPS, self.eps, adamw.map(|a| a.eps), defaults.eps, &differs)?;
        let weight_decay =
            pick(WEIGHT_DECAY, self.weight_decay, adamw.map(|a| a.weight_decay), defaults.weight_decay, &differs)?;
        // The options a run may lack: given, they must be the saved run's, which may lack them.
        let optional = |option: Opt, given: Option<f64>, saved: Option<f64>| -> Result<Option<f64>> {
            match (given, old) {
                (Some(given), Some(_)) if Some(given) != saved => {
                    Err(differs(option, format!("{given:?}"), saved.map_or("unset".into(), |v| format!("{v:?}"))))
                }
                (given, _) => Ok(given.or(saved)),
            }
        };
        let max_grad_norm = optional(MAX_GRAD_NORM, self.max_grad_norm, old.and_then(|o| o.max_grad_norm))?;
        let eval_split = optional(EVAL_SPLIT, self.eval_split, old.and_then(|o| o.eval_split))?;
        // `bias,LayerNorm`, `["bias", "LayerNorm"]` and `bias, LayerNorm` are the same list.
        let given_no_decay: Option<Vec<String>> = self
            .no_decay
            .as_ref()
            .map(|parts| parts.iter().flat_map(|p| p.split(',')).map(|p| p.trim().to_string()).collect());
        let no_decay = match (&given_no_decay, old) {
            (Some(given), Some(o)) if *given != o.no_decay => {
                return Err(differs(NO_DECAY, given.join(","), o.no_decay.join(",")));
            }
            (Some(given), _) => given.clone(),
            (None, old) => old.map(|o| o.no_decay.clone()).unwrap_or_default(),
        };
        let dropout = match (self.dropout.map(DropoutRates::all), old.map(|o| o.dropout)) {
            (Some(given), Some(saved)) if given != saved => {
                return Err(differs(DROPOUT, format!("{:?}", given.hidden), saved.to_string()));
            }
            (Some(given), _) => given,
            (None, Some(saved)) => saved,
            (None, None) => {
                let rates = DropoutRates::of_config(config);
                if let Some(p) = rates.outside() {
                    return Err(BertError::Training(format!(
                        "the model's config.json asks for a dropout probability of {p:?}, which no run can use: give \
                         {DROPOUT} with a probability from 0 to below 1"
                    )));
                }
                rates
            }
        };
        let options = TrainOptions {
            steps,
            lr,
            warmup_steps,
            batching: Batching { batch_size, max_len, mask_prob, nsp_negatives, seed, documents, nsp },
            adamw: AdamWConfig { beta1, beta2, eps, weight_decay },
            max_grad_norm,
            no_decay,
            eval_split,
            dropout,
        };
        options.check()?;
        if max_len > max_positions {
            return Err(BertError::OptionValue {
                option: MAX_LEN,
                value: max_len.to_string(),
                accepted: format!("at most the model's max_position_embeddings {max_positions}"),
            });
        }
        Ok(options)
    }
}

impl TrainOptions {
    /// Refuses options no run can use, each in one line naming the option and what it accepts.
    pub fn check(&self) -> Result<()> {
        let bad = |option: Opt, value: String, accepted: &str| {
            Err(BertError::OptionValue { option, value, accepted: accepted.into() })
        };
        let TrainOptions { steps, lr, warmup_steps, batching, adamw, max_grad_norm, no_decay, eval_split, dropout } =
            self;
        if *steps == 0 {
            return bad(STEPS, "0".into(), "at least 1: a run needs at least one step");
        }
        // Above float32's largest value the rate itself would be infinite in the parameters' type.
        if !(lr.is_finite() && *lr > 0.0 && *lr <= f64::from(f32::MAX)) {
            return bad(LR, format!("{lr:?}"), "a number greater than 0, at most 3.4028235e38 (float32's largest)");
        }
        if warmup_steps > steps {
            return bad(WARMUP_STEPS, warmup_steps.to_string(), &format!("at most {}", STEPS.with(steps)));
        }
        if batching.batch_size == 0 {
            return bad(BATCH_SIZE, "0".into(), "at least 1: a batch needs at least one example");
        }
        if batching.max_len == 0 {
            return bad(MAX_LEN, "0".into(), "at least 3: [CLS] and [SEP] take 2, and a text needs a token");
        }
        if !(batching.mask_prob > 0.0 && batching.mask_prob <= 1.0) {
            return bad(MASK_PROB, format!("{:?}", batching.mask_prob), "greater than 0, at most 1 (BERT used 0.15)");
        }
        if !(batching.nsp_negatives >= 0.0 && batching.nsp_negatives <= 1.0) {
            return bad(NSP_NEGATIVES, format!("{:?}", batching.nsp_negatives), "a probability from 0 to 1");
        }
        let beta = |b: f64| (0.0..1.0).contains(&b);
        if !(beta(adamw.beta1) && beta(adamw.beta2)) {
            return bad(BETAS, format!("{:?},{:?}", adamw.beta1, adamw.beta2), "each at least 0 and less than 1");
        }
        // ε keeps AdamW's denominator above 0: with ε = 0, a gradient of 0 gives 0 / 0.
        if !(adamw.eps.is_finite() && adamw.eps > 0.0) {
            return bad(EPS, format!("{:?}", adamw.eps), "a finite number greater than 0 (PyTorch's default is 1e-8)");
        }
        if !(adamw.weight_decay.is_finite() && adamw.weight_decay >= 0.0) {
            return bad(WEIGHT_DECAY, format!("{:?}", adamw.weight_decay), "a finite number, 0 or more");
        }
        if let Some(norm) = max_grad_norm.filter(|n| !(n.is_finite() && *n > 0.0)) {
            return bad(MAX_GRAD_NORM, format!("{norm:?}"), "a finite number greater than 0 (HF Trainer's is 1.0)");
        }
        if no_decay.iter().any(|p| p.trim().is_empty()) {
            return bad(NO_DECAY, no_decay.join(","), "names or parts of names, such as bias,LayerNorm, none empty");
        }
        if batching.nsp && !batching.documents {
            return bad(
                NSP,
                "true".into(),
                &format!("only with {DOCUMENTS}: in a file of one example a line, a pair is a line with a tab"),
            );
        }
        if let Some(share) = eval_split.filter(|p| !(*p > 0.0 && *p < 1.0)) {
            return bad(EVAL_SPLIT, format!("{share:?}"), "a share greater than 0 and less than 1, such as 0.1");
        }
        if let Some(p) = dropout.outside() {
            return bad(DROPOUT, format!("{p:?}"), "a probability from 0 to below 1 (BERT's is 0.1; 0: no dropout)");
        }
        Ok(())
    }

    /// [`TrainOptions::check`] for options read from `path` (a saved run's state): a bad value
    /// is named by its field in that file, since the caller gave no option.
    pub fn check_saved(&self, path: &Path) -> Result<()> {
        self.check().map_err(|error| match error {
            BertError::OptionValue { option, value, accepted } => BertError::Checkpoint {
                path: path.into(),
                problem: format!("{} is {value}: expected {accepted}", field(option)),
            },
            other => other,
        })
    }
}
