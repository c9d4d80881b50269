//! The matrix product of a dense layer, out = x Wᵀ + b, written for the shapes BERT has.
//!
//! A dense layer multiplies the tokens x [M,K] (M = B·T rows) by a weight W stored as PyTorch
//! stores it, [N,K]: every output feature's weights in one row. Both operands are contiguous along
//! K, the axis that is summed, and W is the large one (2.4 million values in a bert-base
//! feed-forward layer, against 98 thousand for x at 128 tokens).
//!
//! The work is cut the way fast matrix products cut it (Goto's scheme, as in BLIS):
//! - the tokens are copied ("packed") in blocks of up to [`MC`] rows × [`KC`] sums, as panels of
//!   `NR` tokens side by side: panel[k][j] = x[m0 + j, k0 + k], zero past the last token;
//! - a *tile* is `MR` output features × one panel of `NR` tokens. Its `MR`·`NR` sums stay in
//!   vector registers for a whole block of K: each step loads the panel's `NR` values for one k
//!   (whole vector registers) and multiplies them by each of the `MR` weights W[n,k] (one value,
//!   broadcast), a fused multiply-add per register;
//! - the threads share the output features: each walks its own tiles of W, and a tile's weights
//!   (`MR` × `KC`) stay in cache while it passes over every panel of the block.
//!
//! W is read in place, from the memory-mapped checkpoint, never copied or transposed.
//!
//! Every output is one chain of fused multiply-adds over k, in order, from 0 (a new chain for
//! each block of [`KC`]), added to the bias and then to the previous blocks. Nothing about the
//! order depends on the thread count, on where a token sits in a panel, or on the vector width:
//! the AVX-512 and the AVX2 kernels give bit-identical results, and a token's output does not
//! depend on the other tokens in the batch.
//!
//! On CPUs without AVX2 and FMA (and on other architectures), [`linear`] returns false and the
//! caller uses ndarray's `general_mat_mul`.

use crate::threads;

/// At most this many steps of the sum per block: a tile's weights (`MR` × KC) and one panel
/// (KC × `NR`) then fit in the L1 and L2 caches.
pub const KC: usize = 768;

/// At most this many tokens per packed block (768 KiB at KC = 768, in the L2 cache).
pub const MC: usize = 256;

/// out [M,N] = x [M,K] · Wᵀ + bias, where `w` is W [N,K]; every slice contiguous and row-major.
///
/// Returns false, having written nothing, when this CPU has no kernel here (see the module
/// documentation).
pub fn linear(x: &[f32], w: &[f32], bias: &[f32], (m, k, n): (usize, usize, usize), out: &mut [f32]) -> bool {
    assert_eq!(x.len(), m * k, "x is [M,K]");
    assert_eq!(w.len(), n * k, "W is [N,K]");
    assert_eq!(bias.len(), n, "bias is [N]");
    assert_eq!(out.len(), m * n, "out is [M,N]");
    #[cfg(target_arch = "x86_64")]
    {
        let shape = Shape { m, k, n };
        if std::arch::is_x86_feature_detected!("avx512f") {
            if m > 32 {
                product::<6, 64>(x, w, bias, shape, out, tiles_avx512_wide);
            } else {
                product::<12, 32>(x, w, bias, shape, out, tiles_avx512);
            }
            return true;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            product::<6, 16>(x, w, bias, shape, out, tiles_avx2);
            return true;
        }
    }
    false
}

#[derive(Clone, Copy)]
struct Shape {
    m: usize,
    k: usize,
    n: usize,
}

/// One block of the product: tokens `m0..m0 + mc`, sums `k0..k0 + kc`, packed into `pack`.
struct Block<'a> {
    x_pack: &'a [f32],
    w: &'a [f32],
    bias: &'a [f32],
    shape: Shape,
    m0: usize,
    mc: usize,
    k0: usize,
    kc: usize,
}

/// The output, written by several threads at once, each to its own output features (columns).
#[derive(Clone, Copy)]
struct Out {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: `Out` is only handed to threads that write disjoint columns of the output (see
// `product`), while `product` holds the only `&mut` to it.
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

/// Computes the tiles of output features `tiles` for one block; one of the kernels below.
type TilesFn = unsafe fn(&Block<'_>, std::ops::Range<usize>, Out);

fn product<const MR: usize, const NR: usize>(
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    shape: Shape,
    out: &mut [f32],
    tiles: TilesFn,
) {
    let Shape { m, k, n } = shape;
    let mc_max = MC.min(m.div_ceil(NR) * NR);
    let out = Out { ptr: out.as_mut_ptr(), len: out.len() };
    let tile_count = n.div_ceil(MR);
    PACK.with_borrow_mut(|lines| {
        lines.resize(lines.len().max((mc_max * KC.min(k)).div_ceil(16)), CacheLine([0.0; 16]));
        // SAFETY: a CacheLine is 16 f32 and nothing else (repr(C)), so the lines are
        // 16 · lines.len() f32 in a row, borrowed mutably for as long as `lines` is.
        let pack = unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<f32>(), lines.len() * 16) };
        for k0 in (0..k).step_by(KC) {
            let kc = KC.min(k - k0);
            for m0 in (0..m).step_by(mc_max) {
                let mc = mc_max.min(m - m0);
                let x_pack = &mut pack[..mc.div_ceil(NR) * NR * kc];
                threads::for_each_part(x_pack, NR * kc, 1, |first_panel, part| {
                    pack_panels::<NR>(x, shape, m0 + first_panel * NR, m0 + mc, k0, kc, part)
                });
                let block = Block { x_pack, w, bias, shape, m0, mc, k0, kc };
                threads::for_each_range(tile_count, |range| {
                    // SAFETY: the kernel was chosen for a CPU that has its features (see
                    // `linear`), and each range of tiles writes only its own output features.
                    unsafe { tiles(&block, range, out) }
                });
            }
        }
    })
}

/// 64 bytes, aligned to 64: a panel of packed tokens starts on a cache line, so that no vector
/// load from it straddles two lines (which would halve the loads' throughput).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct CacheLine([f32; 16]);

thread_local! {
    /// The packed tokens, kept from one product to the next: a new buffer of this size would be
    /// fresh pages from the kernel, zeroed on first touch, at every product.
    static PACK: std::cell::RefCell<Vec<CacheLine>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Packs tokens `first..end` (at most `part.len() / (NR·kc)` panels of them), sums `k0..k0+kc`,
/// into `part` as panel[k][j]; zero past `end`.
fn pack_panels<const NR: usize>(x: &[f32], shape: Shape, first: usize, end: usize, k0: usize, kc: usize, part: &mut [f32]) {
    for (p, panel) in part.chunks_exact_mut(NR * kc).enumerate() {
        for j in 0..NR {
            let token = first + p * NR + j;
            if token < end {
                let row = &x[token * shape.k + k0..][..kc];
                for (kk, &value) in row.iter().enumerate() {
                    panel[kk * NR + j] = value;
                }
            } else {
                for kk in 0..kc {
                    panel[kk * NR + j] = 0.0;
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn tiles_avx512_wide(block: &Block<'_>, tiles: std::ops::Range<usize>, out: Out) {
    compute_tiles::<6, 64>(block, tiles, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn tiles_avx512(block: &Block<'_>, tiles: std::ops::Range<usize>, out: Out) {
    compute_tiles::<12, 32>(block, tiles, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tiles_avx2(block: &Block<'_>, tiles: std::ops::Range<usize>, out: Out) {
    compute_tiles::<6, 16>(block, tiles, out)
}

/// For each tile of `MR` output features in `tiles` and each panel of the block: the `MR`×`NR`
/// sums over the block's k, added to the output (or to the bias, for the first block).
#[inline(always)]
fn compute_tiles<const MR: usize, const NR: usize>(block: &Block<'_>, tiles: std::ops::Range<usize>, out: Out) {
    let Shape { m, k, n } = block.shape;
    // The last tile may have fewer than MR features; its weights are copied into `edge`, padded
    // with zero rows, so that the kernel always reads MR rows.
    let mut edge = Vec::new();
    for tile in tiles {
        let n0 = tile * MR;
        let features = MR.min(n - n0);
        let (w_tile, ldw) = if features == MR {
            (&block.w[n0 * k + block.k0..], k)
        } else {
            edge.clear();
            edge.resize(MR * block.kc, 0.0);
            for i in 0..features {
                edge[i * block.kc..][..block.kc].copy_from_slice(&block.w[(n0 + i) * k + block.k0..][..block.kc]);
            }
            (&edge[..], block.kc)
        };
        for (p, panel) in block.x_pack.chunks_exact(NR * block.kc).enumerate() {
            let sums = tile_sums::<MR, NR>(block.kc, w_tile, ldw, panel);
            let first_token = block.m0 + p * NR;
            let tokens = NR.min(block.m0 + block.mc - first_token);
            for (i, row) in sums.iter().enumerate().take(features) {
                for (j, &sum) in row.iter().enumerate().take(tokens) {
                    let index = (first_token + j) * n + n0 + i;
                    debug_assert!(index < out.len && first_token + j < m);
                    // SAFETY: index < M·N = out.len, and the column n0 + i belongs to this
                    // thread's tiles alone.
                    unsafe {
                        let slot = out.ptr.add(index);
                        *slot = if block.k0 == 0 { block.bias[n0 + i] + sum } else { *slot + sum };
                    }
                }
            }
        }
    }
}

/// sums[i][j] = Σ_k w[i·ldw + k] · panel[k·NR + j] for k < kc: `MR` weight rows by `NR` tokens.
///
/// The loops have fixed trip counts `MR` and `NR`, so the compiler keeps the sums in `MR`·`NR`/16
/// vector registers (24 of the 32 with AVX-512, 12 of the 16 with AVX2) and each k is two vector
/// loads, `MR` broadcasts and `MR`·`NR`/16 fused multiply-adds.
#[inline(always)]
fn tile_sums<const MR: usize, const NR: usize>(kc: usize, w: &[f32], ldw: usize, panel: &[f32]) -> [[f32; NR]; MR] {
    assert!(panel.len() >= kc * NR && w.len() >= (MR - 1) * ldw + kc, "a tile's operands are in bounds");
    let mut sums = [[0.0f32; NR]; MR];
    for kk in 0..kc {
        // SAFETY: kk < kc, so both reads are inside the bounds asserted above.
        let tokens: &[f32; NR] = unsafe { &*(panel.as_ptr().add(kk * NR) as *const [f32; NR]) };
        for (i, row) in sums.iter_mut().enumerate() {
            let weight = unsafe { *w.get_unchecked(i * ldw + kk) };
            for (sum, &token) in row.iter_mut().zip(tokens) {
                *sum = weight.mul_add(token, *sum);
            }
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small deterministic values in [-1, 1).
    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len).map(|i| (((i + seed) * 7919) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    /// The same chains of fused multiply-adds as the kernels, one output at a time.
    fn reference(x: &[f32], w: &[f32], bias: &[f32], (m, k, n): (usize, usize, usize)) -> Vec<f32> {
        let mut out = vec![0.0; m * n];
        for t in 0..m {
            for o in 0..n {
                let mut total = bias[o];
                for k0 in (0..k).step_by(KC) {
                    let mut sum = 0.0f32;
                    for kk in k0..k.min(k0 + KC) {
                        sum = w[o * k + kk].mul_add(x[t * k + kk], sum);
                    }
                    total += sum;
                }
                out[t * n + o] = total;
            }
        }
        out
    }

    /// `product` with one kernel: (x, W, bias, shape, out).
    type Kernel = fn(&[f32], &[f32], &[f32], Shape, &mut [f32]);

    /// Every kernel this CPU can run, by name.
    fn kernels() -> Vec<(&'static str, Kernel)> {
        let mut found: Vec<(&'static str, Kernel)> = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                found.push(("avx512", |x, w, b, s, o| product::<12, 32>(x, w, b, s, o, tiles_avx512)));
                found.push(("avx512 wide", |x, w, b, s, o| product::<6, 64>(x, w, b, s, o, tiles_avx512_wide)));
            }
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                found.push(("avx2", |x, w, b, s, o| product::<6, 16>(x, w, b, s, o, tiles_avx2)));
            }
        }
        found
    }

    #[test]
    fn every_kernel_and_shape_matches_the_plain_loop_bit_for_bit() {
        let kernels = kernels();
        // Without a kernel, `linear` must say so and leave the product to the caller.
        let mut out = [0.0f32; 1];
        assert_eq!(linear(&[1.0], &[1.0], &[0.0], (1, 1, 1), &mut out), !kernels.is_empty());
        // Edges on every axis: M and N not multiples of a panel or a tile, K over one block,
        // M over one block, a single token.
        for (name, kernel) in kernels {
            for (m, k, n) in [(1, 5, 1), (3, 45, 7), (12, 64, 24), (33, 100, 13), (300, KC + 5, 25), (17, 2 * KC, 12)] {
                let (x, w, bias) = (values(m * k, 1), values(n * k, 2), values(n, 3));
                let mut out = vec![f32::NAN; m * n];
                kernel(&x, &w, &bias, Shape { m, k, n }, &mut out);
                let want = reference(&x, &w, &bias, (m, k, n));
                for (i, (g, r)) in out.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), r.to_bits(), "{name} ({m},{k},{n}) element {i}: got {g}, expected {r}");
                }
            }
        }
    }
}
