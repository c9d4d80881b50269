//! A property of `diff` and `view` over dump directories made at random (issue 25): whatever a
//! directory holds (stages of random shapes and dtypes under real and made-up names, nested
//! folders, files that are not `.npy` at all, a manifest that agrees with its files or not),
//! both commands end with status 0, 1 or 2, never a panic (101), and never change a file they
//! did not write. Each case is a handful of runs of the binary; failures are recorded in
//! `dump_properties.proptest-regressions` beside this file and replayed first.

use std::path::Path;
use std::process::Command;

use crate::common::{npy_header, root};
use proptest::prelude::*;

/// Stage names a learner's dump may use: real ones of every shape kind, and made-up ones.
const NAMES: &[&str] = &[
    "input.ids",
    "input.attention_mask",
    "input.token_type_ids",
    "input.labels",
    "embeddings.sum",
    "embeddings.layernorm",
    "layer0.attention.query",
    "layer0.attention.scores",
    "layer0.attention.probs",
    "layer0.ffn.activation",
    "layer1.attention.probs",
    "mlm.logits",
    "nsp.logits",
    "pooler.output",
    "loss",
    "layer0/attention/probs",
    "hidden_states_0",
];

/// One file of a random dump.
#[derive(Clone, Debug)]
enum Entry {
    /// A `.npy` of `name`, of `shape`, as `descr` (`<f4`, `>f8`, `<i8`, `<f2`, `|b1`), values
    /// from `seed`.
    Npy { name: usize, shape: Vec<usize>, descr: usize, seed: u32 },
    /// A file named like a stage that holds `bytes`.
    Garbage { name: usize, bytes: Vec<u8> },
}

const DESCRS: &[(&str, usize)] = &[("<f4", 4), (">f8", 8), ("<i8", 8), ("<f2", 2), ("|b1", 1), ("<i4", 4)];

fn entry() -> impl Strategy<Value = Entry> {
    prop_oneof![
        5 => (0..NAMES.len(), proptest::collection::vec(0usize..6, 0..5), 0..DESCRS.len(), any::<u32>())
            .prop_map(|(name, shape, descr, seed)| Entry::Npy { name, shape, descr, seed }),
        1 => (0..NAMES.len(), proptest::collection::vec(any::<u8>(), 0..200))
            .prop_map(|(name, bytes)| Entry::Garbage { name, bytes }),
    ]
}

/// A `.npy` file of `shape`, `descr`, with values drawn from `seed` (NaN and infinities among
/// the floats).
fn npy(shape: &[usize], descr: &str, size: usize, seed: u32) -> Vec<u8> {
    let mut bytes = npy_header(descr, shape);
    let count: usize = shape.iter().product();
    let mut state = u64::from(seed) | 1;
    for _ in 0..count * size {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.push((state >> 24) as u8);
    }
    bytes
}

/// Every file under `dir` with its bytes, sorted by path.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(here) = stack.pop() {
        for entry in std::fs::read_dir(&here).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push((path.display().to_string(), std::fs::read(&path).unwrap_or_default()));
            }
        }
    }
    files.sort();
    files
}

fn bert_trace(args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_bert-trace"))
        .args(args)
        .current_dir(root())
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .expect("bert-trace runs");
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 40,
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::SourceParallel(
            "proptest-regressions",
        ))),
        max_shrink_iters: 50,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn diff_and_view_end_in_0_1_or_2_and_touch_nothing_of_the_users(
        entries in proptest::collection::vec(entry(), 1..7),
        with_manifest in proptest::bool::weighted(0.3),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dump = tmp.path().join("dump");
        std::fs::create_dir(&dump).unwrap();
        let mut stages = Vec::new();
        for entry in &entries {
            let (name, bytes, shape, descr) = match entry {
                Entry::Npy { name, shape, descr, seed } => {
                    let (d, size) = DESCRS[*descr];
                    (NAMES[*name], npy(shape, d, size, *seed), shape.clone(), d)
                }
                Entry::Garbage { name, bytes } => (NAMES[*name], bytes.clone(), vec![1], "<f4"),
            };
            let path = dump.join(format!("{name}.npy"));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, bytes).unwrap();
            let dtype = match descr { "<f4" => "float32", ">f8" => "float64", "<f2" => "float16", "|b1" => "bool", "<i4" => "int32", _ => "int64" };
            stages.push(serde_json::json!({"name": name.replace('/', "."), "shape": shape, "dtype": dtype, "file": format!("{name}.npy")}));
        }
        if with_manifest {
            let manifest = serde_json::json!({
                "format": "bert-trace-dump/1", "producer": {"name": "test"}, "model": "golden/tiny",
                "inputs": {"texts": ["x"]}, "stages": stages,
            });
            std::fs::write(dump.join("manifest.json"), manifest.to_string()).unwrap();
        }
        let before = snapshot(&dump);
        let golden = root().join("golden/tiny/dumps/mask");
        let (g, d) = (golden.display().to_string(), dump.display().to_string());
        let page = tmp.path().join("page.html");
        let svg = tmp.path().join("picture.svg");
        let (page_s, svg_s) = (page.display().to_string(), svg.display().to_string());
        let runs: [Vec<&str>; 5] = [
            vec!["diff", &g, &d],
            vec!["diff", &d, &g],
            vec!["diff", &d, &d],
            vec!["view", &d, "--out", &page_s],
            vec!["view", &d, "--stage", "layer0.attention.probs", "--svg", &svg_s],
        ];
        let mut codes = Vec::new();
        for args in runs {
            let (code, stderr) = bert_trace(&args);
            codes.push(code.unwrap_or(-1));
            prop_assert!(
                matches!(code, Some(0..=2)) && !stderr.contains("panicked"),
                "{:?} ended with {:?}: {}", args, code, stderr
            );
        }
        println!("{} files{}: exit statuses {codes:?}", entries.len(), if with_manifest { " and a manifest" } else { "" });
        prop_assert_eq!(snapshot(&dump), before, "a file of the dump changed");
    }
}
