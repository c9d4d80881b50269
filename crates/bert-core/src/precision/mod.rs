//! Lower precisions, simulated stage by stage (`bert-trace --precision bf16|f16`, `--weights
//! int8`): what a BERT deployed in bfloat16, float16 or with int8 weights computes, every stage
//! held in f32 but rounded where PyTorch's eager forward in that format rounds
//! ([`rounding`] says where), so that each stage can be set against the float64 truth
//! (`diff --truth`) and its own error isolated from what it inherited (`diff --isolate`).
//!
//! - [`Format`]: bfloat16 and float16, and rounding to them (in `ops::format`, since the
//!   operations that round inside a stage read it);
//! - [`int8`]: the weight-only int8 rule;
//! - [`Rounding`]: the hook that rounds every stage.
//!
//! What the simulation cannot say: PyTorch's products accumulate in an order oneDNN does not
//! state, so a simulated stage is PyTorch's to within a unit or two in the last place of the
//! format, not bit for bit (`tests/precision.rs` measures the distribution); and a real int8
//! kernel that quantizes the activations too (dynamic quantization) has errors this does not.

pub mod int8;
pub mod rounding;

use serde::{Deserialize, Serialize};

pub use self::rounding::{FirstNonFinite, FirstNonFiniteCell, NonFiniteWhy, Rounding};
use crate::model::parameters::param;
use crate::model::BertModel;
pub use crate::ops::format::{active, narrow, with_format, Format};
use crate::ops::Float;
use crate::stage::ParamKind;

/// How the dense layers' weights are stored, when not in the pass's float format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightFormat {
    /// Symmetric int8, one scale per output channel ([`int8`]).
    Int8,
}

crate::choice!(WeightFormat { Int8 => "int8" });

/// What a simulated pass does differently from float32: the format every stage and weight is
/// rounded to, and how the dense layers' weights are stored. The default simulates nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Simulation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<WeightFormat>,
}

impl Simulation {
    /// Whether the pass is plain float32 (or float64).
    pub fn is_none(&self) -> bool {
        self.format.is_none() && self.weights.is_none()
    }

    /// The weights as the simulated deployment holds them, in place: every dense layer's weight
    /// quantized to int8 and back (the MLM decoder's too, from the word embedding table it is
    /// tied to, which the lookup keeps in float), then every parameter rounded to the format.
    /// The same values whether `F` is f32 or f64, so that an f64 model with the simulation
    /// applied computes the exact result of the simulated model's weights (`diff --isolate`).
    pub fn apply_to_weights<F: Float>(&self, model: &mut BertModel<F>) {
        if self.is_none() {
            return;
        }
        let word_table = param(ParamKind::WordEmbeddings);
        let dense: Vec<_> = model.dense_weights().into_iter().filter(|&stage| stage != word_table).collect();
        let rows: Vec<_> = dense.iter().map(|&stage| model.parameter(stage).map_or(1, |p| p.shape()[0])).collect();
        let original_table = model.embeddings.word_embeddings.clone();
        let (format, int8) = (self.format, self.weights == Some(WeightFormat::Int8));
        // A bert-base holds 110 million weights: each row (int8's channel) or run of values is
        // transformed on the thread pool, in place.
        let transform = |values: &mut [F], rows: Option<usize>| {
            let width = match (int8, rows) {
                (true, Some(rows)) => values.len() / rows.max(1),
                _ => crate::ops::part_len(values.len()),
            };
            let runs: Vec<&mut [F]> = values.chunks_mut(width.max(1)).collect();
            crate::ops::for_each_item(runs, |run| {
                // Each piece through a small f32 buffer: the f32 model's values, or the f64
                // model's (which are f32 values), transformed as f32.
                let mut held: Vec<f32> = Vec::with_capacity(run.len().min(4096));
                let piece_len = if int8 && rows.is_some() { run.len() } else { 4096 };
                for piece in run.chunks_mut(piece_len.max(1)) {
                    held.clear();
                    held.extend(piece.iter().map(|v| v.to_f32().unwrap_or(f32::NAN)));
                    if int8 && rows.is_some() {
                        int8::quantize_row(&mut held);
                    }
                    if let Some(format) = format {
                        format.round_slice(&mut held);
                    }
                    for (value, &narrowed) in piece.iter_mut().zip(&held) {
                        *value = F::of(f64::from(narrowed));
                    }
                }
            });
        };
        let _ = model.update_parameters(|stage, values| {
            transform(values, dense.iter().position(|&d| d == stage).map(|i| rows[i]));
            Ok::<(), ()>(())
        });
        if let (true, Some(mlm)) = (int8, &mut model.mlm) {
            let mut decoder = original_table;
            let rows = decoder.shape()[0];
            transform(decoder.values_mut(), Some(rows));
            mlm.decoder.weight = decoder;
        }
    }

    /// What the simulation is, in words, for a report's note.
    pub fn describe(&self) -> String {
        let weights = match self.weights {
            Some(WeightFormat::Int8) => "dense weights in int8 (per output channel), ",
            None => "",
        };
        match self.format {
            Some(format) => format!("simulated {format}: {weights}every weight and stage rounded to {format}"),
            None => format!("simulated: {weights}every stage in float32"),
        }
    }
}

/// A simulated pass as its dump's manifest records it: the simulation, and where a value first
/// stopped being finite (a dump keeps such values, the record of what the format did).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SimulationRecord {
    #[serde(flatten)]
    pub simulation: Simulation,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_non_finite: Option<FirstNonFinite>,
}
