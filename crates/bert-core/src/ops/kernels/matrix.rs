//! A matrix as the kernels see it: a slice and two strides, so that one head of a `[B,T,nh,hs]`
//! array, or its transpose, is a matrix without a copy. Its own file, below both the product
//! (`gemm.rs`) and the packing (`pack.rs`) that read it.

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

/// [`Matrix`], to be written.
pub(crate) struct MatrixMut<'a> {
    pub values: &'a mut [f32],
    pub row_stride: usize,
    pub col_stride: usize,
}
