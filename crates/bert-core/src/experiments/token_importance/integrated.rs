//! Integrated gradients (Sundararajan et al. 2017) and gradient × input, by the backward pass.
//!
//! The function attributed is the target's score f (log-probability or logit) as a function of
//! the word embeddings the model looks up, `embeddings.word` `[T,H]`: position and token-type
//! embeddings are kept, and the LayerNorm and everything after are recomputed. (Captum's BERT
//! tutorial interpolates the embedding layer's output instead, after the three embeddings are
//! summed and normalised; the position and token type then move along the path too, and the
//! LayerNorm is skipped at every point but the ends.)
//!
//! Integrated gradients walk a straight line x(α) = b + α (x − b) from a baseline b to the
//! input x, and attribute to token t
//!
//!   Σ_h (x − b)_{t,h} · ∫₀¹ ∂f/∂x_{t,h}(x(α)) dα,
//!
//! the integral by `n` points of a [`Rule`], each point a row of one batched backward pass.
//! The attributions sum to f(x) − f(b) up to the rule's error: their gap is the check.
//! Gradient × input attributes Σ_h x_{t,h} · ∂f/∂x_{t,h}(x), one backward pass.

use ndarray::{s, Array2, Array3, ArrayView2, ArrayViewMutD};
use serde::Serialize;

use super::{Attribution, Prediction, Rule, Score, TokenAttribution};
use crate::error::{BertError, Result};
use crate::io::tokenizer::{Batch, PAD};
use crate::model::{BertModel, Pass};
use crate::ops::Float;
use crate::pass::hook::{Hook, TensorViewMut};
use crate::pass::{Sink, TensorView};
use crate::stage::{Stage, StageKind};
use crate::words::Choice;

/// What the baseline puts where the input has a token to attribute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Baseline {
    /// `[PAD]`'s word embedding: the text with its words taken out, its length kept.
    #[default]
    Pad,
    /// Zero vectors.
    Zero,
}

crate::choice!(Baseline { Pad => "pad", Zero => "zero" });

/// The path integrated gradients take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathSpec {
    pub baseline: Baseline,
    pub rule: Rule,
    /// How many points; at least 1.
    pub steps: usize,
}

/// Whether the attributions add up to what they divide: f(x) − f(b).
#[derive(Clone, Debug, Serialize)]
pub struct Completeness {
    pub baseline: Baseline,
    pub rule: Rule,
    pub steps: usize,
    /// f(b), the score of the baseline.
    pub baseline_score: f64,
    /// Σ attributions.
    pub sum: f64,
    /// f(x) − f(b).
    pub difference: f64,
    /// Σ attributions − (f(x) − f(b)): the quadrature's error, which more points shrink.
    pub gap: f64,
}

/// How many tokens (points × the text's length) one backward pass holds at most.
const TOKENS_PER_PASS: usize = 2048;

impl<F: Float> BertModel<F> {
    /// Integrated gradients of `target`'s score along `path`, for `batch`'s one sequence.
    /// `progress` hears (points done, points in all) after each pass.
    pub fn integrated_gradients(
        &self,
        batch: &Batch,
        target: Prediction,
        of: Score,
        path: PathSpec,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Attribution> {
        self.check_target(batch, target)?;
        if path.steps == 0 {
            return Err(BertError::Labels("integrated gradients need at least one point on the path".into()));
        }
        let kept = self.kept(batch, target);
        let input = self.word_rows(batch);
        let baseline = self.baseline(&input, &kept, path.baseline)?;
        if input == baseline {
            return Err(BertError::Labels(format!(
                "the baseline equals the input: {}",
                if kept.iter().all(|&k| k) {
                    let besides = match target {
                        Prediction::Masked { .. } => "[CLS], [SEP] and the [MASK]",
                        _ => "[CLS] and [SEP]",
                    };
                    format!("the text has no token to attribute besides {besides}")
                } else {
                    format!("every token to attribute is already what the {} baseline puts there", path.baseline.name())
                }
            )));
        }
        let ends = Interpolate::rows(&input, &baseline, &[1.0, 0.0]);
        let end_scores = self.scores(&batch.repeat_first(2), target, of, Some(&mut Interpolate { rows: ends }))?;
        let (score, baseline_score) = (end_scores[0], end_scores[1]);

        let points = path.rule.points(path.steps);
        let (t, h) = input.dim();
        let mut mean_grad = Array2::<f64>::zeros((t, h));
        let per_pass = (TOKENS_PER_PASS / t.max(1)).max(1);
        let mut done = 0;
        for chunk in points.chunks(per_pass) {
            let alphas: Vec<f64> = chunk.iter().map(|&(alpha, _)| alpha).collect();
            let grads = self.word_gradients(batch, target, of, Interpolate::rows(&input, &baseline, &alphas))?;
            for (row, &(_, weight)) in chunk.iter().enumerate() {
                mean_grad.scaled_add(weight, &grads.slice(s![row, .., ..]));
            }
            done += chunk.len();
            progress(done, points.len());
        }
        let difference = &input - &baseline;
        let tokens = self.token_attributions(batch, &kept, difference.view(), mean_grad.view());
        let sum = tokens.iter().map(|t| t.attribution).sum::<f64>();
        let completeness = Completeness {
            baseline: path.baseline,
            rule: path.rule,
            steps: path.steps,
            baseline_score,
            sum,
            difference: score - baseline_score,
            gap: sum - (score - baseline_score),
        };
        let attribution =
            Attribution { target: self.target_report(target), score, tokens, completeness: Some(completeness) };
        attribution.check_finite()?;
        Ok(attribution)
    }

    /// Gradient × input of `target`'s score, for `batch`'s one sequence.
    pub fn grad_input(&self, batch: &Batch, target: Prediction, of: Score) -> Result<Attribution> {
        self.check_target(batch, target)?;
        let kept = self.kept(batch, target);
        let input = self.word_rows(batch);
        let grads = self.word_gradients(batch, target, of, Interpolate::rows(&input, &input, &[1.0]))?;
        let score = self.scores(batch, target, of, None)?[0];
        let tokens = self.token_attributions(batch, &kept, input.view(), grads.slice(s![0, .., ..]));
        let attribution = Attribution { target: self.target_report(target), score, tokens, completeness: None };
        attribution.check_finite()?;
        Ok(attribution)
    }

    /// `[T,H]` the word embeddings `batch`'s one sequence looks up, in f64.
    fn word_rows(&self, batch: &Batch) -> Array2<f64> {
        let word = self.embeddings.word(batch.ids.view());
        word.slice(s![0, .., ..]).mapv(|v| v.to_f64().unwrap_or(f64::NAN))
    }

    /// `[T,H]` the baseline: `input` where `kept`, `[PAD]`'s embedding or zeros elsewhere.
    fn baseline(&self, input: &Array2<f64>, kept: &[bool], baseline: Baseline) -> Result<Array2<f64>> {
        let fill = match baseline {
            Baseline::Zero => ndarray::Array1::zeros(input.ncols()),
            Baseline::Pad => {
                let pad = self
                    .tokenizer
                    .token_to_id(PAD)
                    .ok_or_else(|| BertError::Labels(format!("the vocabulary has no {PAD} token for the baseline")))?;
                let ids = Array2::from_elem((1, 1), i64::from(pad));
                self.embeddings.word(ids.view()).slice(s![0, 0, ..]).mapv(|v| v.to_f64().unwrap_or(f64::NAN))
            }
        };
        let mut out = input.clone();
        for (t, _) in kept.iter().enumerate().filter(|(_, &k)| !k) {
            out.row_mut(t).assign(&fill);
        }
        Ok(out)
    }

    /// `[points,T,H]` ∂f/∂(word embeddings) at each of `rows`' points, by one backward pass
    /// whose batch holds a row per point.
    fn word_gradients(&self, batch: &Batch, target: Prediction, of: Score, rows: Array3<f64>) -> Result<Array3<f64>> {
        let n = rows.dim().0;
        let mut points = batch.repeat_first(n);
        // A label gives the pass its loss, the mean of −log p over the rows; the seed below
        // replaces the loss's gradient by the score's own.
        match target {
            Prediction::Masked { position, id } => {
                let mut labels = Array2::from_elem(points.dims(), crate::objectives::labels::IGNORE);
                labels.column_mut(position).fill(i64::from(id));
                points.labels.mlm = Some(labels);
            }
            Prediction::Class(class) => points.labels.class = Some(ndarray::Array1::from_elem(n, class as i64)),
            Prediction::NextSentence(label) => points.labels.nsp = Some(ndarray::Array1::from_elem(n, label as i64)),
        }
        let mut hook = PathHook { interpolate: Interpolate { rows }, seed: Seed { target, of, rows: n } };
        let mut keep = KeepWordGradient(None);
        let pass = Pass { hook: Some(&mut hook as &mut dyn Hook), backward: true, ..Pass::default() };
        self.trace_with(&points, &mut keep, pass)?;
        let grads = keep.0.expect("a backward pass reaches the word embeddings");
        Ok(grads.into_dimensionality().expect("[points,T,H]"))
    }

    /// Each token not `kept`: Σ over the hidden size of `factor` · `grad`.
    fn token_attributions(
        &self,
        batch: &Batch,
        kept: &[bool],
        factor: ArrayView2<'_, f64>,
        grad: ArrayView2<'_, f64>,
    ) -> Vec<TokenAttribution> {
        (0..kept.len())
            .filter(|&t| !kept[t])
            .map(|t| TokenAttribution {
                position: t,
                token: self.token_at(batch, t),
                attribution: factor.row(t).iter().zip(grad.row(t)).map(|(x, g)| x * g).sum(),
                score_without: None,
            })
            .collect()
    }
}

/// Puts the points of a path in as each row's `embeddings.word`.
struct Interpolate {
    /// `[points,T,H]`
    rows: Array3<f64>,
}

impl Interpolate {
    /// `[points,T,H]` (1 − α) b + α x for each α, in f64, so that α = 1 is x exactly and α = 0
    /// is b exactly once rounded to the model's precision.
    fn rows(input: &Array2<f64>, baseline: &Array2<f64>, alphas: &[f64]) -> Array3<f64> {
        let (t, h) = input.dim();
        Array3::from_shape_fn((alphas.len(), t, h), |(k, i, j)| {
            let alpha = alphas[k];
            (1.0 - alpha) * baseline[[i, j]] + alpha * input[[i, j]]
        })
    }

    fn wants(stage: &Stage) -> bool {
        stage.kind == StageKind::EmbWord
    }

    fn apply(&self, tensor: TensorViewMut<'_>) -> Result<()> {
        match tensor {
            TensorViewMut::F32(mut a) => a.zip_mut_with(&self.rows.view().into_dyn(), |v, &r| *v = r as f32),
            TensorViewMut::F64(mut a) => a.assign(&self.rows.view().into_dyn()),
            TensorViewMut::I64(_) => unreachable!("embeddings.word is float"),
        }
        Ok(())
    }
}

impl Hook for Interpolate {
    fn wants(&self, stage: &Stage) -> bool {
        Interpolate::wants(stage)
    }

    fn apply(&mut self, _: Stage, tensor: TensorViewMut<'_>, _: ArrayView2<'_, i64>) -> Result<()> {
        Interpolate::apply(self, tensor)
    }
}

/// The gradient that starts the backward pass: ∂ score / ∂ logits in place of ∂ loss / ∂ logits.
struct Seed {
    target: Prediction,
    of: Score,
    rows: usize,
}

impl Seed {
    fn wants(&self, stage: &Stage) -> bool {
        stage.kind
            == match self.target {
                Prediction::Masked { .. } => StageKind::MlmLogits,
                Prediction::Class(_) => StageKind::ClassifierLogits,
                Prediction::NextSentence(_) => StageKind::NspLogits,
            }
    }

    /// `grad` is ∂ mean(−log p) / ∂ logits = (p − onehot) / rows. For the log-probability,
    /// −rows times it is ∂ log p / ∂ logits of each row; for the logit, the one-hot alone.
    fn apply<F: Float>(&self, mut grad: ArrayViewMutD<'_, F>) {
        match self.of {
            Score::Logprob => {
                let scale = F::from(-(self.rows as f64)).expect("a row count");
                grad.mapv_inplace(|g| g * scale);
            }
            Score::Logit => {
                grad.fill(F::zero());
                for row in 0..self.rows {
                    let at = match self.target {
                        Prediction::Masked { position, id } => vec![row, position, id as usize],
                        Prediction::Class(class) => vec![row, class],
                        Prediction::NextSentence(label) => vec![row, label],
                    };
                    grad[at.as_slice()] = F::one();
                }
            }
        }
    }
}

/// The path's points in, the score's gradient out.
struct PathHook {
    interpolate: Interpolate,
    seed: Seed,
}

impl Hook for PathHook {
    fn wants(&self, stage: &Stage) -> bool {
        Interpolate::wants(stage) || self.seed.wants(stage)
    }

    fn apply(&mut self, stage: Stage, tensor: TensorViewMut<'_>, _: ArrayView2<'_, i64>) -> Result<()> {
        match Interpolate::wants(&stage) {
            true => self.interpolate.apply(tensor),
            // The logits are read as computed.
            false => Ok(()),
        }
    }

    fn backward(&mut self, stage: Stage, grad: TensorViewMut<'_>, _: ArrayView2<'_, i64>) -> Result<()> {
        // The word embeddings' gradient has been kept; nothing before them is read.
        if self.seed.wants(&stage) {
            match grad {
                TensorViewMut::F32(g) => self.seed.apply(g),
                TensorViewMut::F64(g) => self.seed.apply(g),
                TensorViewMut::I64(_) => unreachable!("logits are float"),
            }
        }
        Ok(())
    }
}

/// Keeps `grad.embeddings.word`.
struct KeepWordGradient(Option<ndarray::ArrayD<f64>>);

impl Sink for KeepWordGradient {
    fn wants(&self, stage: &Stage) -> bool {
        stage.kind == StageKind::EmbWord && stage.is_grad()
    }

    fn emit(&mut self, _: Stage, tensor: TensorView<'_>) -> Result<()> {
        self.0 = Some(match tensor {
            TensorView::F32(a) => a.mapv(f64::from),
            TensorView::F64(a) => a.to_owned(),
            TensorView::I64(_) => unreachable!("gradients are float"),
        });
        Ok(())
    }
}
