//! The command line end to end: what `--stop-at` writes and does not write, `diff` passing on the
//! goldens and failing at the right first stage, and one clear line with exit status 2 for each
//! kind of bad input.

mod common;

use std::path::Path;
use std::process::Output;

use common::{bert_trace, root};

use bert_core::dump::Dump;
use ndarray::ArrayD;
use ndarray_npy::{ReadNpyExt, WriteNpyExt};

const MASK_TEXT: &str = "When in Rome, do as the [MASK] do.";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The stage names a dump's manifest lists, and a check that the directory holds exactly those
/// files plus the manifest (nothing half-written, nothing stale).
fn written_stages(dir: &Path) -> Vec<String> {
    let dump = Dump::open(dir).unwrap_or_else(|e| panic!("{e}"));
    let mut expected: Vec<String> = dump.manifest.stages.iter().map(|s| s.file.clone()).collect();
    expected.push("manifest.json".into());
    expected.push(bert_core::dump::MARKER.into());
    expected.sort();
    let mut found: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    found.sort();
    assert_eq!(found, expected, "files in {} vs its manifest", dir.display());
    dump.manifest.stages.iter().map(|s| s.name.clone()).collect()
}

#[test]
fn stop_at_writes_up_to_the_stop_and_nothing_after() {
    // (--stop-at, the last stage written, the stage right after it)
    let cases = [
        ("input.ids", "input.ids", "input.token_type_ids"),
        ("embeddings", "embeddings.layernorm", "layer0.attention.query"),
        ("layer0.attention.scores", "layer0.attention.scores", "layer0.attention.probs"),
        ("layer0.attention", "layer0.attention.layernorm", "layer0.ffn.intermediate"),
        ("layer1", "layer1.ffn.layernorm", "pooler.dense"),
        ("mlm.logits", "mlm.logits", "nsp.logits"),
    ];
    for (stop, last, next) in cases {
        let out = tempfile::tempdir().unwrap();
        let dir = out.path().join("t");
        let output = bert_trace(&["--stop-at", stop, "--out", dir.to_str().unwrap(), MASK_TEXT]);
        assert!(output.status.success(), "--stop-at {stop}: {}", text(&output.stderr));
        let stages = written_stages(&dir);
        assert_eq!(
            stages.last().map(String::as_str),
            Some(last),
            "--stop-at {stop}: expected last {last}, got {stages:?}"
        );
        assert!(!stages.iter().any(|s| s == next), "--stop-at {stop}: {next} was written");
        let stdout = text(&output.stdout);
        assert!(stdout.contains(&format!("stopped after {last}")), "--stop-at {stop}: {stdout}");
        assert!(stdout.contains("tensor(["), "--stop-at {stop}: no preview in {stdout}");
    }
}

#[test]
fn a_rerun_replaces_its_own_previous_dump() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("t");
    let dir_arg = dir.to_str().unwrap();
    assert!(bert_trace(&["--out", dir_arg, MASK_TEXT]).status.success());
    let deep = written_stages(&dir);
    assert!(deep.iter().any(|s| s == "mlm.logits"));
    let output = bert_trace(&["--stop-at", "embeddings", "--out", dir_arg, MASK_TEXT]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let shallow = written_stages(&dir);
    assert_eq!(shallow.last().map(String::as_str), Some("embeddings.layernorm"), "{shallow:?}");
}

#[test]
fn only_writes_the_matching_stages() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("t");
    let output = bert_trace(&["--only", "*.probs", "--only", "input.*", "--out", dir.to_str().unwrap(), MASK_TEXT]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stages = written_stages(&dir);
    let want = [
        "input.ids",
        "input.token_type_ids",
        "input.attention_mask",
        "layer0.attention.probs",
        "layer1.attention.probs",
    ];
    assert_eq!(stages, want);
}

/// Traces a golden case's inputs into a temporary dump and diffs it against the golden.
fn trace_like(golden: &Path, out: &Path) -> Output {
    let manifest = Dump::open(golden).unwrap().manifest;
    let mut args: Vec<String> = vec!["--out".into(), out.display().to_string()];
    for pair in manifest.inputs.pair.iter().flatten() {
        args.extend(["--pair".into(), pair.clone()]);
    }
    args.extend(manifest.inputs.texts.iter().cloned());
    args.extend(["--reference".into(), golden.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    bert_trace(&args)
}

#[test]
fn diff_passes_on_every_tiny_golden() {
    for case in ["mask", "pair", "batch", "accents_cjk"] {
        let golden = root().join("golden/tiny/dumps").join(case);
        let out = tempfile::tempdir().unwrap();
        let output = trace_like(&golden, &out.path().join("t"));
        let stdout = text(&output.stdout);
        assert_eq!(output.status.code(), Some(0), "{case}: expected exit 0\n{stdout}\n{}", text(&output.stderr));
        assert!(stdout.contains("stages pass"), "{case}: {stdout}");
    }
}

/// Copies a golden dump to a temporary directory, changes one stage with `change`, and returns
/// the copy.
fn perturbed(case: &str, stage: &str, change: impl Fn(&mut ArrayD<f32>)) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    let golden = root().join("golden/tiny/dumps").join(case);
    for entry in std::fs::read_dir(&golden).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, copy.path().join(path.file_name().unwrap())).unwrap();
    }
    let file = copy.path().join(format!("{stage}.npy"));
    let mut values = ArrayD::<f32>::read_npy(std::fs::File::open(&file).unwrap()).unwrap();
    change(&mut values);
    values.write_npy(std::fs::File::create(&file).unwrap()).unwrap();
    copy
}

#[test]
fn diff_names_the_first_stage_that_diverges() {
    // (stage to perturb, how, what the report must say)
    type Change = fn(&mut ArrayD<f32>);
    let cases: [(&str, Change, &str); 3] = [
        (
            "layer0.ffn.intermediate",
            |a| a.as_slice_mut().unwrap()[5] += 0.01,
            "first failing stage: layer0.ffn.intermediate",
        ),
        ("layer1.attention.probs", |a| a.as_slice_mut().unwrap()[0] = f32::NAN, "NaN"),
        ("embeddings.sum", |a| a.mapv_inplace(|v| v * 1.001), "first failing stage: embeddings.sum"),
    ];
    let golden = root().join("golden/tiny/dumps/mask");
    let out = tempfile::tempdir().unwrap();
    let trace = out.path().join("t");
    assert_eq!(trace_like(&golden, &trace).status.code(), Some(0));
    for (stage, change, needle) in cases {
        let reference = perturbed("mask", stage, change);
        let output = bert_trace(&["diff", reference.path().to_str().unwrap(), trace.to_str().unwrap()]);
        let stdout = text(&output.stdout);
        assert_eq!(output.status.code(), Some(1), "{stage}: expected exit 1\n{stdout}");
        assert!(stdout.contains(needle), "{stage}: expected `{needle}` in\n{stdout}");
        assert!(stdout.contains(&format!("first failing stage: {stage}")), "{stage}: wrong first stage\n{stdout}");
    }
}

#[test]
fn diff_json_is_machine_readable() {
    let golden = root().join("golden/tiny/dumps/batch");
    let out = tempfile::tempdir().unwrap();
    let trace = out.path().join("t");
    assert_eq!(trace_like(&golden, &trace).status.code(), Some(0));
    let output = bert_trace(&["diff", "--json", golden.to_str().unwrap(), trace.to_str().unwrap()]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    assert!(report["first_failure"].is_null(), "{report}");
    // The batch is padded, so padded query rows are reported apart.
    let padded = report["stages"].as_array().unwrap().iter().filter(|s| !s["padded_rows"].is_null()).count();
    assert!(padded > 0, "no stage reported padded rows");
}

/// Runs `args` (with `{tmp}` replaced by a fresh temporary directory) and expects exit status 2
/// with one line on stderr containing `needle`.
fn expect_error(args: &[&str], needle: &str, setup: impl Fn(&Path)) {
    let tmp = tempfile::tempdir().unwrap();
    setup(tmp.path());
    let args: Vec<String> = args.iter().map(|a| a.replace("{tmp}", tmp.path().to_str().unwrap())).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let needle = needle.replace("{tmp}", tmp.path().to_str().unwrap());
    let output = bert_trace(&args);
    let stderr = text(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("note:")).collect();
    assert_eq!(output.status.code(), Some(2), "{args:?}: expected exit 2, stderr:\n{stderr}");
    assert_eq!(lines.len(), 1, "{args:?}: expected one line, got:\n{stderr}");
    assert!(lines[0].contains(&needle), "{args:?}: expected `{needle}` in: {}", lines[0]);
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
}

fn nothing(_: &Path) {}

#[test]
fn bad_input_gets_one_line_and_status_2() {
    let long_text = "rome ".repeat(100);
    expect_error(&["--model", "{tmp}/missing", MASK_TEXT], "does not exist", nothing);
    expect_error(&["--model", "{tmp}", MASK_TEXT], "no config.json", nothing);
    expect_error(&["--stop-at", "layer0.atention", MASK_TEXT], "did you mean layer0.attention", nothing);
    expect_error(&["--stop-at", "layer9", MASK_TEXT], "it has 2 layers, layer0 to layer1", nothing);
    expect_error(&["--stop-at", "layer0.nonsense", MASK_TEXT], "unknown stage `layer0.nonsense`", nothing);
    expect_error(&["--only", "layer7.*", MASK_TEXT], "matches no stage", nothing);
    expect_error(&[], "no TEXT given", nothing);
    expect_error(&["--no-dump", long_text.as_str()], "--truncate", nothing);
    expect_error(&["--pair", "a", "--pair", "b", MASK_TEXT], "pair text(s)", nothing);
    expect_error(&["--no-dump", "   "], "empty", nothing);
    expect_error(&["diff", "{tmp}/nothing", "{tmp}/nothing"], "not a directory", nothing);
    expect_error(&["diff", "{tmp}", "{tmp}"], "manifest.json", nothing);
    expect_error(&["diff", "{tmp}", "{tmp}"], "not a valid manifest", |dir| {
        std::fs::write(dir.join("manifest.json"), "{ not json").unwrap();
    });
    expect_error(&["--out", "{tmp}", MASK_TEXT], "not a bert-trace dump", |dir| {
        std::fs::write(dir.join("my-notes.txt"), "mine").unwrap();
    });
    expect_error(&["--out", "{tmp}/file/sub", MASK_TEXT], "{tmp}/file", |dir| {
        std::fs::write(dir.join("file"), "a file, not a directory").unwrap();
    });
}

#[test]
fn truncate_cuts_long_input_to_max_positions() {
    let long_text = "rome ".repeat(100);
    let output = bert_trace(&["--no-dump", "--truncate", "--stop-at", "input.ids", long_text.as_str()]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("[1, 64]"), "{}", text(&output.stdout));
}

#[test]
fn force_writes_beside_foreign_files_and_keeps_them() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("my-notes.txt"), "mine").unwrap();
    let output = bert_trace(&["--force", "--stop-at", "embeddings", "--out", tmp.path().to_str().unwrap(), MASK_TEXT]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(std::fs::read_to_string(tmp.path().join("my-notes.txt")).unwrap(), "mine");
    assert!(tmp.path().join("manifest.json").is_file());
}

#[test]
fn stages_and_inspect_describe_the_model() {
    let output = bert_trace(&["stages"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success());
    for needle in ["layer1.ffn.layernorm", "hidden_states[2]", "[B, 4, T, 8]", "mlm.logits", "nsp.logits"] {
        assert!(stdout.contains(needle), "stages: expected `{needle}` in\n{stdout}");
    }
    let output = bert_trace(&["inspect"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success());
    for needle in ["hidden_size", "1e-12", "embeddings", "encoder", "total"] {
        assert!(stdout.contains(needle), "inspect: expected `{needle}` in\n{stdout}");
    }
}
