//! The backward pass against PyTorch's autograd: every parameter's gradient of golden/tiny,
//! for an MLM-only loss and for the MLM + NSP loss of a masked sentence pair, and of
//! golden/tiny-classifier for a classifier's loss on a padded batch, against the `grad.param.*`
//! of `scripts/dump_reference.py --backward` (golden/*/gradients). The same parameters must have
//! a gradient (none for the pooler and the NSP head under an MLM-only loss), and each must agree within atol 1e-5 + rtol 1e-4 (float32 on both sides). And the
//! order of the stages a backward pass hands its sink, against the stage table's plan of them.

use std::path::{Path, PathBuf};

use bert_core::io::dump::manifest::Inputs;
use bert_core::model::Pass;
use bert_core::stage::{Objectives, Stage};
use bert_core::{BertModel, Dump, Sink, TensorView};

fn golden(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../golden").join(path)
}

/// The inputs `dump_reference.py` was given for the autograd dump `case` (`tiny/gradients/...`),
/// from its manifest.
fn golden_inputs(case: &str) -> Inputs {
    Dump::open(&golden(case)).unwrap().manifest.inputs
}

fn strings(list: &[&str]) -> Option<Vec<String>> {
    Some(list.iter().map(|s| s.to_string()).collect())
}

/// Every gradient of `model` on `inputs` against the dump `case`, with the MLM head run on every
/// position or (`labelled_only`, as a training step runs it) on the labelled ones only; the
/// largest error, for the message.
fn check<F: bert_core::ops::Float>(model: &BertModel<F>, case: &str, inputs: Inputs, labelled_only: bool) -> f64 {
    let case = &format!("{case}{}", if labelled_only { " (the MLM head at the labelled positions only)" } else { "" });
    let batch = model.encode_inputs(&inputs, false).unwrap();
    let pass = Pass { backward: true, labelled_only, ..Pass::default() };
    let mut shapes = HeadShape::default();
    let traced = model.trace_with(&batch, &mut shapes, pass).unwrap();
    if let Some(labels) = &batch.labels.mlm {
        // The head ran where the mode says: every position, or the M labelled ones gathered.
        let labelled = labels.iter().filter(|&&l| l != -100).count();
        let (b, t) = batch.dims();
        let want = if labelled_only { vec![1, labelled] } else { vec![b, t] };
        assert_eq!(shapes.0.as_deref().map(|s| &s[..2]), Some(&want[..]), "{case}: mlm.logits' leading axes");
    }
    let gradients = bert_core::model::gradients::Gradients {
        loss: traced.outputs.loss.unwrap(),
        params: traced.gradients.unwrap(),
    };
    let case_dir = case.split(' ').next().unwrap();
    let dump = Dump::open(&golden(case_dir)).unwrap();
    let loss = dump.read(dump.entry("loss").unwrap()).unwrap().to_f64()[[]];
    let got_loss = gradients.loss.to_f64().unwrap();
    assert!((got_loss - loss).abs() < 1e-5, "{case}: loss: expected {loss}, got {got_loss}");
    let expected: Vec<String> =
        dump.manifest.stages.iter().filter_map(|s| s.name.strip_prefix("grad.param.")).map(String::from).collect();
    // The names PyTorch gave its parameters' gradients against our parameters' stages' names.
    let mut got: Vec<String> = gradients.params.by_stage.iter().map(|(stage, _)| stage.hf()).collect();
    let mut sorted = expected.clone();
    sorted.sort();
    got.sort();
    assert_eq!(got, sorted, "{case}: which parameters have a gradient");
    let mut worst = 0.0f64;
    for name in &expected {
        let want = dump.read(dump.entry(&format!("grad.param.{name}")).unwrap()).unwrap().to_f64();
        let (_, have) = gradients.params.by_stage.iter().find(|(stage, _)| stage.hf() == *name).unwrap();
        let have = have.mapv(|v| v.to_f64().unwrap());
        assert_eq!(have.shape(), want.shape(), "{case}: {name}: shape");
        for ((index, h), w) in have.indexed_iter().zip(want.iter()) {
            let err = (h - w).abs();
            worst = worst.max(err);
            assert!(err <= 1e-5 + 1e-4 * w.abs(), "{case}: grad.param.{name} at {index:?}: expected {w}, got {h}");
        }
    }
    worst
}

/// A sink that keeps only the shape of `mlm.logits`.
#[derive(Default)]
struct HeadShape(Option<Vec<usize>>);

impl Sink for HeadShape {
    fn wants(&self, stage: &Stage) -> bool {
        stage.name() == "mlm.logits"
    }

    fn emit(&mut self, _stage: Stage, tensor: TensorView<'_>) -> bert_core::Result<()> {
        self.0 = Some(tensor.shape().to_vec());
        Ok(())
    }
}

#[test]
fn every_parameter_gradient_matches_autograd() {
    // (model, its autograd dumps)
    let cases = [("tiny", &["mlm_target", "pair_nsp"][..]), ("tiny-classifier", &["label"][..])];
    for (model, dumps) in cases {
        let f32_model = BertModel::load(&golden(model)).unwrap();
        let f64_model = BertModel::<f64>::load_as(&golden(model)).unwrap();
        for dump in dumps {
            let case = format!("{model}/gradients/{dump}");
            let inputs = golden_inputs(&case);
            for labelled_only in [false, true] {
                let worst32 = check(&f32_model, &case, inputs.clone(), labelled_only);
                let worst64 = check(&f64_model, &case, inputs.clone(), labelled_only);
                println!(
                    "{case} (labelled only: {labelled_only}): largest |error| against autograd: f32 {worst32:.2e}, \
                     f64 {worst64:.2e}"
                );
            }
        }
    }
}

#[test]
fn a_backward_needs_a_loss() {
    let model = BertModel::load(&golden("tiny")).unwrap();
    let batch = model.encode(&["When in Rome, do as the Romans do.".to_string()], None, false).unwrap();
    let message = model.gradients(&batch).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("needs a loss"), "{message}");
}

/// The names of the stages a pass hands its sink, in the order it hands them.
#[derive(Default)]
struct Names(Vec<String>);

impl Sink for Names {
    fn emit(&mut self, stage: Stage, _: TensorView<'_>) -> bert_core::Result<()> {
        self.0.push(stage.name());
        Ok(())
    }
}

/// `backward_plan` writes the backward's order down a second time, beside the backward pass that
/// computes it: the stages a pass with a backward hands its sink must be the plan's, in the
/// plan's order, for each loss.
#[test]
fn the_backward_emits_the_stages_of_its_plan_in_order() {
    let text = || vec!["When in Rome, do as the [MASK] do.".to_string()];
    // (the loss, the inputs that ask for it). An NSP-only loss does not reach the MLM head's own
    // parameters (PyTorch leaves their `.grad` None), so its plan must not list them either.
    let cases = [
        ("MLM only", Inputs { texts: text(), mlm_targets: strings(&["romans"]), ..Inputs::default() }),
        (
            "NSP only",
            Inputs {
                texts: text(),
                pair: strings(&["The cat sat on the mat."]),
                nsp_label: Some(vec![1]),
                ..Inputs::default()
            },
        ),
        ("MLM and NSP", golden_inputs("tiny/gradients/pair_nsp")),
        ("a classifier's", golden_inputs("tiny-classifier/gradients/label")),
    ];
    let tiny = BertModel::load(&golden("tiny")).unwrap();
    let classifier = BertModel::load(&golden("tiny-classifier")).unwrap();
    for (case, inputs) in cases {
        let model = if inputs.label.is_some() { &classifier } else { &tiny };
        let batch = model.encode_inputs(&inputs, false).unwrap();
        let mut sink = Names::default();
        model.trace_with(&batch, &mut sink, Pass { backward: true, ..Pass::default() }).unwrap();
        let got = sink.0;
        let expected: Vec<String> =
            model.plan(Objectives { backward: true, ..batch.objectives() }).iter().map(Stage::name).collect();
        assert!(got.iter().any(|name| name.starts_with("grad.")), "{case}: no gradient emitted: {got:?}");
        if let Some(at) = (0..expected.len().max(got.len())).find(|&i| expected.get(i) != got.get(i)) {
            panic!(
                "{case}: the pass and its plan part at index {at}: the plan has {:?}, the pass emitted {:?}\n\
                 expected ({}): {expected:?}\ngot ({}): {got:?}",
                expected.get(at),
                got.get(at),
                expected.len(),
                got.len()
            );
        }
    }
}

/// Each dense layer and LayerNorm carries the stages of its weight and bias: the names it was
/// loaded under and the keys its gradients are added under. They must be the stages at which
/// the stage table's `param.*` rows find that very tensor (`BertModel::parameter`, which the
/// optimizer and the checkpoint writer use), or a gradient would update another parameter. Held
/// for every module of golden/tiny as loaded, and with new heads drawn (a classifier, then the
/// pretraining heads again), the MLM decoder (whose weight is the word embedding table) included.
#[test]
fn each_module_carries_the_stages_its_parameters_are_found_at() {
    let loaded = BertModel::load(&golden("tiny")).unwrap();
    let mut drawn = BertModel::load(&golden("tiny")).unwrap();
    drawn.add_classifier(&["no".to_string(), "yes".to_string()], 0);
    drawn.add_pretraining_heads(true, 0);
    let mut failures = carried_stages(&loaded, "loaded");
    failures.extend(carried_stages(&drawn, "new heads"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// How `model`'s modules' stages differ from where the table finds their tensors.
fn carried_stages(model: &BertModel, which: &str) -> Vec<String> {
    use bert_core::io::weights::Param;
    use bert_core::model::parameters::WeightAndBias;
    use bert_core::stage::{ParamKind, StageKind};

    let mut modules: Vec<(String, WeightAndBias, [&Param; 2])> = Vec::new();
    let mut add = |name: String, params: WeightAndBias, weight, bias| modules.push((name, params, [weight, bias]));
    let e = &model.embeddings.layer_norm;
    add("embeddings.layer_norm".into(), e.params, &e.weight, &e.bias);
    for (i, layer) in model.layers.iter().enumerate() {
        let a = &layer.attention;
        for (name, linear) in [
            ("query", &a.self_attention.query),
            ("key", &a.self_attention.key),
            ("value", &a.self_attention.value),
            ("output.dense", &a.output.dense),
            ("intermediate", &layer.feed_forward.intermediate),
            ("ffn.output", &layer.feed_forward.output),
        ] {
            add(format!("layer{i}.{name}"), linear.params, &linear.weight, &linear.bias);
        }
        for (name, norm) in
            [("attention.layer_norm", &a.output.layer_norm), ("ffn.layer_norm", &layer.feed_forward.layer_norm)]
        {
            add(format!("layer{i}.{name}"), norm.params, &norm.weight, &norm.bias);
        }
    }
    if let Some(mlm) = &model.mlm {
        add("mlm.transform".into(), mlm.transform.params, &mlm.transform.weight, &mlm.transform.bias);
        add("mlm.layer_norm".into(), mlm.layer_norm.params, &mlm.layer_norm.weight, &mlm.layer_norm.bias);
        add("mlm.decoder".into(), mlm.decoder.params, &mlm.decoder.weight, &mlm.decoder.bias);
    }
    for (name, dense) in [
        ("pooler", model.pooler.as_ref().map(|p| &p.dense)),
        ("nsp", model.nsp.as_ref().map(|n| &n.dense)),
        ("classifier", model.classifier.as_ref().map(|c| &c.dense)),
    ] {
        if let Some(dense) = dense {
            add(name.into(), dense.params, &dense.weight, &dense.bias);
        }
    }

    let mut failures = Vec::new();
    for (name, params, tensors) in &modules {
        for (stage, tensor) in [params.weight, params.bias].into_iter().zip(tensors) {
            match model.parameter(stage) {
                Some(found) if std::ptr::eq(found.as_slice().as_ptr(), tensor.as_slice().as_ptr()) => {}
                Some(_) => failures.push(format!("{which}: {name}: the table's {stage} is another tensor")),
                None => failures.push(format!("{which}: {name}: the model has no {stage}")),
            }
        }
    }
    // Every parameter of the model is some module's, or one of the embedding tables.
    let carried: Vec<Stage> = modules.iter().flat_map(|(_, p, _)| [p.weight, p.bias]).collect();
    let tables = [ParamKind::WordEmbeddings, ParamKind::PositionEmbeddings, ParamKind::TokenTypeEmbeddings];
    for (stage, _) in model.parameters() {
        let table = tables.iter().any(|&kind| stage.kind == StageKind::Param(kind));
        if !table && !carried.contains(&stage) {
            failures.push(format!("{which}: {stage}: no module carries it"));
        }
    }
    if modules.len() < 10 + model.layers.len() {
        failures.push(format!("{which}: only {} modules", modules.len()));
    }
    failures
}
