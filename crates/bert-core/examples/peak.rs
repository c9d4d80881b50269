//! How close the matrix products come to this machine's limit: its fused multiply-add peak, and
//! each of a bert-base forward pass's products as a share of it.
//!
//! ```text
//! cargo run --release -p bert-core --example peak -- [--tokens 12,128,512] [--min-secs 0.5]
//!     [--shape H,I,V,nh]
//! ```
//!
//! The peak is every thread running independent chains of fused multiply-adds on whole vector
//! registers (AVX-512 where the CPU has it, else AVX2), nothing loaded or stored: 2 flops per
//! lane per instruction. Each product is then timed alone, on the shapes of bert-base-uncased at
//! batch 1 (H = 768, I = 3,072, V = 30,522, nh = 12, hs = 64; `--shape` gives others, such as the
//! course models' 256,1024,5607,4 with `--tokens 4096`), through the operations the model
//! calls (`ops::linear`, `ops::scaled_matmul`) with the default kernels. A dense layer's weight
//! is one of 12 copies, taken in turn, as the 12 layers' are: together 113 MB or more, more than
//! any cache, so each comes from memory as in a pass; each layer's weight gradient dW = dyᵀ · x is
//! timed after it. One JSON line per measurement: the median
//! time of the calls over `--min-secs`, its GFLOP/s (2·M·K·N flops) and its share of the peak.
//!
//! The thread count is `BERT_TRACE_THREADS`, or else all physical cores.

use std::time::Instant;

use bert_core::ops;
use ndarray::{Array1, Array2, Array4};

fn main() {
    let mut tokens = vec![12, 128, 512];
    let mut min_secs = 0.5;
    let mut shape = (768, 3072, 30522, 12);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--tokens" => {
                tokens = value.split(',').map(|t| t.trim().parse().unwrap_or_else(|_| usage("--tokens"))).collect()
            }
            "--min-secs" => min_secs = value.parse().unwrap_or_else(|_| usage("--min-secs takes seconds")),
            "--shape" => {
                let sizes: Vec<usize> = value.split(',').map(|n| n.trim().parse().unwrap_or(0)).collect();
                match sizes[..] {
                    [h, i, v, heads] if h > 0 && i > 0 && v > 0 && heads > 0 && h % heads == 0 => {
                        shape = (h, i, v, heads)
                    }
                    _ => usage("--shape takes H,I,V,nh: four sizes above 0, H a multiple of nh"),
                }
            }
            other => usage(&format!("unknown option {other}")),
        }
    }
    // As the command does at its start (bert-trace's main.rs).
    ops::keep_freed_memory();
    if let Ok(text) = std::env::var("BERT_TRACE_THREADS") {
        let n: usize = text.trim().parse().unwrap_or_else(|_| usage("BERT_TRACE_THREADS is not a number"));
        ops::set_threads(n).unwrap_or_else(|e| usage(&e.to_string()));
    }
    let threads = ops::threads();
    let (peak, vector) = fma_peak(threads, min_secs);
    println!("{}", serde_json::json!({ "measure": "fma peak", "threads": threads, "vector": vector, "gflops": peak }));

    let (h, i, v, heads) = shape;
    let hs = h / heads;
    for &t in &tokens {
        let report = |name: &str, flops: f64, ms: f64| {
            let gflops = flops / ms / 1e6;
            println!(
                "{}",
                serde_json::json!({
                    "measure": name, "tokens": t, "threads": threads, "ms": ms,
                    "gflops": gflops, "share_of_peak": gflops / peak,
                })
            );
        };
        for (name, n_in, n_out, copies) in [
            ("attention.query (and key, value, output): H -> H", h, h, 12),
            ("ffn.intermediate: H -> I", h, i, 12),
            ("ffn.output: I -> H", i, h, 12),
            ("mlm decoder: H -> V", h, v, 1),
        ] {
            let x = Array2::from_shape_fn((t, n_in), |(r, c)| pattern(r * n_in + c, 1));
            let weights: Vec<Array2<f32>> = (0..copies)
                .map(|copy| Array2::from_shape_fn((n_out, n_in), |(r, c)| pattern(r * n_in + c, 2 + copy)))
                .collect();
            let bias = Array1::from_shape_fn(n_out, |c| pattern(c, 99));
            let mut next = 0;
            let ms = median_ms(min_secs, || {
                let w = &weights[next % copies];
                next += 1;
                std::hint::black_box(ops::linear(&x, w.view(), bias.view()));
            });
            report(name, 2.0 * (t * n_in * n_out) as f64, ms);
            // The backward's weight gradient of the same layer, dW = dyᵀ · x, summed over the
            // tokens: the reference's product (matrixmultiply), as `ops::linear_backward` runs it.
            let d_out = Array2::from_shape_fn((t, n_out), |(r, c)| pattern(r * n_out + c, 98));
            let ms = median_ms(min_secs, || {
                std::hint::black_box(ops::matrix_product(d_out.t(), x.view()));
            });
            report(&format!("{name}, its dW = dyᵀ · x"), 2.0 * (t * n_in * n_out) as f64, ms);
        }
        // The per-head products, laid out as the model lays them out: q, k and v heads-first
        // views of [B,T,nh,hs] arrays, the probabilities [B,nh,T,T].
        let as_heads = |seed| {
            Array4::from_shape_fn((1, t, heads, hs), |(_, r, hh, c)| pattern((r * heads + hh) * hs + c, seed))
                .permuted_axes([0, 2, 1, 3])
        };
        let (q, k, value) = (as_heads(3), as_heads(4), as_heads(5));
        let probs = Array4::from_shape_fn((1, heads, t, t), |(_, hh, r, c)| pattern((hh * t + r) * t + c, 6));
        let scale = (hs as f32).powf(-0.5);
        let ms = median_ms(min_secs, || {
            std::hint::black_box(ops::scaled_matmul(q.view(), ops::transpose(k.view()), scale));
        });
        report("attention.scores: q · kᵀ per head (K = hs = 64)", 2.0 * (heads * t * hs * t) as f64, ms);
        let ms = median_ms(min_secs, || {
            std::hint::black_box(ops::matmul(probs.view(), value.view()));
        });
        report("attention.context: probs · v per head (K = T)", 2.0 * (heads * t * t * hs) as f64, ms);
    }
}

/// Values in [-1, 1) from a fixed pattern.
fn pattern(i: usize, seed: usize) -> f32 {
    (((i + seed * 7907) * 7919) % 1000) as f32 / 500.0 - 1.0
}

/// The median time of `run`, in ms, over at least 5 calls and `min_secs`, after one warm-up.
fn median_ms(min_secs: f64, mut run: impl FnMut()) -> f64 {
    run();
    let mut times = Vec::new();
    let begun = Instant::now();
    while times.len() < 5 || begun.elapsed().as_secs_f64() < min_secs {
        let started = Instant::now();
        run();
        times.push(started.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// The GFLOP/s of `threads` threads each running fused multiply-adds for `secs`, and the vector
/// width used.
fn fma_peak(threads: usize, secs: f64) -> (f64, &'static str) {
    const ROUND: u64 = 1 << 23;
    let (per_round, fmas, vector): (u64, fn(u64), &'static str) = fma_kernel();
    let begun = Instant::now();
    let mut rounds = 0u64;
    while begun.elapsed().as_secs_f64() < secs {
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| fmas(ROUND));
            }
        });
        rounds += 1;
    }
    let flops = (rounds * threads as u64 * ROUND * per_round) as f64;
    (flops / begun.elapsed().as_secs_f64() / 1e9, vector)
}

/// Flops per loop iteration, the loop, and its name, for the widest vectors this CPU has.
fn fma_kernel() -> (u64, fn(u64), &'static str) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512 (checked above).
            return (12 * 16 * 2, |n| unsafe { fma_avx512(n) }, "avx512");
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            return (12 * 8 * 2, |n| unsafe { fma_avx2(n) }, "avx2");
        }
    }
    usage("this CPU has neither AVX-512 nor AVX2 with FMA")
}

/// 12 independent chains of fused multiply-adds on zeros, in assembly: written in Rust, the
/// compiler kept some chains in memory, which halved the rate. Twelve cover a latency of 4 to 6
/// cycles on two FMA units.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_avx512(iterations: u64) {
    // The loop counts down to 0 after its first pass: 0 passes would be 2^64.
    assert!(iterations > 0, "at least one pass");
    std::arch::asm!(
        // vpxord, not vxorps: AVX-512's vxorps needs AVX512DQ, which avx512f does not imply.
        "vpxord {a}, {a}, {a}",
        "vpxord zmm0, zmm0, zmm0", "vpxord zmm1, zmm1, zmm1", "vpxord zmm2, zmm2, zmm2",
        "vpxord zmm3, zmm3, zmm3", "vpxord zmm4, zmm4, zmm4", "vpxord zmm5, zmm5, zmm5",
        "vpxord zmm6, zmm6, zmm6", "vpxord zmm7, zmm7, zmm7", "vpxord zmm8, zmm8, zmm8",
        "vpxord zmm9, zmm9, zmm9", "vpxord zmm10, zmm10, zmm10", "vpxord zmm11, zmm11, zmm11",
        "2:",
        "vfmadd231ps zmm0, {a}, {a}", "vfmadd231ps zmm1, {a}, {a}", "vfmadd231ps zmm2, {a}, {a}",
        "vfmadd231ps zmm3, {a}, {a}", "vfmadd231ps zmm4, {a}, {a}", "vfmadd231ps zmm5, {a}, {a}",
        "vfmadd231ps zmm6, {a}, {a}", "vfmadd231ps zmm7, {a}, {a}", "vfmadd231ps zmm8, {a}, {a}",
        "vfmadd231ps zmm9, {a}, {a}", "vfmadd231ps zmm10, {a}, {a}", "vfmadd231ps zmm11, {a}, {a}",
        "dec {n}",
        "jnz 2b",
        a = out(zmm_reg) _,
        n = inout(reg) iterations => _,
        out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _, out("zmm4") _, out("zmm5") _,
        out("zmm6") _, out("zmm7") _, out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
        options(nostack, nomem),
    );
}

/// The same with AVX2's 8-lane registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_avx2(iterations: u64) {
    // The loop counts down to 0 after its first pass: 0 passes would be 2^64.
    assert!(iterations > 0, "at least one pass");
    std::arch::asm!(
        "vxorps {a}, {a}, {a}",
        "vxorps ymm0, ymm0, ymm0", "vxorps ymm1, ymm1, ymm1", "vxorps ymm2, ymm2, ymm2",
        "vxorps ymm3, ymm3, ymm3", "vxorps ymm4, ymm4, ymm4", "vxorps ymm5, ymm5, ymm5",
        "vxorps ymm6, ymm6, ymm6", "vxorps ymm7, ymm7, ymm7", "vxorps ymm8, ymm8, ymm8",
        "vxorps ymm9, ymm9, ymm9", "vxorps ymm10, ymm10, ymm10", "vxorps ymm11, ymm11, ymm11",
        "2:",
        "vfmadd231ps ymm0, {a}, {a}", "vfmadd231ps ymm1, {a}, {a}", "vfmadd231ps ymm2, {a}, {a}",
        "vfmadd231ps ymm3, {a}, {a}", "vfmadd231ps ymm4, {a}, {a}", "vfmadd231ps ymm5, {a}, {a}",
        "vfmadd231ps ymm6, {a}, {a}", "vfmadd231ps ymm7, {a}, {a}", "vfmadd231ps ymm8, {a}, {a}",
        "vfmadd231ps ymm9, {a}, {a}", "vfmadd231ps ymm10, {a}, {a}", "vfmadd231ps ymm11, {a}, {a}",
        "dec {n}",
        "jnz 2b",
        a = out(ymm_reg) _,
        n = inout(reg) iterations => _,
        out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _, out("ymm4") _, out("ymm5") _,
        out("ymm6") _, out("ymm7") _, out("ymm8") _, out("ymm9") _, out("ymm10") _, out("ymm11") _,
        options(nostack, nomem),
    );
}

fn usage(problem: &str) -> ! {
    eprintln!("peak: {problem}\nusage: peak [--tokens 12,128,512] [--min-secs 0.5] [--shape H,I,V,nh]");
    std::process::exit(2)
}
