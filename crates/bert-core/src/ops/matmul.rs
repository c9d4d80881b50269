//! Matrix products: a dense layer's `x · Wᵀ + b`, and attention's products, one per head.
//!
//! The fast kernel is `kernels/gemm.rs`, a packed product written for BERT's shapes, which reads
//! W in place from the checkpoint and gives the same bits whatever the thread count; a layer
//! with only a few outputs takes one dot product in f64 per output (`kernels/narrow.rs`).

use ndarray::{s, Array, Array1, Array2, Array4, ArrayBase, ArrayView1, ArrayView2, ArrayView4, Axis, Data, Dimension};

use super::kernels::{column_sums, copy, gemm, narrow};
use super::split_heads::transpose;
use super::{fast, Float};

/// `[..,in]` -> `[..,out]`: x · Wᵀ + b for every vector along the last axis, with W `[out,in]`
/// as PyTorch stores it (`nn.Linear`).
pub fn linear<F: Float, S: Data<Elem = F>, D: Dimension>(
    x: &ArrayBase<S, D>,
    weight: ArrayView2<'_, F>,
    bias: ArrayView1<'_, F>,
) -> Array<F, D> {
    // [..,in] -> [N,in]: every token one row, so that the whole batch is one matrix product.
    let last = Axis(x.ndim() - 1);
    let n_in = x.len_of(last);
    let x = x.as_standard_layout();
    let rows = x.view().into_shape_with_order((x.len() / n_in.max(1), n_in)).expect("a standard layout");
    let y = F::linear_rows(rows, weight, bias);
    let mut shape = x.raw_dim();
    shape[last.index()] = weight.nrows();
    y.into_shape_with_order(shape).expect("[N,out] holds every token's outputs")
}

/// `[N,in]` -> `[N,out]`: [`linear`] on f32 rows, by the fast kernel or the formula. A layer
/// with fewer than six outputs (NSP, a small classifier) sums each output in f64 instead.
pub(super) fn linear_rows_f32(
    x: ArrayView2<'_, f32>,
    weight: ArrayView2<'_, f32>,
    bias: ArrayView1<'_, f32>,
) -> Array2<f32> {
    if fast() {
        let (n, n_in) = x.dim();
        let n_out = weight.nrows();
        let operands = (x.as_slice(), weight.as_slice(), bias.as_slice());
        if let (Some(x), Some(w), Some(b)) = operands {
            if n_out < narrow::NARROW {
                let mut out = Array2::<f32>::zeros((n, n_out));
                narrow::linear(x, w, b, (n, n_in, n_out), out.as_slice_mut().expect("a new array is contiguous"));
                return out;
            }
            // Not zeroed first: the kernel writes every output when it runs at all.
            let mut out = Array2::<f32>::uninit((n, n_out));
            if gemm::linear(x, w, b, (n, n_in, n_out), out.as_slice_mut().expect("a new array is contiguous")) {
                // SAFETY: `gemm::linear` wrote every output (it returned true).
                return unsafe { out.assume_init() };
            }
        }
    }
    linear_reference(x, weight, bias)
}

/// The formula: every row of x times every row of W, plus the bias.
pub fn linear_reference<F: Float>(
    x: ArrayView2<'_, F>,
    weight: ArrayView2<'_, F>,
    bias: ArrayView1<'_, F>,
) -> Array2<F> {
    x.dot(&weight.t()) + bias
}

/// `[B,nh,M,K]` · `[B,nh,K,N]` -> `[B,nh,M,N]`: a matrix product for each sequence and head,
/// `torch.matmul(a, b)`.
pub fn matmul<F: Float>(a: ArrayView4<'_, F>, b: ArrayView4<'_, F>) -> Array4<F> {
    scaled_matmul(a, b, F::one())
}

/// [`matmul`], each result times `scale`: `torch.matmul(a, b) * scale`. The scaling happens as
/// each product is stored, not in a second pass over the result. In a pass simulated in a
/// narrower format (`crate::precision`) the product and the scaled product are each a tensor of
/// that format, as PyTorch makes them.
pub fn scaled_matmul<F: Float>(a: ArrayView4<'_, F>, b: ArrayView4<'_, F>, scale: F) -> Array4<F> {
    if super::format::active().is_some() && scale != F::one() {
        let product = super::format::narrow(F::scaled_matmul(a, b, F::one()));
        return super::format::narrow(product * scale);
    }
    super::format::narrow(F::scaled_matmul(a, b, scale))
}

/// [`scaled_matmul`] on f32, by the fast kernel where it applies.
pub(super) fn scaled_matmul_f32(a: ArrayView4<'_, f32>, b: ArrayView4<'_, f32>, scale: f32) -> Array4<f32> {
    if fast() {
        if let Some(out) = gemm::batched(a.view(), b.view(), scale) {
            return out;
        }
    }
    scaled_matmul_reference(a, b, scale)
}

/// The formula: for every sequence b and head h, `a[b,h] · b[b,h]`, times `scale`.
pub fn scaled_matmul_reference<F: Float>(a: ArrayView4<'_, F>, b: ArrayView4<'_, F>, scale: F) -> Array4<F> {
    let (batch, heads, m, _) = a.dim();
    let n = b.dim().3;
    let mut out = Array4::zeros((batch, heads, m, n));
    for bi in 0..batch {
        for hi in 0..heads {
            let product = a.slice(s![bi, hi, .., ..]).dot(&b.slice(s![bi, hi, .., ..]));
            out.slice_mut(s![bi, hi, .., ..]).assign(&(product * scale));
        }
    }
    out
}

/// `[M,K]` · `[K,N]` -> `[M,N]`: `a @ b` for two matrices of any layout, the backward's
/// products.
pub fn matrix_product<F: Float>(a: ArrayView2<'_, F>, b: ArrayView2<'_, F>) -> Array2<F> {
    F::matrix_product(a, b)
}

/// [`matrix_product`] on f32, by the fast kernel where it applies.
pub(super) fn matrix_product_f32(a: ArrayView2<'_, f32>, b: ArrayView2<'_, f32>) -> Array2<f32> {
    if fast() {
        if let Some(out) = gemm::matmul(a, b) {
            return out;
        }
    }
    matrix_product_reference(a, b)
}

/// The formula: ndarray's product.
pub fn matrix_product_reference<F: Float>(a: ArrayView2<'_, F>, b: ArrayView2<'_, F>) -> Array2<F> {
    a.dot(&b)
}

/// Σ_i a_i · b_i: one element of a product, as `explain` recomputes it (in f64, beside the
/// terms that weigh most).
pub fn dot<F: Float>(a: ArrayView1<'_, F>, b: ArrayView1<'_, F>) -> F {
    a.dot(&b)
}

/// The backward of [`linear`] on rows: x `[N,in]`, W `[out,in]` and d loss / d y `[N,out]` ->
/// (dx `[N,in]` = dy · W, dW `[out,in]` = dyᵀ · x, db `[out]` = Σ_rows dy). dW sums over every
/// token of the batch: each token's use of the weight adds its share.
pub fn linear_backward<F: Float>(
    x: ArrayView2<'_, F>,
    weight: ArrayView2<'_, F>,
    d_out: ArrayView2<'_, F>,
) -> (Array2<F>, Array2<F>, Array1<F>) {
    F::linear_backward(x, weight, d_out)
}

/// [`linear_backward`] on f32. With the fast kernels, the rows of dy that are all zero (the MLM
/// loss's unlabelled positions) are left out of the products where that changes nothing but the
/// blocking of dW's sums (see `rows_that_count`), and db's column sums are shared between the
/// threads, with the formula's bits.
pub(super) fn linear_backward_f32(
    x: ArrayView2<'_, f32>,
    weight: ArrayView2<'_, f32>,
    d_out: ArrayView2<'_, f32>,
) -> (Array2<f32>, Array2<f32>, Array1<f32>) {
    if fast() {
        if let Some(rows) = rows_that_count(x, weight, d_out) {
            let mut dx = Array2::zeros((d_out.nrows(), weight.ncols()));
            let (d_out, x) = (rows_of(d_out, &rows), rows_of(x, &rows));
            for (&row, values) in rows.iter().zip(matrix_product(d_out.view(), weight).outer_iter()) {
                dx.row_mut(row).assign(&values);
            }
            return (dx, matrix_product(d_out.t(), x.view()), bias_gradient(d_out.view()));
        }
        return (matrix_product(d_out, weight), matrix_product(d_out.t(), x), bias_gradient(d_out));
    }
    linear_backward_reference(x, weight, d_out)
}

/// `matrix.select(Axis(0), rows)`, the rows copied whole on every thread where they are
/// contiguous.
fn rows_of(matrix: ArrayView2<'_, f32>, rows: &[usize]) -> Array2<f32> {
    copy::copy_rows(matrix, rows).unwrap_or_else(|| matrix.select(Axis(0), rows))
}

/// db = `d_out.sum_axis(Axis(0))`, the same bits, with the columns shared between the threads
/// where the kernel takes d_out's layout.
fn bias_gradient(d_out: ArrayView2<'_, f32>) -> Array1<f32> {
    column_sums::column_sums(d_out).unwrap_or_else(|| d_out.sum_axis(Axis(0)))
}

/// The formula: dx = dy · W, dW = dyᵀ · x, db = the sum of dy's rows.
pub fn linear_backward_reference<F: Float>(
    x: ArrayView2<'_, F>,
    weight: ArrayView2<'_, F>,
    d_out: ArrayView2<'_, F>,
) -> (Array2<F>, Array2<F>, Array1<F>) {
    (matrix_product(d_out, weight), matrix_product(d_out.t(), x), d_out.sum_axis(Axis(0)))
}

/// The rows of dy that are not all zero, when leaving the others out of [`linear_backward`]'s
/// products gives the same result; None when every row counts, or when it would not.
///
/// The MLM loss counts only the masked positions (about 1 in 7 in pretraining), so d loss / d
/// logits is zero on every other row, and so is the gradient of every stage after it until
/// attention mixes the tokens again: the MLM head's and the last layer's feed-forward and
/// attention output. A zero row of dy adds only ±0 to each sum of dW and db, and its row of dx
/// is 0 · W, zero. So dx and db come out the same bits; dW is the same sum of the other rows'
/// terms, but matrixmultiply adds its sums in blocks of 256 rows, and with fewer rows the blocks
/// fall elsewhere, so dW's rounding may differ (as it would with another batch). That holds while
/// the values a zero row meets are finite: a NaN or an infinity in its row of x, or anywhere in W,
/// would make those sums NaN, so then every row counts, as in PyTorch.
fn rows_that_count<F: Float>(
    x: ArrayView2<'_, F>,
    weight: ArrayView2<'_, F>,
    d_out: ArrayView2<'_, F>,
) -> Option<Vec<usize>> {
    let counts: Vec<bool> = d_out.outer_iter().map(|row| !every(row, |v| v == F::zero())).collect();
    if counts.iter().all(|&c| c) {
        return None;
    }
    let skipped_finite = counts.iter().zip(x.outer_iter()).all(|(&c, row)| c || every(row, F::is_finite));
    if !skipped_finite || !weight.outer_iter().all(|row| every(row, F::is_finite)) {
        return None;
    }
    Some(counts.iter().enumerate().filter(|(_, &c)| c).map(|(row, _)| row).collect())
}

/// Whether `holds` is true of every value of `row`, asked of 16 values at a time: a test per
/// value that stops at the first failure cannot be vectorized, and the backward asks this of
/// every value of the rows it leaves out.
fn every<F: Float>(row: ArrayView1<'_, F>, holds: impl Fn(F) -> bool) -> bool {
    match row.as_slice() {
        Some(values) => values.chunks(16).all(|chunk| chunk.iter().fold(true, |all, &v| all & holds(v))),
        None => row.iter().all(|&v| holds(v)),
    }
}

/// The backward of [`scaled_matmul`]: a `[B,nh,M,K]`, b `[B,nh,K,N]` and d loss / d out
/// `[B,nh,M,N]` -> (da = scale · dout · bᵀ, db = scale · aᵀ · dout), for every sequence and head.
pub fn scaled_matmul_backward<F: Float>(
    a: ArrayView4<'_, F>,
    b: ArrayView4<'_, F>,
    d_out: ArrayView4<'_, F>,
    scale: F,
) -> (Array4<F>, Array4<F>) {
    (scaled_matmul(d_out, transpose(b), scale), scaled_matmul(transpose(a), d_out, scale))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{with_kernels, Kernels};
    use ndarray::Array;

    /// Values in [-1, 1) from a fixed pattern.
    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len).map(|i| (((i + seed) * 7919) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    /// Whether every element of `got` is within `tol` (relative to 1 + |want|) of `want`.
    ///
    /// The tests pass 1e-5, about 170 float32 ulps of 1. Their sums have at most 300 terms in
    /// [-1, 1), and each partial sum is rounded once. The rounding errors add up like a random
    /// walk, about √K · 6e-8 · the sum's size, which is under 2e-6 here. The fast kernel and the
    /// reference (matrixmultiply) add in different orders, so they cannot be held to each other
    /// bit for bit; both are held to the f64 product instead.
    fn close<D: ndarray::Dimension>(got: &Array<f32, D>, want: &Array<f64, D>, tol: f64) -> Result<(), String> {
        assert_eq!(got.shape(), want.shape());
        for ((index, g), w) in got.indexed_iter().zip(want) {
            if (*g as f64 - w).abs() > tol * (1.0 + w.abs()) {
                return Err(format!("at {index:?}: expected {w}, got {g}"));
            }
        }
        Ok(())
    }

    #[test]
    fn backwards_match_finite_differences() {
        use crate::ops::gradcheck;
        let two = |a: ndarray::ArrayD<f64>| a.into_dimensionality::<ndarray::Ix2>().unwrap();
        let four = |a: ndarray::ArrayD<f64>| a.into_dimensionality::<ndarray::Ix4>().unwrap();
        let (x, w, b) = (gradcheck::values(&[4, 5], 11), gradcheck::values(&[3, 5], 12), gradcheck::values(&[3], 13));
        let b1 = b.clone().into_dimensionality::<ndarray::Ix1>().unwrap();
        let upstream = gradcheck::values(&[4, 3], 14);
        let (dx, dw, db) = linear_backward(two(x.clone()).view(), two(w.clone()).view(), two(upstream.clone()).view());
        let y = |x: &ndarray::ArrayD<f64>, w: &ndarray::ArrayD<f64>, b: &ndarray::Array1<f64>| {
            linear_reference(two(x.clone()).view(), two(w.clone()).view(), b.view()).into_dyn()
        };
        gradcheck::assert_close("linear dx", &dx.into_dyn(), &gradcheck::numeric(|x| y(x, &w, &b1), &x, &upstream));
        gradcheck::assert_close("linear dW", &dw.into_dyn(), &gradcheck::numeric(|w| y(&x, w, &b1), &w, &upstream));
        let by_bias = |b: &ndarray::ArrayD<f64>| y(&x, &w, &b.clone().into_dimensionality().unwrap());
        gradcheck::assert_close("linear db", &db.into_dyn(), &gradcheck::numeric(by_bias, &b, &upstream));

        let (a, m) = (gradcheck::values(&[2, 3, 4, 5], 15), gradcheck::values(&[2, 3, 5, 2], 16));
        let upstream = gradcheck::values(&[2, 3, 4, 2], 17);
        let scale = 0.35;
        let (da, dm) = scaled_matmul_backward(
            four(a.clone()).view(),
            four(m.clone()).view(),
            four(upstream.clone()).view(),
            scale,
        );
        let out = |a: &ndarray::ArrayD<f64>, m: &ndarray::ArrayD<f64>| {
            scaled_matmul_reference(four(a.clone()).view(), four(m.clone()).view(), scale).into_dyn()
        };
        gradcheck::assert_close("matmul da", &da.into_dyn(), &gradcheck::numeric(|a| out(a, &m), &a, &upstream));
        gradcheck::assert_close("matmul db", &dm.into_dyn(), &gradcheck::numeric(|m| out(&a, m), &m, &upstream));
    }

    #[test]
    fn linear_fast_and_reference_match_an_f64_product_on_awkward_shapes() {
        // One token, odd sizes on every axis, row counts on both sides of a 16- or 32-token panel.
        for (rows, n_in, n_out) in [(1, 1, 1), (1, 45, 7), (3, 45, 7), (17, 33, 5), (33, 64, 13), (70, 100, 24)] {
            let x = Array2::from_shape_vec((rows, n_in), values(rows * n_in, 1)).unwrap();
            let w = Array2::from_shape_vec((n_out, n_in), values(n_out * n_in, 2)).unwrap();
            let b = ndarray::Array1::from(values(n_out, 3));
            let want = linear_reference(x.mapv(f64::from).view(), w.mapv(f64::from).view(), b.mapv(f64::from).view());
            for kernels in [Kernels::Fast, Kernels::Reference] {
                let got = with_kernels(kernels, || linear(&x, w.view(), b.view()));
                if let Err(e) = close(&got, &want, 1e-5) {
                    panic!("linear {kernels:?} [{rows},{n_in}] x [{n_out},{n_in}]: {e}");
                }
            }
        }
    }

    #[test]
    fn matrix_products_match_an_f64_product_in_every_layout() {
        // The backward's products: dy · W (dy by rows: the fast kernel, transposed), dyᵀ · x
        // ("columns, rows": neither operand along the sum, so the reference runs for both
        // choices), and the other layouts a view can have, among them windows of wider arrays
        // and axes of length 1.
        for (m, k, n) in [(1, 1, 1), (1, 7, 5), (5, 1, 3), (13, 40, 1), (70, 33, 24), (300, 20, 45), (24, 300, 700)] {
            let a = Array2::from_shape_vec((m, k), values(m * k, 8)).unwrap();
            let b = Array2::from_shape_vec((k, n), values(k * n, 9)).unwrap();
            let want = matrix_product_reference(a.mapv(f64::from).view(), b.mapv(f64::from).view());
            let a_t = a.t().as_standard_layout().into_owned();
            let b_t = b.t().as_standard_layout().into_owned();
            let a_wide = ndarray::concatenate![Axis(1), a, a];
            let b_wide = ndarray::concatenate![Axis(0), b, b];
            let layouts = [
                ("rows, rows", a.view(), b.view()),
                ("rows, columns", a.view(), b_t.t()),
                ("columns, rows", a_t.t(), b.view()),
                ("columns, columns", a_t.t(), b_t.t()),
                ("window, window", a_wide.slice(s![.., k..]), b_wide.slice(s![k.., ..])),
            ];
            for (layout, a, b) in layouts {
                for kernels in [Kernels::Fast, Kernels::Reference] {
                    let got = with_kernels(kernels, || matrix_product(a, b));
                    if let Err(e) = close(&got, &want, 1e-5) {
                        panic!("matrix_product {kernels:?} {layout} [{m},{k}] x [{k},{n}]: {e}");
                    }
                }
            }
        }
    }

    #[test]
    fn backwards_fast_and_reference_match_an_f64_backward() {
        // As in the backward pass: x, W and dy by rows for a dense layer; q, k and v heads-first
        // views of [B,T,nh,hs] arrays, probs and the upstream gradients [B,nh,T,T] or heads-first.
        let two = |rows, cols, seed| Array2::from_shape_vec((rows, cols), values(rows * cols, seed)).unwrap();
        for (rows, n_in, n_out) in [(1, 3, 2), (17, 33, 5), (130, 64, 300)] {
            let (x, w, dy) = (two(rows, n_in, 10), two(n_out, n_in, 11), two(rows, n_out, 12));
            let want = linear_backward(x.mapv(f64::from).view(), w.mapv(f64::from).view(), dy.mapv(f64::from).view());
            for kernels in [Kernels::Fast, Kernels::Reference] {
                let (dx, dw, db) = with_kernels(kernels, || linear_backward(x.view(), w.view(), dy.view()));
                for (name, got, want) in [("dx", dx, &want.0), ("dW", dw, &want.1)] {
                    if let Err(e) = close(&got, want, 1e-5) {
                        panic!("linear backward {kernels:?} {name} [{rows},{n_in}] -> {n_out}: {e}");
                    }
                }
                close(&db, &want.2, 1e-5).unwrap_or_else(|e| panic!("linear backward {kernels:?} db: {e}"));
            }
        }
        for (batch, t, heads, hs) in [(1, 1, 1, 1), (1, 13, 4, 8), (2, 40, 2, 33)] {
            let as_heads = |seed| {
                Array::from_shape_vec((batch, t, heads, hs), values(batch * t * heads * hs, seed))
                    .unwrap()
                    .permuted_axes([0, 2, 1, 3])
            };
            let square =
                |seed| Array4::from_shape_vec((batch, heads, t, t), values(batch * heads * t * t, seed)).unwrap();
            let (q, k, v, d_ctx) = (as_heads(13), as_heads(14), as_heads(15), as_heads(16));
            let (probs, d_scores) = (square(17), square(18));
            let scale = (hs as f32).powf(-0.5);
            let f64s = |a: ArrayView4<'_, f32>| a.mapv(f64::from);
            let pairs = [
                ("scores", q.view(), transpose(k.view()), d_scores.view(), scale),
                ("context", probs.view(), v.view(), d_ctx.view(), 1.0),
            ];
            for (name, a, b, d_out, scale) in pairs {
                let want = scaled_matmul_backward(f64s(a).view(), f64s(b).view(), f64s(d_out).view(), scale as f64);
                for kernels in [Kernels::Fast, Kernels::Reference] {
                    let (da, db) = with_kernels(kernels, || scaled_matmul_backward(a, b, d_out, scale));
                    for (which, got, want) in [("da", da, &want.0), ("db", db, &want.1)] {
                        if let Err(e) = close(&got, want, 1e-5) {
                            panic!("{name} backward {kernels:?} {which} B={batch} T={t} nh={heads} hs={hs}: {e}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn zero_rows_of_the_upstream_gradient_are_left_out_only_where_that_changes_nothing() {
        // As in the MLM head: the gradient is zero on every unlabelled row. Rows 0, 2, 3 and 6
        // of 7 are zero here; the last row counts, so that the rows kept are not a prefix.
        let two = |rows, cols, seed| Array2::from_shape_vec((rows, cols), values(rows * cols, seed)).unwrap();
        let (x, w, mut dy) = (two(7, 33, 20), two(45, 33, 21), two(7, 45, 22));
        for zero in [0, 2, 3, 6] {
            dy.row_mut(zero).fill(if zero == 3 { -0.0 } else { 0.0 });
        }
        // In f64 the backward is the formula, every row counted.
        let want = linear_backward(x.mapv(f64::from).view(), w.mapv(f64::from).view(), dy.mapv(f64::from).view());
        assert_eq!(rows_that_count(x.view(), w.view(), dy.view()), Some(vec![1, 4, 5]));
        let (dx, dw, db) = with_kernels(Kernels::Fast, || linear_backward(x.view(), w.view(), dy.view()));
        for (name, got, want) in [("dx", dx.clone(), &want.0), ("dW", dw, &want.1)] {
            close(&got, want, 1e-5).unwrap_or_else(|e| panic!("with zero rows left out, {name}: {e}"));
        }
        close(&db, &want.2, 1e-5).unwrap_or_else(|e| panic!("with zero rows left out, db: {e}"));
        for zero in [0, 2, 3, 6] {
            assert!(dx.row(zero).iter().all(|&v| v == 0.0), "dx row {zero} is 0 · W");
        }

        // A non-finite value where a zero row meets it makes the formula's sums NaN: then every
        // row counts, and the fast path gives the formula's NaN.
        let mut x_nan = x.clone();
        x_nan[[2, 5]] = f32::NAN;
        assert_eq!(rows_that_count(x_nan.view(), w.view(), dy.view()), None);
        let (_, dw, _) = with_kernels(Kernels::Fast, || linear_backward(x_nan.view(), w.view(), dy.view()));
        assert!(dw.column(5).iter().all(|v| v.is_nan()), "a NaN in a zero row's x reaches dW, as in the formula");
        let mut w_inf = w.clone();
        w_inf[[7, 9]] = f32::INFINITY;
        assert_eq!(rows_that_count(x.view(), w_inf.view(), dy.view()), None);
        let (dx, _, _) = with_kernels(Kernels::Fast, || linear_backward(x.view(), w_inf.view(), dy.view()));
        assert!(dx[[0, 9]].is_nan(), "0 · inf reaches a zero row's dx, as in the formula");
        // The scans read every value, in the last, shorter chunk of a row too.
        let mut x_late = x.clone();
        x_late[[6, 32]] = f32::INFINITY;
        assert_eq!(rows_that_count(x_late.view(), w.view(), dy.view()), None);
        let mut dy_late = dy.clone();
        dy_late[[3, 44]] = 1e-30;
        assert_eq!(rows_that_count(x.view(), w.view(), dy_late.view()), Some(vec![1, 3, 4, 5]));
        // Every row nonzero: nothing to leave out.
        assert_eq!(rows_that_count(x.view(), w.view(), two(7, 45, 23).view()), None);
    }

    #[test]
    fn matmul_fast_and_reference_match_an_f64_product_in_every_layout() {
        // As in attention: Q and K as heads-first views of [B,T,nh,hs] arrays, K transposed;
        // and P [B,nh,T,T] by V, a heads-first view. T = 1 and odd sizes included, and sums of
        // nothing (hs = 0, T = 0), whose outputs the kernel does not write.
        for (batch, t, heads, hs) in
            [(1, 1, 1, 1), (1, 13, 4, 8), (2, 7, 3, 5), (2, 40, 2, 33), (1, 3, 2, 0), (1, 0, 2, 4)]
        {
            let as_heads = |seed| {
                Array::from_shape_vec((batch, t, heads, hs), values(batch * t * heads * hs, seed))
                    .unwrap()
                    .permuted_axes([0, 2, 1, 3])
            };
            let (q, k, v) = (as_heads(4), as_heads(5), as_heads(6));
            let k_t = k.view().permuted_axes([0, 1, 3, 2]);
            let scale = (hs as f32).powf(-0.5);
            let want = scaled_matmul_reference(q.mapv(f64::from).view(), k_t.mapv(f64::from).view(), scale as f64);
            let p = Array4::from_shape_vec((batch, heads, t, t), values(batch * heads * t * t, 7)).unwrap();
            let want_context = scaled_matmul_reference(p.mapv(f64::from).view(), v.mapv(f64::from).view(), 1.0);
            for kernels in [Kernels::Fast, Kernels::Reference] {
                let got = with_kernels(kernels, || scaled_matmul(q.view(), k_t.view(), scale));
                if let Err(e) = close(&got, &want, 1e-5) {
                    panic!("scores {kernels:?} B={batch} T={t} nh={heads} hs={hs}: {e}");
                }
                let got = with_kernels(kernels, || matmul(p.view(), v.view()));
                if let Err(e) = close(&got, &want_context, 1e-5) {
                    panic!("context {kernels:?} B={batch} T={t} nh={heads} hs={hs}: {e}");
                }
            }
        }
    }
}
