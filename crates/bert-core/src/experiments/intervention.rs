//! Interventions: changes to a stage that the rest of the pass then reads. An ablated head has
//! its slice of `layerL.attention.context` replaced (by zeros or by its mean over the
//! sequence's real tokens) before the output projection mixes the heads; a patched stage takes
//! its value, or some positions of it, from another run of the same model.

use std::fmt;
use std::ops::RangeInclusive;
use std::path::Path;

use ndarray::{s, ArrayView2, ArrayViewMut3, ArrayViewMutD, Axis, Slice};

use crate::error::{BertError, Result};
use crate::io::config::BertConfig;
use crate::io::dump::manifest::InterventionRecord;
use crate::io::dump::Dump;
use crate::io::tokenizer::Batch;
use crate::model::BertModel;
use crate::ops::Float;
use crate::pass::hook::{Hook, TensorViewMut};
use crate::pass::Tensor;
use crate::stage::{self, Dim, Stage, StageKind};
use crate::words::{Choice, Opt};

pub const ABLATE: Opt = Opt("ablate");
pub const PATCH: Opt = Opt("patch");

/// What an ablated head's slice is replaced by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AblateWith {
    /// Zeros: the head contributes only through the output projection's bias.
    #[default]
    Zero,
    /// The slice's mean over the sequence's own real tokens, at every position: the head says
    /// the same thing everywhere, what it says on average.
    Mean,
}

crate::choice!(AblateWith { Zero => "zero", Mean => "mean" });

/// One head of one layer, or all of that layer's heads (`head` None).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ablation {
    pub layer: usize,
    pub head: Option<usize>,
    pub with: AblateWith,
}

impl Ablation {
    /// `layerL.headH` or `layerL.heads`, checked against the model's layers and heads.
    pub fn parse(spec: &str, with: AblateWith, config: &BertConfig) -> Result<Ablation> {
        let bad = |problem: String| BertError::Intervention { spec: ABLATE.with(spec), problem };
        let (layer, head) = Ablation::split(spec)
            .ok_or_else(|| bad("expected layerL.headH (one head) or layerL.heads (all of a layer's heads)".into()))?;
        let (n_layers, n_heads) = (config.num_hidden_layers, config.num_attention_heads);
        let layer: usize = canonical_index(layer)
            .filter(|&l| l < n_layers)
            .ok_or_else(|| bad(format!("the model has {n_layers} layers, layer0 to layer{}", n_layers - 1)))?;
        let head =
            match head {
                "heads" => None,
                head => Some(head.strip_prefix("head").and_then(canonical_index).filter(|&h| h < n_heads).ok_or_else(
                    || bad(format!("the model has {n_heads} heads per layer, head0 to head{}", n_heads - 1)),
                )?),
            };
        Ok(Ablation { layer, head, with })
    }

    /// A spec's layer and its head part (`headH` or `heads`), unchecked: `layerL.` then the rest.
    fn split(spec: &str) -> Option<(&str, &str)> {
        spec.strip_prefix("layer").and_then(|rest| rest.split_once('.'))
    }

    /// The layer a recorded spec names (a dump's manifest holds [`Ablation::spec`]).
    pub fn layer_of(spec: &str) -> Option<usize> {
        Ablation::split(spec).and_then(|(layer, _)| canonical_index(layer))
    }

    /// The name it is given on the command line and in the manifest.
    pub fn spec(&self) -> String {
        match self.head {
            Some(head) => super::AttentionHead { layer: self.layer, head }.to_string(),
            None => format!("layer{}.heads", self.layer),
        }
    }

    /// The backward of [`Ablation::apply`]: d loss / d the ablated context -> d loss / d the
    /// computed one, in place. Zeros are a constant, so nothing flows back through the head's
    /// columns; the mean spreads each sequence's summed gradient evenly over its real tokens.
    fn backward<F: Float>(&self, mut grad: ArrayViewMut3<'_, F>, n_heads: usize, mask: ArrayView2<'_, i64>) {
        let hs = grad.dim().2 / n_heads;
        let heads = match self.head {
            Some(head) => head..head + 1,
            None => 0..n_heads,
        };
        for head in heads {
            let mut slice = grad.slice_mut(s![.., .., head * hs..(head + 1) * hs]);
            match self.with {
                AblateWith::Zero => slice.fill(F::zero()),
                AblateWith::Mean => {
                    for (seq, mut rows) in slice.axis_iter_mut(Axis(0)).enumerate() {
                        let real = (0..rows.nrows()).filter(|&t| mask[[seq, t]] == 1).count();
                        let total = rows.sum_axis(Axis(0));
                        for (t, mut row) in rows.rows_mut().into_iter().enumerate() {
                            if mask[[seq, t]] == 1 {
                                row.assign(&(&total / F::of(real as f64)));
                            } else {
                                row.fill(F::zero());
                            }
                        }
                    }
                }
            }
        }
    }

    /// Replaces the head's columns of `context` `[B,T,H]`.
    fn apply<F: Float>(&self, mut context: ArrayViewMut3<'_, F>, n_heads: usize, mask: ArrayView2<'_, i64>) {
        let hs = context.dim().2 / n_heads;
        let heads = match self.head {
            Some(head) => head..head + 1,
            None => 0..n_heads,
        };
        for head in heads {
            let mut slice = context.slice_mut(s![.., .., head * hs..(head + 1) * hs]);
            match self.with {
                AblateWith::Zero => slice.fill(F::zero()),
                AblateWith::Mean => {
                    for (seq, mut rows) in slice.axis_iter_mut(Axis(0)).enumerate() {
                        let real: Vec<usize> = (0..rows.nrows()).filter(|&t| mask[[seq, t]] == 1).collect();
                        if real.is_empty() {
                            continue;
                        }
                        let mut mean = ndarray::Array1::<F>::zeros(hs);
                        for &t in &real {
                            mean += &rows.row(t);
                        }
                        mean /= F::of(real.len() as f64);
                        rows.rows_mut().into_iter().for_each(|mut row| row.assign(&mean));
                    }
                }
            }
        }
    }
}

/// A run of token positions, `3` or `1-4` (inclusive, from 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Positions(pub RangeInclusive<usize>);

impl Positions {
    pub fn parse(text: &str) -> Option<Positions> {
        let (first, last) = text.split_once('-').unwrap_or((text, text));
        let (first, last) = (canonical_index(first)?, canonical_index(last)?);
        (first <= last).then_some(Positions(first..=last))
    }
}

impl fmt::Display for Positions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0.start(), self.0.end()) {
            (first, last) if first == last => write!(f, "{first}"),
            (first, last) => write!(f, "{first}-{last}"),
        }
    }
}

/// One stage, or some positions of it, replaced by another run's value.
#[derive(Clone, Debug)]
pub struct Patch {
    pub stage: Stage,
    pub positions: Option<Positions>,
    /// The other run's value of the whole stage.
    pub value: Tensor,
    /// Where it came from, as given (the other dump).
    pub from: String,
}

impl Patch {
    /// Splits `DUMP:STAGE` or `DUMP:STAGE@POSITIONS` into the dump, the stage and the positions.
    pub fn parse_spec(spec: &str) -> Result<(String, Stage, Option<Positions>)> {
        let bad = |problem: String| BertError::Intervention { spec: PATCH.with(spec), problem };
        let (dump, target) = spec
            .rsplit_once(':')
            .filter(|(dump, _)| !dump.is_empty())
            .ok_or_else(|| bad("expected DUMP:STAGE or DUMP:STAGE@POSITIONS (positions like 3 or 1-4)".into()))?;
        let (name, positions) = match target.split_once('@') {
            Some((name, positions)) => {
                let parsed = Positions::parse(positions).ok_or_else(|| {
                    bad(format!("positions `{positions}` are not a position (3) or a range of them (1-4)"))
                })?;
                (name, Some(parsed))
            }
            None => (target, None),
        };
        let stage = stage::parse(name).ok_or_else(|| bad(format!("`{name}` is not a stage (see ‹@stages›)")))?;
        if stage.info().part == stage::Part::Lens {
            return Err(bad("the lens's stages are read after the pass: patching one changes nothing".into()));
        }
        // A patch replaces a value the forward pass computes and then reads on: a gradient, a
        // parameter or a parameter after a training step is none of these, and patching one
        // would change nothing.
        let role = match (stage.of, stage.info().part) {
            (stage::Of::Grad, _) => Some("a gradient, which the backward pass computes from the forward's values"),
            (stage::Of::Updated, _) => Some("a parameter after a training step, which no pass reads"),
            (_, stage::Part::Param) => Some("a parameter, not a stage the forward pass computes"),
            _ => None,
        };
        if let Some(role) = role {
            return Err(bad(format!("{stage} is {role}: a patch replaces a stage of the forward pass")));
        }
        Ok((dump.into(), stage, positions))
    }

    /// Checks the patch against the shape `expected` the stage has in this run: the same shape,
    /// or for some positions, the same but along the token axis, which must hold them.
    pub fn check(&self, expected: &[usize]) -> Result<()> {
        let bad = |problem: String| BertError::Intervention { spec: PATCH.with(self.spec()), problem };
        let found = self.value.shape();
        let float_stage = self.stage.info().dtype != stage::DType::I64;
        if float_stage != self.value.is_float() {
            return Err(bad(format!(
                "{} in {} is {}, this run's is {}",
                self.stage,
                self.from,
                self.value.dtype().numpy_name(),
                self.stage.info().dtype.numpy_name()
            )));
        }
        let mismatch = || bad(format!("{} is {found:?} in {}, {expected:?} in this run", self.stage, self.from));
        match (&self.positions, token_axis(self.stage)) {
            (None, _) if found == expected => Ok(()),
            (None, _) => Err(mismatch()),
            (Some(_), None) => Err(bad(format!("{} has no token axis to take positions of", self.stage))),
            (Some(positions), Some(axis)) => {
                let others_match =
                    found.len() == expected.len() && (0..found.len()).all(|d| d == axis || found[d] == expected[d]);
                if !others_match {
                    return Err(mismatch());
                }
                let last = *positions.0.end();
                let tokens = found[axis].min(expected[axis]);
                if last >= tokens {
                    return Err(bad(format!(
                        "position {last} is beyond {}'s {} tokens here and {} in {}",
                        self.stage, expected[axis], found[axis], self.from
                    )));
                }
                Ok(())
            }
        }
    }

    /// `DUMP:STAGE` or `DUMP:STAGE@POSITIONS`, as given.
    pub fn spec(&self) -> String {
        match &self.positions {
            Some(positions) => format!("{}:{}@{positions}", self.from, self.stage),
            None => format!("{}:{}", self.from, self.stage),
        }
    }

    /// The backward of a patch: the patched values are another run's constants, so nothing flows
    /// back through them: their gradient is zeroed, in place.
    fn backward<F: Float>(&self, mut grad: ArrayViewMutD<'_, F>) {
        match (&self.positions, token_axis(self.stage)) {
            (Some(positions), Some(axis)) => {
                let range = Slice::from(*positions.0.start()..=*positions.0.end());
                grad.slice_axis_mut(Axis(axis), range).fill(F::zero());
            }
            _ => grad.fill(F::zero()),
        }
    }

    fn apply<T: Copy + 'static>(&self, mut target: ArrayViewMutD<'_, T>, value: ndarray::ArrayViewD<'_, T>) {
        match (&self.positions, token_axis(self.stage)) {
            (Some(positions), Some(axis)) => {
                let range = Slice::from(*positions.0.start()..=*positions.0.end());
                target.slice_axis_mut(Axis(axis), range).assign(&value.slice_axis(Axis(axis), range));
            }
            _ => target.assign(&value),
        }
    }
}

/// The first token axis of a stage's shape (the queries', for scores and probabilities).
fn token_axis(stage: Stage) -> Option<usize> {
    stage.info().shape.iter().position(|&d| d == Dim::T)
}

/// `layerL.attention.context` as the `[B,T,H]` it is (a patch may have been refused otherwise).
fn as_context<T>(view: ArrayViewMutD<'_, T>) -> Result<ArrayViewMut3<'_, T>> {
    let shape = view.shape().to_vec();
    view.into_dimensionality().map_err(|_| BertError::Intervention {
        spec: ABLATE.to_string(),
        problem: format!("layerL.attention.context is {shape:?} here, not [B,T,H]"),
    })
}

/// A decimal index written as we write it: `03` is not `3`.
fn canonical_index(text: &str) -> Option<usize> {
    text.parse::<usize>().ok().filter(|i| i.to_string() == text)
}

/// Every intervention of one run: the patches in the order given, then the ablations.
#[derive(Clone, Debug, Default)]
pub struct Interventions {
    pub patches: Vec<Patch>,
    pub ablations: Vec<Ablation>,
    /// The model's heads per layer, to find a head's columns.
    pub n_heads: usize,
}

impl Interventions {
    /// The interventions of `--ablate` (each `layerL.headH` or `layerL.heads`, all replaced
    /// `with` the same) and `--patch` (each `DUMP:STAGE[@POSITIONS]`), for `model`: every dump
    /// read and checked against the model before any pass.
    pub fn load<F: Float>(
        model: &BertModel<F>,
        ablate: &[String],
        with: AblateWith,
        patch: &[String],
    ) -> Result<Interventions> {
        let ablations = ablate.iter().map(|spec| Ablation::parse(spec, with, &model.config)).collect::<Result<_>>()?;
        let mut patches = Vec::new();
        for spec in patch {
            let (from, stage, positions) = Patch::parse_spec(spec)?;
            let bad = |problem: String| BertError::Intervention { spec: PATCH.with(spec), problem };
            let dump = Dump::open(Path::new(&from))?;
            if let Some(theirs) = &dump.manifest.model_fingerprint {
                let ours = model.fingerprint();
                if *theirs != ours {
                    return Err(bad(format!(
                        "{from} was made with another model (fingerprint {theirs}, {}), this run uses {} (fingerprint {ours})",
                        if dump.manifest.model.is_empty() { "not named" } else { &dump.manifest.model },
                        model.source.display()
                    )));
                }
            }
            let entry = dump.entry(&stage.name()).ok_or_else(|| bad(format!("{from} has no stage {stage}")))?;
            let value = dump.read(entry)?;
            patches.push(Patch { stage, positions, value, from });
        }
        Ok(Interventions { patches, ablations, n_heads: model.config.num_attention_heads })
    }

    pub fn is_empty(&self) -> bool {
        self.patches.is_empty() && self.ablations.is_empty()
    }

    /// What the manifest records, in the order they are applied.
    pub fn records(&self) -> Vec<InterventionRecord> {
        let patches = self.patches.iter().map(|p| InterventionRecord::Patch {
            patch: p.stage.name(),
            positions: p.positions.as_ref().map(Positions::to_string),
            from: p.from.clone(),
        });
        let ablations =
            self.ablations.iter().map(|a| InterventionRecord::Ablate { ablate: a.spec(), with: a.with.name().into() });
        patches.chain(ablations).collect()
    }

    /// Checks every intervention against the run before its pass: each patched stage is one the
    /// run computes (in `plan`, at or before the stage it stops after, `stop`) and takes the
    /// shape it has for `batch`; patched inputs still index the model's tables; each ablated
    /// layer's context is reached. An intervention that would change nothing is refused, never
    /// recorded as done.
    pub fn check_run<F: Float>(
        &self,
        model: &BertModel<F>,
        batch: &Batch,
        plan: &[Stage],
        stop: Option<Stage>,
    ) -> Result<()> {
        let (b, t) = batch.dims();
        let dims = model.dims(b, t);
        let reached = |stage: Stage| -> std::result::Result<(), String> {
            let at =
                plan.iter().position(|s| *s == stage).ok_or_else(|| format!("this run does not compute {stage}"))?;
            match stop.and_then(|stop| plan.iter().position(|s| *s == stop)) {
                Some(end) if at > end => Err(format!("the pass stops after {} before it reaches {stage}", plan[end])),
                _ => Ok(()),
            }
        };
        for patch in &self.patches {
            reached(patch.stage)
                .map_err(|problem| BertError::Intervention { spec: PATCH.with(patch.spec()), problem })?;
            patch.check(&patch.stage.shape(&dims))?;
        }
        for ablation in &self.ablations {
            reached(Stage::layer(ablation.layer, StageKind::AttnContext))
                .map_err(|problem| BertError::Intervention { spec: ABLATE.with(ablation.spec()), problem })?;
        }
        // The inputs as the patches leave them must still be inputs the model can read.
        let mut patched = batch.clone();
        let mut hook = Interventions { patches: self.patches.clone(), ablations: Vec::new(), n_heads: self.n_heads };
        let mask = batch.attention_mask.clone();
        let inputs = [
            (StageKind::InputIds, &mut patched.ids),
            (StageKind::InputTokenTypeIds, &mut patched.token_type_ids),
            (StageKind::InputAttentionMask, &mut patched.attention_mask),
        ];
        let mut changed = Vec::new();
        for (kind, array) in inputs {
            let stage = Stage::new(kind);
            if hook.wants(&stage) {
                hook.apply(stage, TensorViewMut::I64(array.view_mut().into_dyn()), mask.view())?;
                changed.push(stage);
            }
        }
        if let Some(labels) = patched.labels.mlm.as_mut().filter(|_| hook.wants(&Stage::new(StageKind::InputLabels))) {
            hook.apply(
                Stage::new(StageKind::InputLabels),
                TensorViewMut::I64(labels.view_mut().into_dyn()),
                mask.view(),
            )?;
            changed.push(Stage::new(StageKind::InputLabels));
        }
        if !changed.is_empty() {
            model.check_ids(&patched).map_err(|e| {
                let patch = self.patches.iter().find(|p| changed.contains(&p.stage)).expect("a patch changed them");
                BertError::Intervention { spec: PATCH.with(patch.spec()), problem: e.to_string() }
            })?;
        }
        Ok(())
    }
}

impl Hook for Interventions {
    fn wants(&self, stage: &Stage) -> bool {
        let ablated =
            stage.is_value_of(StageKind::AttnContext) && self.ablations.iter().any(|a| Some(a.layer) == stage.layer);
        ablated || self.patches.iter().any(|p| p.stage == *stage)
    }

    fn apply(&mut self, stage: Stage, mut tensor: TensorViewMut<'_>, mask: ArrayView2<'_, i64>) -> Result<()> {
        for patch in self.patches.iter().filter(|p| p.stage == stage) {
            patch.check(tensor.shape())?;
            match (&mut tensor, &patch.value) {
                (TensorViewMut::F32(target), value) => {
                    let value = value.to_f64().mapv(|v| v as f32);
                    patch.apply(target.view_mut(), value.view());
                }
                (TensorViewMut::F64(target), value) => patch.apply(target.view_mut(), value.to_f64().view()),
                (TensorViewMut::I64(target), Tensor::I64(value)) => patch.apply(target.view_mut(), value.view()),
                (TensorViewMut::I64(_), _) => unreachable!("Patch::check refuses a float value for an integer stage"),
            }
        }
        for ablation in self.ablations.iter().filter(|a| Some(a.layer) == stage.layer) {
            if !stage.is_value_of(StageKind::AttnContext) {
                continue;
            }
            match &mut tensor {
                TensorViewMut::F32(context) => ablation.apply(as_context(context.view_mut())?, self.n_heads, mask),
                TensorViewMut::F64(context) => ablation.apply(as_context(context.view_mut())?, self.n_heads, mask),
                TensorViewMut::I64(_) => unreachable!("layerL.attention.context is a float stage"),
            }
        }
        Ok(())
    }

    /// In the reverse order of `apply`: the ablations' backward, then the patches'.
    fn backward(&mut self, stage: Stage, mut grad: TensorViewMut<'_>, mask: ArrayView2<'_, i64>) -> Result<()> {
        for ablation in self.ablations.iter().rev().filter(|a| Some(a.layer) == stage.layer) {
            if !stage.is_value_of(StageKind::AttnContext) {
                continue;
            }
            match &mut grad {
                TensorViewMut::F32(g) => ablation.backward(as_context(g.view_mut())?, self.n_heads, mask),
                TensorViewMut::F64(g) => ablation.backward(as_context(g.view_mut())?, self.n_heads, mask),
                TensorViewMut::I64(_) => unreachable!("a gradient is a float"),
            }
        }
        for patch in self.patches.iter().rev().filter(|p| p.stage == stage) {
            match &mut grad {
                TensorViewMut::F32(g) => patch.backward(g.view_mut()),
                TensorViewMut::F64(g) => patch.backward(g.view_mut()),
                TensorViewMut::I64(_) => unreachable!("a gradient is a float"),
            }
        }
        Ok(())
    }
}
