//! Dropout's mask: which elements a training step drops, drawn from a seed.

use ndarray::{Array, Dimension};

use super::kernels::dropout_mask as kernel;
use super::{fast, Float};
use crate::objectives::splitmix::SplitMix64;

/// A mask of `shape`: each element 0 with probability `p`, else 1/(1-p) (rounded to `F`, as
/// PyTorch rounds its scale to the tensor's type). Element i, in row-major order, is dropped when
/// the (i+1)-th uniform of SplitMix64's stream from `seed` is below p, so the mask depends on the
/// seed alone: the same on every machine, thread count and kernel. `p` is a rate in [0, 1), as
/// the training options check; for any other value every kernel gives the formula's result.
pub fn dropout_mask<F: Float, D: Dimension>(seed: u64, p: f64, shape: D) -> Array<F, D> {
    F::dropout_mask(seed, p, shape)
}

/// [`dropout_mask`] on f32, by the fast kernel: the same bits, drawn on every thread.
pub(super) fn dropout_mask_f32<D: Dimension>(seed: u64, p: f64, shape: D) -> Array<f32, D> {
    // A rate outside [0, 1), which no run accepts, is left to the formula.
    if fast() && (0.0..1.0).contains(&p) {
        let mut mask = Array::<f32, D>::zeros(shape);
        let kept = f32::of(1.0 / (1.0 - p));
        kernel::draw(seed, p, kept, mask.as_slice_mut().expect("a new array is contiguous"));
        return mask;
    }
    dropout_mask_reference(seed, p, shape)
}

/// The formula: one uniform after the other, each element dropped when its uniform is below p.
pub fn dropout_mask_reference<F: Float, D: Dimension>(seed: u64, p: f64, shape: D) -> Array<F, D> {
    let kept = F::of(1.0 / (1.0 - p));
    let mut stream = SplitMix64::new(seed);
    Array::from_shape_simple_fn(shape, || if stream.uniform() < p { F::zero() } else { kept })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{with_kernels, Kernels};

    /// The kernel's masks are the formula's, bit for bit: at lengths below, at and across the
    /// threads' split and the vector width, and at rates from none to nearly all. (A draw at the
    /// threshold itself is tested in `kernels/dropout_mask.rs`.)
    #[test]
    fn the_kernel_draws_the_formulas_masks() {
        for len in [0, 1, 15, 16, 17, 1000, (1 << 15) - 1, 1 << 15, (1 << 16) + 3, 200_001] {
            for p in [0.0, 0.1, 0.5, 0.3, 0.999_999] {
                for seed in [0, 7, u64::MAX] {
                    let want: ndarray::Array1<f32> = dropout_mask_reference(seed, p, ndarray::Ix1(len));
                    let got: ndarray::Array1<f32> =
                        with_kernels(Kernels::Fast, || dropout_mask(seed, p, ndarray::Ix1(len)));
                    let differ = want.iter().zip(&got).position(|(w, g)| w.to_bits() != g.to_bits());
                    assert!(differ.is_none(), "len {len}, p {p}, seed {seed}: element {differ:?} differs");
                }
            }
        }
        // The rate is what was asked: about a tenth of a million elements dropped at p = 0.1.
        let mask: ndarray::Array1<f32> = dropout_mask(3, 0.1, ndarray::Ix1(1_000_000));
        let dropped = mask.iter().filter(|&&v| v == 0.0).count();
        assert!((99_000..101_000).contains(&dropped), "{dropped} of 1,000,000 dropped at p = 0.1");
        assert!(mask.iter().all(|&v| v == 0.0 || v == f32::of(1.0 / 0.9)));
    }
}
