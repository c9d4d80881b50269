//! The experiments against their definitions on golden/tiny: a hook changes what the rest of
//! the pass reads, an ablated head changes only its columns of the context, the head scan's
//! reuse of the layers below equals whole passes, occlusion equals whole passes on the hidden
//! inputs, the lens's last row is the model's own prediction, patches replace what they name.
//! (Against PyTorch: crates/bert-trace/tests/all/experiments.rs diffs the goldens that
//! `dump_reference.py --ablate/--patch/--lens` made.)

use std::path::Path;

use bert_core::experiments::intervention::{AblateWith, Ablation, Interventions, Patch, Positions};
use bert_core::experiments::token_importance::{Prediction, Score};
use bert_core::model::Pass;
use bert_core::ops;
use bert_core::pass::hook::{Hook, TensorViewMut};
use bert_core::stage::Stage;
use bert_core::{Batch, BertModel, Memory, Tensor};
use ndarray::{s, ArrayView2, Axis, Ix3};

const TEXT: &str = "When in Rome, do as the [MASK] do.";
/// Where TEXT's [MASK] is: after [CLS] when in ro ##me , do as the.
const MASK_AT: (usize, usize) = (0, 9);

fn model(name: &str) -> BertModel {
    BertModel::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../golden").join(name)).unwrap()
}

fn encode(model: &BertModel, texts: &[&str]) -> Batch {
    let texts: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
    model.encode(&texts, None, false).unwrap()
}

/// Every stage of one pass with `hook`.
fn run(model: &BertModel, batch: &Batch, hook: Option<&mut dyn Hook>) -> Memory {
    let mut memory = Memory::default();
    model.trace_with(batch, &mut memory, Pass { hook, ..Pass::default() }).unwrap();
    memory
}

fn f32_of(memory: &Memory, name: &str) -> ndarray::ArrayD<f32> {
    match memory.get(name) {
        Some(Tensor::F32(a)) => a.clone(),
        other => panic!("{name}: expected an f32 stage, got {other:?}"),
    }
}

/// log p(id) at `(seq, pos)` of a pass's `mlm.logits`.
fn log_prob(memory: &Memory, (seq, pos): (usize, usize), id: u32) -> f64 {
    let logits = f32_of(memory, "mlm.logits").into_dimensionality::<Ix3>().unwrap();
    let row = logits.index_axis(Axis(0), seq).row(pos).to_owned().insert_axis(Axis(0));
    ops::log_softmax_rows(row.view())[[0, id as usize]]
}

fn ablate(model: &BertModel, layer: usize, head: Option<usize>, with: AblateWith) -> Interventions {
    let ablation = Ablation { layer, head, with };
    Interventions { ablations: vec![ablation], n_heads: model.config.num_attention_heads, ..Interventions::default() }
}

#[test]
fn an_ablated_head_changes_only_its_columns_of_the_context_and_what_follows() {
    let model = model("tiny");
    let batch = encode(&model, &[TEXT]);
    let plain = run(&model, &batch, None);
    let hs = model.config.hidden_size / model.config.num_attention_heads;
    // (layer, head) ablated with zeros
    for (layer, head) in [(0, 0), (1, 2), (1, 3)] {
        let mut hook = ablate(&model, layer, Some(head), AblateWith::Zero);
        let ablated = run(&model, &batch, Some(&mut hook));
        let name = |stage: &str| format!("layer{layer}.attention.{stage}");
        for unchanged in [name("probs"), name("value"), "embeddings.layernorm".to_string()] {
            assert_eq!(
                f32_of(&plain, &unchanged),
                f32_of(&ablated, &unchanged),
                "{unchanged} with layer{layer}.head{head} ablated"
            );
        }
        let (before, after) = (f32_of(&plain, &name("context")), f32_of(&ablated, &name("context")));
        for col in 0..model.config.hidden_size {
            let (was, is) = (before.slice(s![.., .., col]), after.slice(s![.., .., col]));
            if (head * hs..(head + 1) * hs).contains(&col) {
                assert!(is.iter().all(|&v| v == 0.0), "{}: column {col} of head {head} is {is}", name("context"));
            } else {
                assert_eq!(was, is, "{}: column {col}, outside head {head}, changed", name("context"));
            }
        }
        assert_ne!(f32_of(&plain, "mlm.logits"), f32_of(&ablated, "mlm.logits"), "layer{layer}.head{head}");
    }
}

#[test]
fn a_mean_ablation_puts_the_mean_over_the_real_tokens_everywhere() {
    let model = model("tiny");
    // A padded batch: the second sequence's mean must leave its padding out.
    let batch = encode(&model, &["When in Rome, do as the Romans do.", "Do as the Romans."]);
    let plain = run(&model, &batch, None);
    let mut hook = ablate(&model, 1, Some(0), AblateWith::Mean);
    let ablated = run(&model, &batch, Some(&mut hook));
    let hs = model.config.hidden_size / model.config.num_attention_heads;
    let (before, after) = (f32_of(&plain, "layer1.attention.context"), f32_of(&ablated, "layer1.attention.context"));
    for seq in 0..2 {
        let real: Vec<usize> = (0..batch.dims().1).filter(|&t| batch.attention_mask[[seq, t]] == 1).collect();
        for col in 0..hs {
            let mean = real.iter().map(|&t| before[[seq, t, col]]).sum::<f32>() / real.len() as f32;
            for t in 0..batch.dims().1 {
                let got = after[[seq, t, col]];
                assert!(
                    (got - mean).abs() <= 1e-6 * mean.abs().max(1.0),
                    "seq {seq} pos {t} col {col}: expected {mean}, got {got}"
                );
            }
        }
    }
}

#[test]
fn the_head_scan_equals_a_whole_pass_for_every_head() {
    let model = model("tiny");
    let batch = encode(&model, &[TEXT]);
    let romans = model.tokenizer.single_token("romans").unwrap();
    for with in [AblateWith::Zero, AblateWith::Mean] {
        let scan = model.scan_heads(&batch, MASK_AT, ("romans", romans), with).unwrap();
        let unablated = log_prob(&run(&model, &batch, None), MASK_AT, romans);
        assert!((scan.log_prob - unablated).abs() < 1e-5, "unablated: expected {unablated}, got {}", scan.log_prob);
        for layer in 0..model.config.num_hidden_layers {
            for head in 0..model.config.num_attention_heads {
                let mut hook = ablate(&model, layer, Some(head), with);
                let expected = log_prob(&run(&model, &batch, Some(&mut hook)), MASK_AT, romans) - unablated;
                let got = scan.grid[layer][head];
                assert!(
                    (got - expected).abs() < 1e-5,
                    "layer{layer}.head{head} ({with:?}): expected {expected}, got {got}"
                );
            }
        }
        // Ranked: the largest fall first.
        assert!(scan.heads.windows(2).all(|w| w[0].change <= w[1].change), "{:?}", scan.heads);
    }
}

#[test]
fn occlusion_equals_a_whole_pass_on_the_hidden_input() {
    let model = model("tiny");
    let batch = encode(&model, &[TEXT]);
    let romans = model.tokenizer.single_token("romans").unwrap();
    for hide in ["[MASK]", "[UNK]"] {
        let target = Prediction::Masked { position: MASK_AT.1, id: romans };
        let occlusion = model.occlude(&batch, target, Score::Logprob, hide).unwrap();
        let full = log_prob(&run(&model, &batch, None), MASK_AT, romans);
        let hidden_positions: Vec<usize> = occlusion.tokens.iter().map(|t| t.position).collect();
        // Not [CLS] (0), not the [MASK] (9), not [SEP] (12).
        assert_eq!(hidden_positions, vec![1, 2, 3, 4, 5, 6, 7, 8, 10, 11], "{hide}");
        let hide_id = model.tokenizer.token_to_id(hide).unwrap();
        for token in &occlusion.tokens {
            let mut changed = batch.clone();
            changed.ids[[0, token.position]] = i64::from(hide_id);
            // Positive where the token raised log p: the full pass's minus the hidden one's.
            let expected = full - log_prob(&run(&model, &changed, None), MASK_AT, romans);
            assert!(
                (token.attribution - expected).abs() < 1e-5,
                "{hide} at {}: expected {expected}, got {}",
                token.position,
                token.attribution
            );
        }
    }
}

#[test]
fn the_lens_reads_every_layer_and_its_last_row_is_the_models_own_prediction() {
    let model = model("tiny");
    let batch = encode(&model, &[TEXT]);
    let mut memory = Memory::default();
    model.trace_with(&batch, &mut memory, Pass { lens: true, ..Pass::default() }).unwrap();
    let names: Vec<String> = memory.stages.iter().map(|(s, _)| s.name()).collect();
    let lens: Vec<&String> = names.iter().filter(|n| n.starts_with("lens.")).collect();
    assert_eq!(lens, ["lens.embeddings.logits", "lens.layer0.logits", "lens.layer1.logits"], "{names:?}");
    assert!(names.ends_with(&[
        "lens.embeddings.logits".into(),
        "lens.layer0.logits".into(),
        "lens.layer1.logits".into()
    ]));
    assert_eq!(f32_of(&memory, "lens.layer1.logits"), f32_of(&memory, "mlm.logits"), "the last row");
    // The lens leaves the pass as it was.
    let plain = run(&model, &batch, None);
    for (stage, tensor) in &plain.stages {
        assert_eq!(memory.get(&stage.name()), Some(tensor), "{stage}");
    }
    let rows = model.lens(&batch, &[MASK_AT], 3, None).unwrap();
    let last = rows[0].rows.last().unwrap();
    let top =
        bert_core::experiments::readout::Readout {
            log_probs: ops::log_softmax_rows(
                f32_of(&plain, "mlm.logits").into_dimensionality::<Ix3>().unwrap().slice(s![0, 9..10, ..]),
            )
            .row(0)
            .to_owned(),
        }
        .top(3);
    assert_eq!(last.top, top, "the lens's last row against the model's prediction");
}

#[test]
fn a_patch_replaces_what_it_names_and_the_pass_reads_it() {
    let model = model("tiny");
    let clean = run(&model, &encode(&model, &[TEXT]), None);
    let corrupted_batch = encode(&model, &["Once in Rome, do as the [MASK] do."]);
    let corrupted = run(&model, &corrupted_batch, None);
    let stage = bert_core::stage::parse("layer0.ffn.layernorm").unwrap();
    let value = clean.get("layer0.ffn.layernorm").unwrap().clone();
    let tokens = corrupted_batch.dims().1;
    // (positions, the positions that must take the clean value)
    let cases = [
        (None, (0..tokens).collect::<Vec<_>>()),
        (Positions::parse("1-3"), vec![1, 2, 3]),
        (Positions::parse("4"), vec![4]),
    ];
    for (positions, patched) in cases {
        let patch = Patch { stage, positions: positions.clone(), value: value.clone(), from: "clean".into() };
        let mut hook = Interventions { patches: vec![patch], n_heads: 4, ..Interventions::default() };
        let got = run(&model, &corrupted_batch, Some(&mut hook));
        let (got_stage, clean_stage, corrupted_stage) = (
            f32_of(&got, "layer0.ffn.layernorm"),
            f32_of(&clean, "layer0.ffn.layernorm"),
            f32_of(&corrupted, "layer0.ffn.layernorm"),
        );
        for t in 0..tokens {
            let want = if patched.contains(&t) { &clean_stage } else { &corrupted_stage };
            assert_eq!(got_stage.slice(s![.., t, ..]), want.slice(s![.., t, ..]), "{positions:?}: position {t}");
        }
        if positions.is_none() {
            // The whole input of layer 1 is the clean one, and so is everything after it.
            assert_eq!(f32_of(&got, "mlm.logits"), f32_of(&clean, "mlm.logits"), "whole patch");
        }
    }
}

/// Sets one input id, as a user's hook might.
struct SetId(i64);

impl Hook for SetId {
    fn wants(&self, stage: &Stage) -> bool {
        stage.name() == "input.ids"
    }
    fn apply(&mut self, _: Stage, tensor: TensorViewMut<'_>, _: ArrayView2<'_, i64>) -> bert_core::Result<()> {
        if let TensorViewMut::I64(mut ids) = tensor {
            ids[[0, 1]] = self.0;
        }
        Ok(())
    }
}

#[test]
fn the_input_stages_are_what_the_model_reads() {
    let model = model("tiny");
    let batch = encode(&model, &[TEXT]);
    let mask_id = i64::from(model.tokenizer.token_to_id("[MASK]").unwrap());
    let mut hook = SetId(mask_id);
    let hooked = run(&model, &batch, Some(&mut hook));
    let mut changed = batch.clone();
    changed.ids[[0, 1]] = mask_id;
    let expected = run(&model, &changed, None);
    for (stage, tensor) in &expected.stages {
        assert_eq!(hooked.get(&stage.name()), Some(tensor), "{stage}");
    }
    // An id outside the table is refused, not read out of bounds.
    let vocab = model.config.vocab_size as i64;
    for bad in [vocab, -1] {
        let mut hook = SetId(bad);
        let err = model.trace_with(&batch, &mut Memory::default(), Pass { hook: Some(&mut hook), ..Pass::default() });
        let message = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains(&format!("token id {bad} is outside the table")), "id {bad}: {message}");
    }
}

#[test]
fn specs_are_parsed_strictly() {
    let config = &model("tiny").config; // 2 layers, 4 heads
                                        // (spec, parses)
    let ablations = [
        ("layer0.head0", true),
        ("layer1.head3", true),
        ("layer1.heads", true),
        ("layer2.head0", false),
        ("layer0.head4", false),
        ("layer01.head0", false),
        ("layer0.head", false),
        ("layer0", false),
        ("head0", false),
    ];
    for (spec, parses) in ablations {
        let got = Ablation::parse(spec, AblateWith::Zero, config);
        assert_eq!(got.is_ok(), parses, "--ablate {spec}: {got:?}");
        if let Ok(ablation) = got {
            assert_eq!(ablation.spec(), spec, "the spec round-trips");
        }
    }
    // (text, range)
    let positions =
        [("3", Some(3..=3)), ("1-4", Some(1..=4)), ("4-1", None), ("-1", None), ("03", None), ("1-", None), ("", None)];
    for (text, range) in positions {
        assert_eq!(Positions::parse(text).map(|p| p.0), range, "positions `{text}`");
    }
    // (spec, parses)
    let patches = [
        ("dump:layer0.ffn.layernorm", true),
        ("some/dir:with:colons:layer1.attention.context@1-3", true),
        ("dump:input.ids@2", true),
        (":layer0.ffn.layernorm", false),
        ("layer0.ffn.layernorm", false),
        ("dump:layer0.ffn.norm", false),
        ("dump:layer0.ffn.layernorm@x", false),
        ("dump:lens.layer0.logits", false),
    ];
    for (spec, parses) in patches {
        let got = Patch::parse_spec(spec);
        assert_eq!(got.is_ok(), parses, "--patch {spec}: {got:?}");
    }
}

#[test]
fn the_fingerprint_names_the_checkpoint_not_the_precision() {
    let tiny = model("tiny");
    let tiny64 = BertModel::<f64>::load_as(&tiny.source).unwrap();
    assert_eq!(tiny.fingerprint(), tiny64.fingerprint(), "f32 and f64 loads of one checkpoint");
    assert_ne!(tiny.fingerprint(), model("tiny-relu").fingerprint(), "two checkpoints");
    assert_eq!(tiny.fingerprint().len(), 16);
}
