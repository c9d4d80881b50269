//! Where the forward pass sends each stage of the stage table ([`crate::stage`]): a [`Sink`]
//! picked by the caller, and the `Tracer` that hands stages to it in execution order and stops
//! the pass where asked; the hooks that may replace a stage's value ([`hook`]), and the four
//! numbers a stage table shows ([`summary`]).

pub mod hook;
pub mod summary;

use ndarray::{Array2, ArrayBase, ArrayD, ArrayViewD, DataMut, Dimension};

use self::hook::{Hook, TensorViewMut};
use crate::error::{BertError, Result};
use crate::ops::{EitherFloat, EitherFloatMut, Float};
use crate::stage::{DType, Stage};

/// A borrowed view of one stage's tensor.
#[derive(Clone, Debug)]
pub enum TensorView<'a> {
    F32(ArrayViewD<'a, f32>),
    /// An f64 pass (`--precision f64`), or a float64 file read back.
    F64(ArrayViewD<'a, f64>),
    I64(ArrayViewD<'a, i64>),
}

/// An owned tensor, as a [`Memory`] sink keeps it or a dump is read back.
#[derive(Clone, Debug, PartialEq)]
pub enum Tensor {
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
    I64(ArrayD<i64>),
}

impl TensorView<'_> {
    pub fn shape(&self) -> &[usize] {
        match self {
            TensorView::F32(a) => a.shape(),
            TensorView::F64(a) => a.shape(),
            TensorView::I64(a) => a.shape(),
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            TensorView::F32(_) => DType::F32,
            TensorView::F64(_) => DType::F64,
            TensorView::I64(_) => DType::I64,
        }
    }

    pub fn to_owned(&self) -> Tensor {
        self.to_owned_c_order()
    }

    /// A copy with its values in C order (row-major), whatever the view's strides: the order of
    /// a `.npy` file. Large ones are copied on every thread (`ops::c_order_copy`).
    pub fn to_owned_c_order(&self) -> Tensor {
        match self {
            TensorView::F32(a) => Tensor::F32(crate::ops::c_order_copy(a)),
            TensorView::F64(a) => Tensor::F64(crate::ops::c_order_copy(a)),
            TensorView::I64(a) => Tensor::I64(crate::ops::c_order_copy(a)),
        }
    }
}

impl Tensor {
    pub fn view(&self) -> TensorView<'_> {
        match self {
            Tensor::F32(a) => TensorView::F32(a.view()),
            Tensor::F64(a) => TensorView::F64(a.view()),
            Tensor::I64(a) => TensorView::I64(a.view()),
        }
    }

    pub fn shape(&self) -> &[usize] {
        match self {
            Tensor::F32(a) => a.shape(),
            Tensor::F64(a) => a.shape(),
            Tensor::I64(a) => a.shape(),
        }
    }

    /// Whether the values are floating point (f32 or f64).
    pub fn is_float(&self) -> bool {
        !matches!(self, Tensor::I64(_))
    }

    /// The values as f32, for drawing: None for an integer tensor.
    pub fn to_f32(&self) -> Option<ArrayD<f32>> {
        match self {
            Tensor::F32(a) => Some(a.clone()),
            Tensor::F64(a) => Some(a.mapv(|v| v as f32)),
            Tensor::I64(_) => None,
        }
    }

    /// The values of a float tensor as `F` (an f64 value rounded to f32 when `F` is f32): None
    /// for an integer tensor.
    pub fn to_float<F: Float>(&self) -> Option<ArrayD<F>> {
        match self {
            Tensor::F32(a) => Some(a.mapv(|v| F::of(f64::from(v)))),
            Tensor::F64(a) => Some(a.mapv(F::of)),
            Tensor::I64(_) => None,
        }
    }

    /// A float tensor of either float type.
    pub fn of_float<F: Float>(values: ArrayD<F>) -> Tensor {
        match F::either(values.view()) {
            EitherFloat::F32(view) => Tensor::F32(view.to_owned()),
            EitherFloat::F64(view) => Tensor::F64(view.to_owned()),
        }
    }

    /// The values of an integer tensor: None for a float tensor.
    pub fn to_i64(&self) -> Option<ArrayD<i64>> {
        match self {
            Tensor::I64(a) => Some(a.clone()),
            Tensor::F32(_) | Tensor::F64(_) => None,
        }
    }

    pub fn dtype(&self) -> DType {
        self.view().dtype()
    }

    /// The values as f64, in row-major order, whatever the dtype.
    pub fn to_f64(&self) -> ArrayD<f64> {
        match self {
            Tensor::F32(a) => a.mapv(f64::from),
            Tensor::F64(a) => a.clone(),
            Tensor::I64(a) => a.mapv(|v| v as f64),
        }
    }
}

/// Receives the stages of one forward pass, in execution order.
pub trait Sink {
    /// Whether this sink wants `stage` at all. A sink that answers no costs nothing beyond this
    /// call: the tensor is neither copied nor converted for it.
    fn wants(&self, stage: &Stage) -> bool {
        let _ = stage;
        true
    }

    /// Takes one stage. The view is only valid during the call.
    fn emit(&mut self, stage: Stage, tensor: TensorView<'_>) -> Result<()>;

    /// Called once after a backward pass with the parameters the loss did not reach (they have
    /// no `grad.param.*` stage, as PyTorch leaves their `.grad` None).
    fn unreached(&mut self, parameters: &[String]) -> Result<()> {
        let _ = parameters;
        Ok(())
    }

    /// Called once after the last stage (the last one computed, if the pass stopped early).
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Hands every stage to the caller's sink and, when a backward pass will read them, to a second
/// sink that keeps them (`model/gradients.rs`'s record).
pub(crate) struct Tee<'a> {
    pub(crate) sink: &'a mut dyn Sink,
    pub(crate) record: Option<&'a mut dyn Sink>,
}

impl Sink for Tee<'_> {
    fn wants(&self, stage: &Stage) -> bool {
        self.sink.wants(stage) || self.record.as_ref().is_some_and(|r| r.wants(stage))
    }

    fn emit(&mut self, stage: Stage, tensor: TensorView<'_>) -> Result<()> {
        if let Some(record) = self.record.as_deref_mut().filter(|r| r.wants(&stage)) {
            record.emit(stage, tensor.clone())?;
        }
        if self.sink.wants(&stage) {
            self.sink.emit(stage, tensor)?;
        }
        Ok(())
    }
}

/// Throws every stage away: the plain forward pass.
pub struct Discard;

impl Sink for Discard {
    fn wants(&self, _: &Stage) -> bool {
        false
    }
    fn emit(&mut self, _: Stage, _: TensorView<'_>) -> Result<()> {
        Ok(())
    }
}

/// Keeps a copy of every stage in memory, in order (for tests and for the CLI's statistics).
#[derive(Default)]
pub struct Memory {
    pub stages: Vec<(Stage, Tensor)>,
}

impl Memory {
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.stages.iter().find(|(stage, _)| stage.name() == name).map(|(_, t)| t)
    }
}

impl Sink for Memory {
    fn emit(&mut self, stage: Stage, tensor: TensorView<'_>) -> Result<()> {
        self.stages.push((stage, tensor.to_owned()));
        Ok(())
    }
}

/// A mutable view of a float stage, as a hook takes it.
fn mutable<F, S, D>(tensor: &mut ArrayBase<S, D>) -> TensorViewMut<'_>
where
    F: Float,
    S: DataMut<Elem = F>,
    D: Dimension,
{
    match F::either_mut(tensor.view_mut().into_dyn()) {
        EitherFloatMut::F32(view) => TensorViewMut::F32(view),
        EitherFloatMut::F64(view) => TensorViewMut::F64(view),
    }
}

/// Why the forward pass ended before its last stage.
pub(crate) enum Halt {
    /// The caller's stop stage was reached; not an error.
    Stopped(Stage),
    Failed(BertError),
}

impl From<BertError> for Halt {
    fn from(e: BertError) -> Halt {
        Halt::Failed(e)
    }
}

/// Hands stages to the hook, then to the sink, and raises [`Halt::Stopped`] after the stop stage.
///
/// The model hands each stage over mutably (`&mut` its array): a [`Hook`] changes it there (an
/// ablated head, a stage patched from another run) before the sink records it and before the
/// rest of the pass reads it.
pub(crate) struct Tracer<'s> {
    sink: &'s mut dyn Sink,
    stop_after: Option<Stage>,
    hook: Option<&'s mut dyn Hook>,
    /// `[B,T]` the attention mask the model reads, for the hook; set once the inputs are traced.
    attention_mask: Array2<i64>,
}

impl<'s> Tracer<'s> {
    pub(crate) fn new(sink: &'s mut dyn Sink, stop_after: Option<Stage>, hook: Option<&'s mut dyn Hook>) -> Tracer<'s> {
        Tracer { sink, stop_after, hook, attention_mask: Array2::zeros((0, 0)) }
    }

    /// Records the attention mask the rest of the pass reads, for the hook.
    pub(crate) fn set_attention_mask(&mut self, mask: &Array2<i64>) {
        self.attention_mask = mask.clone();
    }

    /// Emits a float stage of any rank (f32, or f64 in an f64 pass).
    pub(crate) fn float<F, S, D>(&mut self, stage: Stage, tensor: &mut ArrayBase<S, D>) -> Result<(), Halt>
    where
        F: Float,
        S: DataMut<Elem = F>,
        D: Dimension,
    {
        let value = Stage { of: crate::stage::Of::Value, ..stage };
        let hook = self.hook.as_deref_mut().filter(|hook| hook.wants(&value));
        if let (Some(hook), false) = (hook, stage.is_grad()) {
            hook.apply(stage, mutable(tensor), self.attention_mask.view())?;
        }
        if self.sink.wants(&stage) {
            let view = match F::either(tensor.view().into_dyn()) {
                EitherFloat::F32(view) => TensorView::F32(view),
                EitherFloat::F64(view) => TensorView::F64(view),
            };
            self.sink.emit(stage, view)?;
        }
        // A gradient is recorded as d loss / d the value the model used; what flows on to the
        // stages before it is d loss / d the value computed, which the hook's backward gives.
        let hook = self.hook.as_deref_mut().filter(|hook| hook.wants(&value));
        if let (Some(hook), true) = (hook, stage.is_grad()) {
            hook.backward(value, mutable(tensor), self.attention_mask.view())?;
        }
        self.after(stage)
    }

    /// Emits an int64 stage (the inputs and labels).
    pub(crate) fn i64<S, D>(&mut self, stage: Stage, tensor: &mut ArrayBase<S, D>) -> Result<(), Halt>
    where
        S: DataMut<Elem = i64>,
        D: Dimension,
    {
        if let Some(hook) = self.hook.as_deref_mut().filter(|hook| hook.wants(&stage)) {
            hook.apply(stage, TensorViewMut::I64(tensor.view_mut().into_dyn()), self.attention_mask.view())?;
        }
        if self.sink.wants(&stage) {
            self.sink.emit(stage, TensorView::I64(tensor.view().into_dyn()))?;
        }
        self.after(stage)
    }

    fn after(&mut self, stage: Stage) -> Result<(), Halt> {
        if self.stop_after == Some(stage) {
            return Err(Halt::Stopped(stage));
        }
        Ok(())
    }

    /// Names the parameters a backward pass did not reach, to the sink.
    pub(crate) fn unreached(&mut self, parameters: &[String]) -> Result<(), Halt> {
        Ok(self.sink.unreached(parameters)?)
    }
}
