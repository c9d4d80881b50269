//! The one seam through which a run changes its own stages: a [`Hook`] gets each stage it wants
//! as `&mut`, after the model computed it and before the sink records it or the rest of the pass
//! reads it, so the statistics and the dump show the value the model used. Ablating a head,
//! patching a stage from another run ([`crate::experiments`]) and a Python function are hooks.

use ndarray::{ArrayView2, ArrayViewMutD};

use crate::error::Result;
use crate::stage::Stage;

/// A mutable view of one stage's tensor.
#[derive(Debug)]
pub enum TensorViewMut<'a> {
    F32(ArrayViewMutD<'a, f32>),
    F64(ArrayViewMutD<'a, f64>),
    I64(ArrayViewMutD<'a, i64>),
}

impl TensorViewMut<'_> {
    /// The same view for a shorter time, so that one view can be handed to several hooks.
    pub fn reborrow(&mut self) -> TensorViewMut<'_> {
        match self {
            TensorViewMut::F32(a) => TensorViewMut::F32(a.view_mut()),
            TensorViewMut::F64(a) => TensorViewMut::F64(a.view_mut()),
            TensorViewMut::I64(a) => TensorViewMut::I64(a.view_mut()),
        }
    }

    pub fn shape(&self) -> &[usize] {
        match self {
            TensorViewMut::F32(a) => a.shape(),
            TensorViewMut::F64(a) => a.shape(),
            TensorViewMut::I64(a) => a.shape(),
        }
    }
}

/// Changes the stages it wants, in place.
pub trait Hook {
    /// Whether this hook changes `stage`; a stage no hook wants is not touched.
    fn wants(&self, stage: &Stage) -> bool;

    /// Changes `tensor`, the value of `stage`, in place. `attention_mask` `[B,T]` is the mask
    /// the model reads (1 for a real token), for hooks that treat padding apart.
    fn apply(&mut self, stage: Stage, tensor: TensorViewMut<'_>, attention_mask: ArrayView2<'_, i64>) -> Result<()>;

    /// The backward of [`Hook::apply`], for a backward pass through the changed model: `grad`,
    /// d loss / d the value `apply` returned, becomes d loss / d the value it was given, in
    /// place. A hook that cannot say refuses the backward pass.
    fn backward(&mut self, stage: Stage, grad: TensorViewMut<'_>, attention_mask: ArrayView2<'_, i64>) -> Result<()> {
        let _ = (grad, attention_mask);
        Err(crate::error::BertError::Labels(format!("a backward pass through the hook on {stage} is not supported")))
    }
}

/// Several hooks as one, each applied in turn to the stages it wants (the command line's
/// interventions, then a Python function's).
pub struct Chain<'a>(pub Vec<&'a mut dyn Hook>);

impl Hook for Chain<'_> {
    fn wants(&self, stage: &Stage) -> bool {
        self.0.iter().any(|hook| hook.wants(stage))
    }

    fn apply(
        &mut self,
        stage: Stage,
        mut tensor: TensorViewMut<'_>,
        attention_mask: ArrayView2<'_, i64>,
    ) -> Result<()> {
        for hook in self.0.iter_mut().filter(|hook| hook.wants(&stage)) {
            hook.apply(stage, tensor.reborrow(), attention_mask)?;
        }
        Ok(())
    }

    fn backward(
        &mut self,
        stage: Stage,
        mut grad: TensorViewMut<'_>,
        attention_mask: ArrayView2<'_, i64>,
    ) -> Result<()> {
        // The last change made is the first undone.
        for hook in self.0.iter_mut().rev().filter(|hook| hook.wants(&stage)) {
            hook.backward(stage, grad.reborrow(), attention_mask)?;
        }
        Ok(())
    }
}
