//! What the backward pass reads and writes: the `Record` of the forward stages it needs (the
//! forward pass's sink when gradients are asked for, so a plain pass keeps nothing), and the
//! [`Grads`] it adds each parameter's gradient into. `backward.rs` runs it.

use std::collections::HashMap;

use ndarray::{ArrayD, ArrayView2, ArrayView3, ArrayView4, ArrayViewD, Ix2, Ix3, Ix4};

use crate::error::Result;
use crate::ops::Float;
use crate::pass::{Sink, TensorView};
use crate::stage::{DType, Part, Stage, StageKind::AttnScores};

/// The forward stages the backward reads, each as the pass computed it.
pub(crate) struct Record<F: Float> {
    stages: HashMap<Stage, ArrayD<F>>,
}

impl<F: Float> Record<F> {
    pub(crate) fn new() -> Record<F> {
        Record { stages: HashMap::new() }
    }
}

impl<F: Float> Sink for Record<F> {
    fn wants(&self, stage: &Stage) -> bool {
        // The scores are not needed (the probabilities are), nor the losses' own stages.
        let info = stage.info();
        info.dtype != DType::I64 && !matches!(info.part, Part::Lens) && !matches!(stage.kind, AttnScores)
    }

    fn emit(&mut self, stage: Stage, tensor: TensorView<'_>) -> Result<()> {
        let values = match tensor {
            TensorView::F32(a) => F::copied_from_f32(a),
            TensorView::F64(a) => F::copied_from_f64(a),
            TensorView::I64(_) => unreachable!("only float stages are wanted"),
        };
        self.stages.insert(stage, values);
        Ok(())
    }
}

impl<F: Float> Record<F> {
    fn get(&self, stage: Stage) -> ArrayViewD<'_, F> {
        self.stages.get(&stage).unwrap_or_else(|| panic!("the forward pass computed {stage}")).view()
    }

    /// A stage of dimension `D`, if the pass computed it (a dropout mask only in training).
    pub(crate) fn of_dim<D: ndarray::Dimension>(&self, stage: Stage) -> Option<ndarray::ArrayView<'_, F, D>> {
        let values = self.stages.get(&stage)?.view();
        Some(values.into_dimensionality::<D>().expect("a stage of the dimension its backward reads"))
    }

    pub(crate) fn two(&self, stage: Stage) -> ArrayView2<'_, F> {
        self.get(stage).into_dimensionality::<Ix2>().expect("a [B,H] stage")
    }

    pub(crate) fn three(&self, stage: Stage) -> ArrayView3<'_, F> {
        self.get(stage).into_dimensionality::<Ix3>().expect("a [B,T,.] stage")
    }

    pub(crate) fn four(&self, stage: Stage) -> ArrayView4<'_, F> {
        self.get(stage).into_dimensionality::<Ix4>().expect("a [B,nh,T,.] stage")
    }
}

/// d loss / d parameter, by the parameter's stage (`param.<name>`, whose Hugging Face name is
/// transformers' `BertForPreTraining.named_parameters()`' own), in the order the backward reached
/// them. A parameter used twice (the word embeddings, also the MLM decoder's weight) has the sum.
pub struct Grads<F: Float = f32> {
    pub by_stage: Vec<(Stage, ArrayD<F>)>,
}

impl<F: Float> Grads<F> {
    pub(crate) fn new() -> Grads<F> {
        Grads { by_stage: Vec::new() }
    }

    /// Adds `grad` to the gradient of the parameter `stage`.
    pub(crate) fn add(&mut self, stage: Stage, grad: ArrayD<F>) {
        debug_assert!(stage.info().part == Part::Param, "{stage} is not a parameter");
        match self.by_stage.iter_mut().find(|(s, _)| *s == stage) {
            Some((_, sum)) => *sum += &grad,
            None => self.by_stage.push((stage, grad)),
        }
    }

    /// The gradient of the parameter `stage`, if the loss reached it.
    pub fn get(&self, stage: Stage) -> Option<&ArrayD<F>> {
        self.by_stage.iter().find(|(s, _)| *s == stage).map(|(_, g)| g)
    }

    pub(crate) fn get_mut(&mut self, stage: Stage) -> Option<&mut ArrayD<F>> {
        self.by_stage.iter_mut().find(|(s, _)| *s == stage).map(|(_, g)| g)
    }
}

/// What [`crate::BertModel::gradients`] returns.
pub struct Gradients<F: Float = f32> {
    /// The loss the gradients are of: `mlm.loss + nsp.loss`, those the labels ask for.
    pub loss: F,
    pub params: Grads<F>,
}
