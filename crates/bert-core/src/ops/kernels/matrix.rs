//! A matrix as the kernels see it: a slice and two strides, so that one head of a `[B,T,nh,hs]`
//! array, or its transpose, is a matrix without a copy. Its own file, below both the product
//! (`gemm.rs`) and the packing (`pack.rs`) that read it.

use std::mem::MaybeUninit;

/// A matrix somewhere in a slice: element `[r,c]` is `values[r * row_stride + c * col_stride]`.
/// One head of a `[B,T,nh,hs]` array is `[T,hs]` with strides (H, 1); its transpose, (1, H).
#[derive(Clone, Copy)]
pub(crate) struct Matrix<'a> {
    pub values: &'a [f32],
    pub row_stride: usize,
    pub col_stride: usize,
}

impl<'a> Matrix<'a> {
    /// Rows `row_stride` apart, each contiguous.
    pub(crate) fn row_major(values: &'a [f32], row_stride: usize) -> Matrix<'a> {
        Matrix { values, row_stride, col_stride: 1 }
    }
}

/// [`Matrix`], to be written. Its values may be uninitialized: the product writes each output
/// before it reads it (the first block of K assigns, later blocks add), so an output that is
/// about to be computed need not be zeroed first (for attention's scores at 512 tokens, 12.6 MB
/// a layer, the zeroing was a fifth of the product's time).
pub(crate) struct MatrixMut<'a> {
    pub values: &'a mut [MaybeUninit<f32>],
    pub row_stride: usize,
    pub col_stride: usize,
}

#[cfg(test)]
impl<'a> MatrixMut<'a> {
    /// Values that are already initialized, as the matrix to write (the tests' outputs).
    pub(crate) fn of(values: &'a mut [f32], row_stride: usize, col_stride: usize) -> MatrixMut<'a> {
        // SAFETY: MaybeUninit<f32> has f32's layout, and the product writes only f32 values, so
        // the slice stays initialized.
        let values = unsafe { &mut *(values as *mut [f32] as *mut [MaybeUninit<f32>]) };
        MatrixMut { values, row_stride, col_stride }
    }
}
