//! A large array's copy, made by every thread: a pass that keeps every stage copies each one as
//! it is handed over (about 700 MB at 512 tokens of a bert-base-sized model), and one thread
//! alone copies at less than the memory's speed.

use ndarray::{Array, ArrayView, Dimension};

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
/// in C order are copied as one slice, by [`copy_of`]; others are gathered in C order.
pub(crate) fn c_order_copy<T: Copy + Send + Sync, D: Dimension>(view: &ArrayView<'_, T, D>) -> Array<T, D> {
    match view.as_slice() {
        Some(values) => Array::from_shape_vec(view.raw_dim(), copy_of(values)).expect("its shape"),
        None => view.as_standard_layout().into_owned(),
    }
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
}
