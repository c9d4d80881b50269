//! `bert-trace compare A B` (two checkpoints on one input) against what it must find: nothing
//! between a trace and itself, exactly the head whose query weights were changed, and a refusal
//! of two different inputs; and `view` drawing its JSON.

use std::path::Path;

use crate::common::{bert_trace, root};
use safetensors::{serialize, tensor::TensorView, SafeTensors};

const TEXTS: [&str; 2] = ["When in Rome, do as the Romans do.", "All roads lead to Rome."];

/// golden/tiny copied to `dir`, with rows `rows` of layer `layer`'s query weight (one head's
/// outputs) multiplied by -3: that head, and only it, looks elsewhere.
fn tiny_with_one_head_changed(dir: &Path, layer: usize, rows: std::ops::Range<usize>) {
    std::fs::create_dir_all(dir).unwrap();
    for name in ["config.json", "vocab.txt", "tokenizer_config.json"] {
        std::fs::copy(root().join("golden/tiny").join(name), dir.join(name)).unwrap();
    }
    let bytes = std::fs::read(root().join("golden/tiny/model.safetensors")).unwrap();
    let tensors = SafeTensors::deserialize(&bytes).unwrap();
    let target = format!("bert.encoder.layer.{layer}.attention.self.query.weight");
    let mut owned: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, view) in tensors.tensors() {
        let mut data = view.data().to_vec();
        if name == target {
            let cols = view.shape()[1];
            for row in rows.clone() {
                for col in 0..cols {
                    let at = (row * cols + col) * 4;
                    let v = f32::from_le_bytes(data[at..at + 4].try_into().unwrap()) * -3.0;
                    data[at..at + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        owned.push((name, view.dtype(), view.shape().to_vec(), data));
    }
    let views: Vec<(String, TensorView<'_>)> = owned
        .iter()
        .map(|(name, dtype, shape, data)| (name.clone(), TensorView::new(*dtype, shape.clone(), data).unwrap()))
        .collect();
    std::fs::write(dir.join("model.safetensors"), serialize(views, None).unwrap()).unwrap();
}

/// Traces `texts` into `out` with `model`, or the built-in tiny model, whose shapes (hs = 8) the
/// cases name.
fn trace(model: Option<&Path>, out: &Path, texts: &[&str]) {
    let model = model.unwrap_or(Path::new("tiny"));
    let mut args: Vec<String> = vec!["--out".into(), out.display().to_string()];
    args.extend(["--model".into(), model.display().to_string()]);
    args.extend(texts.iter().map(|t| t.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = bert_trace(&args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

fn compare_json(a: &Path, b: &Path) -> serde_json::Value {
    let output = bert_trace(&["compare", &a.display().to_string(), &b.display().to_string(), "--json"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn compare_finds_nothing_between_a_trace_and_itself_and_exactly_the_changed_head() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    trace(None, &base, &TEXTS);
    let mut failures = Vec::new();
    // (what, layer and query rows changed (head = rows / hs, hs = 8), expected most changed head)
    type Case = (&'static str, Option<(usize, std::ops::Range<usize>)>, Option<(u64, u64)>);
    let cases: [Case; 3] = [
        ("the same model", None, None),
        ("layer 1, head 2 changed", Some((1, 16..24)), Some((1, 2))),
        ("layer 0, head 0 changed", Some((0, 0..8)), Some((0, 0))),
    ];
    for (what, change, want) in cases {
        let other = tmp.path().join(what.replace([' ', ','], "-"));
        match &change {
            None => trace(None, &other, &TEXTS),
            Some((layer, rows)) => {
                let model = tmp.path().join(format!("model-{layer}-{}", rows.start));
                tiny_with_one_head_changed(&model, *layer, rows.clone());
                trace(Some(&model), &other, &TEXTS);
            }
        }
        let report = compare_json(&base, &other);
        let heads = report["heads"].as_array().unwrap();
        let first = &heads[0];
        let got = (first["layer"].as_u64().unwrap(), first["head"].as_u64().unwrap());
        let top = first["js_divergence"].as_f64().unwrap();
        let rest = heads[1..].iter().map(|h| h["js_divergence"].as_f64().unwrap()).fold(0.0, f64::max);
        println!("{what}: most changed head {got:?} ({top:.4}), the others at most {rest:.2e}");
        match want {
            None => {
                let cosines: Vec<f64> =
                    report["stages"].as_array().unwrap().iter().map(|s| s["cosine"].as_f64().unwrap()).collect();
                if top != 0.0 || cosines.iter().any(|c| (c - 1.0).abs() > 1e-12) {
                    failures.push(format!(
                        "{what}: expected JS 0 and cosine 1 everywhere, got JS {top} and cosines {cosines:?}"
                    ));
                }
            }
            Some(head) => {
                // The heads before the changed one read the same input: exactly 0. A changed
                // head in layer 0 changes what layer 1 reads, so layer 1's heads move too, less.
                if got != head || top < 0.01 || rest >= top {
                    failures.push(format!("{what}: expected head {head:?} first, got {got:?} ({top}; next {rest})"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn different_inputs_are_refused_and_view_draws_the_grid() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    trace(None, &a, &TEXTS);
    trace(None, &b, &["When in Rome, do as the Greeks do.", TEXTS[1]]);
    let output = bert_trace(&["compare", &a.display().to_string(), &b.display().to_string()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("token 9 of sequence 0"), "{stderr}");

    let json = tmp.path().join("compare.json");
    let output = bert_trace(&["compare", &a.display().to_string(), &a.display().to_string(), "--json"]);
    std::fs::write(&json, &output.stdout).unwrap();
    let svg = tmp.path().join("grid.svg");
    let output = bert_trace(&["view", &json.display().to_string(), "--svg", &svg.display().to_string()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("layer 1") && text.contains("head 3"), "the grid's labels");
    // Any other JSON is one line and status 2.
    let other = tmp.path().join("other.json");
    std::fs::write(&other, "{\"format\": \"something else\"}").unwrap();
    let output = bert_trace(&["view", &other.display().to_string(), "--svg", &svg.display().to_string()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not the JSON report of compare, ablate, attribute, heads or rollout"), "{stderr}");
}
