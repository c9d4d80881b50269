//! The tokenizer against a tiny vocab.txt (or tokenizer.json) written by each test: the input
//! layout `[CLS] A [SEP] B [SEP]`, batch padding, casing and accents, CJK, special tokens,
//! WordPiece pieces, the padding and truncation that tokenizer.json files carry, and the errors.

use crate::support;

use std::path::Path;

use bert_core::io::tokenizer::BertTokenizer;
use bert_core::BertError;
use support::{assert_mentions, Checkpoint};
use tempfile::TempDir;

/// [PAD] deliberately not at id 0, so that the pad id is looked up rather than assumed.
const VOCAB: &[&str] = &[
    "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[PAD]", "the", "cat", "sat", "on", "mat", "a", "dog", "##s", "##ing", "run",
    "cafe", "Cat", "The", "café", ".", ",", "!", "中", "文", "hello", "world", "naive",
];

fn strings(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|s| s.to_string()).collect()
}

fn id(token: &str) -> i64 {
    VOCAB.iter().position(|t| *t == token).unwrap_or_else(|| panic!("{token} not in VOCAB")) as i64
}

/// A directory with vocab.txt (and the given extra files).
fn dir_with(vocab: &[&str], files: &[(&str, &[u8])]) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut text = vocab.join("\n");
    text.push('\n');
    std::fs::write(dir.path().join("vocab.txt"), text).unwrap();
    for (name, bytes) in files {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    dir
}

fn load(dir: &Path) -> BertTokenizer {
    BertTokenizer::from_dir(dir).unwrap_or_else(|e| panic!("loading the tokenizer failed: {e}"))
}

fn tokenizer() -> (TempDir, BertTokenizer) {
    let dir = dir_with(VOCAB, &[]);
    let tok = load(dir.path());
    (dir, tok)
}

/// The tokens of one text (no pair), with [CLS] and [SEP].
fn tokens(tok: &BertTokenizer, text: &str) -> Vec<String> {
    let batch = tok.encode(&strings(&[text]), None, 64, false).unwrap_or_else(|e| panic!("encode {text:?}: {e}"));
    batch.tokens[0].clone()
}

/// Checks each (text, expected tokens without [CLS]/[SEP]) and reports every mismatch.
fn check_tokens(tok: &BertTokenizer, cases: &[(&str, &[&str])]) {
    let mut failures = Vec::new();
    for (text, want) in cases {
        let mut expected = vec!["[CLS]".to_string()];
        expected.extend(want.iter().map(|s| s.to_string()));
        expected.push("[SEP]".into());
        let got = tokens(tok, text);
        if got != expected {
            failures.push(format!("{text:?}:\n  expected {expected:?}\n  got      {got:?}"));
        } else {
            println!("ok: {text:?} -> {got:?}");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Layout and padding

#[test]
fn a_pair_is_cls_a_sep_b_sep_with_type_ids() {
    let (_dir, tok) = tokenizer();
    let batch = tok.encode(&strings(&["the cat"]), Some(&strings(&["a dog ran"])), 64, false).unwrap();
    // "ran" is not in the vocabulary (only "run" is): [UNK].
    let want_tokens = ["[CLS]", "the", "cat", "[SEP]", "a", "dog", "[UNK]", "[SEP]"];
    assert_eq!(batch.tokens[0], want_tokens);
    let ids: Vec<i64> = want_tokens.iter().map(|t| id(t)).collect();
    assert_eq!(batch.ids.row(0).to_vec(), ids);
    assert_eq!(batch.token_type_ids.row(0).to_vec(), [0, 0, 0, 0, 1, 1, 1, 1]);
    assert_eq!(batch.attention_mask.row(0).to_vec(), [1; 8]);
    assert_eq!(batch.dims(), (1, 8));
}

#[test]
fn a_batch_pads_to_its_longest_with_the_pad_id_and_mask_zero() {
    let (_dir, tok) = tokenizer();
    let texts = strings(&["the cat sat on the mat", "a dog", "hello world !"]);
    let batch = tok.encode(&texts, None, 64, false).unwrap();
    let lengths = [8, 4, 5];
    assert_eq!(batch.dims(), (3, 8), "padded to the longest (8), not to max_len");
    let pad = id("[PAD]");
    assert_eq!(pad, 4);
    for (row, &len) in lengths.iter().enumerate() {
        assert_eq!(batch.tokens[row].len(), len, "tokens of row {row} are not padded");
        for col in 0..8 {
            let real = col < len;
            assert_eq!(batch.attention_mask[[row, col]], real as i64, "mask [{row},{col}]");
            if !real {
                assert_eq!(batch.ids[[row, col]], pad, "pad id at [{row},{col}]");
                assert_eq!(batch.token_type_ids[[row, col]], 0, "pad type id at [{row},{col}]");
            }
        }
        assert_eq!(batch.ids[[row, len - 1]], id("[SEP]"), "row {row} ends with [SEP]");
    }
}

#[test]
fn a_pair_batch_pads_with_type_id_zero() {
    let (_dir, tok) = tokenizer();
    let batch = tok.encode(&strings(&["the cat", "a"]), Some(&strings(&["sat on the mat", "dog"])), 64, false).unwrap();
    assert_eq!(batch.dims(), (2, 9));
    assert_eq!(batch.token_type_ids.row(0).to_vec(), [0, 0, 0, 0, 1, 1, 1, 1, 1]);
    assert_eq!(batch.token_type_ids.row(1).to_vec(), [0, 0, 0, 1, 1, 0, 0, 0, 0]);
    assert_eq!(batch.attention_mask.row(1).to_vec(), [1, 1, 1, 1, 1, 0, 0, 0, 0]);
}

#[test]
fn a_single_input_is_never_padded() {
    let (_dir, tok) = tokenizer();
    for text in ["a", "the cat sat", "hello world"] {
        let batch = tok.encode(&strings(&[text]), None, 64, false).unwrap();
        let n = batch.tokens[0].len();
        assert_eq!(batch.dims(), (1, n), "{text:?}");
        assert!(batch.attention_mask.iter().all(|&m| m == 1), "{text:?}: no padding");
        assert!(!batch.ids.iter().any(|&i| i == id("[PAD]")), "{text:?}: no [PAD]");
    }
    // Equal lengths: nothing to pad either.
    let batch = tok.encode(&strings(&["the cat", "a dog"]), None, 64, false).unwrap();
    assert_eq!(batch.dims(), (2, 4));
    assert!(batch.attention_mask.iter().all(|&m| m == 1));
}

// ---------------------------------------------------------------------------------------------
// Normalization and WordPiece

#[test]
fn uncased_by_default_lowercases_and_strips_accents() {
    let (_dir, tok) = tokenizer();
    check_tokens(
        &tok,
        &[
            ("THE Cat", &["the", "cat"]),
            ("Café", &["cafe"]),
            ("CAFÉ", &["cafe"]),
            // Decomposed: "e" + combining acute.
            ("Cafe\u{301}", &["cafe"]),
            ("naïve", &["naive"]),
            ("  the\tcat\n", &["the", "cat"]),
        ],
    );
}

#[test]
fn do_lower_case_false_keeps_case_and_accents() {
    let config = br#"{"do_lower_case": false, "model_max_length": 512, "tokenize_chinese_chars": true,
        "strip_accents": null, "cls_token": "[CLS]", "tokenizer_class": "BertTokenizer"}"#;
    let dir = dir_with(VOCAB, &[("tokenizer_config.json", config)]);
    let tok = load(dir.path());
    check_tokens(
        &tok,
        &[("The Cat", &["The", "Cat"]), ("the cat", &["the", "cat"]), ("café", &["café"]), ("CAT", &["[UNK]"])],
    );
}

#[test]
fn tokenizer_config_with_only_other_fields_stays_uncased() {
    let config = br#"{"model_max_length": 512, "padding_side": "right", "do_basic_tokenize": true}"#;
    let dir = dir_with(VOCAB, &[("tokenizer_config.json", config)]);
    check_tokens(&load(dir.path()), &[("The Café", &["the", "cafe"])]);
}

#[test]
fn a_corrupt_tokenizer_config_is_an_error() {
    let dir = dir_with(VOCAB, &[("tokenizer_config.json", b"{do_lower_case: no")]);
    let err = BertTokenizer::from_dir(dir.path()).err().expect("an error");
    println!("{err}");
    assert!(matches!(err, BertError::Tokenizer { .. }), "got {err:?}");
    assert_mentions(&err.to_string(), &["tokenizer_config.json", "not a valid"]);
    // The message is about that file, not vocab.txt.
    assert!(!err.to_string().contains("vocab.txt"), "{err}");
}

#[test]
fn wordpiece_cjk_specials_and_unknown_words() {
    let (_dir, tok) = tokenizer();
    check_tokens(
        &tok,
        &[
            // Every CJK character is its own word.
            ("中文", &["中", "文"]),
            ("hello中文world", &["hello", "中", "文", "world"]),
            // [MASK] is one token, in any position, even next to punctuation.
            ("the [MASK] sat", &["the", "[MASK]", "sat"]),
            ("[MASK].", &["[MASK]", "."]),
            // Words not in the vocabulary, and words that cannot be split into its pieces.
            ("zebra", &["[UNK]"]),
            ("the zebra sat", &["the", "[UNK]", "sat"]),
            ("cats", &["cat", "##s"]),
            ("dogs running", &["dog", "##s", "[UNK]"]),
            ("cat,dog!", &["cat", ",", "dog", "!"]),
        ],
    );
}

#[test]
fn ids_and_decoding_agree_with_the_vocabulary() {
    let (_dir, tok) = tokenizer();
    for (i, token) in VOCAB.iter().enumerate() {
        assert_eq!(tok.token_to_id(token), Some(i as u32), "{token}");
        assert_eq!(tok.id_to_token(i as u32).as_deref(), Some(*token));
    }
    let batch = tok.encode(&strings(&["the cats sat"]), None, 64, false).unwrap();
    let ids: Vec<u32> = batch.ids.iter().map(|&i| i as u32).collect();
    assert_eq!(tok.decode(&ids), "the cats sat");
}

#[test]
fn a_token_listed_twice_keeps_its_last_id() {
    // HF's `load_vocab` fills a dict line by line, so the later line wins.
    let mut vocab: Vec<&str> = VOCAB.to_vec();
    vocab.push("cat");
    let dir = dir_with(&vocab, &[]);
    let tok = load(dir.path());
    assert_eq!(tok.token_to_id("cat"), Some(VOCAB.len() as u32));
    let batch = tok.encode(&strings(&["the cat"]), None, 64, false).unwrap();
    assert_eq!(batch.ids.row(0).to_vec(), vec![id("[CLS]"), id("the"), VOCAB.len() as i64, id("[SEP]")]);
}

#[test]
fn windows_line_endings_in_vocab_txt() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("vocab.txt"), VOCAB.join("\r\n")).unwrap();
    let tok = load(dir.path());
    assert_eq!(tok.token_to_id("[SEP]"), Some(2));
    check_tokens(&tok, &[("the cat", &["the", "cat"])]);
}

// ---------------------------------------------------------------------------------------------
// tokenizer.json

/// A tokenizer.json like those on the Hub for BERT, with fixed padding to 128 and truncation
/// to 5 switched on, serialized by the tokenizers crate itself.
fn tokenizer_json_with_padding_and_truncation() -> String {
    use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
    use tokenizers::models::wordpiece::WordPiece;
    use tokenizers::normalizers::bert::BertNormalizer;
    use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
    use tokenizers::processors::bert::BertProcessing;
    use tokenizers::{AddedToken, PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

    let vocab: ahash::AHashMap<String, u32> =
        VOCAB.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)).collect();
    let model = WordPiece::builder().vocab(vocab).unk_token("[UNK]".into()).build().unwrap();
    let mut tok = Tokenizer::new(model);
    tok.with_normalizer(Some(BertNormalizer::new(true, true, None, true)));
    tok.with_pre_tokenizer(Some(BertPreTokenizer));
    tok.with_post_processor(Some(BertProcessing::new(
        ("[SEP]".into(), id("[SEP]") as u32),
        ("[CLS]".into(), id("[CLS]") as u32),
    )));
    tok.with_decoder(Some(WordPieceDecoder::default()));
    let specials: Vec<AddedToken> =
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"].iter().map(|t| AddedToken::from(t.to_string(), true)).collect();
    tok.add_special_tokens(&specials);
    tok.with_padding(Some(PaddingParams {
        strategy: PaddingStrategy::Fixed(128),
        pad_id: id("[PAD]") as u32,
        pad_token: "[PAD]".into(),
        ..Default::default()
    }));
    tok.with_truncation(Some(TruncationParams { max_length: 5, ..Default::default() })).unwrap();
    // Check that the file really carries both, so the test below means something.
    let probe = tok.encode("the cat sat on the mat", true).unwrap();
    assert_eq!(probe.len(), 128, "the test tokenizer.json pads to 128");
    assert_eq!(probe.get_attention_mask().iter().filter(|&&m| m == 1).count(), 5, "and truncates to 5");
    tok.to_string(true).unwrap()
}

#[test]
fn tokenizer_json_padding_and_truncation_are_ignored() {
    let json = tokenizer_json_with_padding_and_truncation();
    assert!(json.contains("\"Fixed\"") && json.contains("\"max_length\""), "{json}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), &json).unwrap();
    let from_json = load(dir.path());
    assert!(from_json.source().ends_with("tokenizer.json"));

    let (_vdir, from_vocab) = tokenizer();
    let texts = strings(&["the cat sat on the mat", "a dog"]);
    let pairs = strings(&["hello world", "the [MASK] sat"]);
    for pairs in [None, Some(&pairs[..])] {
        let got = from_json.encode(&texts, pairs, 64, false).unwrap();
        let want = from_vocab.encode(&texts, pairs, 64, false).unwrap();
        assert_eq!(got, want, "tokenizer.json and vocab.txt disagree (pairs: {})", pairs.is_some());
        let longest = got.tokens.iter().map(Vec::len).max().unwrap();
        assert_eq!(got.dims(), (2, longest), "not padded to 128, not cut to 5");
        assert!(longest > 5);
    }
    let single = from_json.encode(&strings(&["the cat"]), None, 64, false).unwrap();
    assert_eq!(single.dims(), (1, 4), "a single input is not padded to 128");
}

#[test]
fn tokenizer_json_is_preferred_over_vocab_txt() {
    // The vocab.txt here lacks [CLS]; it must not even be read when tokenizer.json is present.
    let json = tokenizer_json_with_padding_and_truncation();
    let dir = dir_with(&["[UNK]", "[SEP]", "oops"], &[("tokenizer.json", json.as_bytes())]);
    let tok = load(dir.path());
    assert_eq!(tok.token_to_id("[CLS]"), Some(1));
}

#[test]
fn tokenizer_config_decides_the_normalizer_of_tokenizer_json() {
    // The tokenizer.json lowercases, splits CJK and strips accents (bert-base-uncased's settings).
    let json = tokenizer_json_with_padding_and_truncation();
    // (tokenizer_config.json or none, text, expected tokens, the field a note must name or "")
    let cases: &[(Option<&str>, &str, &[&str], &str)] = &[
        (None, "The Café", &["the", "cafe"], ""),
        (Some(r#"{}"#), "The Café", &["the", "cafe"], ""),
        (Some(r#"{"do_lower_case": true}"#), "The Café", &["the", "cafe"], ""),
        (Some(r#"{"do_lower_case": false}"#), "The café", &["The", "café"], "do_lower_case"),
        (
            Some(r#"{"do_lower_case": false, "tokenizer_class": "BertTokenizerFast"}"#),
            "The café",
            &["The", "café"],
            "do_lower_case",
        ),
        (Some(r#"{"do_lower_case": false, "strip_accents": true}"#), "The Café", &["The", "[UNK]"], "strip_accents"),
        (Some(r#"{"do_lower_case": false, "tokenizer_class": "MyTokenizer"}"#), "The Café", &["the", "cafe"], ""),
        (Some(r#"{"tokenize_chinese_chars": false}"#), "中文", &["[UNK]"], "tokenize_chinese_chars"),
        (Some(r#"{"tokenize_chinese_chars": true}"#), "中文", &["中", "文"], ""),
    ];
    let mut failures = Vec::new();
    for (config, text, want, note) in cases {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), &json).unwrap();
        if let Some(config) = config {
            std::fs::write(dir.path().join("tokenizer_config.json"), config).unwrap();
        }
        let tok = load(dir.path());
        let mut expected = vec!["[CLS]".to_string()];
        expected.extend(want.iter().map(|s| s.to_string()));
        expected.push("[SEP]".into());
        let got = tokens(&tok, text);
        if got != expected {
            failures.push(format!("{config:?} {text:?}:\n  expected {expected:?}\n  got      {got:?}"));
        }
        let notes = tok.notes().join(" | ");
        let wanted = !note.is_empty();
        let noted = wanted && notes.contains(note) && notes.contains("tokenizer_config.json");
        if noted != wanted || (!wanted && !notes.is_empty()) {
            failures.push(format!("{config:?}: expected a note naming `{note}`, got notes: {notes:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_corrupt_tokenizer_config_beside_tokenizer_json_is_named() {
    let json = tokenizer_json_with_padding_and_truncation();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), &json).unwrap();
    std::fs::write(dir.path().join("tokenizer_config.json"), "{ not json").unwrap();
    let err = BertTokenizer::from_dir(dir.path()).err().expect("an error");
    assert!(matches!(err, BertError::Tokenizer { .. }), "got {err:?}");
    assert_mentions(&err.to_string(), &["tokenizer_config.json", "not a valid tokenizer_config.json"]);
}

// ---------------------------------------------------------------------------------------------
// Length

#[test]
fn an_input_longer_than_max_len_is_a_typed_error_with_its_length_and_the_limit() {
    let (_dir, tok) = tokenizer();
    let texts = strings(&["a dog", "the cat sat on the mat"]); // 4 and 8 tokens
    let err = tok.encode(&texts, None, 6, false).expect_err("too long");
    let text = err.to_string();
    println!("{text}");
    match &err {
        BertError::TooLong { index, tokens, max, .. } => {
            assert_eq!((*index, *tokens, *max), (1, 8, 6), "the second text is too long")
        }
        other => panic!("expected BertError::TooLong, got {other:?}"),
    }
    // Whether the caller can cut a text is the caller's to say: the library names no option.
    assert_mentions(&text, &["input 1", "8 tokens", "6"]);
    assert!(!text.contains("truncate"), "{text}");
    // Exactly max_len is fine.
    assert!(tok.encode(&texts, None, 8, false).is_ok());
}

#[test]
fn truncate_cuts_to_max_len_and_keeps_the_separators() {
    let (_dir, tok) = tokenizer();
    let batch = tok.encode(&strings(&["the cat sat on the mat", "a dog"]), None, 6, true).unwrap();
    assert_eq!(batch.dims(), (2, 6));
    assert_eq!(batch.tokens[0], ["[CLS]", "the", "cat", "sat", "on", "[SEP]"]);
    assert_eq!(batch.tokens[1], ["[CLS]", "a", "dog", "[SEP]"], "short inputs are untouched");

    // A pair: the longer sentence loses tokens first, and both [SEP] stay.
    let batch = tok.encode(&strings(&["the cat sat on the mat"]), Some(&strings(&["a dog"])), 8, true).unwrap();
    assert_eq!(batch.tokens[0], ["[CLS]", "the", "cat", "sat", "[SEP]", "a", "dog", "[SEP]"]);
    assert_eq!(batch.token_type_ids.row(0).to_vec(), [0, 0, 0, 0, 0, 1, 1, 1]);
}

#[test]
fn the_model_limits_inputs_to_max_position_embeddings() {
    // Through BertModel::encode: the limit is config.json's max_position_embeddings (16).
    let (_dir, model) = Checkpoint::tiny().load();
    let long = vec!["the cat sat on the mat ".repeat(3)]; // 18 words + 2 specials
    let err = model.encode(&long, None, false).expect_err("too long");
    assert_mentions(&err.to_string(), &["20 tokens", "max_position_embeddings", "16"]);
    let batch = model.encode(&long, None, true).unwrap();
    assert_eq!(batch.dims(), (1, 16));
    assert!(model.trace(&batch, &mut bert_core::pass::Discard, None).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Bad files and bad inputs

#[test]
fn tokenizer_file_errors_are_clear() {
    let empty = tempfile::tempdir().unwrap();
    let corrupt = dir_with(VOCAB, &[("tokenizer.json", b"{\"version\": \"1.0\", \"model\": ")]);
    let no_cls = dir_with(&["[PAD]", "[UNK]", "[SEP]", "[MASK]", "the"], &[]);
    let no_sep = dir_with(&["[PAD]", "[UNK]", "[CLS]", "[MASK]", "the"], &[]);
    let no_unk = dir_with(&["[PAD]", "[CLS]", "[SEP]", "[MASK]", "the"], &[]);
    let not_utf8 = tempfile::tempdir().unwrap();
    std::fs::write(not_utf8.path().join("vocab.txt"), b"[CLS]\n\xff\xfe\n").unwrap();
    let cases: [(&str, &Path, &[&str]); 6] = [
        ("no tokenizer files", empty.path(), &["tokenizer.json", "vocab.txt"]),
        ("corrupt tokenizer.json", corrupt.path(), &["tokenizer.json", "not a valid"]),
        ("vocab without [CLS]", no_cls.path(), &["vocab.txt", "[CLS]"]),
        ("vocab without [SEP]", no_sep.path(), &["vocab.txt", "[SEP]"]),
        ("vocab without [UNK]", no_unk.path(), &["vocab.txt", "[UNK]"]),
        ("vocab.txt not UTF-8", not_utf8.path(), &["vocab.txt", "UTF-8"]),
    ];
    let mut failures = Vec::new();
    for (label, dir, needles) in cases {
        match BertTokenizer::from_dir(dir) {
            Ok(_) => failures.push(format!("{label}: loaded")),
            Err(err) => {
                let text = err.to_string();
                println!("{label}: {text}");
                if !matches!(err, BertError::Tokenizer { .. }) {
                    failures.push(format!("{label}: expected BertError::Tokenizer, got {err:?}"));
                }
                for needle in needles {
                    if !text.contains(needle) {
                        failures.push(format!("{label}: expected `{needle}` in: {text}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_model_dir_without_tokenizer_files_fails_to_load() {
    let ck = Checkpoint::tiny();
    let dir = ck.write();
    std::fs::remove_file(dir.path().join("vocab.txt")).unwrap();
    let err = bert_core::BertModel::load(dir.path()).err().expect("an error");
    assert!(matches!(err, BertError::Tokenizer { .. }), "got {err:?}");
    assert_mentions(&err.to_string(), &["tokenizer.json", "vocab.txt"]);
}

#[test]
fn bad_inputs_are_errors() {
    let (_dir, tok) = tokenizer();
    /// label, texts, pairs, the index the error names, what its message mentions
    type Case = (&'static str, Vec<String>, Option<Vec<String>>, usize, &'static [&'static str]);
    let cases: Vec<Case> = vec![
        ("no texts", vec![], None, 0, &["no text"]),
        ("empty text", strings(&[""]), None, 0, &["empty"]),
        ("whitespace only", strings(&[" \t\n"]), None, 0, &["empty"]),
        ("second text empty", strings(&["the cat", ""]), None, 1, &["input 1", "empty"]),
        ("fewer pairs", strings(&["the cat", "a dog"]), Some(strings(&["hello"])), 0, &["2 text(s)", "1 pair"]),
        ("more pairs", strings(&["the cat"]), Some(strings(&["a", "b", "c"])), 0, &["1 text(s)", "3 pair"]),
    ];
    let mut failures = Vec::new();
    for (label, texts, pairs, want_index, needles) in cases {
        match tok.encode(&texts, pairs.as_deref(), 64, false) {
            Ok(batch) => failures.push(format!("{label}: encoded to {:?}", batch.tokens)),
            Err(err) => {
                let text = err.to_string();
                println!("{label}: {text}");
                match &err {
                    BertError::Input { index, .. } if *index == want_index => {}
                    other => failures.push(format!("{label}: expected Input at {want_index}, got {other:?}")),
                }
                for needle in needles {
                    if !text.contains(needle) {
                        failures.push(format!("{label}: expected `{needle}` in: {text}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
