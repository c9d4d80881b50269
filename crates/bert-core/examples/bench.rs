//! Benchmarks bert-core's forward pass; `scripts/bench.sh` runs it next to
//! `scripts/bench_pytorch.py` and prints both in one table.
//!
//! ```text
//! cargo run --release -p bert-core --example bench -- forward --model DIR
//!     [--tokens 12,128,512] [--batch 1,8] [--trace off,on,rerun,rerun-unsynced,memory] [--out DUMP_DIR]
//!     [--min-secs 3]
//! cargo run --release -p bert-core --example bench -- profile --model DIR [--tokens 12] [--batch 1]
//!     [--trace off,rerun] [--out DUMP_DIR]
//! cargo run --release -p bert-core --example bench -- backward --model DIR [--tokens 128] [--batch 1]
//! cargo run --release -p bert-core --example bench -- open --model DIR
//! cargo run --release -p bert-core --example bench -- cold --model DIR --out DUMP_DIR TEXT
//! cargo run --release -p bert-core --example bench -- floor --model DIR
//! ```
//!
//! `forward` prints one JSON line per configuration: the median wall time of the forward pass
//! over at least three runs (after one warm-up run), with tracing off (the [`Discard`] sink), on
//! (every stage written by a [`DumpWriter`] into an empty directory, as a first `bert-trace
//! --out DIR` does) or rerun (into the directory that holds the previous run's dump, as every
//! later run does). Before each timed run, outside the timing, the file system is synced: the
//! previous run's files are then on disk, and neither their write-back nor their deletion falls
//! into the next run. `rerun-unsynced` leaves that sync out: the previous run's pages are then
//! still dirty in the page cache, as they are for a rerun within half a minute of the last one
//! (the kernel writes dirty pages back after `vm.dirty_expire_centisecs`, 30 s by default). The
//! token ids are the same deterministic pattern `bench_pytorch.py` uses, with no padding.
//! `memory` keeps every stage in memory instead (a [`bert_core::Memory`] sink), as the Python
//! package keeps them: `scripts/bench_python.py` compares the two.
//!
//! `profile` runs the forward pass and prints, for each kind of stage (`attention.scores`,
//! `ffn.intermediate`, ...), the time spent on it, summed over the layers: the time from the
//! previous stage to this one having been handed on, to nothing (trace off, the default) or to a
//! dump writer (each `--trace` mode as in `forward`, in alternating runs, one column each). The
//! difference between two columns is where tracing's cost falls.
//!
//! `backward` times one forward and backward pass ([`BertModel::gradients`]) of a checkpoint with
//! the MLM head, with every 7th position labelled with its own id (the labels
//! `bench_pytorch.py --backward` gives), against the forward alone; and a training step, the
//! same followed by AdamW on every parameter, as `bert-trace train` takes it.
//!
//! `open` times [`BertModel::load`] alone (config, memory map, tokenizer) and reports how many
//! parameters are read straight from the map. `cold` is the whole `bert-trace` command in one
//! process: load, tokenize TEXT, trace every stage into DUMP_DIR; run it under
//! `/usr/bin/time -v` for the wall time and the peak RSS.
//!
//! `floor` is the least any run of the command spends on the checkpoint: it maps
//! `model.safetensors`, reads every byte of it once (the pages shared between the threads), and
//! exits. `scripts/bench_command.py` times it as a process beside `bert-trace`.
//!
//! The thread count is bert-core's setting ([`bert_core::ops`]): `BERT_TRACE_THREADS`, or
//! else all physical cores.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bert_core::io::dump::manifest::Inputs;
use bert_core::io::dump::{DumpWriter, Options};
use bert_core::pass::{Discard, Sink, TensorView};
use bert_core::stage::Stage;
use bert_core::training::adamw::{adamw_step, AdamWConfig, Moments};
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
    /// Whether `--trace` was given (`profile` defaults to off alone).
    trace_given: bool,
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
        trace_given: false,
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
                args.trace_given = true;
                args.trace = value()
                    .split(',')
                    .map(|v| match v {
                        "off" => Trace::Off,
                        "on" => Trace::On,
                        "rerun" => Trace::Rerun,
                        "rerun-unsynced" => Trace::RerunUnsynced,
                        "memory" => Trace::Memory,
                        _ => usage("--trace takes a list of off, on, rerun, rerun-unsynced and memory"),
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
    /// A rerun with no sync before it: the previous run's pages are still dirty in the page
    /// cache, as they are for a rerun within half a minute (the kernel writes dirty pages back
    /// after `vm.dirty_expire_centisecs`, 30 s by default).
    RerunUnsynced,
    /// Every stage kept in memory ([`bert_core::Memory`]), as the Python package keeps them.
    Memory,
}

impl Trace {
    fn name(self) -> &'static str {
        match self {
            Trace::Off => "off",
            Trace::On => "on",
            Trace::Rerun => "rerun",
            Trace::RerunUnsynced => "rerun-unsynced",
            Trace::Memory => "memory",
        }
    }
}

/// What comes before a timed run with `trace` into `dir`, untimed: the previous dump removed for
/// `on`, and the file system synced but for `rerun-unsynced`.
fn prepare(trace: Trace, dir: &Path) {
    if trace == Trace::On {
        let _ = std::fs::remove_dir_all(dir);
    }
    if trace != Trace::RerunUnsynced && trace != Trace::Memory {
        sync_file_system();
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
    // As the command does at its start (bert-trace's main.rs); BENCH_FRESH_MEMORY=1 leaves the
    // allocator as it is, to measure what that is worth.
    if std::env::var_os("BENCH_FRESH_MEMORY").is_none() {
        bert_core::ops::keep_freed_memory();
    }
    let args = parse_args();
    let threads = threads_from_env().unwrap_or_else(|e| usage(&e));
    match args.command.as_str() {
        "forward" => forward(&args, threads),
        "profile" => profile(&args),
        "backward" => backward(&args, threads),
        "open" => open(&args),
        "cold" => cold(&args, start),
        "floor" => floor(&args, threads),
        other => usage(&format!("unknown command {other}")),
    }
}

/// The token ids `bench_pytorch.py` also uses: [CLS], a fixed pseudo-random walk through the
/// ordinary vocabulary, [SEP]; every sequence of the batch differs, none is padded.
/// A batch of `batch` sequences of `tokens` ids spread over the vocabulary of `model` (ids 1000
/// to 29999 for bert-base's, the ids above 1000 of a smaller one).
fn synthetic_batch(model: &BertModel, batch: usize, tokens: usize) -> Batch {
    const CLS: i64 = 101;
    const SEP: i64 = 102;
    let span = (model.config.vocab_size as i64 - 1000).clamp(1, 29000);
    let ids = Array2::from_shape_fn((batch, tokens), |(b, t)| match t {
        0 => CLS,
        t if t == tokens - 1 => SEP,
        t => 1000 + ((b * tokens + t) as i64 * 7919) % span,
    });
    Batch {
        ids,
        token_type_ids: Array2::zeros((batch, tokens)),
        attention_mask: Array2::ones((batch, tokens)),
        tokens: vec![Vec::new(); batch],
        pairs: false,
        labels: Default::default(),
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

/// A synthetic batch with MLM labels: every 7th position (not [CLS] or [SEP]) predicts its own id.
fn labelled_batch(model: &BertModel, batch: usize, tokens: usize) -> Batch {
    let mut labelled = synthetic_batch(model, batch, tokens);
    let labels = Array2::from_shape_fn((batch, tokens), |(b, t)| {
        if t % 7 == 3 && t + 1 < tokens {
            labelled.ids[[b, t]]
        } else {
            bert_core::objectives::IGNORE
        }
    });
    labelled.labels.mlm = Some(labels);
    labelled
}

fn backward(args: &Args, threads: usize) {
    let mut model = load(&args.model);
    for &batch_size in &args.batch {
        for &tokens in &args.tokens {
            let batch = labelled_batch(&model, batch_size, tokens);
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            for pass in ["forward", "forward+backward", "train step"] {
                let mut moments: Vec<Moments<f32>> =
                    model.parameters().iter().map(|(_, p)| Moments::zeros(p.as_slice().len())).collect();
                let mut step = 0;
                let run = || match pass {
                    "forward" => drop(model.trace(&batch, &mut Discard, None).expect("trace")),
                    "forward+backward" => drop(model.gradients(&batch).expect("gradients")),
                    // What `bert-trace train` does each step (training/mod.rs): the gradients,
                    // then AdamW on every parameter they reach.
                    _ => {
                        let grads = model.gradients(&batch).expect("gradients").params;
                        step += 1;
                        let mut index = 0;
                        model
                            .update_parameters(|stage, values| {
                                let result = match grads.get(stage) {
                                    Some(grad) => {
                                        let grad = grad.as_slice().expect("a gradient is contiguous");
                                        adamw_step(
                                            values,
                                            grad,
                                            &mut moments[index],
                                            &AdamWConfig::default(),
                                            1e-4,
                                            step,
                                        )
                                    }
                                    None => Ok(()),
                                };
                                index += 1;
                                result
                            })
                            .expect("the bench's steps stay finite");
                    }
                };
                let (times, _) = time_runs(args.min_secs, || (), run);
                println!(
                    "{}",
                    serde_json::json!({
                        "side": "bert-core", "pass": pass, "batch": batch_size, "tokens": tokens, "threads": threads,
                        "runs": times.len(), "median_ms": ms(times[times.len() / 2]), "min_ms": ms(times[0]),
                    })
                );
            }
        }
    }
}

fn forward(args: &Args, threads: usize) {
    let model = load(&args.model);
    for &batch_size in &args.batch {
        for &tokens in &args.tokens {
            let batch = synthetic_batch(&model, batch_size, tokens);
            for &trace in &args.trace {
                let dir = args.out.join(format!("b{batch_size}_t{tokens}"));
                let inputs =
                    Inputs { texts: vec![format!("{tokens} synthetic tokens"); batch_size], ..Inputs::default() };
                let prepare = || prepare(trace, &dir);
                let run = || {
                    if trace == Trace::Off {
                        model.trace(&batch, &mut Discard, None).expect("trace");
                    } else if trace == Trace::Memory {
                        let mut stages = bert_core::Memory::default();
                        model.trace(&batch, &mut stages, None).expect("trace");
                    } else {
                        let mut sink = DumpWriter::create(
                            &dir,
                            serde_json::json!({"program": "bench"}),
                            "bench".into(),
                            inputs.clone(),
                            Options::default(),
                        )
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

/// Notes the time at which each stage has been handed on: to a dump writer, or to nothing.
struct StageClock {
    last: Instant,
    /// (stage kind pattern, seconds), in execution order of first appearance.
    spent: Vec<(String, f64)>,
    /// Where the stages go in a traced run; in an untraced one the clock looks at them and
    /// copies nothing.
    dump: Option<DumpWriter>,
}

impl StageClock {
    fn add(&mut self, kind: &str, secs: f64) {
        match self.spent.iter_mut().find(|(k, _)| k == kind) {
            Some((_, total)) => *total += secs,
            None => self.spent.push((kind.to_string(), secs)),
        }
    }
}

impl Sink for StageClock {
    fn emit(&mut self, stage: Stage, tensor: TensorView<'_>) -> bert_core::Result<()> {
        if let Some(dump) = &mut self.dump {
            dump.emit(stage, tensor)?;
        }
        let now = Instant::now();
        self.add(stage.info().pattern, (now - self.last).as_secs_f64());
        self.last = now;
        Ok(())
    }

    fn finish(&mut self) -> bert_core::Result<()> {
        if let Some(dump) = &mut self.dump {
            dump.finish()?;
            self.add("(last files and manifest)", self.last.elapsed().as_secs_f64());
        }
        Ok(())
    }
}

/// For each trace mode asked for (off alone by default), the median over nine runs of the time
/// to each kind of stage, summed over the layers; the modes' runs alternate, so that the
/// machine's drift falls on all of them alike.
fn profile(args: &Args) {
    let model = load(&args.model);
    let (batch_size, tokens) = (args.batch[0], args.tokens[0]);
    let batch = synthetic_batch(&model, batch_size, tokens);
    let dir = args.out.join(format!("profile_b{batch_size}_t{tokens}"));
    let modes = if args.trace_given { args.trace.clone() } else { vec![Trace::Off] };
    let runs = 9;
    let mut spent: Vec<Vec<Vec<(String, f64)>>> = vec![Vec::new(); modes.len()];
    for run in 0..=runs {
        for (mode, &trace) in modes.iter().enumerate() {
            prepare(trace, &dir);
            let dump = (trace != Trace::Off).then(|| {
                let inputs =
                    Inputs { texts: vec![format!("{tokens} synthetic tokens"); batch_size], ..Inputs::default() };
                DumpWriter::create(
                    &dir,
                    serde_json::json!({"program": "bench"}),
                    "bench".into(),
                    inputs,
                    Options::default(),
                )
                .expect("dump directory")
            });
            let mut clock = StageClock { last: Instant::now(), spent: Vec::new(), dump };
            model.trace(&batch, &mut clock, None).expect("trace");
            // The first round warms up (and writes the dump that the reruns write over).
            if run > 0 {
                spent[mode].push(clock.spent);
            }
        }
    }
    // None for a kind that a mode never has (the dump's last files, untraced).
    let median = |mode: usize, kind: &str| {
        let mut times: Vec<f64> =
            spent[mode].iter().filter_map(|run| run.iter().find(|(k, _)| k == kind).map(|(_, s)| *s)).collect();
        times.sort_by(f64::total_cmp);
        times.get(times.len() / 2).map(|secs| secs * 1e3)
    };
    println!("batch {batch_size} x {tokens} tokens, median of {runs} runs, ms per kind of stage (summed over layers):");
    print!("  {:<32}", "stage");
    for trace in &modes {
        print!(" {:>14}", trace.name());
    }
    println!();
    let mut kinds: Vec<String> = Vec::new();
    for run in spent.iter().flatten() {
        for (kind, _) in run {
            if !kinds.contains(kind) {
                kinds.push(kind.clone());
            }
        }
    }
    let mut totals = vec![0.0; modes.len()];
    for kind in &kinds {
        print!("  {kind:<32}");
        for (mode, total) in totals.iter_mut().enumerate() {
            match median(mode, kind) {
                Some(ms) => {
                    *total += ms;
                    print!(" {ms:>14.2}");
                }
                None => print!(" {:>14}", "-"),
            }
        }
        println!();
    }
    print!("  {:<32}", "sum of the medians");
    for total in &totals {
        print!(" {total:>14.2}");
    }
    println!();
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

fn floor(args: &Args, threads: usize) {
    let path = args.model.join("model.safetensors");
    let file = std::fs::File::open(&path).unwrap_or_else(|e| usage(&format!("{}: {e}", path.display())));
    // SAFETY: read-only, and the bench's own checkpoint, which nothing changes meanwhile.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap_or_else(|e| usage(&format!("{}: {e}", path.display())));
    const PAGE: usize = 4096;
    let pages = map.len().div_ceil(PAGE);
    let per_thread = pages.div_ceil(threads.max(1));
    let touched: usize = std::thread::scope(|scope| {
        let parts: Vec<_> = (0..threads)
            .map(|t| {
                let map = &map;
                scope.spawn(move || {
                    let bytes =
                        &map[(t * per_thread * PAGE).min(map.len())..((t + 1) * per_thread * PAGE).min(map.len())];
                    // Every byte read, 8 at a time, as the forward pass reads every weight.
                    let words = bytes.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")));
                    words.fold(0u64, u64::wrapping_add) as usize
                })
            })
            .collect();
        parts.into_iter().map(|p| p.join().expect("a touching thread")).fold(0, usize::wrapping_add)
    });
    std::hint::black_box(touched);
}

fn cold(args: &Args, process_start: Instant) {
    let text = args.text.clone().unwrap_or_else(|| usage("cold needs a TEXT"));
    let model = load(&args.model);
    let loaded = process_start.elapsed();
    let texts = vec![text];
    let batch = model.encode(&texts, None, false).expect("tokenize");
    let inputs = Inputs { texts, ..Inputs::default() };
    let mut sink = DumpWriter::create(
        &args.out,
        serde_json::json!({"program": "bench"}),
        "bench".into(),
        inputs,
        Options { force: true, ..Options::default() },
    )
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

/// `BERT_TRACE_THREADS`, set for our pool and for matrixmultiply (before any thread exists), as
/// the command does; else the physical cores.
fn threads_from_env() -> Result<usize, String> {
    let Ok(text) = std::env::var("BERT_TRACE_THREADS") else { return Ok(bert_core::ops::threads()) };
    let n: usize = text.trim().parse().map_err(|_| format!("BERT_TRACE_THREADS is `{text}`, not a number"))?;
    std::env::set_var(bert_core::ops::MATMUL_ENV_VAR, n.min(bert_core::ops::MAX_MATMUL_THREADS).to_string());
    bert_core::ops::set_threads(n).map_err(|e| e.to_string())
}
