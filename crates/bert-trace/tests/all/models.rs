//! Other BERT-family checkpoints through the command line: bert-large's config alone (`inspect
//! --config`), a sequence classifier whose labels come from `id2label` and whose logits are checked
//! against its weights, and the cased Chinese-vocabulary model (`golden/tiny-chinese`); and the two
//! models built into the binary, by name and by default.

use crate::common;

use std::process::Output;

use crate::common::{bert_trace, root};

use ndarray::{Array2, ArrayD};
use ndarray_npy::ReadNpyExt;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

/// Expects success and returns stdout.
fn ok(output: Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{what}: expected success\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    stdout
}

/// Checks that `text` has a line containing each group of words, in order on that line.
fn assert_rows(text: &str, rows: &[&[&str]], what: &str) {
    let mut failures = Vec::new();
    for words in rows {
        let found = text.lines().any(|line| {
            let mut rest = line;
            words.iter().all(|w| match rest.find(w) {
                Some(at) => {
                    rest = &rest[at + w.len()..];
                    true
                }
                None => false,
            })
        });
        if !found {
            failures.push(format!("expected a row with {words:?}"));
        }
    }
    assert!(failures.is_empty(), "{what}:\n{}\nin:\n{text}", failures.join("\n"));
}

#[test]
fn inspect_config_counts_bert_large_without_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config.json");
    std::fs::write(
        &config,
        r#"{"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 1024,
            "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
            "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2,
            "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pad_token_id": 0}"#,
    )
    .unwrap();
    let stdout = ok(bert_trace(&["inspect", "--config", config.to_str().unwrap()]), "inspect --config");
    // The counts are worked out by hand in crates/bert-core/tests/all/params.rs.
    let rows: &[&[&str]] = &[
        &["(hidden_size / num_attention_heads)", "64"],
        &["embeddings", "31782912"],
        &["encoder", "302309376"],
        &["one layer", "12596224"],
        &["pooler", "1049600"],
        &["total", "335141888", "335.142"],
    ];
    assert_rows(&stdout, rows, "bert-large");
}

const LABELS: [&str; 3] = ["negative", "neutral", "positive"];

/// golden/tiny turned into a BertForSequenceClassification: no MLM or NSP head, a 3-label
/// `classifier` with fixed weights, and `id2label` naming the labels.
fn classifier_dir() -> (tempfile::TempDir, Array2<f32>, Vec<f32>) {
    let tiny = root().join("golden/tiny");
    let dir = tempfile::tempdir().unwrap();
    for file in ["vocab.txt", "tokenizer_config.json"] {
        std::fs::copy(tiny.join(file), dir.path().join(file)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tiny.join("config.json")).unwrap()).unwrap();
    config["architectures"] = serde_json::json!(["BertForSequenceClassification"]);
    config["id2label"] = serde_json::json!({"0": LABELS[0], "1": LABELS[1], "2": LABELS[2]});
    config["label2id"] = serde_json::json!({LABELS[0]: 0, LABELS[1]: 1, LABELS[2]: 2});
    std::fs::write(dir.path().join("config.json"), serde_json::to_vec_pretty(&config).unwrap()).unwrap();

    let hidden = config["hidden_size"].as_u64().unwrap() as usize;
    let weight = Array2::from_shape_fn((3, hidden), |(l, h)| ((l * 7 + h * 3) % 11) as f32 / 11.0 - 0.5);
    let bias = vec![0.25f32, -0.5, 0.125];
    let bytes = std::fs::read(tiny.join("model.safetensors")).unwrap();
    let stored = SafeTensors::deserialize(&bytes).unwrap();
    let weight_bytes: Vec<u8> = weight.iter().flat_map(|v| v.to_le_bytes()).collect();
    let bias_bytes: Vec<u8> = bias.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut tensors: Vec<(String, TensorView<'_>)> =
        stored.tensors().into_iter().filter(|(name, _)| !name.starts_with("cls.")).collect();
    tensors.push(("classifier.weight".into(), TensorView::new(Dtype::F32, vec![3, hidden], &weight_bytes).unwrap()));
    tensors.push(("classifier.bias".into(), TensorView::new(Dtype::F32, vec![3], &bias_bytes).unwrap()));
    let file = safetensors::serialize(tensors, None).unwrap();
    std::fs::write(dir.path().join("model.safetensors"), file).unwrap();
    (dir, weight, bias)
}

#[test]
fn a_classifier_shows_its_labels_by_name_and_its_logits_follow_its_weights() {
    let (dir, weight, bias) = classifier_dir();
    let out = tempfile::tempdir().unwrap();
    let dump = out.path().join("t");
    let args = [
        "--model",
        dir.path().to_str().unwrap(),
        "--out",
        dump.to_str().unwrap(),
        "Rome was not built in a day.",
        "Do as the Romans.",
    ];
    let stdout = ok(bert_trace(&args), "classifier trace");
    let rows: &[&[&str]] = &[
        &["classifier.logits", "[2, 3]"],
        &["classifier (classifier.logits):"],
        &["0", "negative"],
        &["0", "neutral"],
        &["0", "positive"],
        &["1", "positive"],
    ];
    assert_rows(&stdout, rows, "classifier");
    assert!(!stdout.contains("LABEL_0"), "labels not taken from id2label:\n{stdout}");

    // logits = pooler.output @ W^T + b, in float64 from the dumped pooler output.
    let read =
        |name: &str| ArrayD::<f32>::read_npy(std::fs::File::open(dump.join(format!("{name}.npy"))).unwrap()).unwrap();
    let pooled = read("pooler.output");
    let logits = read("classifier.logits");
    let mut failures = Vec::new();
    for b in 0..2 {
        for l in 0..3 {
            let want: f64 = (0..weight.ncols()).map(|h| pooled[[b, h]] as f64 * weight[[l, h]] as f64).sum::<f64>()
                + bias[l] as f64;
            let got = logits[[b, l]] as f64;
            if (got - want).abs() > 1e-5 {
                failures.push(format!("[{b}, {l}] ({}): expected {want}, got {got}", LABELS[l]));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    let inspect = ok(bert_trace(&["inspect", "--model", dir.path().to_str().unwrap()]), "inspect");
    assert_rows(&inspect, &[&["classifier", "99"]], "classifier parameters (3 × 32 + 3)");
    let stages = ok(bert_trace(&["stages", "--model", dir.path().to_str().unwrap()]), "stages");
    assert_rows(&stages, &[&["classifier.logits", "[B,C]", "[B, 3]"]], "stages");
    assert!(!stages.contains("mlm.logits"), "{stages}");
}

#[test]
fn the_chinese_model_keeps_case_and_splits_every_cjk_character() {
    let stdout = ok(
        bert_trace(&[
            "--model",
            "golden/tiny-chinese",
            "--stop-at",
            "input",
            "--no-dump",
            "BERT和bert，Café不是café龘",
        ]),
        "tiny-chinese",
    );
    let tokens: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix('│')?.split_whitespace().nth(1))
        .filter(|t| !["token", "stage"].contains(t) && !t.contains('.'))
        .collect();
    let want = ["[CLS]", "BE", "##RT", "和", "bert", "，", "Café", "不", "是", "café", "[UNK]", "[SEP]"];
    assert_eq!(&tokens[..want.len().min(tokens.len())], want, "tokens of\n{stdout}");
}

/// Without `--model`, bert-trace uses english-small and says so in one note; `--model
/// english-small`, `--model chinese-small` and `--model tiny` name the built-in models, with no
/// note, and give what their
/// directories in golden/ give (the same manifest name, fingerprint and stages, bit for bit); a
/// directory of the same name where the command runs is that directory, as a local directory
/// wins over a hub id in transformers.
#[test]
fn the_built_in_models_are_english_small_by_default_and_tiny_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let text = "When in Rome, do as the [MASK] do.";
    let run = |args: &[&str], dir: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_bert-trace"))
            .args(args)
            .current_dir(dir)
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .unwrap()
    };
    let manifest = |dump: &std::path::Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dump.join("manifest.json")).unwrap()).unwrap()
    };
    let default = tmp.path().join("default");
    let out = run(&["--out", default.to_str().unwrap(), text], tmp.path());
    ok(out.clone(), "no --model");
    let notes: Vec<String> = String::from_utf8_lossy(&out.stderr).lines().map(String::from).collect();
    assert!(
        notes.len() == 1
            && notes[0].starts_with("note: using english-small, the model built into bert-trace (4 layers"),
        "{notes:?}"
    );
    let poem = "床前明月[MASK]，疑是地上霜。";
    let named_models = [
        ("english-small", "golden/english-small", text),
        ("chinese-small", "golden/chinese-small", poem),
        ("tiny", "golden/tiny", text),
    ];
    for (name, dir, text) in named_models {
        let (by_name, by_dir) = (tmp.path().join(format!("{name}-by-name")), tmp.path().join(format!("{name}-by-dir")));
        let named = run(&["--model", name, "--out", by_name.to_str().unwrap(), text], tmp.path());
        ok(named.clone(), name);
        assert!(named.stderr.is_empty(), "{name}: {}", String::from_utf8_lossy(&named.stderr));
        ok(bert_trace(&["--model", dir, "--out", by_dir.to_str().unwrap(), text]), dir);
        let (a, b) = (manifest(&by_name), manifest(&by_dir));
        assert_eq!(a["model"], dir, "{name}: the manifest names its directory");
        assert_eq!(a["model_fingerprint"], b["model_fingerprint"], "{name}");
        assert!(a["model_tensors"].as_object().is_some_and(|t| !t.is_empty()), "{name}: a digest of each tensor");
        assert_eq!(a["model_tensors"], b["model_tensors"], "{name}");
        for stage in b["stages"].as_array().unwrap() {
            let file = stage["file"].as_str().unwrap();
            let same = std::fs::read(by_name.join(file)).unwrap() == std::fs::read(by_dir.join(file)).unwrap();
            assert!(same, "{name}: {file} differs from the one {dir} gives");
        }
    }
    assert_eq!(
        manifest(&default)["model_fingerprint"],
        manifest(&tmp.path().join("english-small-by-name"))["model_fingerprint"]
    );
    // A directory called tiny here is that directory: here, a copy of the tiny Chinese model.
    common::copy_dir(&root().join("golden/tiny-chinese"), &tmp.path().join("tiny"));
    let local = run(&["--model", "tiny", "--stop-at", "input.ids", "--no-dump", "中文"], tmp.path());
    let shown = ok(local, "a local directory called tiny");
    assert!(
        shown.contains("中") && !shown.contains("[UNK]"),
        "the local directory's vocabulary tokenizes CJK:\n{shown}"
    );
}

/// A text with words the vocabulary lacks says which, once, before the trace that shows them
/// only as `[UNK]`: Traditional characters given to chinese-small, whose vocabulary is of
/// Simplified ones, with the Simplified forms it has; in a batch, which sequence holds them;
/// and a word with no Simplified form, alone.
#[test]
fn words_the_vocabulary_lacks_are_named() {
    let out =
        bert_trace(&["--model", "chinese-small", "--no-dump", "--stop-at", "input.ids", "舉頭望明月，低頭思故鄉。"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ok(out, "Traditional characters");
    assert_eq!(
        stderr,
        "note: the model's vocabulary lacks 舉 頭 鄉, which it reads as [UNK]; it has the Simplified forms 舉 → 举, \
         頭 → 头, 鄉 → 乡\n"
    );
    let out =
        bert_trace(&["--model", "chinese-small", "--no-dump", "--stop-at", "input.ids", "床前明月光", "低頭思故鄉"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ok(out, "a batch");
    assert_eq!(
        stderr,
        "note: the model's vocabulary lacks 頭 鄉 (in sequence 1), which it reads as [UNK]; it has the Simplified \
         forms 頭 → 头, 鄉 → 乡\n"
    );
    let out = bert_trace(&["--model", "chinese-small", "--no-dump", "--stop-at", "input.ids", "床前明月光😀"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ok(out, "an emoji");
    assert_eq!(stderr, "note: the model's vocabulary lacks 😀, which it reads as [UNK]\n");
}
