//! Loading real-world BERT checkpoints: each quirk of how checkpoints name and store their
//! tensors gets a file written here, loaded with `BertModel::load`, and either compared bit for
//! bit with the baseline checkpoint's traced forward pass or checked for the right error.

use crate::support;

use bert_core::stage::OutputHeads;
use bert_core::{BertError, BertModel};
use serde_json::json;
use support::{assert_identical, assert_mentions, first_difference, trace_all, Checkpoint, Dtype, RawTensor};

// ---------------------------------------------------------------------------------------------
// The baseline

#[test]
fn baseline_loads_with_all_heads_and_a_tied_decoder() {
    let ck = Checkpoint::tiny();
    let (_dir, model) = ck.load();
    let expected = OutputHeads { pooler: true, mlm: true, nsp: true, ..OutputHeads::default() };
    assert_eq!(model.output_heads(), expected, "heads: expected {expected:?}, got {:?}", model.output_heads());
    assert_eq!(model.layers.len(), 1);

    let word = model.embeddings.word_embeddings.as_slice();
    assert_eq!(word, &ck.tensor("bert.embeddings.word_embeddings.weight").f32_values()[..]);
    let mlm = model.mlm.as_ref().expect("MLM head");
    assert_eq!(mlm.decoder.weight.shape(), model.embeddings.word_embeddings.shape());
    assert_eq!(mlm.decoder.weight.as_slice(), word, "the MLM decoder weight must be the word embedding table");
    // Tied, not copied: the very same memory.
    assert_eq!(mlm.decoder.weight.as_slice().as_ptr(), word.as_ptr());
    assert_eq!(mlm.decoder.bias.as_slice(), &ck.tensor("cls.predictions.bias").f32_values()[..]);

    let memory = trace_all(&model);
    let names: Vec<String> = memory.stages.iter().map(|(s, _)| s.name()).collect();
    let plan: Vec<String> = model.plan(Default::default()).iter().map(|s| s.name()).collect();
    assert_eq!(names, plan, "every planned stage is traced, in order");
    for (stage, tensor) in &memory.stages {
        if let bert_core::pass::Tensor::F32(a) = tensor {
            assert!(a.iter().all(|v| v.is_finite()), "{stage} has non-finite values");
        }
    }
}

#[test]
fn f32_params_are_memory_mapped_not_copied() {
    let (_dir, model) = Checkpoint::tiny().load();
    let params = [
        ("embeddings.word_embeddings", &model.embeddings.word_embeddings),
        ("embeddings.position_embeddings", &model.embeddings.position_embeddings),
        ("embeddings.LayerNorm.weight", &model.embeddings.layer_norm.weight),
        ("layer0.attention.self.query.weight", &model.layers[0].attention.self_attention.query.weight),
        ("layer0.intermediate.dense.weight", &model.layers[0].feed_forward.intermediate.weight),
        ("pooler.dense.weight", &model.pooler.as_ref().unwrap().dense.weight),
        ("mlm.decoder.bias", &model.mlm.as_ref().unwrap().decoder.bias),
    ];
    for (name, param) in params {
        assert!(param.is_mapped(), "{name}: expected a window into the mapped file, got a copy");
    }
}

#[test]
fn misaligned_f32_data_is_copied_and_gives_identical_output() {
    // A writer that does not pad the header leaves f32 data at odd offsets; it cannot be viewed
    // in place, so it is converted once, with the same values.
    let baseline = Checkpoint::tiny();
    let (_d0, model0) = baseline.load();
    let mut ck = baseline.clone();
    ck.align_header = false;
    let (_d1, model1) = ck.load();
    assert!(!model1.embeddings.word_embeddings.is_mapped());
    assert_identical("misaligned header", &trace_all(&model0), &trace_all(&model1));
}

// ---------------------------------------------------------------------------------------------
// Naming variations that must load and compute exactly what the baseline computes

/// One variation of the baseline: a label and the edit that makes it.
type Variation = (&'static str, fn(&mut Checkpoint));

fn no_bert_prefix(ck: &mut Checkpoint) {
    // A bare BertModel (e.g. sentence-transformers): `embeddings.*`, `encoder.*`, `pooler.*`.
    ck.rename_all(|n| n.strip_prefix("bert.").unwrap_or(n).to_string());
}

fn gamma_beta(ck: &mut Checkpoint) {
    // The original TensorFlow conversion: LayerNorm.gamma / LayerNorm.beta.
    ck.rename_all(|n| n.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"));
}

fn no_prefix_and_gamma_beta(ck: &mut Checkpoint) {
    no_bert_prefix(ck);
    gamma_beta(ck);
}

fn decoder_bias(ck: &mut Checkpoint) {
    ck.rename("cls.predictions.bias", "cls.predictions.decoder.bias");
}

fn decoder_weight_stored(ck: &mut Checkpoint) {
    // HF ties the decoder to the input embeddings when it loads, whatever the file stores; the
    // stored copy is made different here so that using it would show.
    let word = ck.tensor("bert.embeddings.word_embeddings.weight").clone();
    let other: Vec<f32> = word.f32_values().iter().map(|v| -2.0 * v + 0.25).collect();
    ck.insert("cls.predictions.decoder.weight", RawTensor::f32(&word.shape, &other));
}

fn decoder_weight_and_bias_stored(ck: &mut Checkpoint) {
    // Both names of the bias, as `save_pretrained` of older versions wrote them.
    decoder_weight_stored(ck);
    let bias = ck.tensor("cls.predictions.bias").clone();
    ck.insert("cls.predictions.decoder.bias", bias);
}

fn position_ids_buffer(ck: &mut Checkpoint) {
    // transformers < 4.31 saved the registered buffer.
    let ids: Vec<i64> = (0..support::POSITIONS as i64).collect();
    ck.insert("bert.embeddings.position_ids", RawTensor::i64(&[1, support::POSITIONS], &ids));
}

fn position_ids_buffer_without_prefix(ck: &mut Checkpoint) {
    position_ids_buffer(ck);
    no_bert_prefix(ck);
}

fn unrelated_extra_tensors(ck: &mut Checkpoint) {
    // Leftovers a converter may keep (optimizer slots, a global step) are ignored.
    ck.insert("global_step", RawTensor::i64(&[], &[1000]));
    let adam = ck.tensor("bert.pooler.dense.weight").converted(Dtype::F64);
    ck.insert("bert.pooler.dense.weight_adam_m", adam);
}

const SAME_OUTPUT: &[Variation] = &[
    ("names without `bert.`", no_bert_prefix),
    ("LayerNorm gamma/beta", gamma_beta),
    ("no `bert.` and gamma/beta", no_prefix_and_gamma_beta),
    ("cls.predictions.decoder.bias", decoder_bias),
    ("cls.predictions.decoder.weight stored", decoder_weight_stored),
    ("decoder.weight, decoder.bias and bias stored", decoder_weight_and_bias_stored),
    ("bert.embeddings.position_ids I64 buffer", position_ids_buffer),
    ("embeddings.position_ids without `bert.`", position_ids_buffer_without_prefix),
    ("unrelated extra tensors", unrelated_extra_tensors),
];

#[test]
fn naming_variations_load_and_give_bit_identical_outputs() {
    let baseline = Checkpoint::tiny();
    let (_d0, model0) = baseline.load();
    let expected = trace_all(&model0);
    let mut failures = Vec::new();
    for (label, edit) in SAME_OUTPUT {
        let mut ck = baseline.clone();
        edit(&mut ck);
        let dir = ck.write();
        let model = match BertModel::load(dir.path()) {
            Ok(model) => model,
            Err(e) => {
                failures.push(format!("{label}: expected to load, got error: {e}"));
                continue;
            }
        };
        if model.output_heads() != model0.output_heads() {
            failures.push(format!(
                "{label}: heads expected {:?}, got {:?}",
                model0.output_heads(),
                model.output_heads()
            ));
            continue;
        }
        if let Some(diff) = first_difference(&expected, &trace_all(&model)) {
            failures.push(format!("{label}: {diff}"));
        }
        println!("ok: {label}");
    }
    assert!(failures.is_empty(), "variations that failed:\n{}", failures.join("\n"));
}

#[test]
fn the_stored_decoder_weight_is_ignored_for_the_tied_embeddings() {
    let mut ck = Checkpoint::tiny();
    decoder_weight_stored(&mut ck);
    let (_dir, model) = ck.load();
    let mlm = model.mlm.as_ref().unwrap();
    assert_eq!(mlm.decoder.weight.as_slice(), model.embeddings.word_embeddings.as_slice());
    assert_ne!(mlm.decoder.weight.as_slice(), &ck.tensor("cls.predictions.decoder.weight").f32_values()[..]);
}

// ---------------------------------------------------------------------------------------------
// Half precision

#[test]
fn f16_and_bf16_files_match_the_f32_model_with_rounded_weights() {
    type Round = fn(f32) -> f32;
    let cases: [(Dtype, Round); 2] =
        [(Dtype::F16, |v| half::f16::from_f32(v).to_f32()), (Dtype::BF16, |v| half::bf16::from_f32(v).to_f32())];
    for (dtype, round) in cases {
        let mut rounded = Checkpoint::tiny();
        rounded.map_values(round);
        let mut stored = rounded.clone();
        stored.store_as(dtype);
        // Rounding the rounded values again changes nothing, so both files hold the same numbers.
        let (_d0, reference) = rounded.load();
        let (_d1, model) = stored.load();
        assert!(!model.embeddings.word_embeddings.is_mapped(), "{dtype:?} weights are converted to f32 in memory");
        assert_eq!(model.output_heads(), reference.output_heads());
        assert_identical(&format!("{dtype:?} file"), &trace_all(&reference), &trace_all(&model));

        // And the rounding is real: the half model differs from the unrounded baseline, a little.
        let (_d2, exact) = Checkpoint::tiny().load();
        let got = trace_all(&model);
        let want = trace_all(&exact);
        assert!(first_difference(&want, &got).is_some(), "{dtype:?}: rounding changed nothing?");
        let name = "embeddings.layernorm";
        let (a, b) = match (want.get(name), got.get(name)) {
            (Some(bert_core::pass::Tensor::F32(a)), Some(bert_core::pass::Tensor::F32(b))) => (a, b),
            _ => panic!("no stage {name}"),
        };
        let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        println!("{dtype:?}: largest difference at {name} vs the unrounded f32 model: {worst:e}");
        assert!(worst < 0.1, "{dtype:?}: {name} differs by {worst} from the unrounded model");
    }
}

#[test]
fn mixed_dtypes_load() {
    // fp16 weights with an f32 LayerNorm (as mixed-precision exports do) and an I64 buffer.
    let mut ck = Checkpoint::tiny();
    ck.map_values(|v| half::f16::from_f32(v).to_f32());
    let reference = ck.clone();
    for (name, t) in ck.tensors.iter_mut() {
        if !name.contains("LayerNorm") {
            *t = t.converted(Dtype::F16);
        }
    }
    position_ids_buffer(&mut ck);
    let (_d0, model0) = reference.load();
    let (_d1, model1) = ck.load();
    assert!(model1.embeddings.layer_norm.weight.is_mapped());
    assert!(!model1.embeddings.word_embeddings.is_mapped());
    assert_identical("mixed f16/f32", &trace_all(&model0), &trace_all(&model1));
}

// ---------------------------------------------------------------------------------------------
// Broken tensors

#[test]
fn a_missing_tensor_is_named() {
    let cases = [
        "bert.encoder.layer.0.attention.self.key.weight",
        "bert.embeddings.position_embeddings.weight",
        "bert.encoder.layer.0.output.LayerNorm.bias",
        "cls.predictions.bias",
    ];
    for name in cases {
        let mut ck = Checkpoint::tiny();
        ck.remove(name);
        let (_dir, err) = ck.load_err();
        let text = err.to_string();
        println!("missing {name}: {text}");
        match &err {
            BertError::MissingTensor { name: got, .. } => {
                // The MLM bias may be reported under either of its names.
                assert!(
                    got == name || (name == "cls.predictions.bias" && got == "cls.predictions.decoder.bias"),
                    "expected MissingTensor {name}, got {got}"
                );
            }
            other => panic!("expected MissingTensor for {name}, got {other:?}"),
        }
        assert_mentions(&text, &["model.safetensors", name]);
    }
}

#[test]
fn a_missing_mlm_bias_names_both_of_its_names() {
    let mut ck = Checkpoint::tiny();
    ck.remove("cls.predictions.bias");
    let (_dir, err) = ck.load_err();
    assert_mentions(&err.to_string(), &["cls.predictions.bias", "cls.predictions.decoder.bias"]);
}

#[test]
fn a_missing_tensor_lists_the_names_tried() {
    let mut ck = Checkpoint::tiny();
    ck.remove("bert.embeddings.LayerNorm.weight");
    let (_dir, err) = ck.load_err();
    assert_mentions(
        &err.to_string(),
        &["bert.embeddings.LayerNorm.weight", "embeddings.LayerNorm.weight", "embeddings.LayerNorm.gamma"],
    );
}

#[test]
fn a_tensor_of_the_wrong_shape_names_both_shapes() {
    let cases: [(&str, Vec<usize>); 3] = [
        // Transposed, as a TF checkpoint converted by hand would be.
        ("bert.encoder.layer.0.intermediate.dense.weight", vec![8, 16]),
        ("bert.embeddings.word_embeddings.weight", vec![support::VOCAB.len() + 1, 8]),
        ("bert.pooler.dense.bias", vec![1, 8]),
    ];
    for (name, bad_shape) in cases {
        let mut ck = Checkpoint::tiny();
        let t = ck.tensor(name).clone();
        let n: usize = bad_shape.iter().product();
        let values = support::Lcg::new(7).values(n, 0.0, 1.0);
        ck.insert(name, RawTensor::f32(&bad_shape, &values));
        let (_dir, err) = ck.load_err();
        let text = err.to_string();
        println!("{name} as {bad_shape:?}: {text}");
        match &err {
            BertError::TensorShape { name: got, expected, found, .. } => {
                assert_eq!(got, name);
                assert_eq!(expected, &t.shape, "expected shape");
                assert_eq!(found, &bad_shape, "found shape");
            }
            other => panic!("expected TensorShape for {name}, got {other:?}"),
        }
        assert_mentions(&text, &["model.safetensors", name, &format!("{bad_shape:?}"), &format!("{:?}", t.shape)]);
    }
}

#[test]
fn a_tensor_of_an_unsupported_dtype_is_refused() {
    let cases = [
        ("bert.pooler.dense.weight", Dtype::F64),
        ("bert.encoder.layer.0.attention.self.query.bias", Dtype::I32),
        ("bert.embeddings.word_embeddings.weight", Dtype::I64),
    ];
    for (name, dtype) in cases {
        let mut ck = Checkpoint::tiny();
        let t = ck.tensor(name).converted(dtype);
        ck.insert(name, t);
        let (_dir, err) = ck.load_err();
        let text = err.to_string();
        println!("{name} as {dtype:?}: {text}");
        match &err {
            BertError::TensorDtype { name: got, found, .. } => {
                assert_eq!(got, name);
                assert_eq!(found, dtype.name());
            }
            other => panic!("expected TensorDtype for {name}, got {other:?}"),
        }
        assert_mentions(&text, &["model.safetensors", name, dtype.name()]);
    }
}

// ---------------------------------------------------------------------------------------------
// Heads

#[test]
fn without_pooler_and_heads_the_encoder_still_runs() {
    let baseline = Checkpoint::tiny();
    let (_d0, model0) = baseline.load();
    let mut ck = baseline.clone();
    ck.remove_prefix("bert.pooler.").remove_prefix("cls.");
    ck.set_config("architectures", json!(["BertModel"]));
    let (_d1, model) = ck.load();
    assert_eq!(model.output_heads(), OutputHeads::default(), "no heads expected");

    let full = trace_all(&model0);
    let bare = trace_all(&model);
    let last = model.plan(Default::default()).last().unwrap().name();
    assert!(last.starts_with("layer0."), "the last stage is the encoder's: {last}");
    // The encoder's stages are the baseline's, bit for bit.
    let prefix = bert_core::pass::Memory { stages: full.stages[..bare.stages.len()].to_vec() };
    assert_identical("no heads", &prefix, &bare);
}

#[test]
fn mlm_only_checkpoint_has_no_pooler() {
    // BertForMaskedLM: no pooler, no NSP.
    let mut ck = Checkpoint::tiny();
    ck.remove_prefix("bert.pooler.").remove_prefix("cls.seq_relationship.");
    let (_dir, model) = ck.load();
    let expected = OutputHeads { mlm: true, ..OutputHeads::default() };
    assert_eq!(model.output_heads(), expected);
    let memory = trace_all(&model);
    assert!(memory.get("mlm.logits").is_some(), "mlm.logits traced");
}

fn classifier_checkpoint(labels: &[&str]) -> Checkpoint {
    let mut ck = Checkpoint::tiny();
    ck.remove_prefix("cls.");
    let mut rng = support::Lcg::new(42);
    ck.insert("classifier.weight", RawTensor::f32(&[3, support::HIDDEN], &rng.values(3 * support::HIDDEN, 0.0, 0.3)));
    ck.insert("classifier.bias", RawTensor::f32(&[3], &rng.values(3, 0.0, 0.1)));
    let id2label: serde_json::Map<String, serde_json::Value> =
        labels.iter().enumerate().map(|(i, l)| (i.to_string(), json!(l))).collect();
    let label2id: serde_json::Map<String, serde_json::Value> =
        labels.iter().enumerate().map(|(i, l)| (l.to_string(), json!(i))).collect();
    ck.set_config("architectures", json!(["BertForSequenceClassification"]))
        .set_config("id2label", json!(id2label))
        .set_config("label2id", json!(label2id));
    ck
}

#[test]
fn classifier_head_takes_its_labels_from_id2label() {
    let ck = classifier_checkpoint(&["negative", "neutral", "positive"]);
    let (_dir, model) = ck.load();
    let expected = OutputHeads { pooler: true, classifier: true, ..OutputHeads::default() };
    assert_eq!(model.output_heads(), expected);
    let labels = &model.classifier.as_ref().unwrap().labels;
    assert_eq!(labels, &["negative", "neutral", "positive"]);
    let memory = trace_all(&model);
    let logits = memory.get("classifier.logits").expect("classifier.logits traced");
    assert_eq!(logits.shape(), &[2, 3]);
}

#[test]
fn classifier_without_id2label_gets_default_names() {
    let mut ck = classifier_checkpoint(&["a", "b", "c"]);
    ck.config.as_object_mut().unwrap().remove("id2label");
    let (_dir, model) = ck.load();
    assert_eq!(model.classifier.unwrap().labels, ["LABEL_0", "LABEL_1", "LABEL_2"]);
}

#[test]
fn id2label_of_the_wrong_length_is_an_error() {
    for labels in [&["negative", "positive"][..], &["a", "b", "c", "d"][..]] {
        let ck = classifier_checkpoint(labels);
        let (_dir, err) = ck.load_err();
        let text = err.to_string();
        println!("{} labels: {text}", labels.len());
        assert!(matches!(err, BertError::Config { .. }), "expected a Config error, got {err:?}");
        assert_mentions(&text, &["config.json", "id2label", &labels.len().to_string(), "3"]);
    }
}

#[test]
fn a_classifier_without_a_pooler_is_an_error() {
    let mut ck = classifier_checkpoint(&["a", "b", "c"]);
    ck.remove_prefix("bert.pooler.");
    let (_dir, err) = ck.load_err();
    assert!(matches!(err, BertError::MissingTensor { .. }), "got {err:?}");
    assert_mentions(&err.to_string(), &["bert.pooler.dense.weight", "model.safetensors"]);
}

// ---------------------------------------------------------------------------------------------
// config.json

#[test]
fn config_errors_name_config_json_and_the_field() {
    let cases: &[(&str, &str, serde_json::Value, &[&str])] = &[
        (
            "hidden not divisible by heads",
            "num_attention_heads",
            json!(3),
            &["hidden_size", "num_attention_heads", "divisible"],
        ),
        ("zero layers", "num_hidden_layers", json!(0), &["num_hidden_layers", "0"]),
        ("zero heads", "num_attention_heads", json!(0), &["num_attention_heads"]),
        (
            "relative positions",
            "position_embedding_type",
            json!("relative_key"),
            &["position_embedding_type", "relative_key"],
        ),
        (
            "relative positions (query)",
            "position_embedding_type",
            json!("relative_key_query"),
            &["position_embedding_type"],
        ),
        ("swish", "hidden_act", json!("swish"), &["hidden_act", "swish"]),
        ("absurd vocab_size", "vocab_size", json!(1u64 << 40), &["vocab_size"]),
        ("absurd hidden_size", "hidden_size", json!(1u64 << 30), &["hidden_size"]),
        ("absurd max_position_embeddings", "max_position_embeddings", json!(1u64 << 40), &["max_position_embeddings"]),
        ("negative eps", "layer_norm_eps", json!(-1.0), &["layer_norm_eps"]),
        ("vocab_size a string", "vocab_size", json!("30522"), &["vocab_size"]),
        ("vocab_size negative", "vocab_size", json!(-1), &["vocab_size"]),
        ("a RoBERTa config", "model_type", json!("roberta"), &["model_type", "roberta", "expected `bert`"]),
    ];
    let mut failures = Vec::new();
    for (label, field, value, needles) in cases {
        let mut ck = Checkpoint::tiny();
        ck.set_config(field, value.clone());
        let dir = ck.write();
        let err = match BertModel::load(dir.path()) {
            Ok(_) => {
                failures.push(format!("{label}: expected a config error, but it loaded"));
                continue;
            }
            Err(e) => e,
        };
        let text = err.to_string();
        println!("{label}: {text}");
        if !matches!(err, BertError::Config { .. }) {
            failures.push(format!("{label}: expected BertError::Config, got {err:?}"));
            continue;
        }
        for needle in needles.iter().chain(&["config.json"]) {
            if !text.contains(needle) {
                failures.push(format!("{label}: expected `{needle}` in: {text}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_missing_config_field_is_named() {
    let mut ck = Checkpoint::tiny();
    ck.config.as_object_mut().unwrap().remove("hidden_size");
    let (_dir, err) = ck.load_err();
    assert!(matches!(err, BertError::Config { .. }), "got {err:?}");
    assert_mentions(&err.to_string(), &["config.json", "hidden_size"]);
}

#[test]
fn an_absurd_vocab_size_is_refused_before_the_weights_are_read() {
    // The weights file is garbage too: the config must be refused first, from its numbers alone.
    let mut ck = Checkpoint::tiny();
    ck.set_config("vocab_size", json!(usize::MAX));
    let dir = ck.write();
    std::fs::write(dir.path().join("model.safetensors"), b"not read").unwrap();
    let err = BertModel::load(dir.path()).err().expect("an error");
    assert!(matches!(err, BertError::Config { .. }), "got {err:?}");
    assert_mentions(&err.to_string(), &["config.json", "vocab_size"]);
}

// ---------------------------------------------------------------------------------------------
// Broken files

#[test]
fn broken_safetensors_files_are_named() {
    let good = Checkpoint::tiny().safetensors_bytes();
    let header_len = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let mut not_json = 16u64.to_le_bytes().to_vec();
    not_json.extend(b"this is not json");
    let mut not_utf8 = 8u64.to_le_bytes().to_vec();
    not_utf8.extend([0xff, 0xfe, 0xfd, 0xfc, b'{', b'}', b' ', b' ']);
    let mut beyond = (good.len() as u64).to_le_bytes().to_vec();
    beyond.extend(&good[8..]);
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend(&good[8..]);
    let mut bad_offsets = good.clone();
    bad_offsets.extend([0u8; 4]); // data longer than the header says
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty file", Vec::new()),
        ("shorter than the length prefix", vec![1, 2, 3]),
        ("truncated data", good[..good.len() - 100].to_vec()),
        ("truncated header", good[..8 + header_len / 2].to_vec()),
        ("header length beyond the file", beyond),
        ("header length u64::MAX", huge),
        ("header not JSON", not_json),
        ("header not UTF-8", not_utf8),
        ("trailing bytes after the data", bad_offsets),
    ];
    let mut failures = Vec::new();
    for (label, bytes) in cases {
        let ck = Checkpoint::tiny();
        let dir = ck.write();
        std::fs::write(dir.path().join("model.safetensors"), &bytes).unwrap();
        match BertModel::load(dir.path()) {
            Ok(_) => failures.push(format!("{label}: loaded")),
            Err(err) => {
                let text = err.to_string();
                println!("{label}: {text}");
                if !matches!(err, BertError::Safetensors { .. }) {
                    failures.push(format!("{label}: expected BertError::Safetensors, got {err:?}"));
                } else if !text.contains("model.safetensors") {
                    failures.push(format!("{label}: the message does not name the file: {text}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn only_pytorch_model_bin_points_to_the_converter() {
    let ck = Checkpoint::tiny();
    let dir = ck.write();
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    std::fs::write(dir.path().join("pytorch_model.bin"), b"PK\x03\x04 a pickle in a zip").unwrap();
    let err = BertModel::load(dir.path()).err().expect("an error");
    let text = err.to_string();
    println!("{text}");
    assert!(matches!(err, BertError::ModelDir { .. }), "got {err:?}");
    assert_mentions(&text, &["pytorch_model.bin", "scripts/convert_to_safetensors.py"]);
}

#[test]
fn directory_problems_are_named() {
    let ck = Checkpoint::tiny();
    let dir = ck.write();
    /// label, the path to load, how to prepare it, what the message mentions
    type Case = (&'static str, std::path::PathBuf, Box<dyn Fn(&std::path::Path)>, &'static str);
    let cases: Vec<Case> = vec![
        ("no such directory", dir.path().join("nope"), Box::new(|_| {}), "does not exist"),
        ("a file, not a directory", dir.path().join("config.json"), Box::new(|_| {}), "file"),
        (
            "no config.json",
            dir.path().join("no_config"),
            Box::new(|p| {
                std::fs::create_dir(p).unwrap();
                std::fs::write(p.join("model.safetensors"), b"").unwrap();
            }),
            "config.json",
        ),
        (
            "no weights at all",
            dir.path().join("no_weights"),
            Box::new(|p| {
                std::fs::create_dir(p).unwrap();
                std::fs::copy(p.parent().unwrap().join("config.json"), p.join("config.json")).unwrap();
            }),
            "model.safetensors",
        ),
    ];
    for (label, path, setup, needle) in cases {
        setup(&path);
        let err = BertModel::load(&path).err().unwrap_or_else(|| panic!("{label}: loaded"));
        let text = err.to_string();
        println!("{label}: {text}");
        // A path that is not there is not found (Python raises NotFoundError); one that is
        // there but is not a model is a bad model directory.
        let kind_ok = match label {
            "no such directory" => matches!(err, BertError::NotFound { .. }),
            _ => matches!(err, BertError::ModelDir { .. }),
        };
        assert!(kind_ok, "{label}: got {err:?}");
        assert_mentions(&text, &[needle]);
    }
}

#[test]
fn an_unreadable_config_json_is_a_config_error() {
    let ck = Checkpoint::tiny();
    let dir = ck.write();
    std::fs::write(dir.path().join("config.json"), b"{\"hidden_size\": 8,").unwrap();
    let err = BertModel::load(dir.path()).err().expect("an error");
    assert!(matches!(err, BertError::Config { .. }), "got {err:?}");
    assert_mentions(&err.to_string(), &["config.json"]);
}

#[test]
fn a_mistyped_field_in_a_one_line_config_is_named() {
    // serde_json reports only "line 1 column N" here; the message must still name the field.
    let mut ck = Checkpoint::tiny();
    ck.set_config("vocab_size", json!(null));
    let dir = ck.write();
    std::fs::write(dir.path().join("config.json"), serde_json::to_vec(&ck.config).unwrap()).unwrap();
    let err = BertModel::load(dir.path()).err().expect("an error");
    let text = err.to_string();
    println!("{text}");
    assert!(matches!(err, BertError::Config { .. }), "got {err:?}");
    assert_mentions(&text, &["config.json", "vocab_size"]);
}
