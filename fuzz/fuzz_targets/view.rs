//! `bert-trace view`'s data layer: a dump whose manifest or one of whose `.npy` files is
//! arbitrary, drawn as the page's data (tokens, attention, heatmaps, layer plots, predictions)
//! and as one stage's SVG, by `bert_commands::view::draw`, which `view` runs before it writes.
//! Errors are fine (an inconsistent dump is one line); a panic, or an allocation the input
//! cannot back, is a finding. PNG rasterising is left out: it is resvg's, and slow. The tiny
//! model that names the tokens is loaded once.
//!
//! Input: the first byte picks the mode, the rest is the file.
//! - byte < 64: the rest is `manifest.json`, beside every `.npy` of golden/tiny/dumps/mask (one
//!   sentence of 13 tokens: small, so that a run reaches a million inputs in under an hour);
//!   the page's data is made, and the SVG of stage `byte % 8` of the ones a picture can show.
//! - otherwise: the rest is the `.npy` of the golden stage `byte % (number of stages)`, under
//!   the golden manifest; the page and the same SVGs are drawn.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bert_core::io::dump::Dump;
use bert_core::BertModel;
use libfuzzer_sys::fuzz_target;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../golden/tiny/dumps/mask");

/// Stages a picture draws (and some it refuses), picked by the mode byte.
const PICTURES: [&str; 8] = [
    "layer0.attention.probs",
    "layer1.attention.scores",
    "embeddings.layernorm",
    "layer0.ffn.activation",
    "mlm.logits",
    "input.ids",
    "layer1.attention.query",
    "nsp.logits",
];

struct Fixed {
    _root: tempfile::TempDir,
    names: Vec<String>,
    files: Vec<String>,
    manifest_dir: PathBuf,
    npy_dir: PathBuf,
    model: BertModel,
}

fn fixed() -> &'static Fixed {
    static FIXED: OnceLock<Fixed> = OnceLock::new();
    FIXED.get_or_init(|| {
        let golden = Dump::open(Path::new(GOLDEN)).expect("golden dump");
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
        let names = golden.manifest.stages.iter().map(|s| s.name.clone()).collect();
        let files = golden.manifest.stages.iter().map(|s| s.file.clone()).collect();
        let model = bert_commands::source::TINY.load_as().expect("the built-in tiny model, whose dump this is");
        Fixed { _root: root, names, files, manifest_dir, npy_dir, model }
    })
}

/// The page and the picture of `stage`, from the dump in `dir` as it now is.
fn draw(dir: &Path, stage: &str, model: &BertModel) {
    let Ok(dump) = Dump::open(dir) else { return };
    let _ = bert_commands::view::draw(&dump, Some(model), Some(stage));
}

fuzz_target!(|data: &[u8]| {
    let fixed = fixed();
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    let stage = PICTURES[mode as usize % PICTURES.len()];
    if mode < 64 {
        std::fs::write(fixed.manifest_dir.join("manifest.json"), bytes).unwrap();
        draw(&fixed.manifest_dir, stage, &fixed.model);
    } else {
        let index = mode as usize % fixed.names.len();
        let path = fixed.npy_dir.join(&fixed.files[index]);
        let golden = std::fs::read(Path::new(GOLDEN).join(&fixed.files[index])).unwrap();
        std::fs::write(&path, bytes).unwrap();
        draw(&fixed.npy_dir, stage, &fixed.model);
        std::fs::write(&path, golden).unwrap();
    }
});
