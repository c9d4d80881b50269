//! Chinese words by jieba-rs against Python's jieba (`scripts/jieba_reference.py`), on
//! golden/chinese-small's famous lines and the first 100 poems of its held-out sample, tokenized
//! by its own tokenizer (one token a character): every run of Chinese characters cut into the
//! same words, in the same order.

use std::path::Path;

use bert_core::experiments::segmentation::{Segmentation, BY_JIEBA};
use bert_core::io::tokenizer::BertTokenizer;

#[test]
fn chinese_words_are_the_words_pythons_jieba_cuts() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../golden/chinese-small");
    let tokenizer = BertTokenizer::from_dir(&dir).unwrap();
    let reference: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("jieba.json")).unwrap()).unwrap();
    let lines = reference["lines"].as_array().unwrap();
    assert!(lines.len() >= 100, "expected the reference's lines, found {}", lines.len());
    let (mut failures, mut words) = (Vec::new(), 0);
    for line in lines {
        let text = line["text"].as_str().unwrap().to_string();
        let want: Vec<&str> = line["words"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
        let batch = tokenizer.encode(std::slice::from_ref(&text), None, usize::MAX, false).unwrap();
        let segmentation = Segmentation::asked(&batch.tokens[0], "").unwrap();
        assert_eq!(segmentation.by, BY_JIEBA, "{text}");
        // The words of Chinese characters, in order: the runs jieba cut.
        let chinese = |word: &str| word.chars().all(|c| ('\u{3400}'..='\u{9fff}').contains(&c) || c > '\u{ffff}');
        let got: Vec<&str> = segmentation.words.iter().map(|w| w.text.as_str()).filter(|w| chinese(w)).collect();
        words += want.len();
        if got != want {
            failures
                .push(format!("{text}:\n  expected (Python's jieba) {want:?}\n  got (jieba-rs)            {got:?}"));
        }
        // Every token is in one word, in order.
        let pieces: Vec<usize> = segmentation.words.iter().flat_map(|w| w.pieces.iter().copied()).collect();
        assert_eq!(pieces, (0..batch.tokens[0].len()).collect::<Vec<_>>(), "{text}");
    }
    assert!(failures.is_empty(), "{} of {} lines cut otherwise:\n{}", failures.len(), lines.len(), failures.join("\n"));
    println!("{} lines, {words} words, as Python's jieba cuts them", lines.len());
}

/// English text is WordPiece's words alone; jieba is not asked.
#[test]
fn words_without_chinese_are_wordpieces_words() {
    let tokens: Vec<String> = "[CLS] when in ro ##me [SEP]".split(' ').map(String::from).collect();
    let words = Segmentation::asked(&tokens, "").unwrap();
    assert_eq!(words, Segmentation::wordpiece(&tokens));
}

/// The dictionary bert-trace embeds is jieba 0.42.1's `dict.txt`, byte for byte
/// (crates/bert-core/data/README.md gives its SHA-256).
#[test]
fn the_embedded_dictionary_is_jiebas() {
    use sha2::Digest;
    use std::io::Read;
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("data/README.md")).unwrap();
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(bert_core::experiments::segmentation::JIEBA_DICTIONARY)
        .read_to_end(&mut text)
        .unwrap();
    let sum: String = sha2::Sha256::digest(&text).iter().map(|b| format!("{b:02x}")).collect();
    assert!(
        readme.contains(&format!("`{sum}`")),
        "the dictionary's sha256 is {sum}, which data/README.md does not give"
    );
    assert_eq!(text.iter().filter(|&&b| b == b'\n').count(), 349_046, "lines of the dictionary");
}
