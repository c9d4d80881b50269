//! The matrix product of a dense layer, out = x Wᵀ + b, written for the shapes BERT has; the
//! attention heads' products use it too.
//!
//! A dense layer multiplies the tokens x `[M,K]` (M = B·T rows) by a weight W stored as PyTorch
//! stores it, `[N,K]`: every output feature's weights in one row. Both operands are contiguous along
//! K, the axis that is summed, and W is the large one (2.4 million values in a bert-base
//! feed-forward layer, against 98 thousand for x at 128 tokens).
//!
//! The work is cut the way fast matrix products cut it (Goto's scheme, as in BLIS):
//! - the tokens are copied ("packed") in blocks of up to [`MC`] rows, as panels of `NR` tokens
//!   side by side: `panel[k][j] = x[m0 + j, k]`, zero past the last token (see `pack.rs`);
//!   the sum over K is cut into blocks of [`KC`] steps;
//! - a *tile* is `MR` output features × one panel of `NR` tokens. Its `MR`·`NR` sums stay in
//!   vector registers for a whole block of K: each step loads the panel's `NR` values for one k
//!   (whole vector registers) and multiplies them by each of the `MR` weights `W[n,k]` (one value,
//!   broadcast), a fused multiply-add per register;
//! - the threads share the output features: each walks its own tiles of W, one block of K after
//!   the other, and a tile's weights (`MR` × `KC`) stay in cache while it passes over every
//!   panel of the block; the next tile's weights are prefetched meanwhile. With tokens enough
//!   for a block per thread they share the tokens instead (see `blocked`).
//!
//! W is read in place, from the memory-mapped checkpoint, never copied or transposed. The
//! backward's dx = dy · W is the same product turned around ([`matmul`]): dy is read in place and
//! W's columns are packed as its tokens.
//!
//! Every output is a sum of chains of fused multiply-adds over k, in order, each from 0 and at
//! most [`chain_for`]`(K)` long (128, or 16 when K is at most 128), added in order within a block
//! of [`KC`]; the first block's sum is added to the bias, each later block's to the output so
//! far. Nothing about the order depends on the thread count, on where a token sits in a panel,
//! or on the vector width: the AVX-512 and the AVX2 kernels give bit-identical results, and a
//! token's output does not depend on the other tokens in the batch.
//!
//! On CPUs without AVX2 and FMA (and on other architectures), [`linear`], [`product`] and
//! [`batched`] return false or None, and the operation runs its reference implementation.

use std::mem::MaybeUninit;

use ndarray::{Array2, Array4, ArrayView2, ArrayView4};

pub(crate) use super::matrix::{Matrix, MatrixMut};
use super::pack::pack_panels;
use super::threads;

/// At most this many steps of the sum per block: a tile's weights (`MR` × KC) and one panel
/// (KC × `NR`) then fit in the L1 and L2 caches.
pub(crate) const KC: usize = 768;

/// At most this many steps of the sum in one chain of fused multiply-adds; the chains' sums
/// are then added in order. A sum of K products in one chain rounds its running total K times,
/// and the error grows with it; in chains of 128 it rounds about 128 + K/128 times. On a
/// bert-base-sized model, one chain per block of [`KC`] left 1,494 of 1,620 stages farther from
/// the float64 truth than PyTorch's, chains of 128 21 (BENCHMARKS.md). Each chain costs one
/// addition per sum and a trip of the tile's sums through memory: chains of 64 took the median
/// of ours / PyTorch's error from 0.82 to 0.67 there (and MiniLM from 13 stages behind to 10),
/// but made the dense layers' products 2-5% slower, so the chains are 128 long.
pub(crate) const CHAIN: usize = 128;

/// The chain length for a sum short enough to be one chain: at most [`CHAIN`] products, such
/// as an attention head's scores q · kᵀ over its 32 (MiniLM) or 64 (bert-base) features, and its
/// context probs · v over up to 128 tokens. In one chain their own error (against the exact
/// product of their own float32 inputs, `scripts/accuracy.py`) was more than an ulp above
/// PyTorch's in 30 of 108 score stages (12 layers × 9 texts) and 3 of 108 context stages on a
/// bert-base-sized model; in chains of 16, in none. The extra additions make these products a
/// quarter to a half slower (one layer's scores, all heads: 1.14-1.34 ms against 1.02-1.15 at
/// 512 tokens), under 1% of a pass.
pub(crate) const SHORT_CHAIN: usize = 16;

/// How many steps each chain of a sum over `k` takes (see [`CHAIN`] and [`SHORT_CHAIN`]).
pub(crate) fn chain_for(k: usize) -> usize {
    if k <= CHAIN {
        SHORT_CHAIN
    } else {
        CHAIN
    }
}

/// At most this many tokens per packed block: one block of K of them, 768 KiB at KC = 768, is in
/// the L2 cache while the tiles pass over it.
pub(crate) const MC: usize = 256;

/// out `[M,N]` = x `[M,K]` · Wᵀ + bias, where `w` is W `[N,K]`; every slice contiguous and row-major.
/// `out` need not be initialized: every output is written when this returns true.
///
/// Returns false, having written nothing, when this CPU has no kernel here (see the module
/// documentation), when K is 0 (no sum to write the bias with), or when there is no output.
pub(crate) fn linear(
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    (m, k, n): (usize, usize, usize),
    out: &mut [MaybeUninit<f32>],
) -> bool {
    assert_eq!(x.len(), m * k, "x is [M,K]");
    assert_eq!(w.len(), n * k, "W is [N,K]");
    assert_eq!(out.len(), m * n, "out is [M,N]");
    if k == 0 || m == 0 || n == 0 {
        return false;
    }
    let x = Matrix::row_major(x, k);
    let w = Matrix::row_major(w, k);
    product(x, w, Some(bias), 1.0, (m, k, n), MatrixMut { values: out, row_stride: n, col_stride: 1 })
}

/// Whether a `[rows,cols]` matrix with these strides lies inside `len` values.
fn fits(rows: usize, cols: usize, len: usize, row_stride: usize, col_stride: usize) -> bool {
    rows == 0 || cols == 0 || (rows - 1) * row_stride + (cols - 1) * col_stride < len
}

/// out `[M,N]` = (x `[M,K]` · Wᵀ) · scale (+ bias `[N]`), where `w` holds W `[N,K]` with contiguous rows:
/// the general form of [`linear`]. x and out may have any strides. The scale multiplies each
/// finished sum, as PyTorch's `(q @ k.T) * scale` does.
///
/// Returns false, having written nothing, when this CPU has no kernel here.
pub(crate) fn product(
    x: Matrix<'_>,
    w: Matrix<'_>,
    bias: Option<&[f32]>,
    scale: f32,
    (m, k, n): (usize, usize, usize),
    out: MatrixMut<'_>,
) -> bool {
    assert!(fits(m, k, x.values.len(), x.row_stride, x.col_stride), "x holds [M,K] = [{m},{k}]");
    assert!(w.col_stride == 1 && fits(n, k, w.values.len(), w.row_stride, 1), "W holds [N,K] = [{n},{k}] by rows");
    assert!(fits(m, n, out.values.len(), out.row_stride, out.col_stride), "out holds [M,N] = [{m},{n}]");
    assert!(bias.is_none_or(|b| b.len() == n), "bias is [N]");
    // A scale with more than one block of K would be applied to each block's sum.
    assert!(scale == 1.0 || k <= KC, "a scaled product has at most KC sums");
    #[cfg(target_arch = "x86_64")]
    {
        let problem = Problem { x, w, bias, scale, m, k, n, out_strides: (out.row_stride, out.col_stride) };
        if std::arch::is_x86_feature_detected!("avx512f") {
            if m > 32 {
                blocked::<6, 64>(problem, out.values, tiles_avx512_wide);
            } else if m > 16 {
                blocked::<12, 32>(problem, out.values, tiles_avx512);
            } else {
                blocked::<12, 16>(problem, out.values, tiles_avx512_narrow);
            }
            return true;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            blocked::<6, 16>(problem, out.values, tiles_avx2);
            return true;
        }
    }
    false
}

/// a `[M,K]` · b `[K,N]` -> `[M,N]`: the backward's dx = dy · W. None (nothing computed) when
/// this CPU has no kernel, or when neither operand is contiguous along K.
///
/// [`product`] reads its second operand W by rows along K, in place. When b is contiguous along
/// K (its columns are), b is that W. Otherwise, when a's rows are contiguous along K, the
/// product is computed transposed, outᵀ `[N,M]` = bᵀ · aᵀ, with a as W, written down the
/// columns of `out`: so dx = dy · W reads dy in place and packs W as panels, each a plain copy
/// of part of a row; at 128 tokens this is twice as fast as the reference's product.
///
/// A weight's gradient dW = dyᵀ · x has neither: both are stored by tokens, and K is the
/// tokens. Copying one operand into its transpose first, or gathering W's tiles, made it slower
/// than the reference's product, which packs both operands (BENCHMARKS.md), so it is left to the
/// reference.
pub(crate) fn matmul(a: ArrayView2<'_, f32>, b: ArrayView2<'_, f32>) -> Option<Array2<f32>> {
    let ((m, k), (b_k, n)) = (a.dim(), b.dim());
    assert_eq!(k, b_k, "[M,K] · [K,N]");
    if !available() || m == 0 || k == 0 || n == 0 {
        return None;
    }
    // Each operand as one slice of its memory, starting at element [0,0]: true of any
    // layout with positive strides that leaves no gaps (copied otherwise).
    let (a, b) = (whole(a), whole(b));
    let (sa, sb) = (strides(&a.view()), strides(&b.view()));
    let (a_values, b_values) = (a.as_slice_memory_order()?, b.as_slice_memory_order()?);
    if sb.0 != 1 && sa.1 != 1 {
        return None;
    }
    // Not zeroed first: the product writes every output (K ≥ 1, checked above).
    let mut out = Array2::<f32>::uninit((m, n));
    let values = out.as_slice_mut().expect("a new array is contiguous");
    let done = if sb.0 == 1 {
        let x = Matrix { values: a_values, row_stride: sa.0, col_stride: sa.1 };
        let w = Matrix::row_major(b_values, sb.1);
        product(x, w, None, 1.0, (m, k, n), MatrixMut { values, row_stride: n, col_stride: 1 })
    } else {
        let x = Matrix { values: b_values, row_stride: sb.1, col_stride: sb.0 };
        let w = Matrix::row_major(a_values, sa.0);
        product(x, w, None, 1.0, (n, k, m), MatrixMut { values, row_stride: 1, col_stride: n })
    };
    assert!(done, "a kernel exists (checked above)");
    // SAFETY: the product wrote each of the m·n outputs in its first block of K.
    Some(unsafe { out.assume_init() })
}

/// `view` itself when its values are one gap-free slice of memory with positive strides, and a
/// row-major copy otherwise.
fn whole<'a>(view: ArrayView2<'a, f32>) -> ndarray::CowArray<'a, f32, ndarray::Ix2> {
    let positive = view.strides().iter().all(|&s| s > 0);
    if positive && view.as_slice_memory_order().is_some() {
        view.into()
    } else {
        Array2::from_shape_vec(view.dim(), view.iter().copied().collect()).expect("the view's values").into()
    }
}

/// A matrix's (row, column) strides. The stride of an axis of length 1 is never used to reach
/// an element, so it is taken as 1: such an axis counts as contiguous.
fn strides(view: &ArrayView2<'_, f32>) -> (usize, usize) {
    let (rows, cols) = view.dim();
    let s = view.strides();
    let stride = |len: usize, s: isize| if len == 1 { 1 } else { s as usize };
    (stride(rows, s[0]), stride(cols, s[1]))
}

/// `[B,nh,M,K]` · `[B,nh,K,N]` -> `[B,nh,M,N]`, each finished sum times `scale`: one [`product`]
/// per head, the heads shared between the threads. None (nothing computed) when this CPU has no
/// kernel, or when neither operand is laid out as [`product`] needs.
///
/// [`product`] reads its second operand W by rows along K. So when A's rows are contiguous
/// along K (Q of `scores = Q Kᵀ`, P of `context = P V`), the product is computed transposed,
/// outᵀ `[N,M]` = Bᵀ · Aᵀ, with A as W and the outputs written down the columns of `out`: the
/// side kept in vector registers is then the keys (for the scores) or the head's values (for
/// the context), and B may have any strides. Otherwise B must be contiguous along K. The
/// backward's da = dout · bᵀ is of the first kind; its db = aᵀ · dout of neither, and runs the
/// reference.
pub(crate) fn batched(a: ArrayView4<'_, f32>, b: ArrayView4<'_, f32>, scale: f32) -> Option<Array4<f32>> {
    let (batch, heads, m, k) = a.dim();
    let (b_batch, b_heads, b_k, n) = b.dim();
    assert_eq!((batch, heads, k), (b_batch, b_heads, b_k), "[B,nh,M,K] · [B,nh,K,N]");
    if !available() || (scale != 1.0 && k > KC) {
        return None;
    }
    // Both operands as one slice of their memory, starting at element [0,0,0,0]: with every
    // stride positive, the first element in memory is that one.
    let positive = |s: &[isize]| s.iter().all(|&s| s > 0);
    if !positive(a.strides()) || !positive(b.strides()) {
        return None;
    }
    let (a_values, b_values) = (a.as_slice_memory_order()?, b.as_slice_memory_order()?);
    let sa: Vec<usize> = a.strides().iter().map(|&s| s as usize).collect();
    let sb: Vec<usize> = b.strides().iter().map(|&s| s as usize).collect();
    let transposed = sa[3] == 1;
    if !transposed && sb[2] != 1 {
        return None;
    }
    if k == 0 || m == 0 || n == 0 {
        // No sums (every output is 0, and the product would write nothing), or no outputs.
        return Some(Array4::zeros((batch, heads, m, n)));
    }
    // Not zeroed first: the product writes every output (see `MatrixMut`).
    let mut out = Array4::<f32>::uninit((batch, heads, m, n));
    let blocks = out.as_slice_mut().expect("a new array is contiguous");
    threads::for_each_part(blocks, m * n, 1, |first, part| {
        for (i, block) in part.chunks_exact_mut(m * n).enumerate() {
            let (bi, hi) = ((first + i) / heads, (first + i) % heads);
            let a_head = &a_values[bi * sa[0] + hi * sa[1]..];
            let b_head = &b_values[bi * sb[0] + hi * sb[1]..];
            let done = if transposed {
                let x = Matrix { values: b_head, row_stride: sb[3], col_stride: sb[2] };
                let w = Matrix::row_major(a_head, sa[2]);
                let out = MatrixMut { values: block, row_stride: 1, col_stride: n };
                product(x, w, None, scale, (n, k, m), out)
            } else {
                let x = Matrix { values: a_head, row_stride: sa[2], col_stride: sa[3] };
                let w = Matrix::row_major(b_head, sb[3]);
                let out = MatrixMut { values: block, row_stride: n, col_stride: 1 };
                product(x, w, None, scale, (m, k, n), out)
            };
            assert!(done, "a kernel exists (checked above)");
        }
    });
    // SAFETY: every head's product wrote each of its m·n outputs in its first block of K
    // (k ≥ 1, checked above), and the heads' blocks cover the array.
    Some(unsafe { out.assume_init() })
}

/// Whether this CPU has a kernel for [`product`].
pub(crate) fn available() -> bool {
    !kernel_names().is_empty()
}

/// The kernels [`product`] can choose from on this CPU, by name.
pub(crate) fn kernel_names() -> Vec<&'static str> {
    let mut names = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            names.extend(["gemm avx512 (12x32)", "gemm avx512 wide (6x64)", "gemm avx512 narrow (12x16)"]);
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            names.push("gemm avx2 (6x16)");
        }
    }
    names
}

/// What [`product`] was asked for, checked.
#[derive(Clone, Copy)]
struct Problem<'a> {
    x: Matrix<'a>,
    w: Matrix<'a>,
    bias: Option<&'a [f32]>,
    scale: f32,
    m: usize,
    k: usize,
    n: usize,
    out_strides: (usize, usize),
}

/// One block of the product: tokens `m0..m0 + mc`, sums `k0..k0 + kc`. `x_pack` holds the block
/// of tokens packed for every sum, panel after panel (`NR`·K values each); the block's part of
/// panel p starts at p·`NR`·K + `NR`·k0.
struct Block<'a> {
    problem: Problem<'a>,
    x_pack: &'a [f32],
    m0: usize,
    mc: usize,
    k0: usize,
    kc: usize,
}

/// The output, written by several threads at once, each to its own output features (columns)
/// or to its own tokens (rows), as `blocked` shares the work.
#[derive(Clone, Copy)]
struct Out {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: `Out` is only handed to threads that write disjoint columns, or disjoint rows, of the output (see
// `blocked`), while `blocked` holds the only `&mut` to it.
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

/// Computes the tiles of output features `tiles` for one block; one of the kernels below.
type TilesFn = unsafe fn(&Block<'_>, std::ops::Range<usize>, Out);

/// The loops over blocks of tokens and of K, with `MR`×`NR` tiles computed by `tiles`.
///
/// The threads share the work in one of two ways, whichever makes them meet less often (every
/// meeting costs a few µs of waking and sleeping, which with few tokens was a tenth of the time):
/// - With tokens enough for a block per thread (512 tokens of a forward pass; the 768 or 3,072
///   input features of a dense layer's dx = dy · W, which packs W's columns as its tokens), each
///   thread takes its own blocks of tokens, packs them and computes all of their tiles: the
///   threads meet once.
/// - Otherwise each block of tokens is packed for the whole of K by all threads, and then each
///   thread goes through the blocks of K for its own tiles: the threads meet twice per block.
///
/// Either way each output is summed in the same order by one thread.
fn blocked<const MR: usize, const NR: usize>(problem: Problem<'_>, out: &mut [MaybeUninit<f32>], tiles: TilesFn) {
    let Problem { m, k, n, .. } = problem;
    let mc_max = MC.min(m.div_ceil(NR) * NR);
    let out = Out { ptr: out.as_mut_ptr().cast::<f32>(), len: out.len() };
    let tile_count = n.div_ceil(MR);
    let panel_count = m.div_ceil(NR);
    if m.div_ceil(mc_max) >= threads::threads() {
        threads::for_each_range(panel_count, |panels| {
            let (first, end) = (panels.start * NR, m.min(panels.end * NR));
            with_pack(mc_max.min((end - first).div_ceil(NR) * NR) * k, |pack| {
                for m0 in (first..end).step_by(mc_max) {
                    let mc = mc_max.min(end - m0);
                    let x_pack = &mut pack[..mc.div_ceil(NR) * NR * k];
                    pack_block::<NR>(problem, m0, m0 + mc, x_pack);
                    for k0 in (0..k).step_by(KC) {
                        let block = Block { problem, x_pack, m0, mc, k0, kc: KC.min(k - k0) };
                        // SAFETY: the kernel was chosen for a CPU that has its features (see
                        // `product`), and each range of panels writes only its own tokens.
                        unsafe { tiles(&block, 0..tile_count, out) }
                    }
                }
            })
        });
        return;
    }
    with_pack(mc_max * k, |pack| {
        for m0 in (0..m).step_by(mc_max) {
            let mc = mc_max.min(m - m0);
            let x_pack = &mut pack[..mc.div_ceil(NR) * NR * k];
            threads::for_each_part(x_pack, NR * k, 1, |first_panel, part| {
                pack_block::<NR>(problem, m0 + first_panel * NR, m0 + mc, part)
            });
            let x_pack = &*x_pack;
            threads::for_each_range(tile_count, |range| {
                for k0 in (0..k).step_by(KC) {
                    let block = Block { problem, x_pack, m0, mc, k0, kc: KC.min(k - k0) };
                    // SAFETY: the kernel was chosen for a CPU that has its features (see
                    // `product`), and each range of tiles writes only its own output features.
                    unsafe { tiles(&block, range.clone(), out) }
                }
            });
        }
    })
}

/// Packs the panels of tokens `first..end` into `part`: whole panels of `NR`·K values, each for
/// every block of K.
fn pack_block<const NR: usize>(problem: Problem<'_>, first: usize, end: usize, part: &mut [f32]) {
    let k = problem.k;
    for (p, panel) in part.chunks_exact_mut(NR * k).enumerate() {
        for k0 in (0..k).step_by(KC) {
            let kc = KC.min(k - k0);
            pack_panels::<NR>(problem.x, first + p * NR, end, k0, kc, &mut panel[NR * k0..][..NR * kc]);
        }
    }
}

/// Runs `work` on this thread's packing buffer, grown to at least `len` values.
fn with_pack(len: usize, work: impl FnOnce(&mut [f32])) {
    PACK.with_borrow_mut(|lines| {
        lines.resize(lines.len().max(len.div_ceil(16)), CacheLine([0.0; 16]));
        // SAFETY: a CacheLine is 16 f32 and nothing else (repr(C)), so the lines are
        // 16 · lines.len() f32 in a row, borrowed mutably for as long as `lines` is.
        let pack = unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<f32>(), lines.len() * 16) };
        work(pack)
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

/// For at most 16 tokens (a short text): one vector of tokens per weight, so that at 12 tokens
/// three lanes in four do work, against three in eight in a 12 × 32 tile. The 12-token pass of a
/// bert-base-sized model took 29 ms instead of 46 on a Zen 4 (BENCHMARKS.md). Tiles of 16 or 24
/// features were slower than either: the compiler kept their sums in memory, not in registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn tiles_avx512_narrow(block: &Block<'_>, tiles: std::ops::Range<usize>, out: Out) {
    compute_tiles::<12, 16>(block, tiles, out)
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
    let Problem { w, k, n, out_strides: (out_row, out_col), .. } = block.problem;
    let (kc, chain) = (block.kc, chain_for(k));
    // The last tile may have fewer than MR features; its weights are copied into `edge`, padded
    // with zero rows, so that the kernel always reads MR rows.
    let mut edge = Vec::new();
    for tile in tiles {
        let n0 = tile * MR;
        let features = MR.min(n - n0);
        let (w_tile, ldw) = if features == MR {
            (&w.values[n0 * w.row_stride + block.k0..], w.row_stride)
        } else {
            edge.clear();
            edge.resize(MR * kc, 0.0);
            for i in 0..features {
                edge[i * kc..][..kc].copy_from_slice(&w.values[(n0 + i) * w.row_stride + block.k0..][..kc]);
            }
            (&edge[..], kc)
        };
        // The next tile's weights, fetched into cache while this tile's first panel is computed.
        let next = (tile + 1 < n / MR).then(|| w.values[(n0 + MR) * w.row_stride + block.k0..].as_ptr());
        let panel_stride = NR * k;
        for p in 0..block.mc.div_ceil(NR) {
            let panel = &block.x_pack[p * panel_stride + NR * block.k0..][..NR * kc];
            // The block's sum, chain by chain: each chain of at most `chain` steps starts from
            // zero in registers, and the chains' sums are added in order.
            let first = if p == 0 { next } else { None };
            let mut sums = tile_sums::<MR, NR>(chain.min(kc), w_tile, ldw, panel, first);
            for c0 in (chain..kc).step_by(chain) {
                let prefetch = first.map(|n| n.wrapping_add(c0));
                let chain_sums =
                    tile_sums::<MR, NR>(chain.min(kc - c0), &w_tile[c0..], ldw, &panel[NR * c0..], prefetch);
                for (total, part) in sums.iter_mut().zip(&chain_sums) {
                    for (t, &c) in total.iter_mut().zip(part) {
                        *t += c;
                    }
                }
            }
            let first_token = block.m0 + p * NR;
            let tokens = NR.min(block.m0 + block.mc - first_token);
            let last = (first_token + tokens - 1) * out_row + (n0 + features - 1) * out_col;
            assert!(last < out.len, "the output holds [M,N]");
            // SAFETY: every index written is at most `last`, inside the output (checked above),
            // and in a column n0..n0 + features of tokens first_token.., which belong to this
            // thread alone: its own tiles, or its own blocks of tokens (see `blocked`).
            unsafe { store_tile(block, &sums, (first_token, tokens), (n0, features), out) };
        }
    }
}

/// Writes one tile's sums to the output: for the first block of K, (bias +) sum · scale; for
/// the later blocks, the sum added to what the earlier blocks wrote.
///
/// # Safety
/// Every output element of tokens `first_token..+tokens` and features `n0..+features` must be
/// inside the output and written by no other thread meanwhile.
// The indices j and i each address two things at once (a slot of the output and a sum), which
// iterators would only obscure.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn store_tile<const MR: usize, const NR: usize>(
    block: &Block<'_>,
    sums: &[[f32; NR]; MR],
    (first_token, tokens): (usize, usize),
    (n0, features): (usize, usize),
    out: Out,
) {
    let Problem { bias, scale, out_strides: (out_row, out_col), .. } = block.problem;
    let first_block = block.k0 == 0;
    // What the first block's sums are added to: the bias, or zero.
    let start: [f32; MR] = std::array::from_fn(|i| match bias {
        Some(b) if i < features => b[n0 + i],
        _ => 0.0,
    });
    if out_row == 1 {
        // The tokens are contiguous in the output (attention's transposed products): a whole
        // row of sums at once.
        // Written through the pointer, not a slice: in the first block the outputs are not yet
        // initialized (see `MatrixMut`).
        for (i, row) in sums.iter().enumerate().take(features) {
            let first_slot = out.ptr.add(first_token + (n0 + i) * out_col);
            if first_block {
                for (j, &sum) in row[..tokens].iter().enumerate() {
                    first_slot.add(j).write(start[i] + sum * scale);
                }
            } else {
                for (j, &sum) in row[..tokens].iter().enumerate() {
                    *first_slot.add(j) += sum;
                }
            }
        }
    } else if out_col == 1 && features == MR {
        // A dense layer's whole tile: token by token, each token's MR outputs side by side in
        // memory. The sums are held feature by feature, so this is a transpose.
        #[cfg(target_arch = "x86_64")]
        if MR == 6 && NR.is_multiple_of(8) {
            let sums: &[[f32; NR]; 6] = &*(sums as *const [[f32; NR]; MR]).cast();
            let start: [f32; 6] = std::array::from_fn(|i| start[i]);
            let first_row = out.ptr.add(first_token * out_row + n0);
            // SAFETY: every kernel needs AVX2 and FMA (see `product`), and the tile's outputs are this
            // thread's and inside the output (this function's contract).
            return store_six_features::<NR>(sums, first_block.then_some((start, scale)), first_row, out_row, tokens);
        }
        for j in 0..tokens {
            let row = out.ptr.add((first_token + j) * out_row + n0);
            if first_block {
                for i in 0..MR {
                    *row.add(i) = start[i] + sums[i][j] * scale;
                }
            } else {
                for i in 0..MR {
                    *row.add(i) += sums[i][j];
                }
            }
        }
    } else {
        for j in 0..tokens {
            let row = out.ptr.add((first_token + j) * out_row + n0 * out_col);
            for (i, sums_of_feature) in sums.iter().enumerate().take(features) {
                let slot = row.add(i * out_col);
                *slot = if first_block { start[i] + sums_of_feature[j] * scale } else { *slot + sums_of_feature[j] };
            }
        }
    }
}

/// [`store_tile`] for a whole tile of six features whose outputs are contiguous: token j's six
/// outputs, `first_row + j·out_row ..+ 6`, become `start[i] + sums[i][j] · scale` (`first`, for
/// the first block of K) or have `sums[i][j]` added. The same arithmetic as the plain loop, in
/// the same order and with no fused multiply-add, so the same bits.
///
/// The sums are held feature by feature; written token by token, one value at a time, they
/// took 5% of the kernel's time at 512 tokens. Here each group of 8 tokens is transposed in
/// registers (an 8 × 8 transpose with two rows of zeros), and each token's six outputs are
/// read and written as four values and two.
///
/// # Safety
/// The CPU must have AVX2 and FMA, and token j's six outputs for j < `tokens` (at most NR) must be inside
/// the output and written by no other thread meanwhile.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn store_six_features<const NR: usize>(
    sums: &[[f32; NR]; 6],
    first: Option<([f32; 6], f32)>,
    first_row: *mut f32,
    out_row: usize,
    tokens: usize,
) {
    use std::arch::x86_64::*;
    let (start, scale) = first.unwrap_or(([0.0; 6], 1.0));
    let start = _mm256_setr_ps(start[0], start[1], start[2], start[3], start[4], start[5], 0.0, 0.0);
    let scale = _mm256_set1_ps(scale);
    for group in (0..tokens).step_by(8) {
        let row = |i: usize| _mm256_loadu_ps(sums[i][group..].as_ptr());
        let zero = _mm256_setzero_ps();
        let (a01, b01) = (_mm256_unpacklo_ps(row(0), row(1)), _mm256_unpackhi_ps(row(0), row(1)));
        let (a23, b23) = (_mm256_unpacklo_ps(row(2), row(3)), _mm256_unpackhi_ps(row(2), row(3)));
        let (a45, b45) = (_mm256_unpacklo_ps(row(4), row(5)), _mm256_unpackhi_ps(row(4), row(5)));
        // Within each 128-bit half, token 4h + t's features 0..4 and 4..8.
        let low = [
            _mm256_shuffle_ps::<0x44>(a01, a23),
            _mm256_shuffle_ps::<0xEE>(a01, a23),
            _mm256_shuffle_ps::<0x44>(b01, b23),
            _mm256_shuffle_ps::<0xEE>(b01, b23),
        ];
        let high = [
            _mm256_shuffle_ps::<0x44>(a45, zero),
            _mm256_shuffle_ps::<0xEE>(a45, zero),
            _mm256_shuffle_ps::<0x44>(b45, zero),
            _mm256_shuffle_ps::<0xEE>(b45, zero),
        ];
        for t in 0..8.min(tokens - group) {
            // Token group + t's six sums, in lanes 0..6.
            let sums = if t < 4 {
                _mm256_permute2f128_ps::<0x20>(low[t], high[t])
            } else {
                _mm256_permute2f128_ps::<0x31>(low[t - 4], high[t - 4])
            };
            let slot = first_row.add((group + t) * out_row);
            let value = if first.is_some() {
                _mm256_add_ps(start, _mm256_mul_ps(sums, scale))
            } else {
                let old = _mm256_set_m128(_mm_castsi128_ps(_mm_loadu_si64(slot.add(4).cast())), _mm_loadu_ps(slot));
                _mm256_add_ps(old, sums)
            };
            _mm_storeu_ps(slot, _mm256_castps256_ps128(value));
            _mm_storeu_si64(slot.add(4).cast(), _mm_castps_si128(_mm256_extractf128_ps::<1>(value)));
        }
    }
}

/// `sums[i][j] = Σ_k w[i·ldw + k] · panel[k·NR + j]` for k < kc: `MR` weight rows by `NR` tokens.
///
/// The loops have fixed trip counts `MR` and `NR`, so the compiler keeps the sums in `MR`·`NR`/16
/// vector registers (24 with AVX-512, of its 32; 12 with AVX2, of its 16) and each k is
/// `NR`/16 vector loads, `MR` broadcasts and `MR`·`NR`/16 fused multiply-adds. Few broadcasts
/// per multiply-add matter: 6 × 64 ran nearly twice as fast as 12 × 32 on a Cascade Lake Xeon.
///
/// `prefetch`, the start of the next tile's weights (rows `ldw` apart), is fetched into cache
/// a cache line per row every 16 steps. With few tokens the weights are used once and come
/// from memory, and the hardware's prefetcher, which follows each row only a few KiB at a
/// time, left the memory bus half idle: this took the 12-token pass from 22.7 to 18.0 ms.
#[inline(always)]
fn tile_sums<const MR: usize, const NR: usize>(
    kc: usize,
    w: &[f32],
    ldw: usize,
    panel: &[f32],
    prefetch: Option<*const f32>,
) -> [[f32; NR]; MR] {
    assert!(panel.len() >= kc * NR && w.len() >= (MR - 1) * ldw + kc, "a tile's operands are in bounds");
    let mut sums = [[0.0f32; NR]; MR];
    for kk in 0..kc {
        #[cfg(target_arch = "x86_64")]
        if let Some(next) = prefetch {
            if kk % 16 == 0 {
                for i in 0..MR {
                    // SAFETY: a prefetch is only a hint; it reads nothing, whatever the address.
                    unsafe {
                        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                            next.wrapping_add(i * ldw + kk) as *const i8,
                        )
                    };
                }
            }
        }
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

    /// The same chains of fused multiply-adds as the kernels, one output at a time: the first
    /// block's sum times `scale` added to the bias, each later block's sum added to that.
    fn reference(x: &[f32], w: &[f32], bias: &[f32], scale: f32, (m, k, n): (usize, usize, usize)) -> Vec<f32> {
        let mut out = vec![0.0; m * n];
        for t in 0..m {
            for o in 0..n {
                let mut total = bias[o];
                for k0 in (0..k).step_by(KC) {
                    let mut sum = 0.0f32;
                    for c0 in (k0..k.min(k0 + KC)).step_by(chain_for(k)) {
                        let mut chain = 0.0f32;
                        for kk in c0..k.min(k0 + KC).min(c0 + chain_for(k)) {
                            chain = w[o * k + kk].mul_add(x[t * k + kk], chain);
                        }
                        sum += chain;
                    }
                    total = if k0 == 0 { total + sum * scale } else { total + sum };
                }
                out[t * n + o] = total;
            }
        }
        out
    }

    /// `blocked` with one kernel, for contiguous operands: (x, W, bias, scale, (M,K,N), out).
    type Kernel = fn(&[f32], &[f32], &[f32], f32, (usize, usize, usize), &mut [f32]);

    fn run<const MR: usize, const NR: usize>(
        x: &[f32],
        w: &[f32],
        bias: &[f32],
        scale: f32,
        (m, k, n): (usize, usize, usize),
        out: &mut [f32],
        tiles: TilesFn,
    ) {
        let (x, w) = (Matrix::row_major(x, k), Matrix::row_major(w, k));
        let problem = Problem { x, w, bias: Some(bias), scale, m, k, n, out_strides: (n, 1) };
        blocked::<MR, NR>(problem, MatrixMut::of(out, n, 1).values, tiles)
    }

    /// Every kernel this CPU can run, by name.
    fn kernels() -> Vec<(&'static str, Kernel)> {
        let mut found: Vec<(&'static str, Kernel)> = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                found.push(("avx512", |x, w, b, c, s, o| run::<12, 32>(x, w, b, c, s, o, tiles_avx512)));
                found.push(("avx512 wide", |x, w, b, c, s, o| run::<6, 64>(x, w, b, c, s, o, tiles_avx512_wide)));
                found.push(("avx512 narrow", |x, w, b, c, s, o| run::<12, 16>(x, w, b, c, s, o, tiles_avx512_narrow)));
            }
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                found.push(("avx2", |x, w, b, c, s, o| run::<6, 16>(x, w, b, c, s, o, tiles_avx2)));
            }
        }
        found
    }

    #[test]
    fn every_kernel_and_shape_matches_the_plain_loop_bit_for_bit() {
        let kernels = kernels();
        // The log says what was tested: on a CPU without AVX2 this loop runs no kernel at all
        // (kernels/mod.rs's test fails then, when CI expects them).
        println!("gemm kernels tested: {:?}", kernels.iter().map(|k| k.0).collect::<Vec<_>>());
        // Without a kernel, `linear` must say so and leave the product to the caller.
        let mut out = [0.0f32; 1];
        assert_eq!(
            linear(&[1.0], &[1.0], &[0.0], (1, 1, 1), MatrixMut::of(&mut out, 1, 1).values),
            !kernels.is_empty()
        );
        // Edges on every axis: M and N not multiples of a panel or a tile, K over one block,
        // M over one block, a single token; short sums (several chains of SHORT_CHAIN) and long
        // ones. A scale other than 1 (the heads' scores) with at most one block of K.
        for (name, kernel) in kernels {
            for (m, k, n) in [(1, 5, 1), (3, 45, 7), (12, 64, 24), (33, 100, 13), (300, KC + 5, 25), (17, 2 * KC, 12)] {
                for scale in [1.0, 0.3] {
                    if scale != 1.0 && k > KC {
                        continue;
                    }
                    let (x, w, bias) = (values(m * k, 1), values(n * k, 2), values(n, 3));
                    let mut out = vec![f32::NAN; m * n];
                    kernel(&x, &w, &bias, scale, (m, k, n), &mut out);
                    let want = reference(&x, &w, &bias, scale, (m, k, n));
                    for (i, (g, r)) in out.iter().zip(&want).enumerate() {
                        let place = format!("{name} ({m},{k},{n}) scale {scale} element {i}");
                        assert_eq!(g.to_bits(), r.to_bits(), "{place}: got {g}, expected {r}");
                    }
                }
            }
        }
    }

    #[test]
    fn strided_and_transposed_operands_match_the_contiguous_product() {
        // As for one attention head: x is a window of a wider array, or its transpose; the output
        // is a window of a wider array, or written transposed.
        let (m, k, n) = (70, 64, 40);
        let (x, w) = (values(m * k, 4), values(n * k, 5));
        let mut want = vec![0.0; m * n];
        if !linear(&x, &w, &vec![0.0; n], (m, k, n), MatrixMut::of(&mut want, n, 1).values) {
            let out = MatrixMut::of(&mut want, n, 1);
            return assert!(!product(Matrix::row_major(&x, k), Matrix::row_major(&w, k), None, 1.0, (m, k, n), out));
        }
        // x inside columns k..2k of a [M,2k] array, and x stored transposed ([K,M]).
        let x_wide: Vec<f32> = (0..m).flat_map(|r| [vec![9.0; k], x[r * k..][..k].to_vec()].concat()).collect();
        let x_t: Vec<f32> = (0..k).flat_map(|c| (0..m).map(|r| x[r * k + c]).collect::<Vec<_>>()).collect();
        let layouts = [
            ("window", Matrix { values: &x_wide[k..], row_stride: 2 * k, col_stride: 1 }),
            ("transposed", Matrix { values: &x_t, row_stride: 1, col_stride: m }),
        ];
        for (name, x) in layouts {
            for transposed_out in [false, true] {
                // out inside columns n..2n of a [M,3n] array, or the transpose of that.
                let mut out = vec![f32::NAN; m * 3 * n];
                let (row_stride, col_stride, offset) = if transposed_out { (1, m, n * m) } else { (3 * n, 1, n) };
                let target = MatrixMut::of(&mut out[offset..], row_stride, col_stride);
                assert!(product(x, Matrix::row_major(&w, k), None, 1.0, (m, k, n), target));
                for r in 0..m {
                    for c in 0..n {
                        let got = out[offset + r * row_stride + c * col_stride];
                        assert_eq!(
                            got.to_bits(),
                            want[r * n + c].to_bits(),
                            "x {name}, out transposed {transposed_out}, [{r},{c}]"
                        );
                    }
                }
                let written = out.iter().filter(|v| !v.is_nan()).count();
                assert_eq!(written, m * n, "x {name}, out transposed {transposed_out}: only the window is written");
            }
        }
    }
}
