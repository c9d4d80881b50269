//! Our dense-layer product (`ops::linear`, `ops/kernels/gemm.rs`) against the `gemm` crate that
//! candle uses, on BERT's shapes, with the thread count of `BERT_TRACE_THREADS` for both.
//!
//! ```text
//! BERT_TRACE_THREADS=1 cargo run --release -p bert-core --example gemm_crate
//! BERT_TRACE_THREADS=2 cargo run --release -p bert-core --example gemm_crate
//! ```
//!
//! For each shape it prints the median time of each side, their ratio, the largest difference
//! between the two results, and whether the crate gives the same bits with one thread and with
//! this many (ours is tested to, in `ops/kernels/gemm.rs` and `tests/`).

use std::time::{Duration, Instant};

use bert_core::ops;
use ndarray::{Array1, Array2};

/// Values in [-1, 1) from a fixed pattern.
fn values(len: usize, seed: usize) -> Vec<f32> {
    (0..len).map(|i| (((i + seed) * 7919) % 1000) as f32 / 500.0 - 1.0).collect()
}

/// The median time of `run`, over at least five runs and half a second, after a warm-up.
fn median(mut run: impl FnMut()) -> Duration {
    run();
    let start = Instant::now();
    let mut times = Vec::new();
    while times.len() < 5 || start.elapsed() < Duration::from_millis(500) {
        let t = Instant::now();
        run();
        times.push(t.elapsed());
    }
    times.sort();
    times[times.len() / 2]
}

/// out `[M,N]` = x `[M,K]` · Wᵀ + b with the `gemm` crate: out starts as the bias in every row and
/// the product is added onto it, as in `ops::linear`.
fn crate_linear(x: &Array2<f32>, w: &Array2<f32>, b: &Array1<f32>, threads: usize) -> Array2<f32> {
    let (m, k) = x.dim();
    let n = w.nrows();
    let mut out = Array2::from_shape_fn((m, n), |(_, j)| b[j]);
    let parallelism = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    // SAFETY: every pointer is to a contiguous array of the dimensions and strides given: out
    // [M,N] row-major, x [M,K] row-major, and Wᵀ [K,N] read from W [N,K] (row stride 1, column
    // stride K); none of them overlaps another.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            true,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
    out
}

fn main() {
    let threads = threads_from_env();
    println!(
        "{:>4} {:>6} {:>6} {:>3} {:>9} {:>10} {:>10} {:>10} {:>16}",
        "T", "N", "K", "thr", "ours ms", "gemm ms", "gemm/ours", "max|Δ|", "gemm 1 = N thr"
    );
    for t in [12, 128, 512] {
        for (n, k) in [(768, 768), (3072, 768), (768, 3072), (30522, 768)] {
            let x = Array2::from_shape_vec((t, k), values(t * k, 1)).unwrap();
            let w = Array2::from_shape_vec((n, k), values(n * k, 2)).unwrap();
            let b = Array1::from(values(n, 3));
            let ours = median(|| drop(ops::linear(&x, w.view(), b.view())));
            let theirs = median(|| drop(crate_linear(&x, &w, &b, threads)));
            let (a, c) = (ops::linear(&x, w.view(), b.view()), crate_linear(&x, &w, &b, threads));
            let max_diff = a.iter().zip(&c).map(|(p, q)| (p - q).abs()).fold(0.0f32, f32::max);
            let one = crate_linear(&x, &w, &b, 1);
            let same = one.iter().zip(&c).all(|(p, q)| p.to_bits() == q.to_bits());
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            println!(
                "{t:>4} {n:>6} {k:>6} {threads:>3} {:>9.3} {:>10.3} {:>10.2} {max_diff:>10.2e} {same:>16}",
                ms(ours),
                ms(theirs),
                ms(theirs) / ms(ours)
            );
        }
    }
}

/// `BERT_TRACE_THREADS`, set for our pool and for matrixmultiply (before any thread exists), as
/// the command does; else the physical cores.
fn threads_from_env() -> usize {
    match std::env::var("BERT_TRACE_THREADS").ok().and_then(|v| v.trim().parse::<usize>().ok()) {
        Some(n) => {
            std::env::set_var(ops::MATMUL_ENV_VAR, n.min(ops::MAX_MATMUL_THREADS).to_string());
            ops::set_threads(n).expect("BERT_TRACE_THREADS")
        }
        None => ops::threads(),
    }
}
