//! The models built into bert-trace, so that a trace works from anywhere with no download:
//! `english-small`, the course's English BERT pretrained by `bert-trace train`
//! (golden/english-small, made by scripts/make_english_small.sh), which is the default;
//! `chinese-small`, its Chinese sibling, which reads classical Chinese a character at a time as
//! bert-base-chinese reads text (golden/chinese-small, scripts/make_chinese_small.sh); and
//! `tiny`, the random model whose small numbers the goldens and most chapters' tables use
//! (golden/tiny). `model=` names them; a directory of the same name here wins, as a local
//! directory wins over a hub id in transformers.

use std::path::Path;

use bert_core::io::weights::Storage;
use bert_core::model::load::TokenizerFiles;
use bert_core::ops::Float;
use bert_core::training::save::ModelFiles;
use bert_core::BertModel;

use super::MODEL;
use crate::error::Result;

/// One model built into the binary.
pub struct Builtin {
    /// What `model=` calls it.
    pub name: &'static str,
    /// What manifests call it: its directory in the repository, so that a dump made with it
    /// names a directory that exists in a checkout.
    pub dir: &'static str,
    config: &'static [u8],
    weights: &'static [u8],
    /// Its tokenizer's files by name, as a checkpoint saved from it carries them.
    tokenizer: &'static [(&'static str, &'static [u8])],
    /// What the note says it is, after its shape.
    about: &'static str,
}

macro_rules! golden {
    ($dir:literal, $file:literal) => {
        include_bytes!(concat!("../../../golden/", $dir, "/", $file))
    };
}

/// The course's English BERT: 4 layers, hidden 256, its own 8,192-word vocabulary.
pub const ENGLISH_SMALL: Builtin = Builtin {
    name: "english-small",
    dir: "golden/english-small",
    config: golden!("english-small", "config.json"),
    weights: golden!("english-small", "model.safetensors"),
    tokenizer: &[
        ("tokenizer.json", golden!("english-small", "tokenizer.json")),
        ("vocab.txt", golden!("english-small", "vocab.txt")),
        ("tokenizer_config.json", golden!("english-small", "tokenizer_config.json")),
    ],
    about: "pretrained by bert-trace train on Jane Austen's novels and the World English Bible",
};

/// The course's Chinese BERT: 4 layers, hidden 256, one token a character.
pub const CHINESE_SMALL: Builtin = Builtin {
    name: "chinese-small",
    dir: "golden/chinese-small",
    config: golden!("chinese-small", "config.json"),
    weights: golden!("chinese-small", "model.safetensors"),
    tokenizer: &[
        ("tokenizer.json", golden!("chinese-small", "tokenizer.json")),
        ("vocab.txt", golden!("chinese-small", "vocab.txt")),
        ("tokenizer_config.json", golden!("chinese-small", "tokenizer_config.json")),
    ],
    about: "pretrained by bert-trace train on classical Chinese poems and classics, in Simplified characters",
};

/// The tiny random model: 2 layers, hidden 32, a 245-word vocabulary.
pub const TINY: Builtin = Builtin {
    name: "tiny",
    dir: "golden/tiny",
    config: golden!("tiny", "config.json"),
    weights: golden!("tiny", "model.safetensors"),
    tokenizer: &[
        ("vocab.txt", golden!("tiny", "vocab.txt")),
        ("tokenizer_config.json", golden!("tiny", "tokenizer_config.json")),
    ],
    about: "random weights, whose predictions are meaningless and whose small numbers are easy to read",
};

/// Every built-in model, the default first.
pub const ALL: [&Builtin; 3] = [&ENGLISH_SMALL, &CHINESE_SMALL, &TINY];

/// The model used when none is named.
pub const DEFAULT: &Builtin = &ENGLISH_SMALL;

impl Builtin {
    /// The built-in model `spec` names: None for the default, its name when nothing of that
    /// name exists here.
    pub fn resolve(spec: Option<&Path>) -> Option<&'static Builtin> {
        match spec {
            None => Some(DEFAULT),
            Some(spec) if !spec.exists() => ALL.into_iter().find(|b| spec.as_os_str() == b.name),
            Some(_) => None,
        }
    }

    /// The built-in model a manifest names by its directory.
    pub fn of_manifest(named: &str) -> Option<&'static Builtin> {
        ALL.into_iter().find(|b| named == b.dir)
    }

    /// The model, read from the binary itself, for a pass in `F`.
    pub fn load_as<F: Float>(&self) -> Result<BertModel<F>> {
        Ok(BertModel::from_bytes_as(
            self.config,
            Storage::Static(self.weights),
            self.tokenizer_files(),
            Path::new(self.dir),
        )?)
    }

    /// Its config and tokenizer with new weights drawn from `seed` (`from_config` with its name).
    pub fn new_weights(&self, seed: u64) -> Result<BertModel> {
        Ok(BertModel::from_config_bytes(self.config, self.tokenizer_files(), Path::new(self.dir), seed)?)
    }

    fn tokenizer_files(&self) -> TokenizerFiles<'static> {
        let file = |name: &str| self.tokenizer.iter().find(|(n, _)| *n == name).map(|(_, bytes)| *bytes);
        let config = file("tokenizer_config.json");
        match (file("tokenizer.json"), file("vocab.txt")) {
            (Some(json), _) => TokenizerFiles::Json { json, config },
            (None, Some(vocab)) => TokenizerFiles::Vocab { vocab, config },
            (None, None) => unreachable!("every built-in model carries a tokenizer"),
        }
    }

    /// The files a checkpoint saved from it carries beside its weights.
    pub fn files(&self) -> ModelFiles {
        ModelFiles {
            config_json: self.config.to_vec(),
            tokenizer: self.tokenizer.iter().map(|(name, bytes)| (name.to_string(), bytes.to_vec())).collect(),
        }
    }

    /// The one-line note printed when it is used because no model was named.
    pub fn note<F: Float>(&self, model: &BertModel<F>) -> String {
        let mut others: Vec<String> =
            ALL.into_iter().filter(|b| b.name != self.name).map(|b| MODEL.with(b.name)).collect();
        let last = others.pop().unwrap_or_default();
        format!(
            "note: using {}, the model built into bert-trace ({} layers, hidden {}, vocab {}; {}). Pick another \
             with {}, a hub id, {} or {last}.",
            self.name,
            model.config.num_hidden_layers,
            model.config.hidden_size,
            model.config.vocab_size,
            self.about,
            MODEL.with("DIR"),
            others.join(", ")
        )
    }
}
