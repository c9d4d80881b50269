//! Each column's sum over the rows of a matrix, added as ndarray's `sum_axis(Axis(0))` adds them
//! on a row-major matrix: from zero, one row after the other. A dense layer's bias gradient is
//! this sum over the tokens of d out (4,096 rows in a course model's batch), which ndarray adds on
//! one thread. Here the threads share the columns, so every column is the same additions in the
//! same order, whatever the thread count.

use ndarray::{Array1, ArrayView2};

use super::simd::{vectorized, LANES};
use super::threads::{self, PARALLEL_MIN_LEN};

/// `[N,C]` -> `[C]`: Σ over the rows of each column, each from 0 in row order; None (nothing
/// computed) unless the matrix is row-major with strides `[C, 1]`. (ndarray adds along the
/// column, in another order, when that axis has the smallest stride: a one-column view with a
/// larger stride, which is contiguous too.)
pub(crate) fn column_sums(values: ArrayView2<'_, f32>) -> Option<Array1<f32>> {
    let (rows, width) = values.dim();
    if rows == 0 || width == 0 {
        return Some(Array1::zeros(width));
    }
    if values.strides() != [width as isize, 1] {
        return None;
    }
    let values = values.as_slice()?;
    let mut sums = vec![0.0f32; width];
    // Enough columns to a part that each thread adds at least PARALLEL_MIN_LEN values.
    let min_units = PARALLEL_MIN_LEN.div_ceil((rows * LANES).max(1));
    threads::for_each_part(&mut sums, LANES, min_units, |first, part| {
        let first_column = first * LANES;
        for row in values.chunks_exact(width) {
            add(part, &row[first_column..][..part.len()]);
        }
    });
    Some(Array1::from_vec(sums))
}

vectorized! {
    /// Adds each value of `row` to its column's sum: each column is its own addition, so any
    /// vector width gives the same bits.
    fn add(sums: &mut [f32], row: &[f32]) {
        for (sum, &v) in sums.iter_mut().zip(row) {
            *sum += v;
        }
    }
}

#[cfg(test)]
mod tests {
    use ndarray::{Array2, Axis};

    /// Against ndarray's own `sum_axis(Axis(0))`, bit for bit: widths around the vector width and
    /// the threads' split, row counts from 1 to 4,096, values of mixed signs and magnitudes whose
    /// sums round differently in another order, and columns with a NaN, an infinity and a -0.0
    /// (0.0 + -0.0 is 0.0, as ndarray's sum from zero gives).
    #[test]
    fn the_sums_are_ndarrays_bit_for_bit() {
        for (rows, width) in
            [(0, 5), (4, 0), (1, 1), (1, 17), (3, 16), (7, 33), (4096, 256), (1229, 1024), (5, 20_001), (300, 4_999)]
        {
            let mut values = Array2::from_shape_fn((rows, width), |(r, c)| {
                let i = (r * 7_919 + c * 104_729) % 10_007;
                (i as f32 - 5_003.0) * 10f32.powi((i % 9) as i32 - 4)
            });
            if rows > 0 && width > 3 {
                values[[0, 1]] = f32::NAN;
                values[[rows - 1, 2]] = f32::INFINITY;
                values.column_mut(3).fill(-0.0);
            }
            let got = super::column_sums(values.view()).expect("a row-major matrix");
            let want = values.sum_axis(Axis(0));
            for (c, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "[{rows},{width}], column {c}: want {w:e}, got {g:e}");
            }
        }
    }

    #[test]
    fn a_matrix_whose_rows_are_not_in_order_is_left_to_the_caller() {
        let values = Array2::<f32>::zeros((3, 4));
        assert!(super::column_sums(values.t()).is_none());
        assert!(super::column_sums(values.slice(ndarray::s![.., 1..2])).is_none(), "one column of four");
    }
}
