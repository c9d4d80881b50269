//! The dump reader: `dump::read_manifest` on an arbitrary manifest.json, and `Dump::read` of an
//! arbitrary .npy under golden/tiny/dumps/mask's manifest, with `compare` run on whatever reads
//! back. Errors are fine; a panic or an allocation the file cannot back is a finding.
//!
//! Input: the first byte picks the mode, the rest is the file.
//! - byte < 32: the rest is `manifest.json`, in a directory that also holds every .npy of the
//!   golden dump. When it reads, the fuzzed dump is compared with the golden one by
//!   `diff_dumps`, as the trace (odd byte) or as the reference (even byte, so that its
//!   `input.attention_mask` becomes the query mask).
//! - otherwise: the rest is the .npy of golden stage number `byte % 43`, read with
//!   `Dump::read` under the golden manifest; when it reads, it is compared with the golden tensor
//!   both ways, and, when it is `input.attention_mask`, used as the query mask for the scores.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bert_core::divergence::{compare_tensors, default_tolerance, diff_dumps, ToleranceOverride};
use bert_core::io::dump::{read_manifest, Dump};
use bert_core::pass::Tensor;
use bert_core::stage;
use libfuzzer_sys::fuzz_target;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../golden/tiny/dumps/mask");

struct Fixed {
    /// Kept so the directories live as long as the process (they are removed only if it exits
    /// normally; libFuzzer usually does not).
    _root: tempfile::TempDir,
    golden: Dump,
    tensors: Vec<Tensor>,
    /// Holds the golden .npy files; manifest.json is the fuzzed one.
    manifest_dir: PathBuf,
    /// Holds the golden manifest; the .npy of the fuzzed stage is replaced.
    npy_dir: PathBuf,
}

impl Fixed {
    fn tensor(&self, name: &str) -> Option<&Tensor> {
        let index = self.golden.manifest.stages.iter().position(|s| s.name == name)?;
        Some(&self.tensors[index])
    }
}

fn fixed() -> &'static Fixed {
    static FIXED: OnceLock<Fixed> = OnceLock::new();
    FIXED.get_or_init(|| {
        let golden = Dump::open(Path::new(GOLDEN)).expect("golden dump");
        let tensors = golden.manifest.stages.iter().map(|e| golden.read(e).expect("golden stage")).collect();
        // Every input is written to a file: on a tmpfs that costs microseconds, on a disk
        // milliseconds.
        let shm = Path::new("/dev/shm");
        let root = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() }.expect("temp dir");
        let manifest_dir = root.path().join("manifest");
        let npy_dir = root.path().join("npy");
        for dir in [&manifest_dir, &npy_dir] {
            std::fs::create_dir(dir).unwrap();
            for entry in std::fs::read_dir(GOLDEN).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
            }
        }
        Fixed { _root: root, golden, tensors, manifest_dir, npy_dir }
    })
}

fuzz_target!(|data: &[u8]| {
    let fixed = fixed();
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    if mode < 32 {
        let path = fixed.manifest_dir.join("manifest.json");
        std::fs::write(&path, bytes).unwrap();
        let Ok(manifest) = read_manifest(&path) else {
            return;
        };
        let Ok(fuzzed) = Dump::with_manifest(&fixed.manifest_dir, manifest) else {
            return;
        };
        let _ = if mode % 2 == 1 {
            diff_dumps(&fixed.golden, &fuzzed, ToleranceOverride::default())
        } else {
            diff_dumps(&fuzzed, &fixed.golden, ToleranceOverride::default())
        };
    } else {
        let stages = &fixed.golden.manifest.stages;
        let index = mode as usize % stages.len();
        let entry = &stages[index];
        std::fs::write(fixed.npy_dir.join(&entry.file), bytes).unwrap();
        let dump = Dump::with_manifest(&fixed.npy_dir, fixed.golden.manifest.clone()).expect("the golden manifest");
        let Ok(tensor) = dump.read(entry) else {
            return;
        };
        let kind = stage::parse(&entry.name).expect("golden stage names parse").kind;
        let tolerance = default_tolerance(kind);
        let golden_mask = match fixed.tensor("input.attention_mask") {
            Some(Tensor::I64(mask)) => Some(mask),
            _ => None,
        };
        let golden = &fixed.tensors[index];
        let _ = compare_tensors(&entry.name, golden, &tensor, tolerance, golden_mask);
        let _ = compare_tensors(&entry.name, &tensor, golden, tolerance, golden_mask);
        if let (Tensor::I64(mask), "input.attention_mask") = (&tensor, entry.name.as_str()) {
            // A fuzzed mask of the right shape sets apart the padded query rows.
            for name in ["layer0.attention.scores", "embeddings.sum", "pooler.dense"] {
                if let Some(reference) = fixed.tensor(name) {
                    let kind = stage::parse(name).expect("a stage name").kind;
                    let _ = compare_tensors(name, reference, reference, default_tolerance(kind), Some(mask));
                }
            }
        }
    }
});
