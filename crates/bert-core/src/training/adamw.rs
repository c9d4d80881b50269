//! AdamW, exactly as `torch.optim.AdamW` computes it on the CPU (its single-tensor form, the one
//! PyTorch runs for parameters on the CPU), for every parameter at step t:
//!
//! ```text
//! θ ← θ · (1 − lr·λ)                         decoupled weight decay
//! m ← m + (1 − β1) · (g − m)                 torch's lerp: β1·m + (1 − β1)·g
//! v ← β2 · v + (1 − β2) · g²
//! θ ← θ − lr / (1 − β1^t) · m / (√v / √(1 − β2^t) + ε)
//! ```
//!
//! The scalars are computed in f64 as Python computes them, then used in the parameters' own
//! type, as PyTorch does with a Python float and a float32 tensor.

use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

use crate::ops::Float;

/// The hyperparameters, with `torch.optim.AdamW`'s defaults (the learning rate comes from the
/// schedule at each step).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> AdamWConfig {
        AdamWConfig { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 }
    }
}

/// The optimizer's state of one parameter: the running means of the gradient (`exp_avg`) and
/// of its square (`exp_avg_sq`), as PyTorch's `optimizer.state[p]` names them.
#[derive(Clone, Debug, PartialEq)]
pub struct Moments<F> {
    pub exp_avg: Vec<F>,
    pub exp_avg_sq: Vec<F>,
}

impl<F: Float> Moments<F> {
    pub fn zeros(len: usize) -> Moments<F> {
        Moments { exp_avg: vec![F::zero(); len], exp_avg_sq: vec![F::zero(); len] }
    }
}

/// Where an update left a value that is not finite: the element, which of the parameter's
/// arrays holds it, and the value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NonFiniteAt {
    pub index: usize,
    /// `value` (the parameter), `exp_avg` or `exp_avg_sq`.
    pub array: &'static str,
    pub value: f64,
}

/// One step of AdamW for one parameter: `theta` changes in place; `step` is t, counted from 1.
/// Every value the step writes is checked to be finite as it is written (no second pass over
/// the weights); the first that is not is returned, and nothing of a run that gets one may be
/// saved.
pub fn adamw_step<F: Float>(
    theta: &mut [F],
    grad: &[F],
    moments: &mut Moments<F>,
    config: &AdamWConfig,
    lr: f64,
    step: u64,
) -> Result<(), NonFiniteAt> {
    assert!(theta.len() == grad.len() && grad.len() == moments.exp_avg.len(), "one gradient and state per value");
    let AdamWConfig { beta1, beta2, eps, weight_decay } = *config;
    let decay = F::of(1.0 - lr * weight_decay);
    let (one_minus_beta1, one_minus_beta2, beta2_f) = (F::of(1.0 - beta1), F::of(1.0 - beta2), F::of(beta2));
    let bias_correction1 = 1.0 - beta1.powi(step as i32);
    let bias_correction2_sqrt = F::of((1.0 - beta2.powi(step as i32)).sqrt());
    let step_size = F::of(lr / bias_correction1);
    let eps = F::of(eps);
    // Each value's update reads and writes that value alone, so the values are shared between
    // the threads (the results do not depend on how), and whether all stayed finite is gathered.
    let finite = AtomicBool::new(true);
    let part = crate::ops::part_len(theta.len());
    let parts: Vec<_> = theta
        .chunks_mut(part)
        .zip(grad.chunks(part))
        .zip(moments.exp_avg.chunks_mut(part).zip(moments.exp_avg_sq.chunks_mut(part)))
        .collect();
    crate::ops::for_each_item(parts, |((theta, grad), (m, v))| {
        let mut all_finite = true;
        for ((theta, &g), (m, v)) in theta.iter_mut().zip(grad).zip(m.iter_mut().zip(v.iter_mut())) {
            *theta *= decay;
            // torch's lerp with a weight below 0.5: m + w·(g − m), one fused multiply-add.
            *m = one_minus_beta1.mul_add(g - *m, *m);
            *v = *v * beta2_f + one_minus_beta2 * g * g;
            let denom = v.sqrt() / bias_correction2_sqrt + eps;
            *theta += -step_size * (*m / denom);
            // `&`, not `&&`: no branch in the loop.
            all_finite &= theta.is_finite() & m.is_finite() & v.is_finite();
        }
        if !all_finite {
            finite.store(false, Ordering::Relaxed);
        }
    });
    let finite = finite.into_inner();
    if finite {
        return Ok(());
    }
    let arrays: [(&'static str, &[F]); 3] =
        [("value", &*theta), ("exp_avg", &moments.exp_avg), ("exp_avg_sq", &moments.exp_avg_sq)];
    let (index, array, value) = (0..theta.len())
        .find_map(|i| arrays.iter().find(|(_, a)| !a[i].is_finite()).map(|(name, a)| (i, *name, a[i])))
        .expect("a value that is not finite was seen");
    Err(NonFiniteAt { index, array, value: value.to_f64().unwrap_or(f64::NAN) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first step moves every value by lr against its gradient's sign (m̂ = g and v̂ = g²,
    /// so m̂ / √v̂ = ±1), after the decay.
    #[test]
    fn the_first_step_is_lr_times_the_sign() {
        let config = AdamWConfig::default();
        let mut theta = vec![1.0f64, -2.0, 0.5];
        let grad = [0.3, -4.0, 1e-3];
        let mut moments = Moments::zeros(3);
        adamw_step(&mut theta, &grad, &mut moments, &config, 0.1, 1).unwrap();
        for ((got, before), g) in theta.iter().zip([1.0, -2.0, 0.5]).zip(grad) {
            let want = before * (1.0 - 0.1 * 0.01) - 0.1 * g / (g * g).sqrt();
            assert!((got - want).abs() < 1e-6, "expected {want}, got {got}");
        }
    }

    /// A parameter long enough to be shared between the threads is updated to the same bits as
    /// value by value (each alone, on one thread), and a value that is not finite in the last
    /// thread's part is still found and named.
    #[test]
    fn sharing_the_values_between_threads_changes_no_bit() {
        let len = 100_003;
        assert!(crate::ops::part_len(len) < len || crate::ops::threads() == 1, "the values are shared");
        let start: Vec<f32> = (0..len).map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0).collect();
        let grad: Vec<f32> = (0..len).map(|i| ((i * 53) % 97) as f32 / 48.0 - 1.0).collect();
        let config = AdamWConfig::default();
        let (mut shared, mut moments) = (start.clone(), Moments::zeros(len));
        let mut alone = start.clone();
        let mut alone_moments: Vec<Moments<f32>> = (0..len).map(|_| Moments::zeros(1)).collect();
        for step in 1..=3 {
            adamw_step(&mut shared, &grad, &mut moments, &config, 1e-3, step).unwrap();
            for (i, value) in alone.iter_mut().enumerate() {
                adamw_step(std::slice::from_mut(value), &grad[i..=i], &mut alone_moments[i], &config, 1e-3, step)
                    .unwrap();
            }
        }
        for (i, (s, a)) in shared.iter().zip(&alone).enumerate() {
            assert_eq!(s.to_bits(), a.to_bits(), "value {i}: {s} shared, {a} alone");
            assert_eq!(moments.exp_avg[i].to_bits(), alone_moments[i].exp_avg[0].to_bits(), "exp_avg {i}");
            assert_eq!(moments.exp_avg_sq[i].to_bits(), alone_moments[i].exp_avg_sq[0].to_bits(), "exp_avg_sq {i}");
        }
        let mut bad = grad.clone();
        bad[len - 2] = f32::INFINITY;
        let error = adamw_step(&mut shared, &bad, &mut moments, &config, 1e-3, 4).unwrap_err();
        assert_eq!((error.index, error.array), (len - 2, "value"), "{error:?}");
    }
}
