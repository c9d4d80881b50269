//! The diff's comparison of two tensors, held to its rules on arbitrary values, NaN and ±inf
//! included: a value that is not finite never passes, on either side, unless it is a masked
//! attention score (a padding key's, by the diff's own rule, `is_masked_score`) on both sides; identical finite
//! tensors always pass; a padded query row's finite difference never fails a stage.
//!
//! Input: byte 0 picks the stage (attention scores, probabilities, a hidden state), byte 1 the
//! padding of the two sequences, then 4 bytes per f32: the reference's 18 values, then the
//! trace's (missing bytes are 0).
#![no_main]

use bert_core::divergence::{compare_tensors, default_tolerance, is_masked_score, Status};
use bert_core::pass::Tensor;
use bert_core::stage;
use libfuzzer_sys::fuzz_target;
use ndarray::{ArrayD, IxDyn};

/// [B, nh, T, T] = [2, 1, 3, 3] for the attention stages, [B, T, H] = [2, 3, 3] otherwise.
const STAGES: [(&str, &[usize]); 3] = [
    ("layer0.attention.scores", &[2, 1, 3, 3]),
    ("layer0.attention.probs", &[2, 1, 3, 3]),
    ("layer0.ffn.output", &[2, 3, 3]),
];

fn values(bytes: &[u8], offset: usize) -> Vec<f32> {
    (0..18)
        .map(|i| {
            let mut word = [0u8; 4];
            for (k, b) in word.iter_mut().enumerate() {
                *b = bytes.get(offset + 4 * i + k).copied().unwrap_or(0);
            }
            f32::from_le_bytes(word)
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let (Some(&which), Some(&padding)) = (data.first(), data.get(1)) else { return };
    let (name, shape) = STAGES[which as usize % STAGES.len()];
    let body = &data[2..];
    let (reference, trace) = (values(body, 0), values(body, 72));
    // Sequence b has `real[b]` real tokens (1 to 3), the rest padding.
    let real = [1 + (padding % 3) as usize, 1 + ((padding / 3) % 3) as usize];
    let mask = ArrayD::from_shape_fn(IxDyn(&[2, 3]), |i| i64::from(i[1] < real[i[0]]));
    let as_tensor = |v: &[f32]| Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap());
    let tolerance = default_tolerance(stage::parse(name).unwrap().kind);
    let report = compare_tensors(name, &as_tensor(&reference), &as_tensor(&trace), tolerance, Some(&mask));

    // Which elements are a padding key's score, masked on both sides: the one rule that diff and
    // view share.
    let is_scores = stage::parse(name).unwrap().kind == stage::StageKind::AttnScores;
    let masked = |i: usize| {
        let (b, key) = (i / 9, i % 3);
        let padding = Some(key >= real[b]);
        is_scores && is_masked_score(f64::from(reference[i]), padding) && is_masked_score(f64::from(trace[i]), padding)
    };
    let non_finite = (0..18).any(|i| !(masked(i) || (reference[i].is_finite() && trace[i].is_finite())));
    if non_finite {
        assert_ne!(report.status, Status::Pass, "a non-finite value passed: {reference:?} against {trace:?}");
    }
    if !non_finite && reference.iter().zip(&trace).all(|(r, t)| r == t) {
        assert_eq!(report.status, Status::Pass, "identical values failed: {reference:?}");
    }
    // The statistics say how large the error is; a non-finite one is never reported as 0.
    for stats in report.stats.iter().chain(&report.padded_rows) {
        if stats.non_finite > 0 {
            assert!(
                !(stats.max_abs.is_finite()),
                "max|Δ| {} with {} non-finite values",
                stats.max_abs,
                stats.non_finite
            );
        }
    }
});
