//! `bert-trace evaluate`: the held-out measure as a command of its own, its text and its JSON the
//! same measure, the measure independent of the threads that compute it, and bad input refused
//! in one line before any work.

use crate::common::{one_line, root, run, Cases};

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// A few held-out lines for golden/tiny, written into a temporary directory.
fn lines_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("held-out.txt");
    let text = "the cat sat on the mat.\nwhen in rome, do as the romans do.\nthe dog ran to the house.\n\
                a man walked along the road with a book.\n";
    std::fs::write(&path, text).unwrap();
    let path = path.display().to_string();
    (dir, path)
}

#[test]
fn the_text_and_the_json_give_one_measure_whatever_the_threads() {
    let (_dir, file) = lines_file();
    let json_of = |threads: &str| {
        let ran =
            run(&strings(&["evaluate", "--model", "golden/tiny", "--file", &file, "--json", "--threads", threads]));
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
        serde_json::from_str::<serde_json::Value>(&ran.stdout).unwrap()
    };
    let one = json_of("1");
    let two = json_of("2");
    assert_eq!(one["evaluation"], two["evaluation"], "the measure with 1 thread and with 2");
    let e = &one["evaluation"];
    assert_eq!(one["format"], "bert-trace-evaluate/1");
    let text = run(&strings(&["evaluate", "--model", "golden/tiny", "--file", &file]));
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    let (examples, correct) = (e["examples"].as_u64().unwrap(), e["correct"].as_u64().unwrap());
    assert!(examples > 0, "something was masked: {e}");
    for line in [
        format!("mlm loss {:.4}", e["loss"].as_f64().unwrap()),
        format!("top-1 accuracy {:.4} ({correct} of {examples})", e["accuracy"].as_f64().unwrap()),
        format!("top-5 accuracy {:.4}", e["top5_accuracy"].as_f64().unwrap()),
        format!("always guessing {:?}", e["constant_guess"]["token"].as_str().unwrap()),
    ] {
        assert!(text.stdout.contains(&line), "the text has {line:?}:\n{}", text.stdout);
    }
}

#[test]
fn bad_input_is_refused_in_one_line() {
    let (_dir, file) = lines_file();
    let missing = root().join("no-such-file.txt").display().to_string();
    let cases: Vec<(&str, Vec<String>, String)> = vec![
        (
            "a file that is not there",
            strings(&["evaluate", "--model", "golden/tiny", "--file", &missing]),
            missing.clone(),
        ),
        (
            "--max-len 2",
            strings(&["evaluate", "--model", "golden/tiny", "--file", &file, "--max-len", "2"]),
            "--max-len 2".into(),
        ),
        (
            "--max-len beyond the model's positions",
            strings(&["evaluate", "--model", "golden/tiny", "--file", &file, "--max-len", "100000"]),
            "--max-len 100000".into(),
        ),
        (
            "--batch-size 0",
            strings(&["evaluate", "--model", "golden/tiny", "--file", &file, "--batch-size", "0"]),
            "--batch-size 0".into(),
        ),
        (
            "documents for a classifier without the MLM head",
            strings(&["evaluate", "--model", "golden/tiny-classifier", "--file", &file, "--documents"]),
            "no MLM head (cls.predictions.*) to fill masks with; its classifier is measured on labelled lines, \
             without --documents"
                .into(),
        ),
        (
            "--each-token with --seed, which it has no use for",
            strings(&["evaluate", "--model", "golden/tiny", "--file", &file, "--each-token", "--seed", "3"]),
            "--seed 3 chooses masks, and --each-token chooses none".into(),
        ),
        (
            "--each-token for a classifier without the MLM head",
            strings(&["evaluate", "--model", "golden/tiny-classifier", "--file", &file, "--each-token"]),
            "no MLM head (cls.predictions.*)".into(),
        ),
        (
            "unlabelled lines for a classifier",
            strings(&["evaluate", "--model", "golden/tiny-classifier", "--file", &file]),
            file.clone(),
        ),
    ];
    let mut checks = Cases::default();
    for (name, args, needle) in cases {
        let ran = run(&args);
        checks.check(name, one_line(&ran, &needle), Some(&ran));
    }
    checks.finish("evaluate's bad input");
}
