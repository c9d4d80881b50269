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
    let scale = row.iter().fold(0f32, |m, w| m.max(w.abs())) / 127.0;
    if scale == 0.0 {
        return 0.0;
    }
    for w in row {
        *w = (*w / scale).round_ties_even().clamp(-127.0, 127.0) * scale;
    }
    scale
}

/// Every row of a `[rows, len / rows]` weight, in place.
pub fn quantize_rows(values: &mut [f32], rows: usize) {
    let width = values.len() / rows.max(1);
    if width == 0 {
        return;
    }
    for row in values.chunks_mut(width) {
        quantize_row(row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_takes_127_steps_of_its_largest_weight() {
        let mut row = [0.5f32, -1.27, 0.004, 0.0];
        let scale = quantize_row(&mut row);
        assert_eq!(scale, 1.27f32 / 127.0);
        // 0.5 / 0.01 = 50 (49.999... in f32 rounds to 50); 0.004 / 0.01 = 0.4 rounds to 0.
        let expected = [50.0 * scale, -127.0 * scale, 0.0, 0.0];
        assert_eq!(row, expected, "expected {expected:?}, got {row:?}");
        let mut zeros = [0f32; 3];
        assert_eq!(quantize_row(&mut zeros), 0.0);
        assert_eq!(zeros, [0.0; 3]);
    }
}
