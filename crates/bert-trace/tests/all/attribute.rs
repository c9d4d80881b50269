//! `bert-trace attribute` against Captum on transformers' BERT (`scripts/attribution_reference.py`,
//! golden/*/attribute): integrated gradients (Gauss–Legendre and midpoint, 8 and 50 points, a
//! [PAD] and a zero baseline), gradient × input and occlusion, of the log-probability and of the
//! logit, for an MLM word at the [MASK], the NSP label of a pair, and a classifier's class (the
//! predicted one, and one given by name): Captum's attributions are positive where a token raises
//! the score, and so must ours be. Then what must hold whatever the model: integrated gradients
//! add up to f(x) − f(baseline) as the points grow, and bad input is one line, exit 2.

use crate::common::{bert_trace, root};
use serde_json::Value;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_of(args: &[&str]) -> Value {
    let out = bert_trace(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (model, golden, the arguments besides the text that the golden was made with)
const CASES: [(&str, &str, &[&str]); 4] = [
    ("golden/tiny", "golden/tiny/attribute/mlm_target.json", &["--target", "romans"]),
    ("golden/tiny", "golden/tiny/attribute/nsp_label.json", &["--nsp-label", "0", "--pair", "The Romans built roads."]),
    ("golden/tiny-classifier", "golden/tiny-classifier/attribute/predicted.json", &[]),
    ("golden/tiny-classifier", "golden/tiny-classifier/attribute/label.json", &["--label", "negative"]),
];

/// Our attributions (by position) against Captum's `[T]` (None where it kept the token).
/// Both sides are float32 passes; Captum sums its path in float32, we in f64. The largest
/// difference measured is 1.9e-6 (occlusion's differences of two nearly equal scores); the
/// tolerance allows ten times that, plus 1e-4 of the largest attribution.
fn close(case: &str, ours: &Value, theirs: &[Option<f64>]) {
    let largest = theirs.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs()));
    let tokens = ours["tokens"].as_array().unwrap();
    let attributed: Vec<usize> = theirs.iter().enumerate().filter(|(_, v)| v.is_some()).map(|(t, _)| t).collect();
    let positions: Vec<usize> = tokens.iter().map(|t| t["position"].as_u64().unwrap() as usize).collect();
    assert_eq!(positions, attributed, "{case}: the tokens attributed");
    for token in tokens {
        let position = token["position"].as_u64().unwrap() as usize;
        let (got, want) = (token["attribution"].as_f64().unwrap(), theirs[position].unwrap());
        assert!(
            (got - want).abs() <= 2e-5 + 1e-4 * largest,
            "{case} position {position} ({}): expected {want} (Captum), got {got}",
            token["token"]
        );
    }
}

#[test]
fn every_method_matches_captum() {
    for (model, golden, args) in CASES {
        let reference: Value = serde_json::from_slice(&std::fs::read(root().join(golden)).unwrap()).unwrap();
        let text = reference["inputs"]["text"].as_str().unwrap();
        let kept: Vec<usize> = serde_json::from_value(reference["kept"].clone()).unwrap();
        for (of, expected) in reference["results"].as_object().unwrap() {
            let run = |extra: &[&str]| {
                let mut all = vec!["attribute", "--model", model, "--json", "--of", of];
                all.extend(extra);
                all.extend(args);
                all.push(text);
                json_of(&all)["examples"][0].clone()
            };
            let only_attributed = |values: &Value| -> Vec<Option<f64>> {
                let values: Vec<Option<f64>> = serde_json::from_value(values.clone()).unwrap();
                values.into_iter().enumerate().map(|(t, v)| if kept.contains(&t) { None } else { v }).collect()
            };
            let score = expected["score"].as_f64().unwrap();
            let case = format!("{golden} --of {of}");
            let occluded = run(&["--method", "occlusion"]);
            close(&format!("{case} occlusion"), &occluded, &only_attributed(&expected["occlusion"]));
            assert!((occluded["score"].as_f64().unwrap() - score).abs() < 1e-5, "{case}: the score");
            close(
                &format!("{case} grad-input"),
                &run(&["--method", "grad-input"]),
                &only_attributed(&expected["grad_input"]),
            );
            for ig in expected["integrated_gradients"].as_array().unwrap() {
                let (baseline, rule) = (ig["baseline"].as_str().unwrap(), ig["rule"].as_str().unwrap());
                let steps = ig["steps"].to_string();
                let ours = run(&[
                    "--method",
                    "integrated-gradients",
                    "--baseline",
                    baseline,
                    "--ig-rule",
                    rule,
                    "--ig-steps",
                    &steps,
                ]);
                let case = format!("{case} integrated gradients, {baseline} baseline, {steps} {rule} points");
                close(&case, &ours, &only_attributed(&ig["attributions"]));
                let c = &ours["completeness"];
                let want_baseline = ig["baseline_score"].as_f64().unwrap();
                assert!((c["baseline_score"].as_f64().unwrap() - want_baseline).abs() < 1e-5, "{case}: f(baseline)");
                // Captum's convergence delta is the same gap: Σ attributions − (f(x) − f(b)).
                let (gap, delta) = (c["gap"].as_f64().unwrap(), ig["delta"].as_f64().unwrap());
                assert!((gap - delta).abs() < 2e-5, "{case}: gap {gap}, Captum's delta {delta}");
            }
        }
    }
}

#[test]
fn integrated_gradients_add_up_as_the_points_grow() {
    // On MiniLM-sized arithmetic the midpoint rule's gap falls as 1/n²; Gauss–Legendre's is
    // below the float32 noise from the first few points.
    let gap = |rule: &str, steps: &str| {
        let ours = json_of(&[
            "attribute",
            "--model",
            "golden/tiny",
            "--json",
            "--target",
            "romans",
            "--method",
            "integrated-gradients",
            "--ig-rule",
            rule,
            "--ig-steps",
            steps,
            "When in Rome, do as the [MASK] do.",
        ]);
        ours["examples"][0]["completeness"]["gap"].as_f64().unwrap().abs()
    };
    let (coarse, fine) = (gap("midpoint", "4"), gap("midpoint", "64"));
    assert!(fine < coarse / 50.0, "midpoint: 4 points leave {coarse}, 64 leave {fine}");
    assert!(gap("gauss-legendre", "16") < 1e-5, "Gauss–Legendre with 16 points");
}

#[test]
fn several_texts_and_a_file_each_get_their_own_attribution() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("texts.txt");
    std::fs::write(&file, "Do as the Romans do.\n\nWhen in Rome, do as the Romans do.\n").unwrap();
    let file = file.display().to_string();
    let all = json_of(&[
        "attribute",
        "--model",
        "golden/tiny-classifier",
        "--json",
        "--label",
        "positive",
        "Rome.",
        "--file",
        &file,
    ]);
    let examples = all["examples"].as_array().unwrap();
    let texts: Vec<&str> = examples.iter().map(|e| e["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["Rome.", "Do as the Romans do.", "When in Rome, do as the Romans do."]);
    for example in examples {
        let alone = json_of(&[
            "attribute",
            "--model",
            "golden/tiny-classifier",
            "--json",
            "--label",
            "positive",
            example["text"].as_str().unwrap(),
        ]);
        assert_eq!(alone["examples"][0], *example, "a text in a list is attributed as it is alone");
    }
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let text = "When in Rome, do as the [MASK] do.";
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty.txt");
    std::fs::write(&empty, "\n \n").unwrap();
    let empty = empty.display().to_string();
    // (arguments, what the message says)
    let two = tmp.path().join("two.txt");
    // A blank line between them: the second text is on line 3, as an editor counts.
    std::fs::write(&two, "When in Rome, do as the [MASK] do.\n\nno mask here\n").unwrap();
    let two = two.display().to_string();
    let cases: [(&[&str], &str); 14] = [
        (&["attribute", "--model", "golden/tiny", "--target", "romans", "When in Rome."], "exactly one [MASK]"),
        (
            &["attribute", "--model", "golden/tiny", "--target", "romanesque", text],
            "target `romanesque` is not one token",
        ),
        (
            &[
                "attribute",
                "--model",
                "golden/tiny",
                "--method",
                "integrated-gradients",
                "--ig-steps",
                "0",
                "--target",
                "romans",
                text,
            ],
            "--ig-steps 0",
        ),
        (
            &[
                "attribute",
                "--model",
                "golden/tiny",
                "--method",
                "integrated-gradients",
                "--target",
                "romans",
                "[MASK]",
            ],
            "the baseline equals the input",
        ),
        (
            &[
                "attribute",
                "--model",
                "golden/tiny",
                "--method",
                "integrated-gradients",
                "--target",
                "romans",
                "[PAD] [MASK]",
            ],
            "the baseline equals the input",
        ),
        (
            &["attribute", "--model", "golden/tiny", "--target", "romans", "--file", &empty],
            "empty.txt: holds no text (every line is blank)",
        ),
        (&["attribute", "--model", "golden/tiny", text], "nothing to attribute: give --target"),
        (
            &["attribute", "--model", "golden/tiny", "--ig-steps", "8", "--target", "romans", text],
            "--ig-steps is for --method integrated-gradients",
        ),
        (
            &[
                "attribute",
                "--model",
                "golden/tiny",
                "--method",
                "grad-input",
                "--occlude-with",
                "unk",
                "--target",
                "romans",
                text,
            ],
            "--occlude-with is for --method occlusion",
        ),
        (
            &["attribute", "--model", "golden/tiny", "--target", "romans", "--nsp-label", "0", text],
            "one target at a time",
        ),
        (&["attribute", "--model", "golden/tiny", "--label", "positive", text], "classifier"),
        (&["attribute", "--model", "golden/tiny-classifier", "--label", "happy", "Rome."], "happy"),
        (
            &[
                "attribute",
                "--model",
                "golden/tiny",
                "--method",
                "integrated-gradients",
                "--ig-steps",
                "100000",
                "--target",
                "romans",
                text,
            ],
            "--ig-steps 100000: at most 10000 points",
        ),
        // The second text is refused before the first is attributed, by its file and line.
        (
            &["attribute", "--model", "golden/tiny", "--target", "romans", "--file", &two],
            "two.txt: line 3: the text must hold exactly one [MASK]",
        ),
    ];
    for (args, says) in cases {
        let refused = bert_trace(args);
        let message = stderr(&refused);
        assert_eq!(refused.status.code(), Some(2), "{args:?}: {message}");
        assert!(message.contains(says), "{args:?}: expected `{says}` in:\n{message}");
        assert_eq!(message.lines().count(), 1, "{args:?}: one line:\n{message}");
    }
}

#[test]
fn view_draws_the_tokens_coloured_and_the_heads_grids() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str, &str); 2] = [
        (
            &[
                "attribute",
                "--model",
                "golden/tiny",
                "--json",
                "--method",
                "integrated-gradients",
                "--target",
                "romans",
                "When in Rome, do as the [MASK] do.",
            ],
            "the tokens",
            "##me",
        ),
        (
            &[
                "heads",
                "--model",
                "golden/tiny",
                "--json",
                "--mlm-target",
                "romans",
                "When in Rome, do as the [MASK] do.",
            ],
            "the heads grids",
            "(the pruning curve)",
        ),
    ];
    for (args, what, label) in cases {
        let out = bert_trace(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let json = tmp.path().join("report.json");
        std::fs::write(&json, &out.stdout).unwrap();
        let (svg, png) = (tmp.path().join("p.svg"), tmp.path().join("p.png"));
        let drawn = bert_trace(&[
            "view",
            &json.display().to_string(),
            "--svg",
            &svg.display().to_string(),
            "--png",
            &png.display().to_string(),
        ]);
        assert!(drawn.status.success(), "{what}: {}", stderr(&drawn));
        assert!(String::from_utf8_lossy(&drawn.stdout).starts_with(&format!("wrote {what}")), "{what}");
        let picture = std::fs::read_to_string(&svg).unwrap();
        assert!(picture.starts_with("<svg") && picture.contains(label), "{what}: no `{label}` in the picture");
        assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"), "{what}: a PNG");
    }
}

#[test]
fn by_words_each_word_is_the_sum_of_its_pieces_and_completeness_holds() {
    // english-small splits `astronauts` and `unbelievably` into pieces.
    let text = "The astronauts were unbelievably [MASK].";
    for method in ["occlusion", "integrated-gradients", "grad-input"] {
        let report = json_of(&["attribute", "--target", "happy", "--method", method, "--words", "--json", text]);
        let example = &report["examples"][0];
        let tokens = example["tokens"].as_array().unwrap();
        let words = example["words"].as_array().unwrap();
        let names: Vec<&str> = words.iter().map(|w| w["word"].as_str().unwrap()).collect();
        assert_eq!(names, ["the", "astronauts", "were", "unbelievably", "."], "{method}");
        assert!(tokens.len() > words.len(), "{method}: some word is several pieces");
        for word in words {
            let positions: Vec<u64> =
                word["positions"].as_array().unwrap().iter().map(|p| p.as_u64().unwrap()).collect();
            let pieces: f64 = tokens
                .iter()
                .filter(|t| positions.contains(&t["position"].as_u64().unwrap()))
                .map(|t| t["attribution"].as_f64().unwrap())
                .sum();
            let got = word["attribution"].as_f64().unwrap();
            assert!(
                (got - pieces).abs() <= 1e-12 * pieces.abs().max(1.0),
                "{method} {}: {got} for {pieces}",
                word["word"]
            );
        }
        let (by_tokens, by_words): (f64, f64) = (
            tokens.iter().map(|t| t["attribution"].as_f64().unwrap()).sum(),
            words.iter().map(|w| w["attribution"].as_f64().unwrap()).sum(),
        );
        assert!(
            (by_tokens - by_words).abs() < 1e-9,
            "{method}: the words add up to {by_words}, the tokens to {by_tokens}"
        );
        if method == "integrated-gradients" {
            let sum = example["completeness"]["sum"].as_f64().unwrap();
            assert!((sum - by_words).abs() < 1e-9, "completeness holds by words: {by_words} against {sum}");
        }
    }
    // A segmentation given by hand must spell the attributed tokens.
    let out = bert_trace(&["attribute", "--target", "happy", "--words=the astro nauts were", text]);
    let stderr = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--words the astro nauts were") && stderr.lines().count() == 1, "{stderr}");
}
