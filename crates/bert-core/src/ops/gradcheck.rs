//! The test of every backward rule: its gradient against a central finite difference of the
//! forward formula, in f64, on small random inputs (llm.c checks its GPT-2 backward the same
//! way, against PyTorch). The loss is Σ f(x) ⊙ R for a fixed random R, so that the backward
//! rule is handed d loss / d f(x) = R and must return d loss / d x.

use ndarray::{ArrayD, IxDyn};

/// Reproducible values in [-1, 1): a small linear congruential generator, so that the tests
/// need no random-number crate.
pub(crate) fn values(shape: &[usize], seed: u64) -> ArrayD<f64> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    ArrayD::from_shape_simple_fn(IxDyn(shape), || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    })
}

/// d (Σ f(x) ⊙ upstream) / d x by central differences, one element of x at a time.
pub(crate) fn numeric(f: impl Fn(&ArrayD<f64>) -> ArrayD<f64>, x: &ArrayD<f64>, upstream: &ArrayD<f64>) -> ArrayD<f64> {
    let h = 1e-6;
    let mut grad = ArrayD::zeros(x.raw_dim());
    for idx in 0..x.len() {
        let mut plus = x.clone();
        let mut minus = x.clone();
        plus.as_slice_mut().expect("standard layout")[idx] += h;
        minus.as_slice_mut().expect("standard layout")[idx] -= h;
        let loss = |y: ArrayD<f64>| (y * upstream).sum();
        grad.as_slice_mut().expect("standard layout")[idx] = (loss(f(&plus)) - loss(f(&minus))) / (2.0 * h);
    }
    grad
}

/// Fails with the first element where `got` and `expected` differ by more than
/// 1e-6 · (1 + |expected|), naming `what`.
pub(crate) fn assert_close(what: &str, got: &ArrayD<f64>, expected: &ArrayD<f64>) {
    assert_eq!(got.shape(), expected.shape(), "{what}: shapes");
    for ((index, g), e) in got.indexed_iter().zip(expected.iter()) {
        assert!((g - e).abs() <= 1e-6 * (1.0 + e.abs()), "{what} at {index:?}: expected {e}, got {g}");
    }
}
