//! The four numbers a stage table shows for a tensor: min, mean, standard deviation and max, as
//! numpy's `a.min(), a.mean(), a.std(), a.max()` give them.
//!
//! A 512-token trace has about 155 million values, so the f32 sums are computed the fast way,
//! by the kernels below the operations (`ops/kernels/statistics.rs`): in f64, so that long sums
//! keep their digits, in blocks that the threads share and that are combined in block order, so
//! that the numbers do not depend on the thread count.

use crate::ops::{sum_min_max, sum_squared_deviations};

/// min, mean, population standard deviation (divided by n, numpy's default) and max.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub min: f64,
    pub mean: f64,
    pub std: f64,
    pub max: f64,
}

impl Summary {
    /// The summary of `values`, in any order (the order of memory serves as well as C order).
    ///
    /// Two passes, as numpy does it: the sum and the extremes, then the squared deviations from
    /// the mean, which keep their digits where a one-pass Σx² - n·mean² would cancel. As in
    /// numpy, a NaN anywhere makes all four NaN; no values give min +inf, max -inf and a mean
    /// and std of 0.
    pub fn of_f32(values: &[f32]) -> Summary {
        let n = values.len();
        if n == 0 {
            return Summary { min: f64::INFINITY, mean: 0.0, std: 0.0, max: f64::NEG_INFINITY };
        }
        let (sum, min, max) = sum_min_max(values);
        if sum.is_nan() && values.iter().any(|v| v.is_nan()) {
            return Summary { min: f64::NAN, mean: f64::NAN, std: f64::NAN, max: f64::NAN };
        }
        let mean = sum / n as f64;
        let squares = sum_squared_deviations(values, mean);
        Summary { min: min as f64, mean, std: (squares / n as f64).sqrt(), max: max as f64 }
    }

    /// The summary of f64 values (an f64 pass), one value at a time: the same two passes as
    /// [`Summary::of_f32`] without the blocks.
    pub fn of_f64(values: &[f64]) -> Summary {
        let n = values.len();
        if n == 0 {
            return Summary { min: f64::INFINITY, mean: 0.0, std: 0.0, max: f64::NEG_INFINITY };
        }
        if values.iter().any(|v| v.is_nan()) {
            return Summary { min: f64::NAN, mean: f64::NAN, std: f64::NAN, max: f64::NAN };
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let squares: f64 = values.iter().map(|&v| (v - mean) * (v - mean)).sum();
        Summary {
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            mean,
            std: (squares / n as f64).sqrt(),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }

    /// The summary of integer values (the input ids, types and mask: a few thousand values).
    pub fn of_i64(values: &[i64]) -> Summary {
        let n = values.len();
        if n == 0 {
            return Summary { min: f64::INFINITY, mean: 0.0, std: 0.0, max: f64::NEG_INFINITY };
        }
        let mean = values.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let squares: f64 = values.iter().map(|&v| (v as f64 - mean).powi(2)).sum();
        Summary {
            min: values.iter().copied().min().unwrap_or(0) as f64,
            mean,
            std: (squares / n as f64).sqrt(),
            max: values.iter().copied().max().unwrap_or(0) as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::kernels::threads::PARALLEL_MIN_LEN as BLOCK;

    /// The textbook formulas, one value at a time, in f64.
    fn plain(values: &[f32]) -> (f64, f64, f64, f64) {
        let n = values.len() as f64;
        let mean = values.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = values.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        let min = values.iter().copied().fold(f32::INFINITY, f32::min) as f64;
        let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        (min, mean, var.sqrt(), max)
    }

    #[test]
    fn matches_the_textbook_formulas() {
        // Lengths below one vector, between blocks and over several blocks (shared by the
        // threads); values far from zero, where a one-pass variance would lose its digits.
        for len in [1, 7, 16, 17, BLOCK - 1, BLOCK + 3, 5 * BLOCK + 11] {
            let values: Vec<f32> = (0..len).map(|i| 1000.0 + ((i * 7919) % 1000) as f32 / 997.0).collect();
            let got = Summary::of_f32(&values);
            let (min, mean, std, max) = plain(&values);
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1.0);
            assert!(got.min == min && got.max == max, "{len} values: min/max {got:?}, expected {min} / {max}");
            assert!(
                close(got.mean, mean) && close(got.std, std),
                "{len} values: {got:?}, expected mean {mean}, std {std}"
            );
        }
    }

    #[test]
    fn nan_spreads_to_all_four_as_in_numpy_but_infinities_do_not() {
        for values in [vec![1.0, f32::NAN, 3.0], vec![f32::NAN; 40_000]] {
            let got = Summary::of_f32(&values);
            assert!(got.min.is_nan() && got.mean.is_nan() && got.std.is_nan() && got.max.is_nan(), "{got:?}");
        }
        // numpy: min -inf, max inf, mean nan (inf - inf).
        let got = Summary::of_f32(&[f32::NEG_INFINITY, 0.0, f32::INFINITY]);
        assert_eq!((got.min, got.max), (f64::NEG_INFINITY, f64::INFINITY));
        assert!(got.mean.is_nan(), "{got:?}");
    }

    #[test]
    fn integers() {
        let got = Summary::of_i64(&[101, 2023, 102, 0]);
        let (min, mean, std, max) = plain(&[101.0, 2023.0, 102.0, 0.0]);
        assert_eq!((got.min, got.max), (min, max));
        assert!((got.mean - mean).abs() < 1e-12 && (got.std - std).abs() < 1e-9, "{got:?}");
    }
}
