//! A large array's copy, made by every thread: a pass that keeps every stage copies each one as
//! it is handed over (about 700 MB at 512 tokens of a bert-base-sized model), and one thread
//! alone copies at less than the memory's speed.

use ndarray::{Array, Array2, ArrayView, ArrayView2, Axis, Dimension};

use super::threads;

/// At least this many bytes to a thread: below it, waking a helper costs more than it saves.
const BYTES_PER_THREAD: usize = 1 << 20;

/// A copy of `values`, the same values in the same order, the parts copied on every thread.
pub(crate) fn copy_of<T: Copy + Send + Sync>(values: &[T]) -> Vec<T> {
    let per_thread = (BYTES_PER_THREAD / std::mem::size_of::<T>().max(1)).max(1);
    if values.len() < 2 * per_thread {
        return values.to_vec();
    }
    let mut copy: Vec<T> = Vec::with_capacity(values.len());
    threads::for_each_part(&mut copy.spare_capacity_mut()[..values.len()], 1, per_thread, |first, part| {
        let source = &values[first..first + part.len()];
        // SAFETY: `part` and `source` are the same length, and MaybeUninit<T> has T's layout; the
        // source is borrowed and the destination is the new vector's own memory, so they do not
        // overlap.
        unsafe { std::ptr::copy_nonoverlapping(source.as_ptr(), part.as_mut_ptr().cast::<T>(), part.len()) };
    });
    // SAFETY: every element of the first values.len() was written above (the parts cover the
    // slice).
    unsafe { copy.set_len(values.len()) };
    copy
}

/// A copy of `view` with its values in C order (row-major), whatever its strides: values already
/// in C order are copied as one slice, by [`copy_of`]; values whose last axis is contiguous (the
/// heads of `split_heads`, `[B,nh,T,hs]` over memory in `[B,T,nh,hs]` order) row by row, by
/// [`gather`]; others one value at a time, by ndarray, in C order.
pub(crate) fn c_order_copy<T: Copy + Send + Sync, D: Dimension>(view: &ArrayView<'_, T, D>) -> Array<T, D> {
    if let Some(values) = view.as_slice() {
        return Array::from_shape_vec(view.raw_dim(), copy_of(values)).expect("its shape");
    }
    // (A view of no axes is one value, always in C order: it was copied above.)
    let last = Axis(view.ndim() - 1);
    let rows: Option<Vec<&[T]>> = view.lanes(last).into_iter().map(|row| row.to_slice()).collect();
    match rows {
        Some(rows) => Array::from_shape_vec(view.raw_dim(), gather(&rows, view.len_of(last))).expect("its shape"),
        None => view.as_standard_layout().into_owned(),
    }
}

/// The rows `rows` of a matrix, in that order, as a new row-major matrix; None (nothing copied)
/// when a row is not contiguous in memory. ndarray's `select` copies one value at a time, on
/// one thread.
pub(crate) fn copy_rows<T: Copy + Send + Sync>(matrix: ArrayView2<'_, T>, rows: &[usize]) -> Option<Array2<T>> {
    let slices: Option<Vec<&[T]>> = rows.iter().map(|&row| matrix.row(row).to_slice()).collect();
    let width = matrix.ncols();
    Some(Array2::from_shape_vec((rows.len(), width), gather(&slices?, width)).expect("[rows,width] values"))
}

/// The rows, each `width` values, one after the other in a new vector; the rows shared between
/// the threads, at least [`BYTES_PER_THREAD`] to a thread.
fn gather<T: Copy + Send + Sync>(rows: &[&[T]], width: usize) -> Vec<T> {
    let len = rows.len() * width;
    let mut copy: Vec<T> = Vec::with_capacity(len);
    let rows_per_thread = (BYTES_PER_THREAD / (width * std::mem::size_of::<T>()).max(1)).max(1);
    threads::for_each_row(&mut copy.spare_capacity_mut()[..len], width, rows_per_thread, |i, slot| {
        let row = rows[i];
        assert_eq!(row.len(), slot.len(), "every row is `width` values");
        // SAFETY: `slot` and `row` are the same length (checked above), and MaybeUninit<T> has
        // T's layout; the row is borrowed and the slot is the new vector's own memory, so they do
        // not overlap.
        unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), slot.as_mut_ptr().cast::<T>(), row.len()) };
    });
    // SAFETY: every element of the first `len` was written above (the rows cover the slice).
    unsafe { copy.set_len(len) };
    copy
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_copy_is_the_values_at_every_length() {
        for len in [0, 1, 1000, (1 << 18) - 1, 1 << 18, (1 << 20) + 7, 3 << 20] {
            let values: Vec<f32> = (0..len).map(|i| i as f32 * 0.5).collect();
            assert_eq!(super::copy_of(&values), values, "{len} values");
        }
    }

    /// Permuted, sliced and reversed arrays, small and larger than a thread's share, copied in C
    /// order as ndarray's own `as_standard_layout` copies them: rows gathered where the last axis
    /// is contiguous (split heads, a slice of columns, the tokens reversed), one value at a time
    /// where it is not (a transpose, the features reversed), and an array of no values.
    #[test]
    fn c_order_copies_are_ndarrays_copies() {
        use ndarray::{s, Array, Array4, Ix4};
        for (b, t, nh, hs) in [(1, 3, 2, 5), (2, 128, 4, 64), (32, 128, 4, 64), (2, 0, 3, 4)] {
            let values = Array::from_iter((0..b * t * nh * hs).map(|i| i as f32)).into_shape_with_order((b, t, nh, hs));
            let values: Array4<f32> = values.unwrap();
            let heads = values.view().permuted_axes([0, 2, 1, 3]);
            let transposed = values.view().permuted_axes([0, 1, 3, 2]);
            let sliced = values.slice(s![.., .., .., 1..]);
            let reversed_tokens = values.slice(s![.., ..;-1, .., ..]);
            let reversed_features = values.slice(s![.., .., .., ..;-1]);
            for (what, view) in [
                ("heads", heads),
                ("transposed", transposed),
                ("sliced", sliced.into_dimensionality::<Ix4>().unwrap()),
                ("tokens reversed", reversed_tokens.into_dimensionality::<Ix4>().unwrap()),
                ("features reversed", reversed_features.into_dimensionality::<Ix4>().unwrap()),
            ] {
                let got = super::c_order_copy(&view);
                assert_eq!(got, view.as_standard_layout().into_owned(), "{what} of [{b},{t},{nh},{hs}]");
                assert!(got.is_standard_layout(), "{what}");
            }
        }
    }

    #[test]
    fn copied_rows_are_selects_rows() {
        use ndarray::{Array2, Axis};
        let matrix = Array2::from_shape_fn((1_000, 300), |(r, c)| (r * 300 + c) as f32);
        for rows in [vec![], vec![0], vec![999, 3, 3, 500], (0..1_000).step_by(3).collect()] {
            let got = super::copy_rows(matrix.view(), &rows).expect("contiguous rows");
            assert_eq!(got, matrix.select(Axis(0), &rows), "rows {:?}", &rows[..rows.len().min(4)]);
        }
        assert!(super::copy_rows(matrix.t(), &[0]).is_none(), "a transpose's rows are not contiguous");
    }
}
