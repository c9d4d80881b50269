//! `bert-trace padding`: a text alone and in a padded batch give the same numbers at its real
//! positions, in float64 to rounding; a port that lets the padding through is caught at its
//! first stage. The port is `tests/numpy_bert.py`, BERT's encoder written in NumPy from the
//! formulas, which equals bert-trace's trace stage by stage, and which with `--ignore-mask`
//! never adds the attention mask.

use std::path::Path;

use ndarray_npy::{ReadNpyExt, WriteNpyExt};

use crate::common::{one_line, run, Cases, Ran};

const TEXTS: [&str; 3] = ["When in Rome, do as the [MASK] do.", "The cat sat on the mat.", "Hi."];

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn json(ran: &Ran) -> serde_json::Value {
    serde_json::from_str(&ran.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", ran.stdout, ran.stderr))
}

#[test]
fn the_course_model_pads_without_changing_a_real_token() {
    let mut all = args(&["padding", "--model", "golden/english-small", "--json"]);
    all.extend(args(&TEXTS));
    let ran = run(&all);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let report = json(&ran);
    let stages = report["stages"].as_array().unwrap();
    assert!(stages.len() >= 60, "every stage compared, got {}", stages.len());
    let mut failures = Vec::new();
    for stage in stages {
        let name = stage["name"].as_str().unwrap();
        let double = stage["float64"]["max_abs"].as_f64().unwrap_or(f64::NAN);
        let floor = stage["float32_floor"].as_f64().unwrap_or(f64::NAN);
        // Rounding of float64, far below float32's distance from it where float32 rounds at all.
        if double.is_nan() || double > 1e-10 || !floor.is_finite() {
            failures.push(format!(
                "{name}: expected float64 rows within 1e-10 and a float32 floor, got {double:e}, {floor:e}"
            ));
        }
        if stage["float64"]["passed"] != true || stage["float32"]["passed"] != true {
            failures.push(format!("{name}: expected both precisions to pass, got {stage}"));
        }
    }
    assert!(report["first_leak"].is_null(), "{}", report["first_leak"]);
    let lengths: Vec<u64> = report["lengths"].as_array().unwrap().iter().filter_map(|n| n.as_u64()).collect();
    assert!(lengths.len() == 3 && lengths[0] > lengths[1] && lengths[1] > lengths[2], "{lengths:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Runs the NumPy port on the ids of bert-trace's dump `inputs`, into `out`.
fn port(inputs: &Path, out: &Path, ignore_mask: bool) {
    let python = std::env::var("BERT_TRACE_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = crate::common::root().join("crates/bert-trace/tests/numpy_bert.py");
    let mut command = std::process::Command::new(&python);
    command.arg(&script).arg("golden/english-small").arg(inputs).arg(out).current_dir(crate::common::root());
    if ignore_mask {
        command.arg("--ignore-mask");
    }
    let done = command.output().unwrap_or_else(|e| panic!("{python} runs: {e}"));
    assert!(done.status.success(), "{python} {}: {}", script.display(), String::from_utf8_lossy(&done.stderr));
}

#[test]
fn a_port_that_ignores_the_mask_is_caught_at_layer0_scores() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = |name: &str| tmp.path().join(name).display().to_string();
    // bert-trace's dumps give the port its ids: the batch, and each text alone.
    let traces = [("batch", &TEXTS[..2]), ("first", &TEXTS[..1]), ("second", &TEXTS[1..2])];
    for (name, texts) in traces {
        let mut all = args(&["--model", "golden/english-small", "--out", &dir(name)]);
        all.extend(args(texts));
        assert_eq!(run(&all).code, Some(0));
        port(&tmp.path().join(name), &tmp.path().join(format!("port-{name}")), false);
    }
    port(&tmp.path().join("batch"), &tmp.path().join("port-leaky"), true);

    // The port is BERT: its batch is bert-trace's within every stage's tolerance.
    let diffed = run(&args(&["diff", &dir("batch"), &dir("port-batch")]));
    assert_eq!(diffed.code, Some(0), "the NumPy port differs from bert-trace:\n{}", diffed.stdout);

    let check = |batched: &str| {
        run(&args(&[
            "padding",
            "--batched",
            &dir(batched),
            "--alone",
            &dir("port-first"),
            "--alone",
            &dir("port-second"),
            "--json",
        ]))
    };
    let sound = check("port-batch");
    assert_eq!(sound.code, Some(0), "the port that masks passes: {}", sound.stdout);
    let leaky = check("port-leaky");
    assert_eq!(leaky.code, Some(1), "{}", leaky.stderr);
    let report = json(&leaky);
    let leak = &report["first_leak"];
    assert_eq!(leak["stage"], "layer0.attention.scores", "{leak}");
    assert_eq!(leak["precision"], "float32", "{leak}");
    // The second text is the shorter: its first query's first padding key is the first unmasked.
    let second = report["lengths"][1].as_u64().unwrap();
    let text = run(&args(&[
        "padding",
        "--batched",
        &dir("port-leaky"),
        "--alone",
        &dir("port-first"),
        "--alone",
        &dir("port-second"),
    ]));
    let line = format!(
        "padding leaks first at layer0.attention.scores (float32): a padding key is seen by a real query at \
         [1, 0, 0, {second}]"
    );
    assert!(text.stdout.contains(&line), "expected `{line}` in:\n{}", text.stdout);
}

#[test]
fn what_padding_cannot_check_is_one_line_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let dump = |name: &str, texts: &[&str]| {
        let out = tmp.path().join(name).display().to_string();
        let mut all = args(&["--model", "golden/english-small", "--out", &out]);
        all.extend(args(texts));
        assert_eq!(run(&all).code, Some(0));
        out
    };
    let (batch, first, second) = (dump("batch", &TEXTS[..2]), dump("first", &TEXTS[..1]), dump("second", &TEXTS[1..2]));
    // A batch whose layer0.attention.output holds one sequence where the batch has two.
    let cut = tmp.path().join("cut");
    crate::common::copy_dir(Path::new(&batch), &cut);
    let file = cut.join("layer0.attention.output.npy");
    let values = ndarray::ArrayD::<f32>::read_npy(std::fs::File::open(&file).unwrap()).unwrap();
    let one = values.index_axis(ndarray::Axis(0), 0).insert_axis(ndarray::Axis(0)).to_owned();
    one.write_npy(std::fs::File::create(&file).unwrap()).unwrap();
    let manifest_path = cut.join("manifest.json");
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    for stage in manifest["stages"].as_array_mut().unwrap() {
        if stage["name"] == "layer0.attention.output" {
            stage["shape"] = serde_json::json!(one.shape());
        }
    }
    std::fs::write(&manifest_path, serde_json::to_vec(&manifest).unwrap()).unwrap();
    let cut = cut.display().to_string();
    // A batch holding its inputs alone: nothing to compare, which is not a pass.
    let inputs_only = tmp.path().join("inputs-only");
    std::fs::create_dir(&inputs_only).unwrap();
    for name in ["input.ids", "input.token_type_ids", "input.attention_mask"] {
        std::fs::copy(Path::new(&batch).join(format!("{name}.npy")), inputs_only.join(format!("{name}.npy"))).unwrap();
    }
    let inputs_only = inputs_only.display().to_string();
    let model = ["padding", "--model", "golden/english-small"];
    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        ("one text", [&model[..], &["Hi."]].concat().iter().map(|s| s.to_string()).collect(), "two texts or more"),
        (
            "texts of one length",
            [&model[..], &["Hi.", "Yo."]].concat().iter().map(|s| s.to_string()).collect(),
            "no row of their batch is padded",
        ),
        ("one dump for two rows", args(&["padding", "--batched", &batch, "--alone", &first]), "one for each row"),
        (
            "the rows in the wrong order",
            args(&["padding", "--batched", &batch, "--alone", &second, "--alone", &first]),
            "its tokens are not row 0",
        ),
        (
            "a batch for a text alone",
            args(&["padding", "--batched", &batch, "--alone", &batch, "--alone", &first]),
            "is not one text",
        ),
        ("--alone without --batched", args(&["padding", "--alone", &first, "Hi.", "Hello there."]), "--batched"),
        ("no such dump", args(&["padding", "--batched", "no/such/dump", "--alone", &first]), "no/such/dump"),
        (
            "a batch of inputs alone",
            args(&["padding", "--batched", &inputs_only, "--alone", &first, "--alone", &second]),
            "nothing to compare",
        ),
        (
            "a stage cut to one sequence",
            args(&["padding", "--batched", &cut, "--alone", &first, "--alone", &second]),
            "its layer0.attention.output is [1, ",
        ),
    ];
    let mut checked = Cases::default();
    for (name, all, needle) in cases {
        let ran = run(&all);
        checked.check(name, one_line(&ran, needle), Some(&ran));
    }
    checked.finish("padding's refusals");
}
