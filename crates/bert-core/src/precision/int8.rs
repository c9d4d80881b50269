//! Weight-only int8: each dense layer's weight `[out,in]` quantized symmetrically, one scale per
//! output channel (row), and used dequantized; the activations stay in float. The rule, stated
//! once (`scripts/dump_reference.py --weights int8` follows it in NumPy, float32 throughout):
//!
//! ```text
//! scale = max(|w[o,:]|) / 127          (float32)
//! q     = clip(round(w / scale), -127, 127), ties to even
//! w'    = q · scale                    (float32); a row of zeros stays zeros
//! ```

/// `row` (one output channel's weights) quantized to int8 and back, in place; returns the scale.
pub fn quantize_row(row: &mut [f32]) -> f32 {
    // NumPy's max is NaN when a weight is: the whole row is then NaN, as there.
    let largest = row.iter().fold(0f32, |m, w| if m.is_nan() || w.is_nan() { f32::NAN } else { m.max(w.abs()) });
    let scale = largest / 127.0;
    if scale == 0.0 {
        // A row of zeros, or of weights too small for a scale: +0, as NumPy's `where` gives.
        row.fill(0.0);
        return 0.0;
    }
    for w in row {
        *w = rint(*w / scale).clamp(-127.0, 127.0) * scale;
    }
    scale
}

/// `x` rounded to the nearest integer, ties to even, for |x| up to 2²²: adding 1.5·2²³ leaves no
/// bits below the units, so float32's own rounding (to nearest, ties to even) does it, in two
/// additions a vector unit runs, where `round_ties_even` is a library call on a CPU without
/// SSE4.1's `roundps` (Rust's baseline x86-64). A row's |w| / scale is at most 127.
fn rint(x: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0;
    // On the magnitude, the sign put back: -0.4 rounds to -0, as NumPy's `rint` gives it.
    ((x.abs() + SHIFT) - SHIFT).copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rint_rounds_ties_to_even_as_the_library_does() {
        for i in -2540..=2540 {
            let x = i as f32 / 20.0 + if i % 7 == 0 { 0.0 } else { 1e-3 };
            assert_eq!(rint(x).to_bits(), x.round_ties_even().to_bits(), "{x}");
        }
        assert_eq!((rint(0.5), rint(1.5), rint(-0.5), rint(-2.5)), (0.0, 2.0, -0.0, -2.0));
    }

    #[test]
    fn a_row_takes_127_steps_of_its_largest_weight() {
        let mut row = [0.5f32, -1.27, 0.004, 0.0];
        let scale = quantize_row(&mut row);
        assert_eq!(scale, 1.27f32 / 127.0);
        // 0.5 / 0.01 = 50 (49.999... in f32 rounds to 50); 0.004 / 0.01 = 0.4 rounds to 0.
        let expected = [50.0 * scale, -127.0 * scale, 0.0, 0.0];
        assert_eq!(row, expected, "expected {expected:?}, got {row:?}");
        let mut zeros = [0f32, -0.0, 1e-45];
        assert_eq!(quantize_row(&mut zeros), 0.0);
        assert!(zeros.iter().all(|z| z.to_bits() == 0), "+0 everywhere, got {zeros:?}");
        let mut broken = [1.0f32, f32::NAN];
        quantize_row(&mut broken);
        assert!(broken.iter().all(|w| w.is_nan()), "a NaN makes the row NaN, got {broken:?}");
    }
}
