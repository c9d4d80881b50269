//! Shared helpers for the integration tests: a tiny random BERT checkpoint built in Rust and
//! written to a temporary directory, with the variations real checkpoints show (other tensor
//! names, f16 / bf16, extra buffers, missing or broken tensors), and exact comparisons of traced
//! forward passes.
//!
//! The checkpoint is BertForPreTraining-shaped: H = 8, 2 heads, 1 layer, I = 16, 16 positions,
//! the vocabulary of [`VOCAB`], a pooler, the MLM head (`cls.predictions.*`, decoder tied to the
//! word embeddings) and the NSP head (`cls.seq_relationship.*`). Values come from a fixed LCG, so
//! every run writes the same bytes.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use bert_core::pass::{Memory, Tensor};
use bert_core::BertModel;
use ndarray::Dimension;
use serde_json::{json, Value};
use tempfile::TempDir;

pub const HIDDEN: usize = 8;
pub const HEADS: usize = 2;
pub const INTERMEDIATE: usize = 16;
pub const POSITIONS: usize = 16;
pub const TYPES: usize = 2;

/// The tiny vocabulary: the five specials at bert-base's usual places (well, [PAD] first), then
/// some words, a `##` piece, punctuation, an accented word's stripped form and two CJK characters.
pub const VOCAB: &[&str] = &[
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "a", "dog", "##s", "ran", "cafe",
    "is", "good", ",", ".", "!", "中", "文", "hello", "world",
];

/// The element types a test writes. `F64`, `I32` and `I64` never hold weights in a good file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F64,
    I64,
    F32,
    I32,
    F16,
    BF16,
}

impl Dtype {
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F64 => "F64",
            Dtype::I64 => "I64",
            Dtype::F32 => "F32",
            Dtype::I32 => "I32",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
        }
    }

    pub fn size(self) -> usize {
        match self {
            Dtype::F64 | Dtype::I64 => 8,
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F16 | Dtype::BF16 => 2,
        }
    }
}

/// One tensor as it will be stored: dtype, shape and little-endian bytes.
#[derive(Clone, Debug)]
pub struct RawTensor {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

impl RawTensor {
    pub fn f32(shape: &[usize], values: &[f32]) -> RawTensor {
        assert_eq!(values.len(), shape.iter().product::<usize>(), "values for {shape:?}");
        RawTensor {
            dtype: Dtype::F32,
            shape: shape.to_vec(),
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    pub fn i64(shape: &[usize], values: &[i64]) -> RawTensor {
        assert_eq!(values.len(), shape.iter().product::<usize>(), "values for {shape:?}");
        RawTensor {
            dtype: Dtype::I64,
            shape: shape.to_vec(),
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// The values of an F32 tensor.
    pub fn f32_values(&self) -> Vec<f32> {
        assert_eq!(self.dtype, Dtype::F32, "f32_values of a {:?} tensor", self.dtype);
        self.bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    }

    /// The same F32 values stored as `dtype` (F16 / BF16 round to nearest even, F64 is exact,
    /// I32 truncates).
    pub fn converted(&self, dtype: Dtype) -> RawTensor {
        let values = self.f32_values();
        let bytes: Vec<u8> = match dtype {
            Dtype::F32 => self.bytes.clone(),
            Dtype::F16 => values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect(),
            Dtype::BF16 => values.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect(),
            Dtype::F64 => values.iter().flat_map(|&v| (v as f64).to_le_bytes()).collect(),
            Dtype::I32 => values.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect(),
            Dtype::I64 => values.iter().flat_map(|&v| (v as i64).to_le_bytes()).collect(),
        };
        RawTensor { dtype, shape: self.shape.clone(), bytes }
    }
}

/// A deterministic stream of f32 in [-1, 1): Knuth's MMIX LCG, top 24 bits.
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Lcg {
        Lcg(seed)
    }

    pub fn next_f32(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let bits = (self.0 >> 40) as u32; // 24 bits
        bits as f32 / (1u32 << 23) as f32 - 1.0
    }

    /// `n` values, each `center + scale * u` with u in [-1, 1).
    pub fn values(&mut self, n: usize, center: f32, scale: f32) -> Vec<f32> {
        (0..n).map(|_| center + scale * self.next_f32()).collect()
    }
}

/// A checkpoint directory's contents before it is written: config.json, the tensors of
/// model.safetensors, vocab.txt and any other files.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    pub config: Value,
    pub tensors: BTreeMap<String, RawTensor>,
    pub vocab: Vec<String>,
    /// Extra files by name (tokenizer_config.json, tokenizer.json, pytorch_model.bin, ...).
    pub files: BTreeMap<String, Vec<u8>>,
    /// Pad the safetensors header to a multiple of 8 as `safetensors.serialize` does; when
    /// false, the header is padded so that the data starts at an odd offset (misaligned f32).
    pub align_header: bool,
}

impl Checkpoint {
    /// The baseline: BertForPreTraining with HF's names, all f32.
    pub fn tiny() -> Checkpoint {
        let v = VOCAB.len();
        let (h, i) = (HIDDEN, INTERMEDIATE);
        let config = json!({
            "architectures": ["BertForPreTraining"],
            "model_type": "bert",
            "hidden_size": h,
            "num_hidden_layers": 1,
            "num_attention_heads": HEADS,
            "intermediate_size": i,
            "hidden_act": "gelu",
            "hidden_dropout_prob": 0.1,
            "attention_probs_dropout_prob": 0.1,
            "layer_norm_eps": 1e-12,
            "vocab_size": v,
            "max_position_embeddings": POSITIONS,
            "type_vocab_size": TYPES,
            "pad_token_id": 0,
            "position_embedding_type": "absolute",
            "initializer_range": 0.02,
            "torch_dtype": "float32",
            "transformers_version": "4.44.0"
        });
        let mut rng = Lcg::new(0x5eed_be27);
        let mut tensors = BTreeMap::new();
        let mut matrix = |name: &str, rows: usize, cols: usize, rng: &mut Lcg| {
            let bound = 1.0 / (cols as f32).sqrt();
            tensors
                .insert(format!("{name}.weight"), RawTensor::f32(&[rows, cols], &rng.values(rows * cols, 0.0, bound)));
            tensors.insert(format!("{name}.bias"), RawTensor::f32(&[rows], &rng.values(rows, 0.0, 0.1)));
        };
        let l = "bert.encoder.layer.0";
        for name in ["query", "key", "value"] {
            matrix(&format!("{l}.attention.self.{name}"), h, h, &mut rng);
        }
        matrix(&format!("{l}.attention.output.dense"), h, h, &mut rng);
        matrix(&format!("{l}.intermediate.dense"), i, h, &mut rng);
        matrix(&format!("{l}.output.dense"), h, i, &mut rng);
        matrix("bert.pooler.dense", h, h, &mut rng);
        matrix("cls.predictions.transform.dense", h, h, &mut rng);
        matrix("cls.seq_relationship", 2, h, &mut rng);
        for ln in [
            "bert.embeddings.LayerNorm".to_string(),
            format!("{l}.attention.output.LayerNorm"),
            format!("{l}.output.LayerNorm"),
            "cls.predictions.transform.LayerNorm".to_string(),
        ] {
            tensors.insert(format!("{ln}.weight"), RawTensor::f32(&[h], &rng.values(h, 1.0, 0.2)));
            tensors.insert(format!("{ln}.bias"), RawTensor::f32(&[h], &rng.values(h, 0.0, 0.1)));
        }
        for (name, rows) in [("word", v), ("position", POSITIONS), ("token_type", TYPES)] {
            tensors.insert(
                format!("bert.embeddings.{name}_embeddings.weight"),
                RawTensor::f32(&[rows, h], &rng.values(rows * h, 0.0, 0.5)),
            );
        }
        tensors.insert("cls.predictions.bias".into(), RawTensor::f32(&[v], &rng.values(v, 0.0, 0.1)));
        Checkpoint {
            config,
            tensors,
            vocab: VOCAB.iter().map(|s| s.to_string()).collect(),
            files: BTreeMap::new(),
            align_header: true,
        }
    }

    pub fn tensor(&self, name: &str) -> &RawTensor {
        self.tensors.get(name).unwrap_or_else(|| panic!("the test checkpoint has no tensor `{name}`"))
    }

    /// Renames every tensor through `f`.
    pub fn rename_all(&mut self, f: impl Fn(&str) -> String) -> &mut Self {
        self.tensors = std::mem::take(&mut self.tensors).into_iter().map(|(name, t)| (f(&name), t)).collect();
        self
    }

    pub fn rename(&mut self, from: &str, to: &str) -> &mut Self {
        let t = self.tensors.remove(from).unwrap_or_else(|| panic!("rename: no tensor `{from}`"));
        self.tensors.insert(to.into(), t);
        self
    }

    pub fn remove(&mut self, name: &str) -> &mut Self {
        assert!(self.tensors.remove(name).is_some(), "remove: no tensor `{name}`");
        self
    }

    /// Removes every tensor whose name starts with `prefix`.
    pub fn remove_prefix(&mut self, prefix: &str) -> &mut Self {
        let before = self.tensors.len();
        self.tensors.retain(|name, _| !name.starts_with(prefix));
        assert!(self.tensors.len() < before, "remove_prefix: nothing starts with `{prefix}`");
        self
    }

    pub fn insert(&mut self, name: &str, tensor: RawTensor) -> &mut Self {
        self.tensors.insert(name.into(), tensor);
        self
    }

    /// Replaces every F32 value by `f(value)` (still stored as F32).
    pub fn map_values(&mut self, f: impl Fn(f32) -> f32) -> &mut Self {
        for t in self.tensors.values_mut() {
            if t.dtype == Dtype::F32 {
                let values: Vec<f32> = t.f32_values().into_iter().map(&f).collect();
                *t = RawTensor::f32(&t.shape, &values);
            }
        }
        self
    }

    /// Stores every F32 tensor as `dtype`.
    pub fn store_as(&mut self, dtype: Dtype) -> &mut Self {
        for t in self.tensors.values_mut() {
            if t.dtype == Dtype::F32 {
                *t = t.converted(dtype);
            }
        }
        self
    }

    /// Sets a top-level field of config.json.
    pub fn set_config(&mut self, field: &str, value: Value) -> &mut Self {
        self.config[field] = value;
        self
    }

    pub fn file(&mut self, name: &str, bytes: impl Into<Vec<u8>>) -> &mut Self {
        self.files.insert(name.into(), bytes.into());
        self
    }

    /// The bytes of model.safetensors, written by hand: an 8-byte little-endian header length,
    /// the JSON header {name: {dtype, shape, data_offsets}} (with `__metadata__` as HF writes
    /// it), padded with spaces, then the data. Tensors go widest dtype first, then by name, as
    /// `safetensors.serialize` orders them, so that no tensor starts misaligned for its dtype.
    pub fn safetensors_bytes(&self) -> Vec<u8> {
        let mut order: Vec<(&String, &RawTensor)> = self.tensors.iter().collect();
        order.sort_by(|(ln, lt), (rn, rt)| rt.dtype.size().cmp(&lt.dtype.size()).then(ln.cmp(rn)));
        let mut header = serde_json::Map::new();
        header.insert("__metadata__".into(), json!({"format": "pt"}));
        let mut offset = 0;
        for (name, t) in &order {
            header.insert(
                (*name).clone(),
                json!({
                    "dtype": t.dtype.name(),
                    "shape": t.shape,
                    "data_offsets": [offset, offset + t.bytes.len()],
                }),
            );
            offset += t.bytes.len();
        }
        let mut header = serde_json::to_vec(&Value::Object(header)).unwrap();
        if self.align_header {
            while !header.len().is_multiple_of(8) {
                header.push(b' ');
            }
        } else {
            // 8 + header length odd: every tensor's data starts at an odd address in the map.
            while header.len() % 8 != 1 {
                header.push(b' ');
            }
        }
        let mut out = Vec::with_capacity(8 + header.len() + offset);
        out.extend((header.len() as u64).to_le_bytes());
        out.extend(header);
        for (_, t) in order {
            out.extend(&t.bytes);
        }
        out
    }

    /// Writes config.json, model.safetensors, vocab.txt and the extra files into `dir`.
    pub fn write_to(&self, dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(&self.config).unwrap()).unwrap();
        std::fs::write(dir.join("model.safetensors"), self.safetensors_bytes()).unwrap();
        let mut vocab = self.vocab.join("\n");
        vocab.push('\n');
        std::fs::write(dir.join("vocab.txt"), vocab).unwrap();
        for (name, bytes) in &self.files {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }

    /// Writes the checkpoint into a fresh temporary directory.
    pub fn write(&self) -> TempDir {
        let dir = tempfile::tempdir().unwrap();
        self.write_to(dir.path());
        dir
    }

    /// Writes and loads; panics with the error if loading fails.
    pub fn load(&self) -> (TempDir, BertModel) {
        let dir = self.write();
        let model = BertModel::load(dir.path()).unwrap_or_else(|e| panic!("loading the test checkpoint failed: {e}"));
        (dir, model)
    }

    /// Writes and loads, expecting an error.
    pub fn load_err(&self) -> (TempDir, bert_core::BertError) {
        let dir = self.write();
        match BertModel::load(dir.path()) {
            Ok(_) => panic!("loading succeeded but an error was expected"),
            Err(e) => (dir, e),
        }
    }
}

/// The batch every model test traces: two texts with sentence B, of different lengths (so the
/// second is padded), an unknown word, a `##` piece and [MASK].
pub fn texts() -> (Vec<String>, Vec<String>) {
    (
        vec!["the cat sat on the mat.".into(), "a dog [MASK]!".into()],
        vec!["hello world".into(), "the cats ran zebra".into()],
    )
}

/// Tokenizes [`texts`] and runs the full traced forward pass, keeping every stage.
pub fn trace_all(model: &BertModel) -> Memory {
    let (texts, pairs) = texts();
    let batch = model.encode(&texts, Some(&pairs), false).unwrap_or_else(|e| panic!("encode failed: {e}"));
    let mut memory = Memory::default();
    let traced = model.trace(&batch, &mut memory, None).unwrap_or_else(|e| panic!("trace failed: {e}"));
    assert!(traced.stopped_at.is_none());
    memory
}

/// The first difference between two stage lists, if any: stage names, order, shapes, dtypes
/// and every value's bits must match.
pub fn first_difference(expected: &Memory, got: &Memory) -> Option<String> {
    let names = |m: &Memory| m.stages.iter().map(|(s, _)| s.name()).collect::<Vec<_>>();
    if names(expected) != names(got) {
        return Some(format!("stage lists differ:\n  expected {:?}\n  got      {:?}", names(expected), names(got)));
    }
    for ((stage, want), (_, have)) in expected.stages.iter().zip(&got.stages) {
        if want.shape() != have.shape() {
            return Some(format!("{stage}: shape expected {:?}, got {:?}", want.shape(), have.shape()));
        }
        match (want, have) {
            (Tensor::F32(w), Tensor::F32(h)) => {
                for ((index, a), b) in w.indexed_iter().zip(h.iter()) {
                    if a.to_bits() != b.to_bits() {
                        return Some(format!(
                            "{stage}{:?}: expected {a:e} ({:#010x}), got {b:e} ({:#010x})",
                            index.slice(),
                            a.to_bits(),
                            b.to_bits()
                        ));
                    }
                }
            }
            (Tensor::I64(w), Tensor::I64(h)) => {
                if w != h {
                    return Some(format!("{stage}: expected {w:?}, got {h:?}"));
                }
            }
            _ => return Some(format!("{stage}: dtypes differ")),
        }
    }
    None
}

/// Panics with the first difference, labelled, when the two passes are not bit-identical.
pub fn assert_identical(label: &str, expected: &Memory, got: &Memory) {
    if let Some(diff) = first_difference(expected, got) {
        panic!("{label}: traced stages are not bit-identical to the baseline: {diff}");
    }
}

/// Asserts that `text` contains every one of `needles`, printing both when it does not.
#[track_caller]
pub fn assert_mentions(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "expected the message to mention `{needle}`, got: {text}");
    }
}
