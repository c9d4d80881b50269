//! `bert-trace finetune` beyond PyTorch's check (crates/bert-trace/tests/all/train.rs): the held-out
//! evaluation (its confusion table counts every example, its split is the seed's and is kept on
//! resume), a saved classifier that traces its loss again, a resumed run that repeats the
//! uninterrupted one, and every bad input refused in one line, exit 2, before anything is
//! written.

use std::path::Path;

use crate::common::bert_trace;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn state(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("trainer_state.json")).unwrap()).unwrap()
}

const DATA: &str = "walkthrough/texts/romans_labelled.tsv";

fn finetune(extra: &[&str]) -> std::process::Output {
    let mut args = vec!["finetune", "--model", "golden/tiny", "--file", DATA, "--batch-size", "4", "--lr", "1e-3"];
    args.extend(extra);
    bert_trace(&args)
}

#[test]
fn the_held_out_split_is_the_seeds_counted_whole_and_kept_on_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let (whole, part) = (tmp.path().join("whole"), tmp.path().join("part"));
    let (whole_arg, part_arg) = (whole.display().to_string(), part.display().to_string());
    let common = ["--steps", "6", "--eval-split", "0.25", "--eval-every", "2", "--seed", "7"];
    let out = finetune(&[&common[..], &["--save", &whole_arg, "--save-every", "3"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    // ⌈0.25 · 12⌉ = 3 held out, 9 to train on: two batches of 4 and one of 1 per epoch.
    let header = "9 examples, 3 labels (negative, neutral, positive), 3 batches per epoch (2 of 4 and one of 1)";
    assert!(text.contains(header), "{text}");
    let saved = state(&whole);
    let evals = saved["eval_history"].as_array().unwrap();
    assert_eq!(evals.iter().map(|e| e["step"].as_u64().unwrap()).collect::<Vec<_>>(), [2, 4, 6], "{text}");
    for eval in evals {
        let table: Vec<Vec<u64>> = serde_json::from_value(eval["confusion"].clone()).unwrap();
        let total: u64 = table.iter().flatten().sum();
        let diagonal: u64 = (0..3).map(|i| table[i][i]).sum();
        assert_eq!((total, diagonal), (3, eval["correct"].as_u64().unwrap()), "{eval}");
        let accuracy = eval["accuracy"].as_f64().unwrap();
        assert_eq!(accuracy, diagonal as f64 / 3.0, "{eval}");
    }
    assert_eq!(saved["options"]["eval_split"], serde_json::json!(0.25));
    let config: serde_json::Value = serde_json::from_slice(&std::fs::read(whole.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"], serde_json::json!(["BertForSequenceClassification"]));
    assert_eq!(config["id2label"], serde_json::json!({"0": "negative", "1": "neutral", "2": "positive"}));

    // Resumed from step 3 (whose split it reads from its state), it ends where the whole run did.
    let copy = tmp.path().join("from3");
    std::fs::create_dir(&copy).unwrap();
    for entry in std::fs::read_dir(whole.join("checkpoint-3")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
    }
    let copy_arg = copy.display().to_string();
    let resumed = bert_trace(&["finetune", "--resume", &copy_arg, "--save", &part_arg]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let (a, b) = (
        std::fs::read(whole.join("model.safetensors")).unwrap(),
        std::fs::read(part.join("model.safetensors")).unwrap(),
    );
    assert!(a == b, "the resumed run's weights differ from the uninterrupted run's");
    assert_eq!(state(&part)["eval_history"], saved["eval_history"]);
    // Another split, another plan of evaluations, or another length is another run.
    let refusals = [
        (vec!["--eval-split", "0.5"], "--eval-split 0.5 differs from the run saved in"),
        (vec!["--eval-every", "3"], "--eval-every 3 (the saved run's: 2), unlike the run saved in"),
        (vec!["--eval-file", DATA], "--eval-file: the run saved in"),
        (vec!["--epochs", "5"], "--epochs 5 makes 15 steps, but the run saved in"),
    ];
    for (extra, expected) in refusals {
        let other = bert_trace(&[&["finetune", "--resume", &copy_arg][..], &extra[..]].concat());
        let err = stderr(&other);
        assert_eq!(other.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(expected), "{extra:?}: expected {expected:?} in {err}");
    }

    // The saved classifier traces its loss and gradients by label name.
    let traced = bert_trace(&[
        "--model",
        &whole_arg,
        "--no-dump",
        "--backward",
        "--label",
        "positive",
        "the romans built roads in italy",
    ]);
    assert!(traced.status.success(), "{}", stderr(&traced));
    assert!(stdout(&traced).contains("classifier.loss"), "{}", stdout(&traced));
}

/// A checkpoint without a pooler (the tiny Chinese `BertForMaskedLM`) gets a new one and a new
/// classifier, and the run says so once every check has passed; its MLM head is left out.
#[test]
fn a_checkpoint_without_a_pooler_gets_one_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data.tsv");
    std::fs::write(&data, "好\t我爱北京\n不好\t北京不好\n好\t我爱中国\n").unwrap();
    let save = tmp.path().join("save");
    let (data_arg, save_arg) = (data.display().to_string(), save.display().to_string());
    let args = ["finetune", "--model", "golden/tiny-chinese", "--file", &data_arg, "--steps", "1", "--save", &save_arg];
    let out = bert_trace(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("has no bert.pooler, classifier: made new from --seed 0"), "{err}");
    assert!(err.contains("pretraining heads (cls.predictions) are not part of a classifier"), "{err}");
    let state = state(&save);
    assert_eq!(state["fresh_heads"], serde_json::json!(["bert.pooler", "classifier"]));
    let config: serde_json::Value = serde_json::from_slice(&std::fs::read(save.join("config.json")).unwrap()).unwrap();
    // Names sort by their bytes: 不好 (U+4E0D) before 好 (U+597D).
    assert_eq!(config["id2label"], serde_json::json!({"0": "不好", "1": "好"}));
}

#[test]
fn a_diverged_run_stops_and_saves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let save = tmp.path().join("save");
    let save_arg = save.display().to_string();
    let args =
        ["finetune", "--model", "golden/tiny", "--file", DATA, "--batch-size", "4", "--steps", "5", "--lr", "1e30"];
    let out = bert_trace(&[&args[..], &["--save", &save_arg]].concat());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("the run has diverged"), "{}", stderr(&out));
    assert!(!save.exists(), "a diverged run saved {}", save.display());
}

#[test]
fn bad_input_is_one_line_and_exit_2_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = tmp.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let no_tab = write("no_tab.tsv", "positive\tgood\nbad\n");
    let mixed = write("mixed.tsv", "positive\tgood\n1\tbad\n");
    let one = write("one.tsv", "positive\tgood\npositive\tfine\n");
    let empty_text = write("empty_text.tsv", "positive\tgood\nnegative\t  \n");
    let unknown = write("unknown.tsv", "positive\tgood\nhappy\tfine\n");
    let only_header = write("only_header.tsv", "sentence\tlabel\n");
    let ragged = write("ragged.tsv", "sentence\tlabel\ngood\tpositive\nbad\tnegative\textra\n");
    let big_id = write("big_id.tsv", "0\tgood\n7\tbad\n");
    let names = write("names.tsv", "good\tgreat film\nbad\tdull film\n");
    let unknown_header = write("unknown_header.tsv", "label\treview\npositive\tgood\n");
    let singles = write("singles.tsv", "1\tone text\n0\tanother\n");
    let pairs = "walkthrough/texts/romans_pairs_labelled.tsv";
    let missing = tmp.path().join("missing.tsv").display().to_string();
    let save = tmp.path().join("save");
    let save_arg = save.display().to_string();
    let tiny = ["--model", "golden/tiny"];
    let classifier = ["--model", "golden/tiny-classifier"];
    // (arguments, what the one line must say)
    let cases: Vec<(Vec<&str>, String)> = vec![
        (vec!["--file", &no_tab], format!("{no_tab}: line 2: no tab")),
        (vec!["--file", &mixed], format!("{mixed}: line 2: label \"1\" is a class id, but line 1's is a name")),
        (vec!["--file", &one], "every example has the label \"positive\": a classifier needs two labels".into()),
        (vec!["--file", &empty_text], format!("{empty_text}: line 2: the text is empty")),
        (vec!["--file", DATA, "--eval-file", &unknown], format!("{unknown}: line 2: label \"happy\" is not one")),
        (vec!["--file", DATA, "--eval-file", &only_header], format!("{only_header}: no example")),
        (vec!["--file", &ragged], format!("{ragged}: line 3: 3 fields, but the file's lines have 2")),
        (
            vec!["--file", DATA, "--eval-split", "0.99"],
            "--eval-split 0.99 holds out 12 of them, which leaves 0 to train on".into(),
        ),
        (vec!["--file", DATA, "--eval-split", "1.5"], "--eval-split 1.5".into()),
        (vec!["--file", DATA, "--epochs", "0"], "--epochs 0".into()),
        (vec!["--file", DATA, "--eval-every", "2"], "--eval-every evaluates held-out examples".into()),
        (vec!["--file", DATA, "--max-grad-norm", "-1"], "--max-grad-norm -1.0".into()),
        (vec!["--file", DATA, "--no-decay", "bias,"], "--no-decay".into()),
        (vec!["--file", DATA, "--no-decay", "LayerNrom"], "LayerNrom: expected a part of a parameter's name".into()),
        (
            vec!["--file", &unknown_header],
            format!("{unknown_header}: line 1: a header naming the label, but no text column"),
        ),
        (
            vec!["--file", pairs, "--eval-file", &singles],
            format!("{singles}: single texts, but the classifier trains on sentence pairs"),
        ),
        (vec!["--file", &missing], "missing.tsv".into()),
        (vec!["--steps", "2"], "--file is required".into()),
    ];
    let classifier_cases: Vec<(Vec<&str>, String)> = vec![
        // golden/tiny-classifier's labels are negative, neutral and positive.
        (
            vec!["--file", &big_id],
            format!("{big_id}: line 2: class id 7 is not one of the checkpoint's classifier's 3"),
        ),
        (
            vec!["--file", &names],
            format!("{names}: line 1: label \"good\" is not one of the checkpoint's classifier's labels"),
        ),
    ];
    let runs = cases.iter().map(|c| (&tiny, c)).chain(classifier_cases.iter().map(|c| (&classifier, c)));
    for (model, (args, expected)) in runs {
        let mut all = vec!["finetune"];
        all.extend(model.iter());
        all.extend(args.iter());
        all.extend(["--save", save_arg.as_str()]);
        if !args.contains(&"--steps") && !args.contains(&"--epochs") {
            all.extend(["--steps", "1"]);
        }
        let out = bert_trace(&all);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{all:?}: expected exit 2\n{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{all:?}: expected one line\n{err}");
        assert!(err.contains(expected.as_str()), "{all:?}: expected {expected:?} in\n{err}");
        assert!(!save.exists(), "{all:?}: wrote {}", save.display());
    }
}
