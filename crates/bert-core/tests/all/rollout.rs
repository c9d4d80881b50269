//! Attention rollout and flow against the paper's way of computing them
//! (`scripts/rollout_reference.py`: NumPy for rollout, networkx's Edmonds-Karp for flow), on
//! golden dumps' own attention probabilities: a sequence of english-small with its [MASK], and
//! the padded second sequence of golden/tiny's batch, whose padding must be left out.

use std::path::{Path, PathBuf};

use bert_core::experiments::attention_flow::{rollout, rollout_of_every_sequence, HeadFusion, Rollout, RolloutOptions};
use bert_core::Dump;

fn golden(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../golden").join(path)
}

/// Every element of `got` within `tolerance` of `want`, layer by layer, or the first that is not.
fn close(what: &str, want: &serde_json::Value, got: &[Vec<Vec<f64>>], tolerance: f64) -> Result<f64, String> {
    let want: Vec<Vec<Vec<f64>>> = serde_json::from_value(want.clone()).map_err(|e| format!("{what}: {e}"))?;
    if want.len() != got.len() {
        return Err(format!("{what}: expected {} layers, got {}", want.len(), got.len()));
    }
    let mut worst = 0.0f64;
    for (layer, (w, g)) in want.iter().zip(got).enumerate() {
        for (row, (wr, gr)) in w.iter().zip(g).enumerate() {
            if wr.len() != gr.len() || w.len() != g.len() {
                return Err(format!(
                    "{what} layer {layer}: expected {}×{}, got {}×{}",
                    w.len(),
                    wr.len(),
                    g.len(),
                    gr.len()
                ));
            }
            for (col, (a, b)) in wr.iter().zip(gr).enumerate() {
                let error = (a - b).abs();
                if error.is_nan() || error > tolerance {
                    return Err(format!("{what} layer {layer} [{row}, {col}]: expected {a}, got {b}"));
                }
                worst = worst.max(error);
            }
        }
    }
    Ok(worst)
}

#[test]
fn rollout_and_flow_match_the_papers_code_on_real_tokens_only() {
    // (dump, sequence, the reference's file)
    let cases = [
        ("english-small/dumps/mask", 0, "english-small/rollout/mask.json"),
        ("tiny/dumps/batch", 1, "tiny/rollout/batch_seq1.json"),
    ];
    let mut failures = Vec::new();
    for (dump, seq, reference) in cases {
        let want: serde_json::Value = serde_json::from_slice(&std::fs::read(golden(reference)).unwrap()).unwrap();
        let dump = Dump::open(&golden(dump)).unwrap();
        let got = rollout(&dump, &RolloutOptions { seq, flow: true, ..RolloutOptions::default() }).unwrap();
        let positions: Vec<usize> = serde_json::from_value(want["positions"].clone()).unwrap();
        if got.positions != positions {
            failures.push(format!("{reference}: positions: expected {positions:?}, got {:?}", got.positions));
            continue;
        }
        // Float64 throughout on both sides: products and sums in another order, and flows
        // through augmenting paths in another order, differ by rounding only.
        for (what, want, got) in
            [("rollout", &want["rollout"], &got.rollout), ("flow", &want["flow"], got.flow.as_ref().unwrap())]
        {
            match close(what, want, got, 1e-12) {
                Ok(worst) => println!("{reference} {what}: largest difference {worst:e}"),
                Err(failure) => failures.push(format!("{reference}: {failure}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_row_sums_to_one_whatever_the_heads_and_the_residual() {
    let dump = Dump::open(&golden("tiny/dumps/batch")).unwrap();
    for heads in [HeadFusion::Mean, HeadFusion::Max, HeadFusion::Min] {
        for residual in [0.0, 0.3, 1.0] {
            let got = rollout(&dump, &RolloutOptions { seq: 0, residual, heads, flow: true }).unwrap();
            for (what, layers) in [("rollout", &got.rollout), ("flow", got.flow.as_ref().unwrap())] {
                for (layer, matrix) in layers.iter().enumerate() {
                    for (row, values) in matrix.iter().enumerate() {
                        let sum: f64 = values.iter().sum();
                        assert!(
                            (sum - 1.0).abs() < 1e-12,
                            "{heads:?} residual {residual}: {what} layer {layer} row {row} sums to {sum}"
                        );
                    }
                }
            }
            if residual == 1.0 {
                // All residual: every position reads only itself, through every layer.
                let top = Rollout::top(got.rollout.last().unwrap(), 3, 1);
                assert_eq!(top, vec![(3, 1.0)], "{heads:?}: with r = 1 a position reads itself");
            }
        }
    }
}

#[test]
fn bad_options_and_dumps_are_refused_in_one_line() {
    let dump = Dump::open(&golden("tiny/dumps/batch")).unwrap();
    let refused = |options: RolloutOptions| rollout(&dump, &options).unwrap_err().to_string();
    for (options, says) in [
        (RolloutOptions { residual: 1.5, ..RolloutOptions::default() }, "‹residual=1.5›"),
        (RolloutOptions { residual: f64::NAN, ..RolloutOptions::default() }, "‹residual=NaN›"),
        (RolloutOptions { seq: 2, ..RolloutOptions::default() }, "‹seq=2›"),
    ] {
        let message = refused(options);
        assert!(message.contains(says) && !message.contains('\n'), "{options:?}: {message}");
    }
    // A user's dump of no sequence at all is refused, not an underflow.
    let tmp = tempfile::tempdir().unwrap();
    ndarray_npy::write_npy(tmp.path().join("layer0.attention.probs.npy"), &ndarray::Array4::<f32>::zeros((0, 2, 3, 3)))
        .unwrap();
    let message = rollout(&Dump::open(tmp.path()).unwrap(), &RolloutOptions::default()).unwrap_err().to_string();
    assert!(message.contains("‹seq=0›") && message.contains("has none"), "a batch of no sequence: {message}");
    // A dump without attention probabilities says which stage it lacks.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(golden("tiny/dumps/batch/input.ids.npy"), tmp.path().join("input.ids.npy")).unwrap();
    let empty = Dump::open(tmp.path()).unwrap();
    let message = rollout(&empty, &RolloutOptions::default()).unwrap_err().to_string();
    assert!(message.contains("layer0.attention.probs"), "{message}");
}

/// The page's rollout of every sequence, which hands each sequence only its own slice of the
/// batch, is each sequence's own rollout; a batch whose mask has a sequence the attention lacks,
/// or a sequence with no real token, is refused in one line naming the sequence, not a panic.
#[test]
fn every_sequences_rollout_is_its_own_and_a_malformed_batch_is_refused() {
    let dump = Dump::open(&golden("tiny/dumps/batch")).unwrap();
    let every = rollout_of_every_sequence(&dump, &RolloutOptions::default()).unwrap();
    assert_eq!(every.len(), 2, "golden/tiny's batch has two sequences");
    for (seq, got) in every.iter().enumerate() {
        let want = rollout(&dump, &RolloutOptions { seq, ..RolloutOptions::default() }).unwrap();
        assert_eq!(got, &want, "sequence {seq}: expected its own rollout");
    }
    let mask: ndarray::Array2<i64> =
        ndarray_npy::read_npy(golden("tiny/dumps/batch/input.attention_mask.npy")).unwrap();
    let with_mask = |mask: ndarray::Array2<i64>| {
        let tmp = tempfile::tempdir().unwrap();
        for layer in 0..2 {
            let name = format!("layer{layer}.attention.probs.npy");
            std::fs::copy(golden("tiny/dumps/batch").join(&name), tmp.path().join(&name)).unwrap();
        }
        ndarray_npy::write_npy(tmp.path().join("input.attention_mask.npy"), &mask).unwrap();
        let message = match rollout_of_every_sequence(&Dump::open(tmp.path()).unwrap(), &RolloutOptions::default()) {
            Ok(_) => "accepted".to_string(),
            Err(e) => e.to_string(),
        };
        assert!(!message.contains('\n'), "one line: {message}");
        message
    };
    let mut three = mask.clone();
    three.push_row(mask.row(0)).unwrap();
    let message = with_mask(three);
    assert!(message.contains("‹seq=2›"), "a mask of three sequences against two: {message}");
    let mut empty = mask.clone();
    empty.row_mut(1).fill(0);
    let message = with_mask(empty);
    assert!(message.contains("sequence 1 has no real token"), "sequence 1 all padding: {message}");
}

#[test]
fn a_fresh_pass_for_rollout_keeps_only_what_rollout_reads() {
    use bert_core::experiments::attention_flow::{rollout_of_pass, AttentionKept};
    use bert_core::model::{BertModel, Pass};
    use bert_core::pass::Memory;
    use bert_core::stage::{Stage, StageKind};

    let model: BertModel = BertModel::load(&golden("tiny")).unwrap();
    let texts = ["the cat sat on the mat".to_string(), "a dog".to_string()];
    let batch = model.encode(&texts, None, false).unwrap();
    let (mut kept, mut every) = (AttentionKept::default(), Memory::default());
    model.trace_with(&batch, &mut kept, Pass::default()).unwrap();
    model.trace_with(&batch, &mut every, Pass::default()).unwrap();
    let mut want = vec![Stage::new(StageKind::InputAttentionMask)];
    want.extend((0..model.config.num_hidden_layers).map(|layer| Stage::layer(layer, StageKind::AttnProbs)));
    let got: Vec<Stage> = kept.0.stages.iter().map(|(stage, _)| *stage).collect();
    assert_eq!(got, want, "the stages kept");
    assert!(every.stages.len() > want.len(), "the whole pass has more stages than rollout reads");
    for seq in 0..2 {
        let options = RolloutOptions { seq, flow: true, ..RolloutOptions::default() };
        let (a, b) = (
            rollout_of_pass(&kept.0, Path::new("kept"), &options).unwrap(),
            rollout_of_pass(&every, Path::new("every"), &options).unwrap(),
        );
        assert_eq!(a.positions, b.positions, "sequence {seq}: positions");
        assert_eq!(a.rollout, b.rollout, "sequence {seq}: rollout");
        assert_eq!(a.flow, b.flow, "sequence {seq}: flow");
    }
}
