//! What a training run promises whatever it is given: random option values (tiny and huge rates,
//! ε and decay, short and long sequences, batches of one or many) and random texts (blank lines,
//! lines of special tokens, pairs, one line or many), run into a directory that already holds a
//! good checkpoint. Whatever happens, the run never saves a tensor that is NaN or infinite, and
//! the directory afterwards holds the old checkpoint whole or the new one whole.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bert_core::training::corpus::Corpus;
use bert_core::training::run::{self, Outputs, Progress};
use bert_core::training::save::{read_state, CheckpointDir, ModelFiles, Unobserved};
use bert_core::training::{StepLog, TrainSettings, Trainer};
use bert_core::{BertModel, Result};
use proptest::prelude::*;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn files() -> ModelFiles {
    let dir = root().join("golden/tiny");
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    ModelFiles { config_json: read("config.json"), tokenizer: vec![("vocab.txt".into(), read("vocab.txt"))] }
}

struct Quiet;

impl Progress for Quiet {
    fn note(&mut self, _: &str) {}
    fn line(&mut self, _: &str) {}
    fn saved(&mut self, _: &Path, _: usize) {}
    fn step(&mut self, _: &StepLog, _: usize) -> Result<()> {
        Ok(())
    }
}

/// The run `settings` ask for on `text`, saved into `dir`, every check first: Err if refused or
/// if it failed on the way.
fn train(text: &str, settings: &TrainSettings, dir: &Path, save_every: Option<usize>) -> Result<()> {
    let mut model = BertModel::load(&root().join("golden/tiny"))?;
    let corpus = Corpus::parse(text, Path::new("text.txt"))?;
    let options = settings.resolve(None, &model.config, bert_core::training::options::PRETRAINING)?;
    model.add_pretraining_heads(corpus.pairs.is_some(), options.batching.seed);
    let trainer = Trainer::new(model, corpus, options)?;
    let outputs = Outputs { save: Some(dir.into()), save_every, log_every: 1, ..Outputs::default() };
    run::prepare(trainer, files(), outputs, serde_json::json!({"name": "test"}))?.go(&mut Quiet, &mut Unobserved)?;
    Ok(())
}

/// The visible files of a checkpoint directory, with their bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file() && !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect()
}

/// The first tensor of a safetensors file that is not finite, if any.
fn non_finite(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for (name, view) in tensors.tensors() {
        let values: &[f32] = bytemuck::cast_slice(view.data());
        if let Some(v) = values.iter().find(|v| !v.is_finite()) {
            return Some(format!("{}: {name} holds {v}", path.display()));
        }
    }
    None
}

/// Every `.safetensors` under `dir`, its subdirectories included.
fn every_safetensors(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            every_safetensors(&path, found);
        } else if path.extension().is_some_and(|e| e == "safetensors") {
            found.push(path);
        }
    }
}

/// A line of a text: mostly words, sometimes special tokens, now and then nothing.
fn line() -> impl Strategy<Value = String> {
    let word = prop_oneof![
        12 => prop::sample::select(vec!["the", "romans", "built", "roads", "in", "rome", "do", "as"]),
        2 => prop::sample::select(vec!["[SEP]", "[CLS]", "[MASK]", "[PAD]"]),
    ];
    prop_oneof![
        20 => prop::collection::vec(word, 1..8).prop_map(|words| words.join(" ")),
        1 => Just(String::new()),
    ]
}

/// A learning rate, ε or decay anywhere from tiny to huge, or a value no run can take.
fn scale(low: f64, high: f64) -> impl Strategy<Value = f64> {
    prop_oneof![
        30 => (low.log10()..high.log10()).prop_map(|e| 10f64.powf(e)),
        1 => Just(0.0),
        1 => Just(-1e-4),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_run_never_saves_a_broken_model_nor_breaks_the_one_saved(
        lines in prop::collection::vec((line(), line()), 1..6),
        pairs in any::<bool>(),
        lr in scale(1e-8, 1e40),
        eps in scale(1e-12, 1e3),
        weight_decay in scale(1e-6, 1e3),
        max_len in prop_oneof![1 => 0usize..6, 8 => 6usize..40],
        batch_size in 1usize..4,
        steps in 1usize..4,
        save_every in prop::option::of(1usize..3),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        // The good checkpoint already there.
        let good = TrainSettings { steps: Some(1), ..TrainSettings::default() };
        train("the romans built roads\nwhen in rome do as the romans do\n", &good, &dir, None).unwrap();
        let old = snapshot(&dir);
        let text: String = lines
            .iter()
            .map(|(a, b)| if pairs { format!("{a}\t{b}\n") } else { format!("{a}\n") })
            .collect();
        let settings = TrainSettings {
            steps: Some(steps),
            lr: Some(lr),
            eps: Some(eps),
            weight_decay: Some(weight_decay),
            max_len: Some(max_len),
            batch_size: Some(batch_size),
            ..TrainSettings::default()
        };
        let result = train(&text, &settings, &dir, save_every);
        let mut saved = Vec::new();
        every_safetensors(&dir, &mut saved);
        for path in &saved {
            prop_assert!(non_finite(path).is_none(), "{:?}: {}", result.as_ref().err().map(ToString::to_string), non_finite(path).unwrap());
        }
        drop(CheckpointDir::claim(&dir).unwrap());
        let now = snapshot(&dir);
        match &result {
            Ok(()) => prop_assert_eq!(read_state(&dir).unwrap().step, steps),
            Err(e) => prop_assert!(now == old, "a failed run ({e}) changed the checkpoint that was there"),
        }
    }
}
