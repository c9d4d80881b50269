//! Element-wise loops compiled for the widest vector instructions the CPU has, and the
//! branch-free `exp` (f32) and `exp_f64` they share.
//!
//! A Rust binary for x86-64 may only assume SSE2 (4 floats per instruction). The CPUs that run
//! BERT have AVX2 (8 floats) and often AVX-512 (16 floats), but the compiler uses them only in
//! functions marked `#[target_feature(enable = ...)]`, and such a function may only be called
//! after checking that the CPU has those features. `vectorized!` writes that boilerplate: it
//! compiles one loop body three times and picks the best copy at run time.
//!
//! The loops themselves are plain Rust over slices; the compiler turns them into vector code
//! when each iteration is independent and branch-free. That is why [`exp`] below has no `if`,
//! and why reductions (sums, maxima) keep 16 partial results in an array instead of one.

/// Defines a function whose body is compiled for AVX-512, for AVX2 + FMA and for plain x86-64
/// (or just once, on other architectures), and which runs the best copy the CPU supports.
macro_rules! vectorized {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body

            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
                unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                {
                    // SAFETY: the CPU has every feature `avx512` is compiled for.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU has every feature `avx2` is compiled for.
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}
pub(crate) use vectorized;

/// Which copy `vectorized!` functions run on this CPU, by name.
pub(crate) fn vector_width() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            return "vector loops avx512";
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            return "vector loops avx2";
        }
    }
    "vector loops baseline"
}

/// How many values a reduction keeps side by side: one AVX-512 register of f32.
pub(crate) const LANES: usize = 16;

/// Σ f(v) over `values`, in f64, with [`LANES`] partial sums, which the compiler keeps in vector
/// registers; one running sum would force it to add the values one at a time, in order.
#[inline(always)]
pub(crate) fn lane_sum(values: &[f32], f: impl Fn(f32) -> f64) -> f64 {
    let mut partial = [0.0f64; LANES];
    let chunks = values.chunks_exact(LANES);
    let tail: f64 = chunks.remainder().iter().map(|&v| f(v)).sum();
    for chunk in chunks {
        for (p, &v) in partial.iter_mut().zip(chunk) {
            *p += f(v);
        }
    }
    partial.iter().sum::<f64>() + tail
}

/// e^x for f32, branch-free so that loops calling it vectorize; within 2 ulp of `f32::exp`.
///
/// x = n·ln2 + r with n an integer and |r| ≤ ln2/2, so e^x = 2^n · e^r: 2^n is built directly in
/// the float's exponent bits, and e^r comes from its Taylor polynomial to degree 7 (the last
/// term is below 2^-26 of the first). Below -87.3 the result would be subnormal; it is 0, as
/// for the f32::MIN scores of padded keys. Above 88.7, +inf.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split as Cephes does: 355/512, which has so few mantissa bits that n · LN2_HI is
    // exact, plus the small remainder (ln 2 - 355/512 is negative).
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 · 2^23 rounds a float of magnitude < 2^22 to an integer.
    const ROUND: f32 = 12_582_912.0;
    let clamped = x.clamp(-87.3, 88.7);
    let shifted = clamped * LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = (clamped - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    // `shifted` is 1.5 · 2^23 + n exactly, and the float's ulp there is 1, so its bits are those of
    // 1.5 · 2^23 plus n: n as an integer without a float-to-int conversion (`as i32` clamps
    // each lane on its own, which the compiler cannot vectorize). Then 2^n has n + 127 in the
    // exponent field.
    let n_bits = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    let two_n = f32::from_bits(n_bits.wrapping_add(127) << 23);
    let y = p * two_n;
    let y = if x < -87.3 { 0.0 } else { y };
    if x > 88.7 {
        f32::INFINITY
    } else {
        y
    }
}

/// e^x for f64, branch-free like [`exp`] so that loops calling it vectorize, within 1e-11 of
/// e^x relative: a three-thousandth of half an f32 ulp (at least 3e-8 relative), for softmax and
/// the GELU's backward, which round their results to f32 once.
///
/// The same reduction as [`exp`], x = n·ln2 + r with |r| ≤ ln2/2, in f64: ln 2 split as fdlibm
/// does (LN2_HI has 32 significant bits, so n · LN2_HI is exact for any n here), and e^r from its
/// Taylor polynomial to degree 9, whose left-out terms are all positive, so that the result is
/// never above e^x, and below it by at most 6.9e-12, or 9.8e-12 of e^r (at least 1 / √2). Each
/// Horner step is one `mul_add`, which rounds once on every instruction set, so every build
/// gives the same bits. Below -708 it is 0 (the exact value is at most 3.3e-308, and subnormal
/// below -708.4), and above 709 it is +inf (the exact value overflows above 709.8).
#[inline(always)]
pub(crate) fn exp_f64(x: f64) -> f64 {
    const LOG2_E: f64 = std::f64::consts::LOG2_E;
    const LN2_HI: f64 = 6.931_471_803_691_238e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    // Adding and subtracting 1.5 · 2^52 rounds an f64 of magnitude < 2^51 to an integer.
    const ROUND: f64 = 6_755_399_441_055_744.0;
    // 1/9!, 1/8!, ..., 1/1!, 1/0!: Taylor's coefficients from the highest power down.
    const TAYLOR: [f64; 10] = [
        2.755_731_922_398_589_3e-6,
        2.480_158_730_158_73e-5,
        1.984_126_984_126_984e-4,
        1.388_888_888_888_889e-3,
        8.333_333_333_333_333e-3,
        4.166_666_666_666_666_4e-2,
        1.666_666_666_666_666_6e-1,
        0.5,
        1.0,
        1.0,
    ];
    let clamped = x.clamp(-708.0, 709.0);
    let shifted = clamped.mul_add(LOG2_E, ROUND);
    let n = shifted - ROUND;
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, clamped));
    let p = TAYLOR[1..].iter().fold(TAYLOR[0], |sum, &c| sum.mul_add(r, c));
    // As in [`exp`]: `shifted`'s bits are those of 1.5 · 2^52 plus n, and 2^n has n + 1023 in
    // the exponent field.
    let n_bits = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    let two_n = f64::from_bits(n_bits.wrapping_add(1023) << 52);
    let y = p * two_n;
    let y = if x < -708.0 { 0.0 } else { y };
    if x > 709.0 {
        f64::INFINITY
    } else {
        y
    }
}

#[cfg(test)]
mod tests {
    use super::{exp, exp_f64};

    #[test]
    fn exp_is_within_two_ulp_of_std() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let want = x.exp() as f64;
            let got = exp(x) as f64;
            worst = worst.max((got - want).abs() / want);
            x += 0.001_3;
        }
        assert!(worst < 2.5e-7, "worst relative error {worst:e}");
    }

    /// Over [-708, 709] in steps of about 0.0013, and [-1, 0] more densely (the error repeats
    /// with period ln 2, largest at r = ±ln 2 / 2).
    #[test]
    fn exp_f64_is_within_1e_11_of_std() {
        let steps = (0..1_090_000).map(|i| -708.0 + i as f64 * 0.001_3).chain((0..100_000).map(|i| -(i as f64) * 1e-5));
        let worst = steps
            .filter(|&x| x <= 709.0)
            .map(|x| (x, ((exp_f64(x) - x.exp()) / x.exp()).abs()))
            .fold((0.0, 0.0), |a, b| if b.1 > a.1 { b } else { a });
        assert!(worst.1 < 1e-11, "exp_f64({}) is {:e} from std's, relative", worst.0, worst.1);
    }

    #[test]
    fn exp_f64_of_the_extremes() {
        assert_eq!(exp_f64(f64::from(f32::MIN)), 0.0);
        assert_eq!(exp_f64(-710.0), 0.0);
        assert_eq!(exp_f64(f64::NEG_INFINITY), 0.0);
        assert_eq!(exp_f64(0.0), 1.0);
        assert_eq!(exp_f64(710.0), f64::INFINITY);
        assert!(exp_f64(f64::NAN).is_nan());
    }

    #[test]
    fn exp_of_the_extremes() {
        assert_eq!(exp(f32::MIN), 0.0);
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(100.0), f32::INFINITY);
    }
}
