//! The named operations BERT is made of: a dense layer's matrix product, attention's batched
//! products, softmax, LayerNorm, the activations, the embedding lookup, splitting and merging
//! heads, and the cross-entropy of the pretraining losses.
//!
//! Each operation that has a fast kernel is written twice, side by side in its file:
//!
//! - `<name>_reference`: the formula, written plainly on ndarray, generic over f32 and f64. This
//!   is the code the walkthrough quotes, and the one to read first.
//! - `<name>`: what the model calls. It runs a fast kernel from `kernels/` where one pays off and
//!   applies (this CPU has it, the operands are laid out for it), and the reference otherwise.
//!   No caller ever asks which.
//!
//! Drawing dropout's masks has a fast kernel too, which draws the same values on every thread.
//! The others (the embedding lookup, splitting and merging heads, the cross-entropy) are only
//! the formula: they move or pick values, or run once per pass, and a kernel would gain nothing.
//!
//! [`Kernels`] chooses for a whole forward pass: [`Kernels::Reference`] runs every operation on
//! its reference implementation (`bert-trace --kernels reference`), which is slower but is the
//! formula itself; the golden tests run both ways at the same tolerances.

mod activation;
mod cross_entropy;
mod dropout;
mod embedding;
pub mod format;
#[cfg(test)]
mod gradcheck;
pub(crate) mod kernels;
mod layer_norm;
mod matmul;
mod softmax;
mod split_heads;

use std::cell::Cell;

pub use self::activation::{
    gelu, gelu_backward, gelu_backward_reference, gelu_reference, gelu_tanh, gelu_tanh_backward, gelu_tanh_reference,
    relu, relu_backward, relu_reference, tanh, tanh_backward, tanh_reference,
};
pub use self::cross_entropy::{cross_entropy, cross_entropy_backward, log_softmax_rows};
pub use self::dropout::{dropout_mask, dropout_mask_reference};
pub use self::embedding::{embedding, embedding_backward};
pub use self::format::{lowest, narrow};
pub use self::kernels::available as available_kernels;
/// A large array's copy on every thread, for the sinks that keep stages (`pass/`, and the
/// backward's record through [`Float::copied_from_f32`]), and GELU's and softmax's backward.
pub(crate) use self::kernels::copy::c_order_copy;
pub use self::kernels::memory::keep_freed_memory;
pub use self::kernels::recycling::Recycling;
/// The sums of a stage table's statistics, which `pass/summary.rs` reaches through here.
pub(crate) use self::kernels::statistics::{sum_min_max, sum_squared_deviations};
/// The thread pool's split by rows, for the losses (`cross_entropy.rs`) and softmax's backward.
use self::kernels::threads::for_each_row;
/// The thread pool's map of items in order, for tokenizing a corpus (`training/`).
pub(crate) use self::kernels::threads::map_in_order;
pub use self::kernels::threads::{
    check as check_threads, max_threads, set_threads, threads, ThreadsError, MATMUL_ENV_VAR, MAX_MATMUL_THREADS,
};
/// The thread pool's element-wise split, for the optimizer (`training/adamw.rs`).
pub(crate) use self::kernels::threads::{for_each_item, part_len};
pub use self::layer_norm::{
    back_moments, layer_norm_rows, layer_norm_rows_backward, layer_norm_rows_reference, moments, BackMoments, Moments,
};
pub use self::matmul::{
    dot, linear, linear_backward, linear_backward_reference, linear_reference, matmul, matrix_product,
    matrix_product_reference, scaled_matmul, scaled_matmul_backward, scaled_matmul_reference,
};
pub use self::softmax::{softmax_row, softmax_rows, softmax_rows_backward, softmax_rows_reference, SoftmaxRow};
pub use self::split_heads::{merge_heads, split_heads, transpose};

/// The element types the model and its operations run in: f32, BERT's own, and f64, the
/// exact result's stand-in (`--precision f64`). The choice of implementation is the type's: an
/// f32 operation runs its fast kernel where one applies, an f64 one runs the reference (the
/// formula), so one model's code serves both.
pub trait Float: ndarray::NdFloat + num_traits::FromPrimitive + bytemuck::Pod {
    /// The error function, from `libm`.
    fn erf(self) -> Self;

    /// A constant of the formulas, written as an f64.
    fn of(value: f64) -> Self {
        Self::from_f64(value).expect("a finite constant")
    }

    /// A view of values of this type, as one of the two float types (for the tracer, which
    /// hands stages to sinks by type).
    fn either(view: ndarray::ArrayViewD<'_, Self>) -> EitherFloat<'_>;
    /// The same for a mutable view (for a hook, which changes a stage in place).
    fn either_mut(view: ndarray::ArrayViewMutD<'_, Self>) -> EitherFloatMut<'_>;

    /// `[N,in]` -> `[N,out]`: x · Wᵀ + b, for [`linear`].
    fn linear_rows(
        x: ndarray::ArrayView2<'_, Self>,
        weight: ndarray::ArrayView2<'_, Self>,
        bias: ndarray::ArrayView1<'_, Self>,
    ) -> ndarray::Array2<Self>;
    /// [`scaled_matmul`].
    fn scaled_matmul(
        a: ndarray::ArrayView4<'_, Self>,
        b: ndarray::ArrayView4<'_, Self>,
        scale: Self,
    ) -> ndarray::Array4<Self>;
    /// [`matrix_product`].
    fn matrix_product(a: ndarray::ArrayView2<'_, Self>, b: ndarray::ArrayView2<'_, Self>) -> ndarray::Array2<Self>;
    /// [`linear_backward`].
    fn linear_backward(
        x: ndarray::ArrayView2<'_, Self>,
        weight: ndarray::ArrayView2<'_, Self>,
        d_out: ndarray::ArrayView2<'_, Self>,
    ) -> (ndarray::Array2<Self>, ndarray::Array2<Self>, ndarray::Array1<Self>);
    /// [`softmax_rows`].
    fn softmax_rows<D: ndarray::Dimension>(x: ndarray::Array<Self, D>) -> ndarray::Array<Self, D>;
    /// [`layer_norm_rows`].
    fn layer_norm_rows<D: ndarray::Dimension>(
        x: ndarray::Array<Self, D>,
        weight: ndarray::ArrayView1<'_, Self>,
        bias: ndarray::ArrayView1<'_, Self>,
        eps: Self,
    ) -> ndarray::Array<Self, D>;
    /// [`gelu`].
    fn gelu<D: ndarray::Dimension>(x: ndarray::Array<Self, D>) -> ndarray::Array<Self, D>;
    /// [`gelu_tanh`].
    fn gelu_tanh<D: ndarray::Dimension>(x: ndarray::Array<Self, D>) -> ndarray::Array<Self, D>;
    /// [`gelu_backward`].
    fn gelu_backward<D: ndarray::Dimension>(
        x: ndarray::ArrayView<'_, Self, D>,
        d_out: ndarray::ArrayView<'_, Self, D>,
    ) -> ndarray::Array<Self, D>;
    /// [`tanh`] (named apart from the element's own `tanh`).
    fn tanh_array<D: ndarray::Dimension>(x: ndarray::Array<Self, D>) -> ndarray::Array<Self, D>;
    /// [`dropout_mask`].
    fn dropout_mask<D: ndarray::Dimension>(seed: u64, p: f64, shape: D) -> ndarray::Array<Self, D>;
    /// A copy of f32 values in this type, in C order: the same values for f32 (copied on every
    /// thread when there are many), each widened for f64. For the backward's record of a pass.
    fn copied_from_f32(values: ndarray::ArrayViewD<'_, f32>) -> ndarray::ArrayD<Self>;
    /// The same for f64 values: the same values for f64, each rounded for f32.
    fn copied_from_f64(values: ndarray::ArrayViewD<'_, f64>) -> ndarray::ArrayD<Self>;
}

/// Values of one of the two [`Float`] types.
pub enum EitherFloat<'a> {
    F32(ndarray::ArrayViewD<'a, f32>),
    F64(ndarray::ArrayViewD<'a, f64>),
}

/// Mutable values of one of the two [`Float`] types.
pub enum EitherFloatMut<'a> {
    F32(ndarray::ArrayViewMutD<'a, f32>),
    F64(ndarray::ArrayViewMutD<'a, f64>),
}

impl Float for f32 {
    fn erf(self) -> f32 {
        libm::erff(self)
    }
    fn either(view: ndarray::ArrayViewD<'_, f32>) -> EitherFloat<'_> {
        EitherFloat::F32(view)
    }
    fn either_mut(view: ndarray::ArrayViewMutD<'_, f32>) -> EitherFloatMut<'_> {
        EitherFloatMut::F32(view)
    }
    fn linear_rows(
        x: ndarray::ArrayView2<'_, f32>,
        weight: ndarray::ArrayView2<'_, f32>,
        bias: ndarray::ArrayView1<'_, f32>,
    ) -> ndarray::Array2<f32> {
        matmul::linear_rows_f32(x, weight, bias)
    }
    fn scaled_matmul(
        a: ndarray::ArrayView4<'_, f32>,
        b: ndarray::ArrayView4<'_, f32>,
        scale: f32,
    ) -> ndarray::Array4<f32> {
        matmul::scaled_matmul_f32(a, b, scale)
    }
    fn matrix_product(a: ndarray::ArrayView2<'_, f32>, b: ndarray::ArrayView2<'_, f32>) -> ndarray::Array2<f32> {
        matmul::matrix_product_f32(a, b)
    }
    fn linear_backward(
        x: ndarray::ArrayView2<'_, f32>,
        weight: ndarray::ArrayView2<'_, f32>,
        d_out: ndarray::ArrayView2<'_, f32>,
    ) -> (ndarray::Array2<f32>, ndarray::Array2<f32>, ndarray::Array1<f32>) {
        matmul::linear_backward_f32(x, weight, d_out)
    }
    fn softmax_rows<D: ndarray::Dimension>(x: ndarray::Array<f32, D>) -> ndarray::Array<f32, D> {
        softmax::softmax_rows_f32(x)
    }
    fn layer_norm_rows<D: ndarray::Dimension>(
        x: ndarray::Array<f32, D>,
        weight: ndarray::ArrayView1<'_, f32>,
        bias: ndarray::ArrayView1<'_, f32>,
        eps: f32,
    ) -> ndarray::Array<f32, D> {
        layer_norm::layer_norm_rows_f32(x, weight, bias, eps)
    }
    fn gelu<D: ndarray::Dimension>(x: ndarray::Array<f32, D>) -> ndarray::Array<f32, D> {
        activation::gelu_f32(x)
    }
    fn gelu_tanh<D: ndarray::Dimension>(x: ndarray::Array<f32, D>) -> ndarray::Array<f32, D> {
        activation::gelu_tanh_f32(x)
    }
    fn gelu_backward<D: ndarray::Dimension>(
        x: ndarray::ArrayView<'_, f32, D>,
        d_out: ndarray::ArrayView<'_, f32, D>,
    ) -> ndarray::Array<f32, D> {
        activation::gelu_backward_f32(x, d_out)
    }
    fn tanh_array<D: ndarray::Dimension>(x: ndarray::Array<f32, D>) -> ndarray::Array<f32, D> {
        activation::tanh_f32(x)
    }
    fn dropout_mask<D: ndarray::Dimension>(seed: u64, p: f64, shape: D) -> ndarray::Array<f32, D> {
        dropout::dropout_mask_f32(seed, p, shape)
    }
    fn copied_from_f32(values: ndarray::ArrayViewD<'_, f32>) -> ndarray::ArrayD<f32> {
        c_order_copy(&values)
    }
    fn copied_from_f64(values: ndarray::ArrayViewD<'_, f64>) -> ndarray::ArrayD<f32> {
        values.mapv(f32::of)
    }
}

/// f64 has no kernels: every operation is its reference implementation.
impl Float for f64 {
    fn erf(self) -> f64 {
        libm::erf(self)
    }
    fn either(view: ndarray::ArrayViewD<'_, f64>) -> EitherFloat<'_> {
        EitherFloat::F64(view)
    }
    fn either_mut(view: ndarray::ArrayViewMutD<'_, f64>) -> EitherFloatMut<'_> {
        EitherFloatMut::F64(view)
    }
    fn linear_rows(
        x: ndarray::ArrayView2<'_, f64>,
        weight: ndarray::ArrayView2<'_, f64>,
        bias: ndarray::ArrayView1<'_, f64>,
    ) -> ndarray::Array2<f64> {
        linear_reference(x, weight, bias)
    }
    fn scaled_matmul(
        a: ndarray::ArrayView4<'_, f64>,
        b: ndarray::ArrayView4<'_, f64>,
        scale: f64,
    ) -> ndarray::Array4<f64> {
        scaled_matmul_reference(a, b, scale)
    }
    fn matrix_product(a: ndarray::ArrayView2<'_, f64>, b: ndarray::ArrayView2<'_, f64>) -> ndarray::Array2<f64> {
        matrix_product_reference(a, b)
    }
    fn linear_backward(
        x: ndarray::ArrayView2<'_, f64>,
        weight: ndarray::ArrayView2<'_, f64>,
        d_out: ndarray::ArrayView2<'_, f64>,
    ) -> (ndarray::Array2<f64>, ndarray::Array2<f64>, ndarray::Array1<f64>) {
        linear_backward_reference(x, weight, d_out)
    }
    fn softmax_rows<D: ndarray::Dimension>(x: ndarray::Array<f64, D>) -> ndarray::Array<f64, D> {
        softmax_rows_reference(x)
    }
    fn layer_norm_rows<D: ndarray::Dimension>(
        x: ndarray::Array<f64, D>,
        weight: ndarray::ArrayView1<'_, f64>,
        bias: ndarray::ArrayView1<'_, f64>,
        eps: f64,
    ) -> ndarray::Array<f64, D> {
        layer_norm_rows_reference(x, weight, bias, eps)
    }
    fn gelu<D: ndarray::Dimension>(x: ndarray::Array<f64, D>) -> ndarray::Array<f64, D> {
        gelu_reference(x)
    }
    fn gelu_tanh<D: ndarray::Dimension>(x: ndarray::Array<f64, D>) -> ndarray::Array<f64, D> {
        gelu_tanh_reference(x)
    }
    fn gelu_backward<D: ndarray::Dimension>(
        x: ndarray::ArrayView<'_, f64, D>,
        d_out: ndarray::ArrayView<'_, f64, D>,
    ) -> ndarray::Array<f64, D> {
        gelu_backward_reference(x, d_out)
    }
    fn tanh_array<D: ndarray::Dimension>(x: ndarray::Array<f64, D>) -> ndarray::Array<f64, D> {
        tanh_reference(x)
    }
    fn dropout_mask<D: ndarray::Dimension>(seed: u64, p: f64, shape: D) -> ndarray::Array<f64, D> {
        dropout_mask_reference(seed, p, shape)
    }
    fn copied_from_f32(values: ndarray::ArrayViewD<'_, f32>) -> ndarray::ArrayD<f64> {
        values.mapv(f64::from)
    }
    fn copied_from_f64(values: ndarray::ArrayViewD<'_, f64>) -> ndarray::ArrayD<f64> {
        c_order_copy(&values)
    }
}

/// Which implementation of the operations a forward pass runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kernels {
    /// The fast kernels where this CPU has them, the reference elsewhere.
    #[default]
    Fast,
    /// The reference implementation of every operation: the formulas as written.
    Reference,
}

crate::choice!(Kernels { Fast => "fast", Reference => "reference" });

thread_local! {
    /// The kernels of the forward pass running on this thread. The operations read it on the
    /// thread that calls them, which is the pass's own: the kernels' helper threads never call
    /// an operation.
    static ACTIVE: Cell<Kernels> = const { Cell::new(Kernels::Fast) };
}

/// Runs `work` with every operation it calls, on this thread, using `kernels`.
pub fn with_kernels<R>(kernels: Kernels, work: impl FnOnce() -> R) -> R {
    /// Puts the previous choice back, also when `work` panics.
    struct Restore(Kernels);
    impl Drop for Restore {
        fn drop(&mut self) {
            ACTIVE.set(self.0);
        }
    }
    let _restore = Restore(ACTIVE.replace(kernels));
    work()
}

/// Whether the operations may use their fast kernels.
pub(crate) fn fast() -> bool {
    ACTIVE.get() == Kernels::Fast
}
