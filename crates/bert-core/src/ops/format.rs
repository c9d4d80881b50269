//! The two 16-bit formats a BERT is deployed in, and rounding to them: bfloat16 (float32's
//! 8-bit exponent, 8 bits of significand) and float16 (IEEE half: 5-bit exponent, 11 bits of
//! significand, largest 65504). A pass simulated in one (`crate::precision`) runs in f32 with
//! the format set on its thread ([`with_format`]); an operation that makes more than one of
//! PyTorch's tensors rounds the ones inside it with [`narrow`], which is the identity in any
//! other pass.

use std::cell::Cell;

use serde::{Deserialize, Serialize};

use super::Float;

/// A narrower float format a pass is simulated in. Its values are held in f32, every one
/// exactly a value of the format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `torch.bfloat16`: float32's range, 8 significant bits (unit roundoff 2⁻⁸ ≈ 0.0039).
    Bfloat16,
    /// `torch.float16`: 11 significant bits (unit roundoff 2⁻¹¹ ≈ 0.00049), largest 65504.
    Float16,
}

impl Format {
    /// `x` rounded to the nearest value of the format, ties to even, as PyTorch's `.to(dtype)`
    /// rounds: beyond the largest finite value it becomes an infinity; a NaN stays a NaN.
    pub fn round(self, x: f32) -> f32 {
        match self {
            Format::Bfloat16 => half::bf16::from_f32(x).to_f32(),
            Format::Float16 => half::f16::from_f32(x).to_f32(),
        }
    }

    /// Every value of `values` rounded as [`Format::round`] rounds it, in place: bfloat16 by
    /// adding half a unit (less one, then the evenness bit) to the bits and cutting the low 16,
    /// which the compiler turns into vector instructions; float16 by `half`'s conversions of
    /// whole runs, which use the CPU's F16C instructions where it has them.
    pub fn round_slice(self, values: &mut [f32]) {
        match self {
            Format::Bfloat16 => {
                for v in values.iter_mut() {
                    let bits = v.to_bits();
                    let rounded = f32::from_bits(bits.wrapping_add(0x7FFF + ((bits >> 16) & 1)) & 0xFFFF_0000);
                    *v = if v.is_nan() { *v } else { rounded };
                }
            }
            Format::Float16 => {
                use half::slice::HalfFloatSliceExt;
                let mut held = [half::f16::ZERO; 256];
                for run in values.chunks_mut(held.len()) {
                    let held = &mut held[..run.len()];
                    held.convert_from_f32_slice(run);
                    held.convert_to_f32_slice(run);
                }
            }
        }
    }

    /// The smallest magnitude that rounds to an infinity: half a unit above the largest finite
    /// value, where a tie rounds to the even neighbour, the infinity.
    pub fn overflows_at(self) -> f32 {
        match self {
            Format::Bfloat16 => f32::from_bits(0x7F7F_8000),
            Format::Float16 => 65520.0,
        }
    }

    /// The largest finite value.
    pub fn max(self) -> f32 {
        match self {
            Format::Bfloat16 => half::bf16::MAX.to_f32(),
            Format::Float16 => half::f16::MAX.to_f32(),
        }
    }

    /// `torch.finfo(dtype).min`, the most negative finite value: what HF's attention mask adds
    /// to a padding key's score in this format.
    pub fn lowest(self) -> f32 {
        -self.max()
    }

    /// Significant bits, the implicit one included.
    pub fn digits(self) -> i32 {
        match self {
            Format::Bfloat16 => 8,
            Format::Float16 => 11,
        }
    }

    /// The unit roundoff, 2^-digits: the largest relative error of one rounding of a normal value.
    pub fn unit_roundoff(self) -> f64 {
        2f64.powi(-self.digits())
    }

    /// The spacing of the format's values at `x` (one unit in the last place), subnormals
    /// included; None for a value that is not finite.
    pub fn ulp(self, x: f64) -> Option<f64> {
        if !x.is_finite() {
            return None;
        }
        let min_exponent = match self {
            Format::Bfloat16 => -126,
            Format::Float16 => -14,
        };
        let exponent = if x == 0.0 { min_exponent } else { (x.abs().log2().floor() as i32).max(min_exponent) };
        Some(2f64.powi(exponent - (self.digits() - 1)))
    }

    /// PyTorch's name of the format, as a manifest and `torch` spell it.
    pub fn torch_name(self) -> &'static str {
        match self {
            Format::Bfloat16 => "bfloat16",
            Format::Float16 => "float16",
        }
    }
}

thread_local! {
    /// The format the pass on this thread is simulated in. The operations read it on the
    /// thread that calls them, the pass's own, as they read their kernels.
    static ACTIVE: Cell<Option<Format>> = const { Cell::new(None) };
}

/// Runs `work` with [`narrow`] rounding to `format` on this thread (nothing, for None).
pub fn with_format<R>(format: Option<Format>, work: impl FnOnce() -> R) -> R {
    /// Puts the previous format back, also when `work` panics.
    struct Restore(Option<Format>);
    impl Drop for Restore {
        fn drop(&mut self) {
            ACTIVE.set(self.0);
        }
    }
    let _restore = Restore(ACTIVE.replace(format));
    work()
}

/// The format of the simulated pass running on this thread, if any.
pub fn active() -> Option<Format> {
    ACTIVE.get()
}

/// `x` rounded to the simulated pass's format, where PyTorch's forward in that format makes a
/// tensor inside one stage; `x` itself in any other pass.
pub fn narrow<F: Float, D: ndarray::Dimension>(mut x: ndarray::Array<F, D>) -> ndarray::Array<F, D> {
    if let Some(format) = active() {
        x.mapv_inplace(|v| F::of(f64::from(format.round(v.to_f32().unwrap_or(f32::NAN)))));
    }
    x
}

/// The most negative value of the pass's format, `torch.finfo(dtype).min`: `F`'s own, or the
/// simulated format's.
pub fn lowest<F: Float>() -> F {
    active().map_or(F::min_value(), |format| F::of(f64::from(format.lowest())))
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.torch_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each case: the format, the float32 given, what it rounds to (worked out by hand from the
    /// bits, not by the code under test).
    #[test]
    fn rounds_to_nearest_even_and_overflows_to_infinity() {
        let cases: &[(Format, f32, f32, &str)] = &[
            (Format::Bfloat16, 1.0 + 2f32.powi(-8), 1.0, "a tie goes to the even significand (down)"),
            (Format::Bfloat16, 1.0 + 3.0 * 2f32.powi(-8), 1.0 + 2f32.powi(-6), "a tie goes to the even (up)"),
            (Format::Bfloat16, 1.0 + 2f32.powi(-8) + 2f32.powi(-20), 1.0 + 2f32.powi(-7), "above a tie, up"),
            (Format::Bfloat16, f32::MAX, f32::INFINITY, "f32::MAX is beyond bfloat16's largest"),
            (Format::Bfloat16, f32::MIN, f32::NEG_INFINITY, "so is f32::MIN, which is why the mask uses lowest()"),
            (Format::Float16, 65504.0, 65504.0, "the largest float16"),
            (Format::Float16, 65519.0, 65504.0, "below the halfway point to 65536, down"),
            (Format::Float16, 65520.0, f32::INFINITY, "the halfway point rounds to even: infinity"),
            (Format::Float16, 2f32.powi(-24), 2f32.powi(-24), "the smallest subnormal"),
            (Format::Float16, 2f32.powi(-26), 0.0, "below half the smallest subnormal: zero"),
            (Format::Float16, 1.0 + 2f32.powi(-11), 1.0, "a tie at 1, to even"),
        ];
        for &(format, given, expected, why) in cases {
            let got = format.round(given);
            assert_eq!(
                got.to_bits(),
                expected.to_bits(),
                "{format} of {given:e}: expected {expected:e}, got {got:e} ({why})"
            );
        }
        assert!(Format::Float16.round(f32::NAN).is_nan());
        // The slice rounding is the one-value rounding, on every kind of value.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut values: Vec<f32> = (0..100_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                f32::from_bits(state as u32)
            })
            .chain(cases.iter().map(|c| c.1))
            .chain([f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.0])
            .collect();
        for format in [Format::Bfloat16, Format::Float16] {
            let expected: Vec<f32> = values.iter().map(|&v| format.round(v)).collect();
            let mut got = values.clone();
            format.round_slice(&mut got);
            for ((given, want), have) in values.iter().zip(&expected).zip(&got) {
                let same = want.to_bits() == have.to_bits() || (want.is_nan() && have.is_nan());
                assert!(
                    same,
                    "{format} of {given:e} ({:#x}): round gives {want:e}, round_slice {have:e}",
                    given.to_bits()
                );
            }
            let threshold = format.overflows_at();
            assert!(format.round(threshold).is_infinite() && format.round(threshold.next_down()).is_finite());
        }
        values.clear();
        assert_eq!(Format::Float16.lowest(), -65504.0);
        assert_eq!(Format::Bfloat16.ulp(1.0), Some(2f64.powi(-7)));
        assert_eq!(Format::Float16.ulp(1.5), Some(2f64.powi(-10)));
        assert_eq!(Format::Float16.ulp(0.0), Some(2f64.powi(-24)));
    }
}
