//! `bert-trace diff` reads a golden dump's stages in every form a learner's code might have
//! saved them: `.npy` directories without a manifest (flat or nested), `.npz` archives (stored,
//! deflated, LZMA), `.safetensors`, float16 and float64, big-endian, Fortran order, `.npy`
//! versions 1 to 3, int32 inputs, no batch axis, query/key/value before the split into heads,
//! and other constants for masked scores.
//!
//! `scripts/write_dump_forms.py` writes each form of the goldens `tiny/dumps/mask` (a batch of
//! one) and `tiny/dumps/batch` (two sequences, one padded), and beside each a twin in which one
//! stage is broken far beyond its tolerance. A clean form must pass every stage of the golden,
//! none of them lost on the way; its twin must fail exactly the broken stage, so the reader
//! cannot pass a form by reading nothing, or by reading it wrong in a way a tolerance hides.
//!
//! The interpreter is `$BERT_TRACE_PYTHON` (scripts/test.sh points it at a venv with numpy and
//! safetensors) or `python3`; without numpy or safetensors the test fails rather than skipping.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The stage each twin breaks, as the script chooses it for these goldens.
const PROBS: &str = "layer1.attention.probs";
const QUERY: &str = "layer1.attention.query";
const SCORES: &str = "layer1.attention.scores";

/// One run of `bert-trace diff` and what it must end with.
struct Case {
    /// The golden, under golden/tiny/dumps/, and the form's path in the script's output for it.
    golden: &'static str,
    form: &'static str,
    /// `diff FORM GOLDEN` rather than `diff GOLDEN FORM`.
    reversed: bool,
    /// The first failing stage, or None when every stage in common must pass.
    first_failure: Option<&'static str>,
    /// Text the report must contain besides its summary.
    text: &'static str,
}

/// A form that must pass every stage of `golden`.
fn pass(golden: &'static str, form: &'static str) -> Case {
    Case { golden, form, reversed: false, first_failure: None, text: "" }
}

/// A form that must fail at `stage`, and only there.
fn fail(golden: &'static str, form: &'static str, stage: &'static str) -> Case {
    Case { golden, form, reversed: false, first_failure: Some(stage), text: "" }
}

impl Case {
    fn saying(self, text: &'static str) -> Case {
        Case { text, ..self }
    }

    fn reversed(self) -> Case {
        Case { reversed: true, ..self }
    }

    fn name(&self) -> String {
        let direction = if self.reversed { " (as reference)" } else { "" };
        format!("{}/{}{direction}", self.golden, self.form)
    }
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for golden in ["mask", "batch"] {
        // The forms both goldens have, the twin breaking the probabilities of layer 1. A
        // float16 side widens the tolerance, which the report must say.
        for (form, twin, text) in [
            ("flat", "flat.perturbed", ""),
            ("nested", "nested.perturbed", ""),
            ("savez.npz", "savez.perturbed.npz", ""),
            ("savez_compressed.npz", "savez_compressed.perturbed.npz", ""),
            ("lzma.npz", "lzma.perturbed.npz", ""),
            ("safetensors.safetensors", "safetensors.perturbed.safetensors", ""),
            ("float16", "float16.perturbed", "tolerance:"),
            ("float64", "float64.perturbed", ""),
            ("big_endian", "big_endian.perturbed", ""),
            ("fortran", "fortran.perturbed", ""),
            ("v1", "v1.perturbed", ""),
            ("v2", "v2.perturbed", ""),
            ("v3", "v3.perturbed", ""),
            ("int32_inputs", "int32_inputs.perturbed", ""),
        ] {
            cases.push(pass(golden, form).saying(text));
            cases.push(fail(golden, twin, PROBS).saying(text));
        }
        // The twin breaks query itself, so that heads split back in the wrong order fail.
        cases.push(pass(golden, "presplit_qkv").saying("before the head split"));
        cases.push(fail(golden, "presplit_qkv.perturbed", QUERY));
    }
    // Only a batch of one has a batch axis to leave out.
    cases.push(pass("mask", "no_batch").saying("read as a batch of one"));
    cases.push(fail("mask", "no_batch.perturbed", PROBS).saying("read as a batch of one"));
    // Only a batch with padding has masked scores. The first twin leaves one padding key's
    // score at 0 (unmasked), which must not be taken for a masked score; the second breaks a
    // real key's.
    cases.push(pass("batch", "mask_1e4").saying("the trace with about -10000"));
    cases.push(fail("batch", "mask_1e4.perturbed", SCORES));
    cases.push(pass("batch", "mask_neg_inf").saying("the trace with about -inf"));
    cases.push(fail("batch", "mask_neg_inf.perturbed", SCORES));
    // Each form can be the reference as well as the trace.
    for golden in ["mask", "batch"] {
        for form in ["nested", "lzma.npz", "safetensors.safetensors", "big_endian", "presplit_qkv"] {
            cases.push(pass(golden, form).reversed());
        }
        cases.push(pass(golden, "float16").saying("tolerance:").reversed());
        cases.push(fail(golden, "float16.perturbed", PROBS).saying("tolerance:").reversed());
        cases.push(fail(golden, "presplit_qkv.perturbed", QUERY).reversed());
    }
    cases.push(pass("mask", "no_batch").reversed());
    cases.push(fail("mask", "no_batch.perturbed", PROBS).reversed());
    cases.push(pass("batch", "mask_neg_inf").saying("the reference masks with about -inf").reversed());
    cases.push(fail("batch", "mask_1e4.perturbed", SCORES).reversed());
    cases
}

fn python() -> String {
    std::env::var("BERT_TRACE_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Writes every form of golden/tiny/dumps/GOLDEN under `out/GOLDEN`.
fn write_forms(golden: &str, out: &Path) {
    let output = Command::new(python())
        .arg(common::root().join("scripts/write_dump_forms.py"))
        .arg(common::root().join("golden/tiny/dumps").join(golden))
        .arg(out.join(golden))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python()));
    assert!(
        output.status.success(),
        "scripts/write_dump_forms.py failed on {golden}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// How many stages the golden's manifest lists: every one must be in common with each form.
fn stage_count(golden: &str) -> usize {
    let path = common::root().join("golden/tiny/dumps").join(golden).join("manifest.json");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("readable manifest")).expect("manifest is JSON");
    manifest["stages"].as_array().expect("a list of stages").len()
}

/// What one diff ended with, in the terms a case states.
#[derive(PartialEq)]
struct Outcome {
    exit: Option<i32>,
    first_failure: Option<String>,
    /// Stages compared on both sides, and the names of those that did not pass.
    common: usize,
    failing: Vec<String>,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let exit = self.exit.map_or("a signal".to_string(), |c| c.to_string());
        let first = self.first_failure.as_deref().unwrap_or("none");
        write!(
            f,
            "exit {exit}, first failing stage {first}, {} stages in common, failing {:?}",
            self.common, self.failing
        )
    }
}

/// Runs the case's diff, as text and as JSON, and returns the failure message if it is not as
/// the case says; prints one line either way.
fn check(case: &Case, forms: &Path) -> Option<String> {
    let golden: PathBuf = common::root().join("golden/tiny/dumps").join(case.golden);
    let form = forms.join(case.golden).join(case.form);
    let (reference, trace) = if case.reversed { (&form, &golden) } else { (&golden, &form) };
    let run = |json: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_bert-trace"));
        command.arg("diff").arg(reference).arg(trace).current_dir(common::root());
        if json {
            command.arg("--json");
        }
        command.output().expect("bert-trace runs")
    };
    let text = run(false);
    let json = run(true);
    let stdout = String::from_utf8_lossy(&text.stdout);
    let report: Option<Value> = serde_json::from_slice(&json.stdout).ok();
    let stages = report.as_ref().and_then(|r| r["stages"].as_array().cloned()).unwrap_or_default();
    let kind = |stage: &Value| stage["status"]["kind"].as_str().unwrap_or("").to_string();
    let got = Outcome {
        exit: text.status.code(),
        first_failure: report.as_ref().and_then(|r| r["first_failure"]["name"].as_str().map(str::to_string)),
        common: stages.iter().filter(|s| !kind(s).starts_with("only_in")).count(),
        failing: stages
            .iter()
            .filter(|s| !matches!(kind(s).as_str(), "pass" | "only_in_reference" | "only_in_trace"))
            .map(|s| s["name"].as_str().unwrap_or("?").to_string())
            .collect(),
    };
    let count = stage_count(case.golden);
    let expected = Outcome {
        exit: Some(if case.first_failure.is_some() { 1 } else { 0 }),
        first_failure: case.first_failure.map(str::to_string),
        common: count,
        failing: case.first_failure.map(str::to_string).into_iter().collect(),
    };
    // The text report must agree with the JSON one: its summary, its first failing stage, and
    // whatever else the case says it prints.
    let summary = format!("{} of {count} stages in common pass", count - expected.failing.len());
    let first_line = case.first_failure.map(|stage| format!("first failing stage: {stage}"));
    let mut missing: Vec<String> = Vec::new();
    for wanted in
        [Some(summary), first_line, Some(case.text.to_string()).filter(|t| !t.is_empty())].into_iter().flatten()
    {
        if !stdout.lines().any(|line| line.contains(&wanted)) {
            missing.push(wanted);
        }
    }
    if case.first_failure.is_none() && stdout.contains("first failing stage") {
        missing.push("no \"first failing stage\" line".into());
    }
    if json.status.code() != text.status.code() {
        missing.push(format!("--json to exit as the text report does, not with {:?}", json.status.code()));
    }
    let ok = got == expected && missing.is_empty();
    println!(
        "{}: expected {expected}; got {got}{}",
        case.name(),
        if missing.is_empty() { String::new() } else { format!("; the report lacks {missing:?}") }
    );
    (!ok).then(|| {
        let command = format!("bert-trace diff {} {}", reference.display(), trace.display());
        format!(
            "{}: expected {expected}\n  got {got}\n  missing from the text report: {missing:?}\n  $ {command}\n{stdout}{}",
            case.name(),
            String::from_utf8_lossy(&text.stderr)
        )
    })
}

#[test]
fn every_form_of_a_dump_diffs_like_the_dump() {
    let modules = Command::new(python()).args(["-c", "import numpy, safetensors"]).output();
    assert!(
        modules.is_ok_and(|o| o.status.success()),
        "{} cannot import numpy and safetensors: run the README's test command, which sets BERT_TRACE_PYTHON to a \
         venv with both",
        python()
    );
    let forms = tempfile::tempdir().expect("a temporary directory");
    for golden in ["mask", "batch"] {
        write_forms(golden, forms.path());
    }
    let cases = cases();
    let failures: Vec<String> = cases.iter().filter_map(|case| check(case, forms.path())).collect();
    println!("{} of {} cases as expected", cases.len() - failures.len(), cases.len());
    assert!(failures.is_empty(), "{} cases not as expected:\n\n{}", failures.len(), failures.join("\n\n"));
}
