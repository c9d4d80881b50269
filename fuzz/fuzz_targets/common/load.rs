//! What the `safetensors` and `safetensors_header` targets do with a file's bytes: read its
//! header with `WeightStore::new`; when that works, load every tensor the BERT loader asks for
//! with `BertModel::assemble` (golden/tiny's config and tokenizer); when that works too, run one
//! short forward pass. Errors are fine; a panic, or an allocation the file cannot back
//! (libFuzzer's -malloc_limit_mb, which defaults to -rss_limit_mb), is a finding.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bert_core::io::tokenizer::BertTokenizer;
use bert_core::io::weights::{Storage, WeightStore};
use bert_core::pass::Discard;
use bert_core::{BertConfig, BertModel};

pub const TINY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../golden/tiny");

struct Fixed {
    config: BertConfig,
    vocab: Vec<u8>,
    tokenizer_config: Vec<u8>,
}

fn fixed() -> &'static Fixed {
    static FIXED: OnceLock<Fixed> = OnceLock::new();
    FIXED.get_or_init(|| {
        let dir = Path::new(TINY);
        Fixed {
            config: BertConfig::from_file(&dir.join("config.json")).expect("golden/tiny config"),
            vocab: std::fs::read(dir.join("vocab.txt")).expect("golden/tiny vocab"),
            tokenizer_config: std::fs::read(dir.join("tokenizer_config.json")).expect("golden/tiny tokenizer_config"),
        }
    })
}

thread_local! {
    /// `assemble` takes the tokenizer by value and BertTokenizer is not Clone: one built here is
    /// taken back from each model that loads, and rebuilt only after a failed `assemble`.
    static TOKENIZER: RefCell<Option<BertTokenizer>> = const { RefCell::new(None) };
}

fn tokenizer() -> BertTokenizer {
    TOKENIZER.take().unwrap_or_else(|| {
        let fixed = fixed();
        BertTokenizer::from_vocab(&fixed.vocab, Some(&fixed.tokenizer_config), Path::new("fuzz/vocab.txt"))
            .expect("golden/tiny tokenizer")
    })
}

pub fn load(bytes: Vec<u8>) {
    let fixed = fixed();
    let path = Path::new("fuzz/model.safetensors");
    let Ok(store) = WeightStore::new(path, Storage::Owned(bytes)) else {
        return;
    };
    let _ = store.names();
    let Ok(model) = BertModel::assemble(fixed.config.clone(), &store, tokenizer(), PathBuf::from("fuzz")) else {
        return;
    };
    // A checkpoint that loads must also run: one short forward pass over whatever values the
    // file holds (NaN, inf, subnormals), every stage computed and thrown away.
    let _ = model.output_heads();
    let texts = ["the [MASK] sat.".to_string()];
    let batch = model.encode(&texts, None, false).expect("golden/tiny tokenizer encodes");
    let _ = model.trace(&batch, &mut Discard, None);
    let BertModel { tokenizer, .. } = model;
    TOKENIZER.set(Some(tokenizer));
}
