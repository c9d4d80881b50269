//! Benchmarks bert-core's forward pass; `scripts/bench.sh` runs it next to
//! `scripts/bench_pytorch.py` and prints both in one table.
//!
//! ```text
//! cargo run --release -p bert-core --example bench -- forward --model DIR
//!     [--tokens 12,128,512] [--batch 1,8] [--trace off,on,rerun] [--out DUMP_DIR] [--min-secs 3]
//! cargo run --release -p bert-core --example bench -- profile --model DIR [--tokens 12] [--batch 1]
//! cargo run --release -p bert-core --example bench -- open --model DIR
//! cargo run --release -p bert-core --example bench -- cold --model DIR --out DUMP_DIR TEXT
//! ```
//!
//! `forward` prints one JSON line per configuration: the median wall time of the forward pass
//! over at least three runs (after one warm-up run), with tracing off (the [`Discard`] sink), on
//! (every stage written by a [`DumpWriter`] into an empty directory, as a first `bert-trace
//! --out DIR` does) or rerun (into the directory that holds the previous run's dump, as every
//! later run does). Before each timed run, outside the timing, the file system is synced: the
//! previous run's files are then on disk, and neither their write-back nor their deletion falls
//! into the next run. The token ids are the same deterministic pattern `bench_pytorch.py` uses,
//! with no padding.
//!
//! `profile` runs the forward pass and prints, for each kind of stage (`attention.scores`,
//! `ffn.intermediate`, ...), the time spent computing it, summed over the layers: the time from
//! the previous stage to this one, taken by a sink that looks at nothing.
//!
//! `open` times [`BertModel::load`] alone (config, memory map, tokenizer) and reports how many
//! parameters are read straight from the map. `cold` is the whole `bert-trace` command in one
//! process: load, tokenize TEXT, trace every stage into DUMP_DIR; run it under
//! `/usr/bin/time -v` for the wall time and the peak RSS.
//!
//! The thread count is bert-core's setting ([`bert_core::threads`]): `BERT_TRACE_THREADS`, or
//! else all physical cores.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bert_core::dump::DumpWriter;
use bert_core::manifest::Inputs;
use bert_core::stage::Stage;
use bert_core::trace::{Discard, Sink, TensorView};
use bert_core::{Batch, BertModel};
use ndarray::Array2;

struct Args {
    command: String,
    model: PathBuf,
    out: PathBuf,
    tokens: Vec<usize>,
    batch: Vec<usize>,
    trace: Vec<Trace>,
    min_secs: f64,
    text: Option<String>,
}

fn parse_args() -> Args {
    let mut raw = std::env::args().skip(1);
    let command = raw.next().unwrap_or_else(|| usage("no command"));
    let mut args = Args {
        command,
        model: PathBuf::new(),
        out: PathBuf::from("target/bench-dumps"),
        tokens: vec![12, 128, 512],
        batch: vec![1, 8],
        trace: vec![Trace::Off, Trace::On, Trace::Rerun],
        min_secs: 3.0,
        text: None,
    };
    let list = |value: String| -> Vec<usize> {
        value
            .split(',')
            .map(|v| v.trim().parse().unwrap_or_else(|_| usage(&format!("`{v}` is not a number"))))
            .collect()
    };
    while let Some(flag) = raw.next() {
        let mut value = || raw.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--model" => args.model = value().into(),
            "--out" => args.out = value().into(),
            "--tokens" => args.tokens = list(value()),
            "--batch" => args.batch = list(value()),
            "--trace" => {
                args.trace = value()
                    .split(',')
                    .map(|v| match v {
                        "off" => Trace::Off,
                        "on" => Trace::On,
                        "rerun" => Trace::Rerun,
                        _ => usage("--trace takes a list of off, on and rerun"),
                    })
                    .collect()
            }
            "--min-secs" => args.min_secs = value().parse().unwrap_or_else(|_| usage("--min-secs takes seconds")),
            text if !text.starts_with("--") && args.text.is_none() => args.text = Some(text.to_string()),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if args.model.as_os_str().is_empty() {
        usage("--model DIR is required");
    }
    args
}

/// What the forward pass does with its stages (see the module documentation).
#[derive(Clone, Copy, PartialEq)]
enum Trace {
    Off,
    On,
    Rerun,
}

impl Trace {
    fn name(self) -> &'static str {
        match self {
            Trace::Off => "off",
            Trace::On => "on",
            Trace::Rerun => "rerun",
        }
    }
}

/// Writes every dirty page of the file system to disk (the `sync` command: std has no call for
/// it), so that a timed run starts with none of the previous run's writing still to do.
fn sync_file_system() {
    let _ = std::process::Command::new("sync").status();
}

fn usage(problem: &str) -> ! {
    eprintln!("bench: {problem}\nusage: bench forward|open|cold --model DIR [options] (see examples/bench.rs)");
    std::process::exit(2)
}

fn main() {
    let start = Instant::now();
    let args = parse_args();
    let threads = bert_core::threads::init_from_env().unwrap_or_else(|e| usage(&e.to_string()));
    match args.command.as_str() {
        "forward" => forward(&args, threads),
        "profile" => profile(&args),
        "open" => open(&args),
        "cold" => cold(&args, start),
        other => usage(&format!("unknown command {other}")),
    }
}

/// The token ids `bench_pytorch.py` also uses: [CLS], a fixed pseudo-random walk through the
/// ordinary vocabulary, [SEP]; every sequence of the batch differs, none is padded.
fn synthetic_batch(batch: usize, tokens: usize) -> Batch {
    const CLS: i64 = 101;
    const SEP: i64 = 102;
    let ids = Array2::from_shape_fn((batch, tokens), |(b, t)| match t {
        0 => CLS,
        t if t == tokens - 1 => SEP,
        t => 1000 + ((b * tokens + t) as i64 * 7919) % 29000,
    });
    Batch {
        ids,
        token_type_ids: Array2::zeros((batch, tokens)),
        attention_mask: Array2::ones((batch, tokens)),
        tokens: vec![Vec::new(); batch],
    }
}

fn load(dir: &Path) -> BertModel {
    BertModel::load(dir).unwrap_or_else(|e| {
        eprintln!("bench: {e}");
        std::process::exit(1)
    })
}

/// Times one forward pass per call of `run`, each after a call of `prepare` that is not timed,
/// after one warm-up run, until `min_secs` have passed and at least three runs are in; returns
/// the sorted run times and the process's mean CPU time per run.
fn time_runs(min_secs: f64, mut prepare: impl FnMut(), mut run: impl FnMut()) -> (Vec<Duration>, Option<f64>) {
    prepare();
    run();
    let mut times = Vec::new();
    let mut cpu = Some(0.0);
    let begun = Instant::now();
    while times.len() < 3 || (begun.elapsed().as_secs_f64() < min_secs && times.len() < 50) {
        prepare();
        let cpu_before = cpu_secs();
        let started = Instant::now();
        run();
        times.push(started.elapsed());
        cpu = cpu.zip(cpu_before).zip(cpu_secs()).map(|((total, before), after)| total + after - before);
    }
    let cpu = cpu.map(|total| total / times.len() as f64);
    times.sort();
    (times, cpu)
}

/// The CPU time this process has used (all threads, user + system), from /proc/self/stat on
/// Linux. With one thread it measures the work done, which a busy machine does not change much,
/// unlike the wall time: good for comparing two builds on a shared machine.
fn cpu_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // Linux reports these in USER_HZ, which is 100 on every mainstream platform.
    Some(ticks / 100.0)
}

fn forward(args: &Args, threads: usize) {
    let model = load(&args.model);
    for &batch_size in &args.batch {
        for &tokens in &args.tokens {
            let batch = synthetic_batch(batch_size, tokens);
            for &trace in &args.trace {
                let dir = args.out.join(format!("b{batch_size}_t{tokens}"));
                let inputs = Inputs {
                    texts: vec![format!("{tokens} synthetic tokens"); batch_size],
                    pair: None,
                };
                let prepare = || {
                    if trace == Trace::On {
                        let _ = std::fs::remove_dir_all(&dir);
                    }
                    sync_file_system();
                };
                let run = || {
                    if trace == Trace::Off {
                        model.trace(&batch, &mut Discard, None).expect("trace");
                    } else {
                        let mut sink = DumpWriter::create(&dir, serde_json::json!({"program": "bench"}), "bench".into(), inputs.clone(), false)
                            .expect("dump directory");
                        model.trace(&batch, &mut sink, None).expect("trace");
                    }
                };
                let (times, cpu) = time_runs(args.min_secs, prepare, run);
                let ms = |d: Duration| d.as_secs_f64() * 1e3;
                println!(
                    "{}",
                    serde_json::json!({
                        "side": "bert-core",
                        "batch": batch_size,
                        "tokens": tokens,
                        "trace": trace.name(),
                        "threads": threads,
                        "runs": times.len(),
                        "median_ms": ms(times[times.len() / 2]),
                        "min_ms": ms(times[0]),
                        "cpu_ms": cpu.map(|c| c * 1e3),
                    })
                );
            }
        }
    }
}

/// Notes the time at which each stage arrives; copies nothing.
struct StageClock {
    last: Instant,
    /// (stage kind pattern, seconds), in execution order of first appearance.
    spent: Vec<(String, f64)>,
}

impl Sink for StageClock {
    fn emit(&mut self, stage: Stage, _: TensorView<'_>) -> bert_core::Result<()> {
        let now = Instant::now();
        let kind = stage.info().pattern.to_string();
        let secs = (now - self.last).as_secs_f64();
        match self.spent.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, total)) => *total += secs,
            None => self.spent.push((kind, secs)),
        }
        self.last = Instant::now();
        Ok(())
    }
}

fn profile(args: &Args) {
    let model = load(&args.model);
    let batch = synthetic_batch(args.batch[0], args.tokens[0]);
    let runs = 5;
    let mut clock = StageClock { last: Instant::now(), spent: Vec::new() };
    model.trace(&batch, &mut Discard, None).expect("trace");
    for _ in 0..runs {
        clock.last = Instant::now();
        model.trace(&batch, &mut clock, None).expect("trace");
    }
    let total: f64 = clock.spent.iter().map(|(_, s)| s).sum();
    println!("batch {} x {} tokens, mean of {runs} runs: {:.1} ms", args.batch[0], args.tokens[0], total / runs as f64 * 1e3);
    for (kind, secs) in &clock.spent {
        println!("  {kind:<32} {:>8.2} ms {:>5.1}%", secs / runs as f64 * 1e3, secs / total * 100.0);
    }
}

fn open(args: &Args) {
    let begun = Instant::now();
    let model = load(&args.model);
    let elapsed = begun.elapsed();
    let mut params = vec![
        &model.embeddings.word_embeddings,
        &model.embeddings.position_embeddings,
        &model.embeddings.token_type_embeddings,
    ];
    for layer in &model.layers {
        let attention = &layer.attention;
        for linear in [
            &attention.self_attention.query,
            &attention.self_attention.key,
            &attention.self_attention.value,
            &attention.output.dense,
            &layer.feed_forward.intermediate,
            &layer.feed_forward.output,
        ] {
            params.extend([&linear.weight, &linear.bias]);
        }
    }
    let mapped = params.iter().filter(|p| p.is_mapped()).count();
    println!(
        "{}",
        serde_json::json!({
            "open_ms": elapsed.as_secs_f64() * 1e3,
            "matrices_and_tables_mapped": mapped,
            "matrices_and_tables": params.len(),
        })
    );
}

fn cold(args: &Args, process_start: Instant) {
    let text = args.text.clone().unwrap_or_else(|| usage("cold needs a TEXT"));
    let model = load(&args.model);
    let loaded = process_start.elapsed();
    let texts = vec![text];
    let batch = model.encode(&texts, None, false).expect("tokenize");
    let inputs = Inputs { texts, pair: None };
    let mut sink = DumpWriter::create(&args.out, serde_json::json!({"program": "bench"}), "bench".into(), inputs, true)
        .expect("dump directory");
    let tokenized = process_start.elapsed();
    model.trace(&batch, &mut sink, None).expect("trace");
    let done = process_start.elapsed();
    println!(
        "{}",
        serde_json::json!({
            "tokens": batch.dims().1,
            "stages_written": sink.written().len(),
            "load_ms": loaded.as_secs_f64() * 1e3,
            "tokenize_ms": (tokenized - loaded).as_secs_f64() * 1e3,
            "trace_ms": (done - tokenized).as_secs_f64() * 1e3,
            "in_process_ms": done.as_secs_f64() * 1e3,
        })
    );
}
