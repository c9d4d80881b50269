//! Packing: copying a block of tokens into the panels the kernels read, `panel[k][j]` = the k-th
//! value of token j, `NR` tokens side by side.
//!
//! The tokens come in two layouts:
//! - each token's values contiguous (the rows of a dense layer's input, and the keys of one
//!   head): a panel is then the transpose of a [NR, kc] block, done 8×8 at a time in AVX
//!   registers where the CPU has AVX2;
//! - each value's tokens contiguous (Vᵀ, for attention's context): each step of a panel is then
//!   a plain copy.

use super::matrix::Matrix;

/// Packs tokens `first..end` (at most `part.len() / (NR·kc)` panels of them), sums `k0..k0+kc`,
/// into `part` as `panel[k][j]`; zero past `end`.
pub(super) fn pack_panels<const NR: usize>(
    x: Matrix<'_>,
    first: usize,
    end: usize,
    k0: usize,
    kc: usize,
    part: &mut [f32],
) {
    for (p, panel) in part.chunks_exact_mut(NR * kc).enumerate() {
        let first_token = first + p * NR;
        let tokens = NR.min(end.saturating_sub(first_token));
        if x.row_stride == 1 {
            for kk in 0..kc {
                let start = (k0 + kk) * x.col_stride + first_token;
                panel[kk * NR..][..tokens].copy_from_slice(&x.values[start..start + tokens]);
            }
        } else if x.col_stride == 1 && transpose_available() {
            let rows = Rows { values: x.values, start: first_token * x.row_stride + k0, stride: x.row_stride };
            // SAFETY: the CPU has AVX2 (checked above).
            unsafe { transpose_avx2::<NR>(rows, tokens, kc, panel) };
        } else {
            gather(x, first_token, tokens, k0, kc, NR, panel);
        }
        for kk in 0..kc {
            panel[kk * NR + tokens..(kk + 1) * NR].fill(0.0);
        }
    }
}

/// The general case, one value at a time: step by step along K, each step's tokens side by side.
fn gather(x: Matrix<'_>, first_token: usize, tokens: usize, k0: usize, kc: usize, nr: usize, panel: &mut [f32]) {
    for kk in 0..kc {
        let column = (k0 + kk) * x.col_stride + first_token * x.row_stride;
        for (j, value) in panel[kk * nr..][..tokens].iter_mut().enumerate() {
            *value = x.values[column + j * x.row_stride];
        }
    }
}

/// Token j's values start at `values[start + j * stride]` and are contiguous.
#[derive(Clone, Copy)]
struct Rows<'a> {
    values: &'a [f32],
    start: usize,
    stride: usize,
}

fn transpose_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// panel[kk·NR + j] = token j's value kk, for j < `tokens` and kk < `kc`: 8 tokens × 8 values at
/// a time through an in-register transpose, the edges one value at a time.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose_avx2<const NR: usize>(rows: Rows<'_>, tokens: usize, kc: usize, panel: &mut [f32]) {
    use std::arch::x86_64::*;
    assert!(tokens <= NR && panel.len() >= kc * NR, "the panel holds kc steps of NR tokens");
    assert!(
        tokens == 0 || rows.start + (tokens - 1) * rows.stride + kc <= rows.values.len(),
        "every token's kc values are in x"
    );
    let (whole_tokens, whole_steps) = (tokens / 8 * 8, kc / 8 * 8);
    let src = rows.values.as_ptr().add(rows.start);
    let dst = panel.as_mut_ptr();
    for j0 in (0..whole_tokens).step_by(8) {
        for kk0 in (0..whole_steps).step_by(8) {
            // SAFETY (loads and stores): j0 + 7 < tokens and kk0 + 7 < kc, inside the bounds
            // asserted above.
            let row = src.add(j0 * rows.stride + kk0);
            let r0 = _mm256_loadu_ps(row);
            let r1 = _mm256_loadu_ps(row.add(rows.stride));
            let r2 = _mm256_loadu_ps(row.add(2 * rows.stride));
            let r3 = _mm256_loadu_ps(row.add(3 * rows.stride));
            let r4 = _mm256_loadu_ps(row.add(4 * rows.stride));
            let r5 = _mm256_loadu_ps(row.add(5 * rows.stride));
            let r6 = _mm256_loadu_ps(row.add(6 * rows.stride));
            let r7 = _mm256_loadu_ps(row.add(7 * rows.stride));
            // Pairs of tokens interleaved, then quadruples, then the 128-bit halves swapped:
            // after the third step, vector kk holds value kk of the 8 tokens.
            let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
            let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
            let (t4, t5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
            let (t6, t7) = (_mm256_unpacklo_ps(r6, r7), _mm256_unpackhi_ps(r6, r7));
            let (u0, u1) = (_mm256_shuffle_ps::<0x44>(t0, t2), _mm256_shuffle_ps::<0xEE>(t0, t2));
            let (u2, u3) = (_mm256_shuffle_ps::<0x44>(t1, t3), _mm256_shuffle_ps::<0xEE>(t1, t3));
            let (u4, u5) = (_mm256_shuffle_ps::<0x44>(t4, t6), _mm256_shuffle_ps::<0xEE>(t4, t6));
            let (u6, u7) = (_mm256_shuffle_ps::<0x44>(t5, t7), _mm256_shuffle_ps::<0xEE>(t5, t7));
            let columns = [
                _mm256_permute2f128_ps::<0x20>(u0, u4),
                _mm256_permute2f128_ps::<0x20>(u1, u5),
                _mm256_permute2f128_ps::<0x20>(u2, u6),
                _mm256_permute2f128_ps::<0x20>(u3, u7),
                _mm256_permute2f128_ps::<0x31>(u0, u4),
                _mm256_permute2f128_ps::<0x31>(u1, u5),
                _mm256_permute2f128_ps::<0x31>(u2, u6),
                _mm256_permute2f128_ps::<0x31>(u3, u7),
            ];
            for (kk, column) in columns.into_iter().enumerate() {
                _mm256_storeu_ps(dst.add((kk0 + kk) * NR + j0), column);
            }
        }
        for j in j0..j0 + 8 {
            for kk in whole_steps..kc {
                *dst.add(kk * NR + j) = *src.add(j * rows.stride + kk);
            }
        }
    }
    for j in whole_tokens..tokens {
        for kk in 0..kc {
            *dst.add(kk * NR + j) = *src.add(j * rows.stride + kk);
        }
    }
}

/// Never called: [`transpose_available`] is false on other architectures.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn transpose_avx2<const NR: usize>(_: Rows<'_>, _: usize, _: usize, _: &mut [f32]) {
    unreachable!("no AVX2 on this architecture")
}
