//! A model's tokenizer files read by bert-trace against transformers' `BertTokenizerFast` on the
//! same files: golden/english-small's vocabulary (trained by `scripts/english_vocab.py`) and
//! golden/chinese-small's (one token a character, `scripts/chinese_vocab.py`), each on the
//! held-out sample committed beside it, every line's ids against those
//! `scripts/tokens_reference.py` wrote (`tokens.json`), line by line, with no truncation.

use std::path::Path;

use bert_core::io::tokenizer::BertTokenizer;

/// Every line of `text` of the model `model` (under golden/) tokenized by bert-trace, against the
/// ids and tokens of `reference` (made by scripts/tokens_reference.py from the same files).
fn check(model: &str, text: &str, reference: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../golden").join(model);
    let tokenizer = BertTokenizer::from_dir(&dir).unwrap();
    let reference: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join(reference)).unwrap()).unwrap();
    // Every line but the empty ones (the blank lines between documents), as the script reads it.
    let lines: Vec<String> =
        std::fs::read_to_string(dir.join(text)).unwrap().lines().filter(|l| !l.is_empty()).map(String::from).collect();
    let examples = reference["examples"].as_array().unwrap();
    assert_eq!(examples.len(), lines.len(), "{model}: lines of {text} against the reference's");
    let mut failures = Vec::new();
    let mut ids = 0;
    for (index, (line, example)) in lines.iter().zip(examples).enumerate() {
        assert_eq!(example["text"].as_str(), Some(line.as_str()), "{model}: line {} is the reference's", index + 1);
        let want: Vec<i64> = example["ids"].as_array().unwrap().iter().map(|id| id.as_i64().unwrap()).collect();
        let batch = tokenizer.encode(std::slice::from_ref(line), None, usize::MAX, false).unwrap();
        let got: Vec<i64> = batch.ids.row(0).to_vec();
        ids += want.len();
        if got != want {
            let at = got.iter().zip(&want).position(|(g, w)| g != w).unwrap_or(got.len().min(want.len()));
            failures.push(format!(
                "{model}: line {}: ids part at token {at}: expected {:?} (BertTokenizerFast), got {:?} ({:?})",
                index + 1,
                &example["tokens"].as_array().unwrap()[at.min(want.len().saturating_sub(1))],
                got.get(at),
                batch.tokens[0].get(at)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("{model}: {} lines, {ids} ids, as BertTokenizerFast gives them", lines.len());
}

#[test]
fn the_course_model_tokenizes_its_held_out_sample_as_transformers_does() {
    check("english-small", "heldout-sample.txt", "tokens.json");
}

/// The Chinese course model: BERT's Chinese tokenisation (a space around every CJK character),
/// no lowercasing, and `[UNK]` for a character its vocabulary lacks, on held-out poems.
#[test]
fn the_chinese_course_model_tokenizes_its_held_out_sample_as_transformers_does() {
    check("chinese-small", "heldout-sample.txt", "tokens.json");
}
