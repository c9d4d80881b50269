//! Text to `input_ids`, `token_type_ids` and `attention_mask`, the way `BertTokenizer` does it.
//!
//! The tokenizer comes from `tokenizer.json` when the checkpoint has one, otherwise it is built
//! from `vocab.txt`: BertNormalizer (clean text, split Chinese characters, lowercase and strip
//! accents), BertPreTokenizer (whitespace and punctuation), WordPiece with `[UNK]`, then
//! `[CLS] A [SEP] B [SEP]`.
//!
//! Either way, `tokenizer_config.json` decides the normalizer when it is there, as transformers'
//! `BertTokenizer` does (in 4.x by patching the normalizer of `tokenizer.json`, in 5.x by
//! rebuilding it): `do_lower_case` (default true), `tokenize_chinese_chars` (default true) and
//! `strip_accents` (default: strip when lowercasing). A cased model such as bert-base-cased or
//! bert-base-chinese says `do_lower_case: false` there. When the two files disagree, the tokenizer
//! keeps a note saying so ([`BertTokenizer::notes`]).

use std::path::{Path, PathBuf};

use ndarray::Array2;
use serde::Deserialize;
use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::{EncodeInput, Tokenizer, TruncationParams, TruncationStrategy};

use super::files;
use crate::error::{BertError, Result};
use crate::objectives::labels::{Labels, Replacement};

/// The special tokens every BERT vocabulary needs.
pub const CLS: &str = "[CLS]";
pub const SEP: &str = "[SEP]";
pub const UNK: &str = "[UNK]";
pub const PAD: &str = "[PAD]";
pub const MASK: &str = "[MASK]";

/// The casing choices from `tokenizer_config.json`; absent fields mean bert-base-uncased's.
#[derive(Debug, Default, Deserialize)]
struct TokenizerConfig {
    do_lower_case: Option<bool>,
    strip_accents: Option<bool>,
    tokenize_chinese_chars: Option<bool>,
    tokenizer_class: Option<String>,
}

/// What a BertNormalizer does, as `tokenizer.json` spells its fields.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
struct NormalizerSettings {
    lowercase: bool,
    handle_chinese_chars: bool,
    strip_accents: Option<bool>,
}

impl TokenizerConfig {
    /// Parses `tokenizer_config.json`; `path` names it in errors.
    fn parse(bytes: &[u8], path: &Path) -> Result<TokenizerConfig> {
        serde_json::from_slice(bytes).map_err(|e| BertError::Tokenizer {
            path: path.into(),
            problem: format!("not a valid tokenizer_config.json: {e}"),
        })
    }

    /// Whether transformers would build a `BertTokenizer` (or its fast twin) from this config:
    /// an explicit other class keeps its own normalizer.
    fn is_bert(&self) -> bool {
        self.tokenizer_class.as_deref().is_none_or(|class| class.starts_with("BertTokenizer"))
    }

    /// The normalizer `BertTokenizer` builds from these fields and its defaults.
    fn normalizer(&self) -> NormalizerSettings {
        NormalizerSettings {
            lowercase: self.do_lower_case.unwrap_or(true),
            handle_chinese_chars: self.tokenize_chinese_chars.unwrap_or(true),
            strip_accents: self.strip_accents,
        }
    }
}

impl NormalizerSettings {
    fn build(self) -> BertNormalizer {
        BertNormalizer::new(true, self.handle_chinese_chars, self.strip_accents, self.lowercase)
    }

    /// The settings of `tokenizer.json`'s normalizer, if it is a BertNormalizer.
    fn stored(tokenizer_json: &[u8]) -> Option<NormalizerSettings> {
        let json: serde_json::Value = serde_json::from_slice(tokenizer_json).ok()?;
        let normalizer = json.get("normalizer")?;
        if normalizer.get("type")?.as_str()? != "BertNormalizer" {
            return None;
        }
        serde_json::from_value(normalizer.clone()).ok()
    }

    /// `field: tokenizer_config.json X, tokenizer.json Y` for each field where `self` (from the
    /// config) and `stored` differ.
    fn differences(self, stored: Option<NormalizerSettings>) -> Vec<String> {
        let Some(stored) = stored else {
            return vec!["tokenizer.json has no BertNormalizer".into()];
        };
        let show = |v: Option<bool>| v.map_or("null".to_string(), |b| b.to_string());
        let pairs = [
            ("do_lower_case", Some(self.lowercase), Some(stored.lowercase)),
            ("tokenize_chinese_chars", Some(self.handle_chinese_chars), Some(stored.handle_chinese_chars)),
            ("strip_accents", self.strip_accents, stored.strip_accents),
        ];
        pairs
            .into_iter()
            .filter(|(_, ours, theirs)| ours != theirs)
            .map(|(field, ours, theirs)| {
                format!("{field}: tokenizer_config.json {}, tokenizer.json {}", show(ours), show(theirs))
            })
            .collect()
    }
}

/// A BERT tokenizer, with the padding and truncation that `tokenizer.json` may carry turned off:
/// we pad only a batch, and only to its longest member.
pub struct BertTokenizer {
    inner: Tokenizer,
    source: PathBuf,
    pad_id: u32,
    notes: Vec<String>,
}

/// One tokenized batch: B sequences padded to T tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// `[B,T]` token ids.
    pub ids: Array2<i64>,
    /// `[B,T]` 0 for sentence A (with `[CLS]` and its `[SEP]`), 1 for sentence B.
    pub token_type_ids: Array2<i64>,
    /// `[B,T]` 1 for real tokens, 0 for padding.
    pub attention_mask: Array2<i64>,
    /// The token strings of each sequence, without padding, as the tokenizer gave them (before
    /// any masking).
    pub tokens: Vec<Vec<String>>,
    /// Whether each sequence is a sentence pair.
    pub pairs: bool,
    /// The labels of the pretraining objectives, and how the input was masked (see
    /// [`crate::objectives`]); empty unless asked for.
    pub labels: Labels,
}

impl Batch {
    /// (B, T)
    pub fn dims(&self) -> (usize, usize) {
        self.ids.dim()
    }

    /// Whether each sequence is a sentence pair.
    pub fn is_pairs(&self) -> bool {
        self.pairs
    }

    /// Which pretraining objectives the batch carries labels for.
    pub fn objectives(&self) -> crate::stage::Objectives {
        crate::stage::Objectives {
            masked: self.labels.original_ids.is_some(),
            mlm_labels: self.labels.mlm.is_some(),
            nsp_labels: self.labels.nsp.is_some(),
            class_labels: self.labels.class.is_some(),
            lens: false,
            backward: false,
            dropout: false,
        }
    }

    /// The sequences `rows`, with their labels, padded only to the longest of them: the batch
    /// they would make if tokenized alone.
    pub fn rows(&self, rows: std::ops::Range<usize>) -> Batch {
        let t = rows.clone().map(|b| self.tokens[b].len()).max().unwrap_or(0);
        let cut = |a: &Array2<i64>| a.slice(ndarray::s![rows.clone(), ..t]).to_owned();
        let pick = |a: &ndarray::Array1<i64>| a.slice(ndarray::s![rows.clone()]).to_owned();
        let replacements = self.labels.replacements.iter().filter(|r| rows.contains(&r.seq));
        Batch {
            ids: cut(&self.ids),
            token_type_ids: cut(&self.token_type_ids),
            attention_mask: cut(&self.attention_mask),
            tokens: self.tokens[rows.clone()].to_vec(),
            pairs: self.pairs,
            labels: Labels {
                original_ids: self.labels.original_ids.as_ref().map(cut),
                mlm: self.labels.mlm.as_ref().map(cut),
                nsp: self.labels.nsp.as_ref().map(pick),
                class: self.labels.class.as_ref().map(pick),
                replacements: replacements.map(|r| Replacement { seq: r.seq - rows.start, ..*r }).collect(),
            },
        }
    }

    /// `rows` copies of the first sequence, without labels: one text run several ways at once
    /// (a token hidden in each row, or each row a point on a path).
    pub fn repeat_first(&self, rows: usize) -> Batch {
        let first = |a: &Array2<i64>| {
            let row = a.row(0);
            Array2::from_shape_fn((rows, row.len()), |(_, t)| row[t])
        };
        Batch {
            ids: first(&self.ids),
            token_type_ids: first(&self.token_type_ids),
            attention_mask: first(&self.attention_mask),
            tokens: vec![self.tokens[0].clone(); rows],
            pairs: self.pairs,
            labels: Labels::default(),
        }
    }
}

impl BertTokenizer {
    /// Loads the tokenizer from a model directory: `tokenizer.json`, or else `vocab.txt`, with
    /// `tokenizer_config.json` if there is one.
    pub fn from_dir(dir: &Path) -> Result<BertTokenizer> {
        let json = dir.join("tokenizer.json");
        let vocab = dir.join("vocab.txt");
        let config_path = dir.join("tokenizer_config.json");
        let config = files::read_optional(&config_path, files::MAX_CONFIG)?;
        if let Some(bytes) = files::read_optional(&json, files::MAX_TABLE)? {
            BertTokenizer::from_json_with_config(&bytes, config.as_deref(), &json)
        } else if let Some(text) = files::read_optional(&vocab, files::MAX_TABLE)? {
            BertTokenizer::from_vocab(&text, config.as_deref(), &vocab)
        } else {
            Err(BertError::Tokenizer { path: dir.into(), problem: "no tokenizer.json and no vocab.txt".into() })
        }
    }

    /// Loads a `tokenizer.json` as it is; `path` is only used in errors.
    pub fn from_json(bytes: &[u8], path: &Path) -> Result<BertTokenizer> {
        BertTokenizer::from_json_with_config(bytes, None, path)
    }

    /// Loads a `tokenizer.json` whose normalizer `tokenizer_config.json` (`config_json`, read from
    /// beside `path`) decides, as in transformers.
    pub fn from_json_with_config(bytes: &[u8], config_json: Option<&[u8]>, path: &Path) -> Result<BertTokenizer> {
        let mut inner = Tokenizer::from_bytes(bytes).map_err(|e| BertError::Tokenizer {
            path: path.into(),
            problem: format!("not a valid tokenizer.json: {e}"),
        })?;
        // Some checkpoints ship fixed padding to 128 and truncation; both would silently change
        // what the model sees, so they are switched off and applied only when asked for.
        inner.with_padding(None);
        inner.with_truncation(None).expect("turning truncation off cannot fail");
        let mut notes = Vec::new();
        if let Some(config_bytes) = config_json {
            let config_path = path.with_file_name("tokenizer_config.json");
            let config = TokenizerConfig::parse(config_bytes, &config_path)?;
            if config.is_bert() {
                let wanted = config.normalizer();
                let differences = wanted.differences(NormalizerSettings::stored(bytes));
                if !differences.is_empty() {
                    notes.push(format!(
                        "{}: the normalizer follows tokenizer_config.json, as transformers does ({})",
                        path.display(),
                        differences.join("; ")
                    ));
                }
                inner.with_normalizer(Some(wanted.build()));
            }
        }
        let mut tokenizer = BertTokenizer::checked(inner, path)?;
        tokenizer.notes = notes;
        Ok(tokenizer)
    }

    /// Builds the tokenizer from `vocab.txt` text and an optional `tokenizer_config.json`.
    pub fn from_vocab(vocab_text: &[u8], config_json: Option<&[u8]>, path: &Path) -> Result<BertTokenizer> {
        let bad = |problem: String| BertError::Tokenizer { path: path.into(), problem };
        let text = std::str::from_utf8(vocab_text).map_err(|e| bad(format!("vocab.txt is not UTF-8: {e}")))?;
        let vocab = parse_vocab(text);
        for special in [CLS, SEP, UNK] {
            if !vocab.contains_key(special) {
                return Err(bad(format!("the vocabulary has no {special} token")));
            }
        }
        let (sep_id, cls_id) = (vocab[SEP], vocab[CLS]);
        // [MASK] and the other specials must never be split by the pre-tokenizer.
        let specials: Vec<tokenizers::AddedToken> = [PAD, UNK, CLS, SEP, MASK]
            .iter()
            .filter(|t| vocab.contains_key(**t))
            .map(|t| tokenizers::AddedToken::from(t.to_string(), true))
            .collect();
        let config = match config_json {
            Some(bytes) => TokenizerConfig::parse(bytes, &path.with_file_name("tokenizer_config.json"))?,
            None => TokenizerConfig::default(),
        };
        let model = WordPiece::builder()
            .vocab(vocab)
            .unk_token(UNK.into())
            .continuing_subword_prefix("##".into())
            .max_input_chars_per_word(100)
            .build()
            .map_err(|e| bad(format!("cannot build WordPiece: {e}")))?;
        let mut inner = Tokenizer::new(model);
        inner.with_normalizer(Some(config.normalizer().build()));
        inner.with_pre_tokenizer(Some(BertPreTokenizer));
        inner.with_post_processor(Some(BertProcessing::new((SEP.into(), sep_id), (CLS.into(), cls_id))));
        inner.with_decoder(Some(WordPieceDecoder::default()));
        inner.add_special_tokens(&specials);
        BertTokenizer::checked(inner, path)
    }

    fn checked(inner: Tokenizer, path: &Path) -> Result<BertTokenizer> {
        for special in [CLS, SEP] {
            if inner.token_to_id(special).is_none() {
                return Err(BertError::Tokenizer {
                    path: path.into(),
                    problem: format!("the vocabulary has no {special} token"),
                });
            }
        }
        let pad_id = inner.token_to_id(PAD).unwrap_or(0);
        Ok(BertTokenizer { inner, source: path.into(), pad_id, notes: Vec::new() })
    }

    /// Things a user should know about how the files were read (e.g. `tokenizer.json` and
    /// `tokenizer_config.json` disagreeing on casing), one sentence each.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Where the tokenizer was read from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The ids of the special tokens this vocabulary has ([PAD], [UNK], [CLS], [SEP], [MASK]):
    /// transformers' `all_special_ids`, which masking never chooses.
    pub fn special_ids(&self) -> Vec<i64> {
        [PAD, UNK, CLS, SEP, MASK].iter().filter_map(|t| self.inner.token_to_id(t)).map(i64::from).collect()
    }

    /// The tokens of `text` without `[CLS]` and `[SEP]`: each one's id and where it is in the
    /// text (its byte range), in order. A text is cut into pieces of at most so many tokens at
    /// these ranges (`train --documents`).
    pub fn token_spans(&self, text: &str) -> Result<Vec<(u32, (usize, usize))>> {
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|e| BertError::Input { index: 0, problem: format!("cannot tokenize: {e}") })?;
        Ok(encoding.get_ids().iter().copied().zip(encoding.get_offsets().iter().copied()).collect())
    }

    /// Whether the tokens of texts joined by a space are the tokens of each text in turn, when
    /// each is cut at the start of a word: true of BERT's pre-tokenizer, which splits at every
    /// space before anything else looks at the text (and of its special tokens, matched whole).
    pub fn splits_at_spaces(&self) -> bool {
        matches!(
            self.inner.get_pre_tokenizer(),
            Some(tokenizers::pre_tokenizers::PreTokenizerWrapper::BertPreTokenizer(_))
        )
    }

    /// The words among the first `max_len` tokens of `text` that the vocabulary lacks, which the
    /// model reads as `[UNK]`: each as the text spells it, once, in order (a Traditional
    /// character given to a model of Simplified ones, an emoji, a word WordPiece cannot piece
    /// together). Only the start of a long text is tokenized, as [`BertTokenizer::encode`] cuts
    /// it.
    pub fn unknown_words(&self, text: &str, max_len: usize) -> Vec<String> {
        let text = first_words(text, max_len);
        let (Ok(encoding), Some(unk)) = (self.inner.encode(text, false), self.inner.token_to_id(UNK)) else {
            return Vec::new();
        };
        let mut words: Vec<String> = Vec::new();
        let tokens = encoding.get_ids().iter().zip(encoding.get_offsets()).take(max_len);
        for (&id, &(start, end)) in tokens {
            let word = text.get(start..end).unwrap_or_default().to_string();
            if id == unk && !word.is_empty() && !words.contains(&word) {
                words.push(word);
            }
        }
        words
    }

    /// The ids of the first `first` tokens of `text` alone, without `[CLS]` and `[SEP]`: the
    /// tokens [`BertTokenizer::encode`] gives the text when it cuts it to `first + 2` (a single
    /// text is cut from its end), without building a batch. An empty text is refused as
    /// `encode` refuses it.
    pub fn content_ids(&self, text: &str, first: usize) -> Result<Vec<u32>> {
        if text.trim().is_empty() {
            return Err(BertError::Input { index: 0, problem: "the text is empty".into() });
        }
        let encoding = self
            .inner
            .encode(first_words(text, first), false)
            .map_err(|e| BertError::Input { index: 0, problem: format!("cannot tokenize: {e}") })?;
        Ok(encoding.get_ids().iter().take(first).copied().collect())
    }

    /// How many tokens the vocabulary has (`len(tokenizer)` in transformers).
    pub fn vocab_len(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of `word` when it is one token of the vocabulary (after the normalizer: an
    /// uncased model lowercases it); otherwise a message saying how it tokenizes.
    pub fn single_token(&self, word: &str) -> std::result::Result<u32, String> {
        let encoding =
            self.inner.encode(word, false).map_err(|e| format!("target `{word}` cannot be tokenized: {e}"))?;
        match (encoding.get_ids(), encoding.get_tokens()) {
            ([id], [token]) if token != UNK => Ok(*id),
            (_, tokens) => Err(format!(
                "target `{word}` is not one token of the vocabulary: it tokenizes as {}; pick a word that is one token",
                if tokens.is_empty() { "nothing".to_string() } else { tokens.join(" ") }
            )),
        }
    }

    /// Joins word pieces back into text, dropping the `##` markers and special tokens.
    pub fn decode(&self, ids: &[u32]) -> String {
        self.inner.decode(ids, true).unwrap_or_default()
    }

    /// Tokenizes a batch. `pairs`, when given, holds sentence B for each text.
    /// Sequences longer than `max_len` are an error unless `truncate` is set.
    pub fn encode(&self, texts: &[String], pairs: Option<&[String]>, max_len: usize, truncate: bool) -> Result<Batch> {
        if texts.is_empty() {
            return Err(BertError::Input { index: 0, problem: "no text to trace".into() });
        }
        if let Some(pairs) = pairs {
            if pairs.len() != texts.len() {
                return Err(BertError::Input {
                    index: 0,
                    problem: format!(
                        "{} text(s) but {} pair text(s); give one sentence B per text",
                        texts.len(),
                        pairs.len()
                    ),
                });
            }
        }
        let specials = if pairs.is_some() { 3 } else { 2 };
        if max_len < specials {
            return Err(BertError::Input {
                index: 0,
                problem: format!(
                    "max_position_embeddings {max_len} of config.json leaves no room for a token: [CLS] and [SEP] alone \
                     take {specials} positions, so no input fits, cut or not"
                ),
            });
        }
        // Truncation is a setting of the tokenizer, so a truncating encode works on a copy; a
        // plain one uses the loaded tokenizer as it is (its vocabulary is tens of thousands of
        // strings, and copying it took most of a 12-token command's tokenizing).
        let truncating;
        let tokenizer = if truncate {
            let mut copy = self.inner.clone();
            copy.with_truncation(Some(TruncationParams {
                max_length: max_len,
                strategy: TruncationStrategy::LongestFirst,
                ..Default::default()
            }))
            .map_err(|e| BertError::Input { index: 0, problem: format!("cannot truncate to {max_len} tokens: {e}") })?;
            truncating = copy;
            &truncating
        } else {
            &self.inner
        };
        let mut encodings = Vec::with_capacity(texts.len());
        for (index, text) in texts.iter().enumerate() {
            if text.trim().is_empty() {
                return Err(BertError::Input { index, problem: "the text is empty".into() });
            }
            // A very long text is refused, or cut, before the tokenizer spends seconds on it:
            // every word with a letter or digit gives at least one token.
            let pair = pairs.map(|pairs| pairs[index].as_str());
            let at_least = specials + pair.into_iter().chain([text.as_str()]).map(count_words).sum::<usize>();
            if at_least > max_len && !truncate {
                return Err(BertError::TooLong {
                    index,
                    tokens: at_least,
                    at_least: true,
                    max: max_len,
                    advice: String::new(),
                });
            }
            let text = if truncate { first_words(text, max_len) } else { text.as_str() };
            let input: EncodeInput = match pair {
                Some(pair) => (text, if truncate { first_words(pair, max_len) } else { pair }).into(),
                None => text.into(),
            };
            let encoding = tokenizer
                .encode(input, true)
                .map_err(|e| BertError::Input { index, problem: format!("cannot tokenize: {e}") })?;
            if encoding.len() > max_len {
                return Err(BertError::TooLong {
                    index,
                    tokens: encoding.len(),
                    at_least: false,
                    max: max_len,
                    advice: String::new(),
                });
            }
            encodings.push(encoding);
        }
        let batch = encodings.len();
        let tokens = encodings.iter().map(|e| e.len()).max().unwrap_or(0);
        let mut ids = Array2::from_elem((batch, tokens), self.pad_id as i64);
        let mut token_type_ids = Array2::zeros((batch, tokens));
        let mut attention_mask = Array2::zeros((batch, tokens));
        for (row, encoding) in encodings.iter().enumerate() {
            for (col, ((&id, &type_id), &mask)) in
                encoding.get_ids().iter().zip(encoding.get_type_ids()).zip(encoding.get_attention_mask()).enumerate()
            {
                ids[[row, col]] = id as i64;
                token_type_ids[[row, col]] = type_id as i64;
                attention_mask[[row, col]] = mask as i64;
            }
        }
        Ok(Batch {
            ids,
            token_type_ids,
            attention_mask,
            tokens: encodings.iter().map(|e| e.get_tokens().to_vec()).collect(),
            pairs: pairs.is_some(),
            labels: Labels::default(),
        })
    }
}

/// Whitespace-separated words with at least one letter or digit: each gives at least one token
/// (its pieces, or `[UNK]`), so this is a lower bound on the tokens of `text`.
fn count_words(text: &str) -> usize {
    text.split_whitespace().filter(|w| w.chars().any(char::is_alphanumeric)).count()
}

/// `text` up to the end of its first `n` words that have a letter or digit (all of it if it has
/// fewer), which hold at least the first `n` tokens: cutting there changes none of them, since
/// the tokenizer splits on whitespace before anything else.
fn first_words(text: &str, n: usize) -> &str {
    let mut words = 0;
    let mut in_word = false;
    let mut counted = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if in_word && counted {
                words += 1;
                if words >= n {
                    return &text[..i];
                }
            }
            in_word = false;
            counted = false;
        } else {
            in_word = true;
            counted |= c.is_alphanumeric();
        }
    }
    text
}

/// `vocab.txt`: one token per line; the line number is the id.
fn parse_vocab(text: &str) -> ahash::AHashMap<String, u32> {
    let mut vocab = ahash::AHashMap::with_capacity(text.lines().count());
    for (id, line) in text.lines().enumerate() {
        // A token listed twice keeps its last id, as HF's `load_vocab` does.
        vocab.insert(line.trim_end_matches('\r').to_string(), id as u32);
    }
    vocab
}

/// `text` with every control character (C0, DEL, C1), the two non-characters XML forbids and
/// the bidirectional controls (U+202A..U+202E, U+2066..U+2069, which reorder the text around
/// them) written out as `\u{7}`: a token is then never a bell, a cursor move, a reversed label
/// or a broken SVG, and reads the same in the terminal, the page and the pictures, which all
/// show tokens through this one function.
pub fn visible(text: &str) -> String {
    let bidi = |c: char| matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    let hidden = |c: char| c.is_control() || c == '\u{fffe}' || c == '\u{ffff}' || bidi(c);
    if !text.chars().any(hidden) {
        return text.to_string();
    }
    text.chars().map(|c| if hidden(c) { format!("\\u{{{:x}}}", c as u32) } else { c.to_string() }).collect()
}
