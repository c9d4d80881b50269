//! Dropout's mask (`ops::dropout_mask`), drawn on every thread and in vector registers: a
//! training step of the course models draws 18 million of these a step, which one thread drew
//! at about 3 ns each, a twentieth of the step.
//!
//! Each element's number is known from its place in SplitMix64's stream (`SplitMix64::after`),
//! so every part of the mask starts where its first draw is, and the mask is the same bits
//! whatever the thread count or vector width.

use super::simd::{vectorized, LANES};
use super::threads::{self, PARALLEL_MIN_LEN};
use crate::objectives::splitmix::SplitMix64;

/// 2^53: a uniform is a 53-bit whole number u scaled by 2^-53.
const TWO_53: f64 = (1u64 << 53) as f64;

/// `values[i]` = 0 when the (i+1)-th uniform of the stream from `seed` is below `p`, else
/// `kept`.
///
/// The comparison is made in whole numbers: u · 2^-53 < p exactly when u < ⌈p · 2^53⌉, since
/// both scalings by a power of two are exact, and a whole number is below a real t exactly when
/// it is below ⌈t⌉.
pub(crate) fn draw(seed: u64, p: f64, kept: f32, values: &mut [f32]) {
    assert!((0.0..1.0).contains(&p), "a rate in [0, 1)");
    let below = threshold(p);
    threads::for_each_part(values, LANES, PARALLEL_MIN_LEN / LANES, |first, part| {
        draw_part(seed, (first * LANES) as u64, below, kept, part)
    });
}

/// ⌈p · 2^53⌉: the 53-bit whole numbers below it, and only they, are uniforms below `p`.
fn threshold(p: f64) -> u64 {
    (p * TWO_53).ceil() as u64
}

vectorized! {
    /// The elements from `first` on: the compiler keeps eight of the stream's states in a
    /// vector register (AVX-512 multiplies 64-bit lanes).
    fn draw_part(seed: u64, first: u64, below: u64, kept: f32, values: &mut [f32]) {
        for (i, v) in values.iter_mut().enumerate() {
            let bits = SplitMix64::after(seed, first + i as u64).next_u64();
            *v = if bits >> 11 < below { 0.0 } else { kept };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A draw falls exactly at the threshold once in 2^53, so the masks' test cannot reach it:
    /// here the whole numbers on either side of it are turned into uniforms as
    /// `SplitMix64::uniform` does, and compared with p as the formula compares them.
    #[test]
    fn the_threshold_parts_the_uniforms_below_p_from_the_others() {
        let uniform = |u: u64| u as f64 * (1.0 / TWO_53);
        for p in [0.0, 0.1, 0.3, 0.5, 0.999_999, 1e-300, f64::MIN_POSITIVE, 1.0 - f64::EPSILON / 2.0, 0.25 + 1e-17] {
            let t = threshold(p);
            if t > 0 {
                assert!(uniform(t - 1) < p, "p = {p}: {} is below it", t - 1);
            }
            if t < 1 << 53 {
                assert!(uniform(t) >= p, "p = {p}: {t} is not below it");
            }
        }
    }
}
