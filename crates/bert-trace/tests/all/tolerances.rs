//! `bert-trace tolerances` and `diff --tolerances`: tolerances measured from the float64 truth on
//! held-out text are honest (PyTorch's float32 dumps of other texts, and a NumPy port of BERT,
//! pass every stage with them) and useful (each of a set of bugs ports are known for fails first
//! at the stage that holds it, with the fixed table and with the measured one; a LayerNorm eps
//! of flax's default only with the measured one). The port is `tests/numpy_bert.py`.

use std::path::{Path, PathBuf};

use crate::common::{one_line, root, run, Cases, Ran};

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn json(ran: &Ran) -> serde_json::Value {
    serde_json::from_str(&ran.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", ran.stdout, ran.stderr))
}

/// Measures english-small's tolerances on the first eight lines of its held-out sample that fit
/// its 128 positions (none of them the texts of the golden dumps), into `dir/tolerances.json`.
fn measure(dir: &Path) -> PathBuf {
    let sample = std::fs::read_to_string(root().join("golden/english-small/heldout-sample.txt")).unwrap();
    let lines: Vec<&str> = sample.lines().filter(|l| l.len() > 20 && l.len() < 300).take(8).collect();
    let file = dir.join("measure.txt");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let out = dir.join("tolerances.json");
    let ran = run(&args(&[
        "tolerances",
        "--model",
        "golden/english-small",
        "--file",
        &file.display().to_string(),
        "--out",
        &out.display().to_string(),
    ]));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    out
}

/// The first failing stage of `diff REFERENCE TRACE [--tolerances FILE] --json`, and the share of
/// its tolerance each stage used.
fn first_failure(reference: &str, trace: &Path, tolerances: Option<&Path>) -> (Option<String>, serde_json::Value) {
    let mut all = args(&["diff", reference, &trace.display().to_string(), "--json"]);
    if let Some(file) = tolerances {
        all.extend(args(&["--tolerances", &file.display().to_string()]));
    }
    let report = json(&run(&all));
    let name = report["first_failure"]["name"].as_str().map(String::from);
    (name, report)
}

fn used(report: &serde_json::Value, stage: &str) -> f64 {
    let stages = report["stages"].as_array().unwrap();
    let found = stages.iter().find(|s| s["name"] == stage).unwrap_or_else(|| panic!("no {stage}"));
    found["stats"]["tolerance_used"].as_f64().unwrap_or(f64::NAN)
}

/// Runs the NumPy port with `bug` on the ids of english-small's padded golden batch.
fn port(out: &Path, bug: Option<&str>) {
    let python = std::env::var("BERT_TRACE_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut command = std::process::Command::new(&python);
    command
        .arg(root().join("crates/bert-trace/tests/numpy_bert.py"))
        .args(["golden/english-small", "golden/english-small/dumps/batch"])
        .arg(out)
        .current_dir(root());
    if let Some(bug) = bug {
        command.args(["--bug", bug]);
    }
    let done = command.output().unwrap_or_else(|e| panic!("{python} runs: {e}"));
    assert!(done.status.success(), "numpy_bert.py {bug:?}: {}", String::from_utf8_lossy(&done.stderr));
}

#[test]
fn measured_tolerances_are_honest_and_catch_what_the_fixed_table_lets_through() {
    let tmp = tempfile::tempdir().unwrap();
    let file = measure(tmp.path());
    let measured: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(measured["format"], "bert-trace-tolerances/1");
    assert_eq!(measured["texts"].as_array().map(Vec::len), Some(8));
    let stages = measured["stages"].as_array().unwrap();
    assert!(stages.len() >= 60, "every computed stage measured, got {}", stages.len());
    let mut failures = Vec::new();

    // Honest: PyTorch's float32 dumps of texts not measured pass every stage against
    // bert-trace's traces of them, and so does an independent float32 port (NumPy).
    for case in ["mask", "batch", "mlm_target"] {
        let golden = format!("golden/english-small/dumps/{case}");
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(root().join(&golden).join("manifest.json")).unwrap()).unwrap();
        let out = tmp.path().join(case);
        let mut all = args(&["--model", "golden/english-small", "--out", &out.display().to_string()]);
        for target in manifest["inputs"]["mlm_targets"].as_array().into_iter().flatten() {
            all.extend(args(&["--mlm-target", target.as_str().unwrap()]));
        }
        all.extend(manifest["inputs"]["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()));
        assert_eq!(run(&all).code, Some(0));
        if let (Some(stage), _) = first_failure(&golden, &out, Some(&file)) {
            failures.push(format!("PyTorch's {case} against bert-trace: {stage} fails the measured tolerance"));
        }
    }
    let sound = tmp.path().join("port");
    port(&sound, None);
    if let (Some(stage), _) = first_failure("golden/english-small/dumps/batch", &sound, Some(&file)) {
        failures.push(format!("the NumPy port without a bug: {stage} fails the measured tolerance"));
    }

    // Useful: each bug fails first at the stage that holds it. (bug, its stage, whether the fixed
    // table finds it there too)
    let bugs = [
        ("eps", "embeddings.layernorm", true),
        ("eps-flax", "embeddings.layernorm", false),
        ("tanh-gelu", "layer0.ffn.activation", true),
        ("no-token-type", "embeddings.sum", true),
        ("scale-hidden", "layer0.attention.scores", true),
        ("swap-qk", "layer0.attention.scores", true),
        ("no-mask", "layer0.attention.scores", true),
        ("softmax-axis", "layer0.attention.probs", true),
    ];
    let (mut by_fixed, mut by_measured) = (0, 0);
    for (bug, stage, fixed_finds_it) in bugs {
        let out = tmp.path().join(bug);
        port(&out, Some(bug));
        let (fixed, fixed_report) = first_failure("golden/english-small/dumps/batch", &out, None);
        let (measured, measured_report) = first_failure("golden/english-small/dumps/batch", &out, Some(&file));
        println!(
            "{bug:14} {stage:26} fixed table: first fails {fixed:?} ({:.1}× its tolerance there); measured: {measured:?} \
             ({:.1}×)",
            used(&fixed_report, stage),
            used(&measured_report, stage)
        );
        by_fixed += usize::from(fixed.as_deref() == Some(stage));
        by_measured += usize::from(measured.as_deref() == Some(stage));
        if measured.as_deref() != Some(stage) {
            failures.push(format!("{bug}: expected the measured table to fail first at {stage}, got {measured:?}"));
        }
        if (fixed.as_deref() == Some(stage)) != fixed_finds_it {
            failures.push(format!(
                "{bug}: the fixed table's first failure is {fixed:?}, expected {stage}: {fixed_finds_it}"
            ));
        }
    }
    println!(
        "found at their stage: {by_fixed} of {} by the fixed table, {by_measured} by the measured one",
        bugs.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_tolerance_file_is_written_new_and_read_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let theirs = tmp.path().join("theirs.json");
    std::fs::write(&theirs, "{\"mine\": true}\n").unwrap();
    let path = |p: &Path| p.display().to_string();
    let measure = |extra: &[&str]| {
        let mut all =
            args(&["tolerances", "--model", "golden/english-small", "Hello there.", "The cat sat on the mat."]);
        all.extend(args(extra));
        all
    };
    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        ("an existing file", measure(&["--out", &path(&theirs)]), "exists"),
        (
            "a headroom below 1",
            measure(&["--out", &path(&tmp.path().join("a.json")), "--headroom", "0.5"]),
            "--headroom",
        ),
        (
            "a reference without its truth",
            measure(&["--out", &path(&tmp.path().join("b.json")), "--reference", "golden/english-small/dumps/mask"]),
            "--truth",
        ),
        (
            "a truth that is float32",
            measure(&[
                "--out",
                &path(&tmp.path().join("c.json")),
                "--reference",
                "golden/english-small/dumps/mask",
                "--truth",
                "golden/english-small/dumps/mask",
            ]),
            "not a float64 dump",
        ),
        (
            "a reference that is float64",
            args(&[
                "tolerances",
                "--model",
                "tiny",
                "Hi there.",
                "--out",
                &path(&tmp.path().join("e.json")),
                "--reference",
                "golden/tiny/truth/mask",
                "--truth",
                "golden/tiny/truth/mask",
            ]),
            "is not a plain float32 pass",
        ),
        (
            "a directory that does not exist",
            measure(&["--out", &path(&tmp.path().join("no/such/dir/f.json"))]),
            "does not exist",
        ),
        (
            "diff with a file that is not one",
            args(&["diff", "golden/tiny/dumps/mask", "golden/tiny/dumps/mask", "--tolerances", &path(&theirs)]),
            "is not a tolerance file",
        ),
        (
            "diff with no such file",
            args(&["diff", "golden/tiny/dumps/mask", "golden/tiny/dumps/mask", "--tolerances", "no/such.json"]),
            "no/such.json",
        ),
    ];
    let mut checked = Cases::default();
    for (name, all, needle) in cases {
        let ran = run(&all);
        checked.check(name, one_line(&ran, needle), Some(&ran));
    }
    checked.check(
        "the user's file is untouched",
        match std::fs::read_to_string(&theirs).unwrap() == "{\"mine\": true}\n" {
            true => Ok(()),
            false => Err("it was changed".into()),
        },
        None,
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    checked.check("nothing else written", if left.len() == 1 { Ok(()) } else { Err(format!("left {left:?}")) }, None);
    // A dump of these weights held otherwise (int8) is not this model's float32 error.
    let ran = run(&measure(&[
        "--out",
        &path(&tmp.path().join("d.json")),
        "--reference",
        "golden/english-small/precision/int8",
        "--truth",
        "golden/english-small/precision/truth",
    ]));
    checked.check("a reference of int8 weights", one_line(&ran, "does not match this dump"), Some(&ran));
    // PyTorch's float32 dump and its truth, measured beside the texts (tiny's: english-small has
    // no float32 golden with a truth).
    let out = tmp.path().join("with-pytorch.json");
    let ran = run(&args(&[
        "tolerances",
        "--model",
        "tiny",
        "When in Rome, do as the Romans do.",
        "--out",
        &path(&out),
        "--reference",
        "golden/tiny/dumps/mask",
        "--truth",
        "golden/tiny/truth/mask",
    ]));
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out).unwrap_or_default()).unwrap_or_default();
    checked.check(
        "a reference and its truth",
        match (ran.code, written["references"].as_array().map(Vec::len)) {
            (Some(0), Some(1)) => Ok(()),
            other => Err(format!("{other:?}: {}", ran.stderr)),
        },
        None,
    );
    checked.finish("tolerance files");
}
