//! sentence-transformers' mean pooling: which directories get the `sentence.pooled` stage, the
//! errors for broken pooling configs, and the value itself against a float64 mean computed here
//! from the traced last hidden state, rounded once (the golden test compares it with PyTorch on
//! MiniLM).

use crate::support;

use bert_core::pass::{Memory, Tensor};
use bert_core::BertModel;
use support::{assert_mentions, Checkpoint, HIDDEN};

const MEAN: &str = r#"{"word_embedding_dimension": 8, "pooling_mode_cls_token": false,
    "pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": false,
    "pooling_mode_mean_sqrt_len_tokens": false}"#;
const CLS: &str = r#"{"word_embedding_dimension": 8, "pooling_mode_cls_token": true,
    "pooling_mode_mean_tokens": false}"#;
const MEAN_AND_MAX: &str = r#"{"word_embedding_dimension": 8, "pooling_mode_mean_tokens": true,
    "pooling_mode_max_tokens": true}"#;
const WRONG_WIDTH: &str = r#"{"word_embedding_dimension": 384, "pooling_mode_mean_tokens": true}"#;

fn modules(pooling_path: &str) -> String {
    format!(
        r#"[{{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}},
            {{"idx": 1, "name": "1", "path": "{pooling_path}", "type": "sentence_transformers.models.Pooling"}},
            {{"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}}]"#
    )
}

/// Files of a model directory: (path inside it, contents).
type Files<'a> = Vec<(&'a str, &'a str)>;

/// Writes the tiny checkpoint plus `files` (paths relative to the model directory) and loads it.
fn load_with(files: &[(&str, &str)]) -> (tempfile::TempDir, bert_core::Result<BertModel>) {
    let dir = Checkpoint::tiny().write();
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let model = BertModel::load(dir.path());
    (dir, model)
}

#[test]
fn the_stage_is_there_only_for_mean_pooling() {
    let only_modules = modules("2_Pool");
    let no_pooling_module =
        r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]"#;
    // (what the directory holds, whether sentence.pooled is traced)
    let cases: Vec<(&str, Files, bool)> = vec![
        ("plain BERT", vec![], false),
        ("1_Pooling, mean", vec![("1_Pooling/config.json", MEAN)], true),
        ("1_Pooling, CLS", vec![("1_Pooling/config.json", CLS)], false),
        ("1_Pooling, mean and max", vec![("1_Pooling/config.json", MEAN_AND_MAX)], false),
        ("modules.json names 2_Pool", vec![("modules.json", &only_modules), ("2_Pool/config.json", MEAN)], true),
        (
            "modules.json without a Pooling module",
            vec![("modules.json", no_pooling_module), ("1_Pooling/config.json", MEAN)],
            false,
        ),
        ("modules.json names a missing folder", vec![("modules.json", &only_modules)], false),
    ];
    let mut failures = Vec::new();
    for (label, files, want) in cases {
        let (_dir, model) = load_with(&files);
        let model = model.unwrap_or_else(|e| panic!("{label}: {e}"));
        let names: Vec<String> = model.plan(Default::default()).iter().map(|s| s.name()).collect();
        let got = names.last().map(String::as_str) == Some("sentence.pooled");
        if got != want || model.output_heads().sentence != want {
            failures.push(format!("{label}: expected sentence.pooled {want}, got plan ending {:?}", names.last()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn broken_pooling_configs_are_named() {
    let escaping = modules("../elsewhere");
    // (files, what the one-line error must mention)
    let cases: Vec<(Files, Vec<&str>)> = vec![
        (
            vec![("1_Pooling/config.json", WRONG_WIDTH)],
            vec!["1_Pooling/config.json", "word_embedding_dimension is 384", "expected 8"],
        ),
        (
            vec![("1_Pooling/config.json", "{ not json")],
            vec!["1_Pooling/config.json", "not a valid sentence-transformers pooling config"],
        ),
        (
            vec![("1_Pooling/config.json", r#"{"pooling_mode_mean_tokens": true}"#)],
            vec!["1_Pooling/config.json", "word_embedding_dimension"],
        ),
        (vec![("modules.json", "[1, 2]")], vec!["modules.json", "not a valid sentence-transformers modules.json"]),
        (
            vec![("modules.json", &escaping)],
            vec!["modules.json", "../elsewhere", "not a folder of the model directory"],
        ),
    ];
    for (files, needles) in cases {
        let (_dir, model) = load_with(&files);
        let err = model.err().unwrap_or_else(|| panic!("{files:?}: loading succeeded, expected an error"));
        let text = err.to_string();
        assert!(!text.contains('\n'), "{files:?}: not one line: {text}");
        assert_mentions(&text, &needles);
    }
}

/// Every stage of a batch whose second text is padded.
fn trace_padded(model: &BertModel) -> Memory {
    let texts = ["the cat sat on the mat.".to_string(), "a dog!".to_string()];
    let batch = model.encode(&texts, None, false).unwrap_or_else(|e| panic!("encode: {e}"));
    let mut memory = Memory::default();
    model.trace(&batch, &mut memory, None).unwrap_or_else(|e| panic!("trace: {e}"));
    memory
}

fn f32_stage<'a>(memory: &'a Memory, name: &str) -> &'a ndarray::ArrayD<f32> {
    match memory.get(name) {
        Some(Tensor::F32(a)) => a,
        other => panic!("{name}: expected an f32 stage, got {other:?}"),
    }
}

#[test]
fn sentence_pooled_is_the_mean_over_real_tokens_and_changes_nothing_else() {
    let (_plain_dir, plain) = load_with(&[]);
    let (_st_dir, pooled) = load_with(&[("1_Pooling/config.json", MEAN)]);
    let without = trace_padded(&plain.unwrap());
    let with = trace_padded(&pooled.unwrap());

    // Every other stage is bit-identical; sentence.pooled is one more, at the end.
    let trimmed = Memory { stages: with.stages[..with.stages.len() - 1].to_vec() };
    support::assert_identical("with 1_Pooling", &without, &trimmed);
    assert_eq!(with.stages.last().map(|(s, _)| s.name()).as_deref(), Some("sentence.pooled"));

    // The mean in float64 over the tokens whose mask is 1, rounded once to f32: mean_pool sums
    // in f64 in token order, as here, so the two agree bit for bit (an f32 sum would not).
    let last = f32_stage(&with, "layer0.ffn.layernorm");
    let got = f32_stage(&with, "sentence.pooled");
    let mask = match with.get("input.attention_mask") {
        Some(Tensor::I64(m)) => m,
        other => panic!("input.attention_mask: {other:?}"),
    };
    let (batch, tokens) = (mask.shape()[0], mask.shape()[1]);
    assert!(mask.iter().any(|&m| m == 0), "the test batch must have padding");
    assert_eq!(got.shape(), &[batch, HIDDEN]);
    let mut failures = Vec::new();
    for b in 0..batch {
        let real: Vec<usize> = (0..tokens).filter(|&t| mask[[b, t]] == 1).collect();
        for h in 0..HIDDEN {
            let want = real.iter().map(|&t| last[[b, t, h]] as f64).sum::<f64>() / real.len() as f64;
            let have = got[[b, h]];
            if have.to_bits() != (want as f32).to_bits() {
                failures.push(format!("[{b}, {h}]: expected {:e} (the f64 mean {want:e}), got {have:e}", want as f32));
            }
        }
    }
    assert!(failures.is_empty(), "sentence.pooled differs from the float64 mean:\n{}", failures.join("\n"));
}
