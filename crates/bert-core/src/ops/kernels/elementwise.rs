//! The fast kernels of the row-wise and element-wise operations: softmax over a row, LayerNorm
//! of a row, the two GELUs, and the pooler's tanh. Each is a plain loop over a slice that the compiler vectorizes
//! (see `simd.rs`), run on the pool's threads when there is enough of it.
//!
//! They compute the same formulas as the reference operations in `ops/`, with these differences
//! of method, each a few f32 ulp at most: `exp`, `erf` and `tanh` are branch-free polynomial or
//! rational approximations rather than calls into a maths library, LayerNorm's mean and variance
//! are summed in f64, the exact GELU is computed in f64 and rounded once (below x ≈ -4, where
//! the GELU is under 1e-4, its error is instead at most 1.6e-12 · |x|), the pooler's tanh is
//! std's f64 `tanh` rounded once, and softmax is computed in f64 and rounded once.

use super::simd::{self, lane_sum, vectorized, LANES};
use super::threads::{self, PARALLEL_MIN_LEN};

/// Softmax of every `row_len`-long row of `values`, in place; the rows are shared between the
/// threads once there are enough of them.
pub(crate) fn softmax_rows(values: &mut [f32], row_len: usize) {
    let min_rows = PARALLEL_MIN_LEN.div_ceil(row_len.max(1));
    threads::for_each_part(values, row_len, min_rows, |_, rows| {
        let mut exps = vec![0.0f64; row_len];
        for row in rows.chunks_exact_mut(row_len) {
            softmax_row(row, &mut exps);
        }
    });
}

vectorized! {
    /// softmax(x)_j = exp(x_j - max x) / Σ_k exp(x_k - max x); subtracting the max avoids
    /// overflow and makes the padded keys' f32::MIN scores come out as exactly 0.
    ///
    /// In f64 and rounded once, each value the f32 rounding of a number within 2e-11 (relative)
    /// of the exact softmax of the row: x_j - max in f64 is exact or rounded once (2^-53), and
    /// [`simd::exp_f64`] is low by between 0 and 1e-11 of itself, for the numerator and for every
    /// term of the sum alike, so that their ratio is off by at most about 1e-11; the f64 sum of
    /// at most a few thousand terms in [0, 1] and the scaling add about 1e-13. The f32 version
    /// this replaced (an exp within 2 ulp, an f32 sum, a multiplication by 1 / Σ) left the
    /// probabilities' own rounding behind PyTorch's on 22 of 162 stages, in about 70% of this
    /// one's time (benchmarks/HISTORY.md, "Softmax in f64, rounded once"). `exps` holds the row's
    /// exponentials between the two passes.
    fn softmax_row(row: &mut [f32], exps: &mut [f64]) {
        let mut max = [f32::NEG_INFINITY; LANES];
        let mut chunks = row.chunks_exact(LANES);
        for chunk in &mut chunks {
            for (m, &v) in max.iter_mut().zip(chunk) {
                *m = m.max(v);
            }
        }
        let max = f64::from(chunks.remainder().iter().chain(&max).copied().fold(f32::NEG_INFINITY, f32::max));

        let mut sum = [0.0f64; LANES];
        let mut chunks = row.chunks_exact(LANES).zip(exps.chunks_exact_mut(LANES));
        for (chunk, exps) in &mut chunks {
            for ((s, e), &v) in sum.iter_mut().zip(exps).zip(chunk) {
                *e = simd::exp_f64(f64::from(v) - max);
                *s += *e;
            }
        }
        let done = row.len() / LANES * LANES;
        let mut tail = 0.0;
        for (e, &v) in exps[done..].iter_mut().zip(&row[done..]) {
            *e = simd::exp_f64(f64::from(v) - max);
            tail += *e;
        }
        let inv_sum = 1.0 / (sum.iter().sum::<f64>() + tail);
        for (v, &e) in row.iter_mut().zip(exps.iter()) {
            *v = (e * inv_sum) as f32;
        }
    }
}

/// LayerNorm of every `weight.len()`-long row of `values`, in place.
pub(crate) fn layer_norm_rows(values: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
    for row in values.chunks_exact_mut(weight.len()) {
        layer_norm_row(row, weight, bias, eps);
    }
}

vectorized! {
    /// One row: the statistics, then (x - mean) · inv_std · weight + bias.
    fn layer_norm_row(row: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
        let (mean, var) = mean_var(row);
        let inv_std = 1.0 / (var + eps).sqrt();
        for ((v, w), b) in row.iter_mut().zip(weight).zip(bias) {
            *v = (*v - mean) * inv_std * w + b;
        }
    }
}

/// Mean and biased variance of one row, summed in f64 so long rows lose no precision, with
/// `lane_sum`'s interleaved partial sums (which the compiler keeps in vector registers).
#[inline(always)]
fn mean_var(row: &[f32]) -> (f32, f32) {
    let n = row.len() as f64;
    let mean = lane_sum(row, |v| v as f64) / n;
    let var = lane_sum(row, |v| (v as f64 - mean) * (v as f64 - mean)) / n;
    (mean as f32, var as f32)
}

/// Exact GELU of every value, in place, the values shared between the threads.
pub(crate) fn gelu(values: &mut [f32]) {
    threads::for_each_part(values, LANES, PARALLEL_MIN_LEN / LANES, |_, part| gelu_slice(part));
}

/// Tanh GELU of every value, in place, the values shared between the threads.
pub(crate) fn gelu_tanh(values: &mut [f32]) {
    threads::for_each_part(values, LANES, PARALLEL_MIN_LEN / LANES, |_, part| gelu_tanh_slice(part));
}

vectorized! {
    /// In f64 and rounded once, because an f32 GELU's error is biased: its rounding of 1 / √2
    /// and its erf's errors lean one way, and the next dense layer sums thousands of them (I =
    /// 3,072 in bert-base). The f32 version this replaced left MiniLM's float32 farther from
    /// the float64 truth than PyTorch's on many more stages, for about 1.5% less time at 128
    /// tokens (benchmarks/HISTORY.md, "The exact GELU in f64, rounded once").
    fn gelu_slice(values: &mut [f32]) {
        for v in values {
            let x = f64::from(*v);
            *v = (0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2))) as f32;
        }
    }
}

vectorized! {
    fn gelu_tanh_slice(values: &mut [f32]) {
        const SQRT_2_OVER_PI: f32 = 0.797_884_6;
        for v in values {
            let x = *v;
            *v = 0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)));
        }
    }
}

/// The exact GELU's backward, in place over `d` (d loss / d out on entry, d loss / d x on
/// return): d · (Φ(x) + x · φ(x)), the values shared between the threads.
pub(crate) fn gelu_backward(x: &[f32], d: &mut [f32]) {
    assert_eq!(x.len(), d.len(), "one gradient per input");
    threads::for_each_part(d, LANES, PARALLEL_MIN_LEN / LANES, |first, part| {
        gelu_backward_slice(&x[first * LANES..][..part.len()], part)
    });
}

vectorized! {
    /// Φ(x) = (1 + erf(x / √2)) / 2 by the forward's f64 erf, and φ(x) = e^{-x²/2} / √(2π) by
    /// [`simd::exp_f64`] (within 1e-11 of itself; -x²/2 is exact in f64 for an f32 x), the rest
    /// in f64, rounded once. Below x ≈ -3 the formula in f32 loses digits in 1 + erf(x / √2), a
    /// small difference of numbers near 1; this keeps them down to x ≈ -5.5. Φ is then off by at
    /// most erf's 1.6e-12 / 2 absolute, which below x ≈ -6.5 is more than the GELU's derivative
    /// itself (under 1e-10 there).
    fn gelu_backward_slice(x: &[f32], d: &mut [f32]) {
        for (d, &v) in d.iter_mut().zip(x) {
            let x = f64::from(v);
            let cdf = 0.5 * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2));
            let pdf = simd::exp_f64(-0.5 * x * x) * INV_SQRT_2PI;
            *d = (f64::from(*d) * (cdf + x * pdf)) as f32;
        }
    }
}

/// 1 / √(2π), the normal density's factor.
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// erf(x) for f64, within 3.2e-12 of the exact value, as x · P(x²) / Q(x²), a ratio of
/// polynomials of degree 9 and 7 in x² fitted to erf on [-5, 5] by `scripts/fit_erf.py`, which
/// prints [`ERF_P`] and [`ERF_Q`]. P's constant term, the last of [`ERF_P`], is close to 2 / √π,
/// erf's slope at 0. Outside [-5, 5], erf is ±1 within 1.6e-12, so x is clamped there.
///
/// Each Horner step is one `mul_add`, which rounds once on every instruction set, so that the
/// AVX-512, AVX2 and plain builds give the same bits. (An x86-64 CPU without FMA runs the plain
/// build, where each `mul_add` is a call into libm's software fma: correct, and slow.)
#[inline(always)]
pub(crate) fn erf(x: f64) -> f64 {
    let x = x.clamp(-5.0, 5.0);
    let t = x * x;
    x * polynomial(t, &ERF_P) / polynomial(t, &ERF_Q)
}

/// erf's numerator P(t) and denominator Q(t), from the highest power of t to the constant.
const ERF_P: [f64; 10] = [
    1.153_783_708_990_121_5e-13,
    -4.112_143_081_416_333_7e-11,
    1.322_759_585_058_423e-8,
    1.443_299_374_509_791_3e-6,
    2.763_704_681_502_685e-5,
    5.992_201_969_034_947e-4,
    5.190_685_639_753_479e-3,
    5.974_303_305_219_37e-2,
    1.987_839_848_640_218e-1,
    1.128_379_167_122_835_6,
];
const ERF_Q: [f64; 8] = [
    1.982_898_061_549_182_7e-7,
    6.676_493_537_481_19e-6,
    1.357_058_885_378_212_7e-4,
    1.883_109_904_871_227_9e-3,
    1.838_607_677_850_574e-2,
    1.227_795_652_691_275_5e-1,
    5.095_010_536_474_474e-1,
    1.0,
];

/// The polynomial with these coefficients (highest power first) at t, by Horner's rule.
#[inline(always)]
fn polynomial(t: f64, coefficients: &[f64]) -> f64 {
    coefficients[1..].iter().fold(coefficients[0], |sum, &c| sum.mul_add(t, c))
}

/// tanh of every value, computed in f64 and rounded to f32 once: the pooler's activation, a few
/// hundred values a pass, where std's f32 `tanh` is within about an ulp and left the pooler's own
/// rounding behind PyTorch's (BENCHMARKS.md).
pub(crate) fn tanh_rounded(values: &mut [f32]) {
    for v in values {
        *v = (*v as f64).tanh() as f32;
    }
}

/// tanh(x) = 1 - 2 / (e^{2x} + 1), with the branch-free [`simd::exp`]; e^{2x} overflowing to
/// +inf gives exactly 1, and underflowing to 0 gives exactly -1.
#[inline(always)]
pub(crate) fn tanh(x: f32) -> f32 {
    1.0 - 2.0 / (simd::exp(2.0 * x) + 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest |approximation - reference| over [-10, 10].
    fn worst(approx: impl Fn(f32) -> f32, reference: impl Fn(f32) -> f32) -> f32 {
        (-10_000..=10_000).map(|i| i as f32 * 1e-3).map(|x| (approx(x) - reference(x)).abs()).fold(0.0, f32::max)
    }

    /// Whether each probability of `row` is the f32 rounding of a number within 2e-11 (relative)
    /// of the row's softmax computed in f64 with std's exp; returns how many are subnormal.
    fn check_softmax(row: &[f32], what: &str) -> usize {
        let max = f64::from(row.iter().copied().fold(f32::NEG_INFINITY, f32::max));
        let exps: Vec<f64> = row.iter().map(|&v| (f64::from(v) - max).exp()).collect();
        let sum: f64 = exps.iter().sum();
        let mut got = row.to_vec();
        softmax_rows(&mut got, row.len());
        for (j, (&g, &e)) in got.iter().zip(&exps).enumerate() {
            let want = e / sum;
            let (low, high) = ((want * (1.0 - 2e-11)) as f32, (want * (1.0 + 2e-11)) as f32);
            assert!(low <= g && g <= high, "{what}, [{j}]: want {want:e}, got {g:e}");
        }
        got.iter().filter(|g| **g != 0.0 && !g.is_normal()).count()
    }

    /// Rows around the vector width and up to 512 long (one attention row at BERT's longest
    /// input), a padded key in those longer than 3, and scores spread over [-12, 12] or over
    /// [-60, 60], where some probabilities are subnormal.
    #[test]
    fn softmax_is_the_f64_softmax_rounded_once() {
        let mut subnormal = 0;
        for len in [1, 2, 15, 16, 17, 100, 512] {
            for seed in 0..40 {
                let spread = if seed % 2 == 0 { 12.0 } else { 60.0 };
                let mut row: Vec<f32> = (0..len)
                    .map(|i| ((i * 7_919 + seed * 104_729) % 10_007) as f32 / 10_007.0 * 2.0 * spread - spread)
                    .collect();
                if len > 3 {
                    row[len / 2] = f32::MIN;
                }
                subnormal += check_softmax(&row, &format!("len {len}, seed {seed}"));
            }
        }
        assert!(subnormal > 0, "some probabilities are subnormal");
    }

    /// Rows where exp's errors weigh most: many scores ln 2 / 2 below the largest, where the
    /// polynomial is furthest below e^x, so that the sum is low and the largest score's
    /// probability high, and the reverse; and a reviewer's row where a polynomial of degree 8,
    /// whose errors change sign with r, put a probability 4.2e-10 off.
    #[test]
    fn softmax_where_the_exps_errors_weigh_most() {
        let mut rows = vec![vec![0.0f32; 1_001], vec![0.0f32; 1_001]];
        rows[0][1..].fill(-0.346_573_5);
        rows[1][1_000] = -0.346_573_5;
        let mut reviewer = vec![0.0f32];
        reviewer.extend(std::iter::repeat_n(-0.346_573_68_f32, 200));
        reviewer.extend([-0.346_573_5_f32, -3.184_95]);
        rows.push(reviewer);
        for (i, row) in rows.iter().enumerate() {
            check_softmax(row, &format!("row {i}"));
        }
    }

    #[test]
    fn tanh_is_close_to_std() {
        assert!(worst(tanh, f32::tanh) < 5e-7, "tanh {}", worst(tanh, f32::tanh));
    }

    /// The fit's stated bound, over [-8, 8] in steps of 1e-5 (beyond ±5 the clamp's error).
    #[test]
    fn erf_is_within_its_bound_of_libm() {
        let worst = (-800_000..=800_000)
            .map(|i| i as f64 * 1e-5)
            .map(|x| (x, (erf(x) - libm::erf(x)).abs()))
            .fold((0.0, 0.0), |a, b| if b.1 > a.1 { b } else { a });
        assert!(worst.1 < 3.2e-12, "erf({}) is {:e} from libm's", worst.0, worst.1);
    }

    /// Each GELU value is at most half an f32 ulp from the f64 GELU (libm's erf), plus the
    /// erf's 3.2e-12 · |x| / 2, which only matters below x ≈ -4 (at x = -9.5 the exact GELU is
    /// -1.2e-20 and the kernel's -1.05e-11, the clamped erf's 1 + erf(-5)). Every value of [-10,
    /// 10] in steps of 1e-4, the f32s around 0 with their signs, and the non-finite ones.
    #[test]
    fn gelu_is_within_half_an_ulp_and_the_erfs_error_of_the_f64_gelu() {
        let mut xs: Vec<f32> = (-100_000..=100_000).map(|i| i as f32 * 1e-4).collect();
        xs.extend([f32::MIN_POSITIVE, -f32::MIN_POSITIVE, 1e-30, -1e-30, 0.0, -0.0, 40.0, -40.0]);
        let mut got = xs.clone();
        gelu(&mut got);
        for (&x, &y) in xs.iter().zip(&got) {
            let x64 = f64::from(x);
            let want = 0.5 * x64 * (1.0 + libm::erf(x64 * std::f64::consts::FRAC_1_SQRT_2));
            let half_ulp = f64::from(((want as f32).abs().next_up() - (want as f32).abs()) / 2.0);
            let bound = half_ulp + 1.6e-12 * x64.abs();
            assert!((f64::from(y) - want).abs() <= bound, "gelu({x}): want {want:e}, got {y:e}");
        }
        for (x, &y) in xs.iter().zip(&got).filter(|(x, _)| **x == 0.0) {
            assert_eq!(y.to_bits(), x.to_bits(), "gelu({x:?}) keeps the sign of zero");
        }
        // -inf stays -inf: the clamped erf leaves 1 + erf a tiny positive number, where the
        // reference's erff(-inf) = -1 gives -inf · 0 = NaN. Either way the trace is not finite.
        let mut odd = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
        gelu(&mut odd);
        assert!(
            odd[0].is_nan() && odd[1] == f32::INFINITY && odd[2] == f32::NEG_INFINITY,
            "gelu of NaN, inf, -inf: {odd:?}"
        );
    }
}
