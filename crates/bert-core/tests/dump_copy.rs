//! The dump writer's copy of a stage: a large one is split between the pool's threads, and
//! every part must land where a C-order copy puts it, whatever the layout of the view the
//! forward pass emits (contiguous, heads-first transposed, or strided). This file is a test
//! binary of its own so that it can fix the thread count at two before anything else runs.

use bert_core::dump::{Dump, DumpWriter};
use bert_core::manifest::Inputs;
use bert_core::stage::{Stage, StageKind};
use bert_core::trace::{Sink, Tensor, TensorView};
use ndarray::{s, ArrayD, ArrayViewD, IxDyn};

/// A tensor of `shape` whose values all differ.
fn tensor(shape: &[usize]) -> ArrayD<f32> {
    let len: usize = shape.iter().product();
    ArrayD::from_shape_vec(IxDyn(shape), (0..len).map(|i| i as f32).collect()).expect("shape and length agree")
}

struct Case {
    what: &'static str,
    view: ArrayViewD<'static, f32>,
}

fn leak(a: ArrayD<f32>) -> &'static ArrayD<f32> {
    Box::leak(Box::new(a))
}

/// Views as large as bert-base's stages at a few hundred tokens, so that each is split.
fn cases() -> Vec<Case> {
    let heads_last_b2 = leak(tensor(&[2, 300, 12, 64]));
    let heads_last_b1 = leak(tensor(&[1, 300, 12, 64]));
    let scores = leak(tensor(&[1, 12, 300, 300]));
    let wide = leak(tensor(&[1, 400, 400]));
    let small = leak(tensor(&[1, 5, 8]));
    vec![
        Case {
            what: "heads-first view of a batch of 2 (split along B)",
            view: heads_last_b2.view().permuted_axes(vec![0, 2, 1, 3]),
        },
        Case {
            what: "heads-first view of one sequence (split along nh)",
            view: heads_last_b1.view().permuted_axes(vec![0, 2, 1, 3]),
        },
        Case { what: "contiguous scores", view: scores.view() },
        Case {
            what: "every other value of each row (no contiguous row)",
            view: wide.slice(s![.., .., ..;2]).into_dyn(),
        },
        Case { what: "a small stage (copied on one thread)", view: small.view() },
    ]
}

#[test]
fn a_stage_copied_by_several_threads_is_written_in_c_order() {
    bert_core::threads::set_threads(2).expect("the first setting of this test binary");
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    let cases = cases();
    let inputs = Inputs { texts: vec!["test".into()], pair: None };
    let mut sink = DumpWriter::create(&dir, serde_json::json!({"name": "test"}), "test".into(), inputs, false)
        .expect("dump directory");
    let stage = |i: usize| Stage { layer: Some(i), kind: StageKind::AttnQuery };
    for (i, case) in cases.iter().enumerate() {
        sink.emit(stage(i), TensorView::F32(case.view.clone())).expect("emit");
    }
    sink.finish().expect("finish");

    let dump = Dump::open(&dir).expect("a finished dump");
    for (i, case) in cases.iter().enumerate() {
        let entry = dump.entry(&stage(i).name()).unwrap_or_else(|| panic!("{}: not in the manifest", case.what));
        let Tensor::F32(got) = dump.read(entry).expect("readable") else { panic!("{}: not float32", case.what) };
        // Compared in the view's own index order, which is what C order means for the file.
        assert_eq!(got.shape(), case.view.shape(), "{}: shape", case.what);
        let first_difference = got.iter().zip(case.view.iter()).position(|(g, w)| g != w);
        if let Some(at) = first_difference {
            let (g, w) = (got.iter().nth(at).unwrap(), case.view.iter().nth(at).unwrap());
            panic!("{}: value {at} in C order: expected {w}, got {g}", case.what);
        }
    }
}
