//! Where a simulated pass rounds. PyTorch's eager forward in bfloat16 or float16 computes each
//! operation in float32 (its kernels accumulate products, softmax's sums and LayerNorm's
//! moments in float32) and stores the operation's output as a tensor of the format: one
//! rounding per tensor it makes. A stage of the table is one such tensor, or ends with one, so
//! [`Rounding`], a hook, rounds every float stage as the pass makes it, before the rest of the
//! pass reads it. The three stages that make more than one tensor round the others where the
//! formula makes them, through `ops::narrow`:
//!
//! - `embeddings.sum`: PyTorch makes `word + token_type`, then adds the positions; `narrow`
//!   rounds the first sum, the hook the second.
//! - `attention.scores`: PyTorch makes `matmul(q, kᵀ)`, then `* scaling`, then `+ mask`;
//!   `ops::scaled_matmul` rounds the product and the scaled product, the hook the masked
//!   scores, the mask being the format's lowest value (`ops::lowest`).
//! - `sentence.pooled`: PyTorch makes `sum(hidden · mask)`, then divides by the count;
//!   `narrow` rounds the sum, the hook the mean.
//!
//! A lookup (`embeddings.word`) and moving values (splitting heads) make no new value: the
//! weights were rounded once, when the simulation was applied to the model.

use std::sync::{Arc, Mutex};

use ndarray::{ArrayView2, ArrayViewMutD};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::ops::format::Format;
use crate::pass::hook::{Hook, TensorViewMut};
use crate::stage::{DType, Part, Stage, StageKind};

/// The first value of a simulated pass that was not finite, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FirstNonFinite {
    pub stage: String,
    /// Its index in the stage, row-major.
    pub index: Vec<usize>,
    /// `overflow` when the value was finite before it was rounded (beyond the format's largest),
    /// `computed` when the operation itself gave an infinity or a NaN.
    pub why: NonFiniteWhy,
    /// The value before rounding, as text (JSON has no infinity).
    pub before: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NonFiniteWhy {
    Overflow,
    Computed,
}

impl std::fmt::Display for FirstNonFinite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let index: Vec<String> = self.index.iter().map(usize::to_string).collect();
        let why = match self.why {
            NonFiniteWhy::Overflow => "overflowed: it was",
            NonFiniteWhy::Computed => "was computed as",
        };
        write!(f, "{}[{}] {why} {} before rounding", self.stage, index.join(","), self.before)
    }
}

/// Where a simulated pass's first value that is not finite is noted: shared by the hook that
/// finds it and the dump that records it.
pub type FirstNonFiniteCell = Arc<Mutex<Option<FirstNonFinite>>>;

/// The hook that rounds every float stage of a forward pass to `format`, noting the first value
/// that is not finite afterwards.
pub struct Rounding {
    pub format: Format,
    first_non_finite: FirstNonFiniteCell,
}

impl Rounding {
    pub fn new(format: Format) -> Rounding {
        Rounding { format, first_non_finite: FirstNonFiniteCell::default() }
    }

    /// The first value of the pass so far that is not finite, and why.
    pub fn first_non_finite(&self) -> Option<FirstNonFinite> {
        self.first_non_finite.lock().expect("not poisoned").clone()
    }

    /// The same note, for a dump to record when it is finished.
    pub fn first_non_finite_cell(&self) -> FirstNonFiniteCell {
        Arc::clone(&self.first_non_finite)
    }

    fn round(&mut self, stage: Stage, mut values: ArrayViewMutD<'_, f32>, attention_mask: ArrayView2<'_, i64>) {
        let format = self.format;
        let shape = values.shape().to_vec();
        // A padding key's score is the format's lowest plus a score, which may round to -inf, as
        // in PyTorch: masked either way, and not what the note is for.
        let scores = stage.is_value_of(StageKind::AttnScores) && shape.len() == 4;
        let masked = |index: &[usize]| scores && attention_mask.get((index[0], index[3])).is_some_and(|&m| m == 0);
        let mut first = self.first_non_finite.lock().expect("not poisoned");
        if first.is_none() {
            // Before rounding: the value that will not be finite, and what it was.
            let threshold = format.overflows_at();
            let found = values
                .iter()
                .enumerate()
                .filter(|(_, v)| v.is_nan() || v.abs() >= threshold)
                .map(|(flat, &before)| (unravel(flat, &shape), before))
                .find(|(index, _)| !masked(index));
            if let Some((index, before)) = found {
                let why = if before.is_finite() { NonFiniteWhy::Overflow } else { NonFiniteWhy::Computed };
                *first = Some(FirstNonFinite { stage: stage.name(), index, why, before: format!("{before:e}") });
            }
        }
        match values.as_slice_mut() {
            // The pass's stages are in standard layout: rounded in runs on the thread pool.
            Some(all) => {
                let runs: Vec<&mut [f32]> = all.chunks_mut(crate::ops::part_len(all.len())).collect();
                crate::ops::for_each_item(runs, |run| format.round_slice(run));
            }
            None => values.mapv_inplace(|v| format.round(v)),
        }
    }
}

/// The row-major index of the `flat`-th element of an array of `shape`.
fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (slot, &n) in index.iter_mut().zip(shape).rev() {
        *slot = flat % n.max(1);
        flat /= n.max(1);
    }
    index
}

impl Hook for Rounding {
    fn wants(&self, stage: &Stage) -> bool {
        let info = stage.info();
        !stage.is_grad() && info.dtype == DType::F32 && !matches!(info.part, Part::Input | Part::Param)
    }

    fn apply(&mut self, stage: Stage, tensor: TensorViewMut<'_>, attention_mask: ArrayView2<'_, i64>) -> Result<()> {
        match tensor {
            TensorViewMut::F32(values) => self.round(stage, values, attention_mask),
            // A simulated pass runs in f32 (`Simulation::check` refuses anything else).
            TensorViewMut::F64(_) | TensorViewMut::I64(_) => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    /// Each case: the format, a stage's values, what the hook leaves, and the first value that
    /// is not finite as the note gives it.
    #[test]
    fn rounds_a_stage_and_notes_where_it_first_stops_being_finite() {
        let mask = Array2::<i64>::ones((1, 2));
        /// The format, the stage's values, what they become, the note.
        type Case = (Format, Vec<f32>, Vec<f32>, Option<&'static str>);
        let cases: Vec<Case> = vec![
            (Format::Float16, vec![1.0, 1.0 + 2f32.powi(-12)], vec![1.0, 1.0], None),
            (
                Format::Float16,
                vec![1.0, 70000.0],
                vec![1.0, f32::INFINITY],
                Some("layer1.ffn.intermediate[0,1] overflowed: it was 7e4 before rounding"),
            ),
            (
                Format::Bfloat16,
                vec![f32::NAN, f32::MAX],
                vec![f32::NAN, f32::INFINITY],
                Some("layer1.ffn.intermediate[0,0] was computed as NaN before rounding"),
            ),
        ];
        for (format, given, expected, note) in cases {
            let mut rounding = Rounding::new(format);
            let stage = Stage::layer(1, StageKind::FfnIntermediate);
            assert!(rounding.wants(&stage) && !rounding.wants(&Stage::new(StageKind::InputIds)));
            let mut values = ndarray::Array::from_shape_vec((1, 2), given.clone()).unwrap().into_dyn();
            rounding.apply(stage, TensorViewMut::F32(values.view_mut()), mask.view()).unwrap();
            let got: Vec<f32> = values.iter().copied().collect();
            let same = got.iter().zip(&expected).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
            assert!(same, "{format} of {given:?}: expected {expected:?}, got {got:?}");
            let got_note = rounding.first_non_finite().map(|first| first.to_string());
            assert_eq!(got_note.as_deref(), note, "{format} of {given:?}");
        }
    }
}
