//! Pretraining examples as BERT makes them (`train --documents`): the input of Google's
//! `create_pretraining_data.py` — one sentence or paragraph a line, a blank line between
//! documents — packed into sequences of up to `max_len` tokens.
//!
//! Each line is tokenized once. A line longer than a sequence holds is cut into pieces at word
//! starts (where a token begins after a space), each at most a sequence long. A document's
//! pieces are then packed in order, as many as fit, into one example; as in Google's script, one
//! example in ten (`SHORT_SEQ_PROB`) aims at a random shorter length, so that the model also
//! sees the short inputs fine-tuning gives it. With `nsp`, the pieces of an example are split
//! at a random piece boundary into sentence A and sentence B, the B that follows A in the
//! document (a single piece is split at a word start in its middle); the step's batch then
//! replaces B with another example's at `nsp_negatives` (`corpus.rs`), drawn anew each time the
//! example is seen, where Google's script draws it once.
//!
//! The examples are made once, from the seed; the masks are drawn anew at every step (dynamic
//! masking, as transformers' `DataCollatorForLanguageModeling`; Google's are static).

use std::path::Path;

use super::corpus::{sha256_hex, Corpus};
use crate::error::{BertError, Result};
use crate::io::tokenizer::BertTokenizer;
use crate::objectives::splitmix::SplitMix64;

/// Google's `short_seq_prob`: the share of examples that aim at a random shorter length.
pub const SHORT_SEQ_PROB: f64 = 0.1;

/// How many lines a thread cuts into pieces at a time.
const LINES_AT_ONCE: usize = 256;

/// A run of a line's text, and how many tokens it holds.
#[derive(Clone, Debug)]
struct Piece {
    text: String,
    tokens: usize,
    /// How many of its tokens can be masked (are not special).
    maskable: usize,
    /// Whether it begins and ends where a word does, so that its tokens alone are the tokens it
    /// had in its line (a word longer than a sequence is cut between its pieces).
    whole: bool,
    /// The line of the file it comes from, counted from 1.
    line: usize,
}

/// The documents of `text` (the contents of the file at `path`): each a list of (line number,
/// line), blank lines between them.
fn documents<'a>(text: &'a str, path: &Path) -> Result<Vec<Vec<(usize, &'a str)>>> {
    let mut documents = vec![Vec::new()];
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            if !documents.last().expect("never empty").is_empty() {
                documents.push(Vec::new());
            }
            continue;
        }
        if line.contains('\t') {
            return Err(BertError::Corpus {
                path: path.into(),
                line: index + 1,
                problem: format!(
                    "a tab: with {} a line is a sentence or a paragraph, and sentence pairs are made from a \
                     document's consecutive lines ({})",
                    super::options::DOCUMENTS,
                    super::options::NSP
                ),
            });
        }
        documents.last_mut().expect("never empty").push((index + 1, line.trim()));
    }
    documents.retain(|d| !d.is_empty());
    Ok(documents)
}

/// `line` cut at word starts into pieces of at most `budget` tokens (a single word longer than
/// that is cut between its tokens).
fn pieces(line: &str, number: usize, tokenizer: &BertTokenizer, budget: usize) -> Result<Vec<Piece>> {
    let tokens = tokenizer.token_spans(line)?;
    let specials = tokenizer.special_ids();
    let spans: Vec<(usize, usize)> = tokens.iter().map(|&(_, span)| span).collect();
    let starts_word = |i: usize| {
        let start = spans[i].0;
        start == 0 || line[..start].ends_with(char::is_whitespace)
    };
    // A token that is not a word piece's continuation (`##…`) begins one of the words BERT's
    // pre-tokenizer splits the text into (at spaces, at punctuation, around each Chinese
    // character): a cut before it leaves every word whole.
    let at_word =
        |i: usize| i == tokens.len() || !tokenizer.id_to_token(tokens[i].0).is_some_and(|t| t.starts_with("##"));
    let mut out = Vec::new();
    let mut first = 0;
    while first < spans.len() {
        let mut end = (first + budget).min(spans.len());
        if end < spans.len() {
            // The last word start after `first` at or before `end`, if there is one.
            if let Some(cut) = (first + 1..=end).rev().find(|&i| starts_word(i)) {
                end = cut;
            }
        }
        let from = spans[first].0;
        let to = if end < spans.len() { spans[end].0 } else { line.len() };
        let text = line[from..to].trim();
        if !text.is_empty() {
            let maskable = tokens[first..end].iter().filter(|(id, _)| !specials.contains(&i64::from(*id))).count();
            let whole = at_word(first) && at_word(end);
            out.push(Piece { text: text.to_string(), tokens: end - first, maskable, whole, line: number });
        }
        first = end;
    }
    Ok(out)
}

impl Corpus {
    /// Reads the documents of the file at `path` and packs them as `batching` says (its
    /// `max_len`, `nsp` and `seed`).
    pub fn read_documents(
        path: &Path,
        tokenizer: &BertTokenizer,
        batching: &super::options::Batching,
    ) -> Result<Corpus> {
        let text = super::corpus::read_text(path)?;
        pack(&text, path, tokenizer, batching.max_len, batching.nsp, batching.seed)
    }
}

/// Packs the documents of `text` into examples of at most `max_len` tokens, `[CLS]` and the
/// `[SEP]`s included: sentence pairs with `nsp`, single texts otherwise.
pub fn pack(
    text: &str,
    path: &Path,
    tokenizer: &BertTokenizer,
    max_len: usize,
    nsp: bool,
    seed: u64,
) -> Result<Corpus> {
    let specials = if nsp { 3 } else { 2 };
    let least = specials + if nsp { 2 } else { 1 };
    if max_len < least {
        return Err(BertError::OptionValue {
            option: super::options::MAX_LEN,
            value: max_len.to_string(),
            accepted: format!("at least {least} to pack documents into sequences"),
        });
    }
    let budget = max_len - specials;
    let mut rng = SplitMix64::new(seed ^ 0xD0C5_0000_0000_0000);
    let documents = documents(text, path)?;
    // Tokenizing the lines is most of the time this takes, and a line's pieces depend on the
    // line alone: they are cut on every thread, then packed in order, so that the examples are
    // the same whatever the thread count (and the first bad line is the first in the file).
    let every_line: Vec<(usize, &str)> = documents.iter().flatten().copied().collect();
    let cut =
        crate::ops::map_in_order(&every_line, LINES_AT_ONCE, |&(number, line)| pieces(line, number, tokenizer, budget));
    let mut cut = cut.into_iter();
    let (mut texts, mut pairs, mut lines) = (Vec::new(), Vec::new(), Vec::new());
    // What the check would tokenize each example again to learn, known from its pieces when
    // they are whole and the tokenizer splits at spaces.
    let mut maskable = Vec::new();
    let known = |pieces: &[Piece]| -> Option<usize> {
        (tokenizer.splits_at_spaces() && pieces.iter().all(|p| p.whole))
            .then(|| pieces.iter().map(|p| p.maskable).sum())
    };
    for document in documents {
        let mut all = Vec::new();
        for _ in &document {
            all.extend(cut.next().expect("a line's pieces")?);
        }
        let mut i = 0;
        while i < all.len() {
            let short = budget >= 2 && rng.uniform() < SHORT_SEQ_PROB;
            let target = if short { 2 + (rng.next_u64() % (budget as u64 - 1)) as usize } else { budget };
            // At least one piece; then as many as fit in the target.
            let mut chunk = vec![all[i].clone()];
            let mut length = all[i].tokens;
            i += 1;
            while i < all.len() && length + all[i].tokens <= target {
                length += all[i].tokens;
                chunk.push(all[i].clone());
                i += 1;
            }
            let line = chunk[0].line;
            let join = |pieces: &[Piece]| pieces.iter().map(|p| p.text.as_str()).collect::<Vec<_>>().join(" ");
            if !nsp {
                texts.push(join(&chunk));
                lines.push(line);
                maskable.push(known(&chunk).map(|a| (a, None)));
                continue;
            }
            let (a, b, counts) = if chunk.len() >= 2 {
                let a_end = 1 + (rng.next_u64() % (chunk.len() as u64 - 1)) as usize;
                let counts = known(&chunk[..a_end]).zip(known(&chunk[a_end..]));
                (join(&chunk[..a_end]), join(&chunk[a_end..]), counts)
            } else {
                match split_in_two(&chunk[0].text) {
                    // Where a piece's tokens fall on either side of the cut is not known here.
                    Some((a, b)) => (a, b, None),
                    // A piece of one word has no sentence B: it is left out of the pairs.
                    None => continue,
                }
            };
            texts.push(a);
            pairs.push(b);
            lines.push(line);
            maskable.push(counts.map(|(a, b)| (a, Some(b))));
        }
    }
    if texts.is_empty() {
        return Err(BertError::Corpus {
            path: path.into(),
            line: 0,
            problem: "no text to train on (the file is empty or blank)".into(),
        });
    }
    Ok(Corpus {
        path: path.into(),
        texts,
        pairs: nsp.then_some(pairs),
        lines,
        sha256: sha256_hex(text),
        classes: None,
        maskable: Some(maskable),
    })
}

/// A text cut at the word start nearest its middle, when it has two words.
fn split_in_two(text: &str) -> Option<(String, String)> {
    let starts: Vec<usize> = text
        .char_indices()
        .filter(|&(i, c)| i > 0 && !c.is_whitespace() && text[..i].ends_with(char::is_whitespace))
        .map(|(i, _)| i)
        .collect();
    let middle = text.len() / 2;
    let cut = *starts.iter().min_by_key(|&&i| i.abs_diff(middle))?;
    Some((text[..cut].trim().to_string(), text[cut..].trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> BertTokenizer {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../golden/tiny");
        BertTokenizer::from_dir(&dir).expect("golden/tiny's tokenizer")
    }

    /// Every example fits, the documents' words come back in order, and no example mixes two
    /// documents.
    #[test]
    fn packing_keeps_every_word_in_order_within_each_document() {
        let tokenizer = tiny();
        let words = |n: usize, tag: &str| (0..n).map(|i| format!("{tag}{}", i % 7)).collect::<Vec<_>>().join(" ");
        let text = format!(
            "{}\n{}\n\n{}\n{}\n",
            words(5, "the cat "),
            words(40, "a dog "),
            words(3, "the bird "),
            words(30, "the cow ")
        );
        for nsp in [false, true] {
            for max_len in [8, 16, 33] {
                let corpus = pack(&text, Path::new("t.txt"), &tokenizer, max_len, nsp, 7).unwrap();
                let mut joined = Vec::new();
                for (index, a) in corpus.texts.iter().enumerate() {
                    let b = corpus.pairs.as_ref().map(|p| p[index].as_str());
                    let batch = tokenizer
                        .encode(std::slice::from_ref(a), b.map(|b| vec![b.to_string()]).as_deref(), 512, false)
                        .unwrap();
                    assert!(
                        batch.ids.ncols() <= max_len,
                        "max_len {max_len}: {a:?} / {b:?} is {} tokens",
                        batch.ids.ncols()
                    );
                    joined.push(a.clone());
                    joined.extend(b.map(str::to_string));
                }
                let first: Vec<&str> = text.split("\n\n").collect();
                let words_of = |t: &str| t.split_whitespace().map(str::to_string).collect::<Vec<_>>();
                let expected: Vec<String> = first.iter().flat_map(|d| words_of(d)).collect();
                let got: Vec<String> = joined.iter().flat_map(|t| words_of(t)).collect();
                if !nsp {
                    assert_eq!(expected, got, "max_len {max_len}");
                } else {
                    // A pair needs two words: a one-word example is left out, nothing else.
                    let mut rest = expected.iter();
                    assert!(got.iter().all(|w| rest.any(|e| e == w)), "max_len {max_len}: out of order");
                    assert!(expected.len() - got.len() <= corpus.len(), "max_len {max_len}: too many left out");
                }
            }
        }
    }

    /// What packing learns of each example's maskable tokens is what tokenizing the example
    /// again gives, and the check reaches the same verdict from it as by tokenizing: on lines
    /// of words, words with punctuation, Chinese characters, accents, special tokens (lines of
    /// nothing else too), runs of Chinese characters with no space, which are cut between
    /// characters, and words of more pieces than a sequence holds, which are cut inside.
    #[test]
    fn what_packing_learns_of_the_tokens_is_what_tokenizing_gives() {
        let tokenizer = tiny();
        let specials = tokenizer.special_ids();
        let pool = [
            "the",
            "rome,",
            "romans.",
            "when",
            "in",
            "do",
            "as",
            "[MASK]",
            "[SEP]",
            "Éte",
            "naïve",
            "中",
            "国人",
            "東京",
            "roads!?",
            "x",
            "unbelievablyunbelievablyunbelievably",
            "(cat)",
            "dog's",
            "中国人中国人中国人中国人中国人中国人",
            "romememememememe",
        ];
        let mut rng = crate::objectives::splitmix::SplitMix64::new(5);
        let mut text = String::new();
        for _ in 0..60 {
            for _ in 0..1 + rng.next_u64() % 4 {
                let n = rng.next_u64() % 30;
                let line: Vec<&str> =
                    (0..n.max(1)).map(|_| pool[(rng.next_u64() % pool.len() as u64) as usize]).collect();
                text += &line.join(" ");
                text.push('\n');
            }
            if rng.next_u64().is_multiple_of(5) {
                text += "[SEP] [MASK]\n";
            }
            text.push('\n');
        }
        for nsp in [false, true] {
            for max_len in [6, 9, 16, 40] {
                let corpus = pack(&text, Path::new("t.txt"), &tokenizer, max_len, nsp, 3).unwrap();
                let known = corpus.maskable.as_ref().expect("packing learns the counts");
                let count = |t: &str| {
                    tokenizer
                        .content_ids(t, 510)
                        .unwrap()
                        .iter()
                        .filter(|&&id| !specials.contains(&i64::from(id)))
                        .count()
                };
                let mut learnt = 0;
                for (index, counts) in known.iter().enumerate() {
                    let Some((a, b)) = counts else { continue };
                    learnt += 1;
                    assert_eq!(*a, count(&corpus.texts[index]), "max_len {max_len}: {:?}", corpus.texts[index]);
                    if let (Some(b), Some(pairs)) = (b, &corpus.pairs) {
                        assert_eq!(*b, count(&pairs[index]), "max_len {max_len}: B {:?}", pairs[index]);
                    }
                }
                // An example is learnt when none of its pieces is cut inside a word: here the
                // long word, and with little room the tiny vocabulary's many-piece words, cut
                // most of them; the lines the course trains on are cut between words.
                assert!(learnt >= 1, "max_len {max_len}: none of {} learnt", known.len());
                let batching = crate::training::options::Batching {
                    batch_size: 4,
                    max_len,
                    mask_prob: 0.15,
                    nsp_negatives: 0.5,
                    seed: 3,
                    documents: true,
                    nsp,
                };
                let tokenized = Corpus { maskable: None, ..corpus.clone() };
                let verdict = |c: &Corpus| c.check(&tokenizer, &batching).map_err(|e| e.to_string());
                assert_eq!(verdict(&corpus), verdict(&tokenized), "max_len {max_len}, nsp {nsp}");
            }
        }
    }

    #[test]
    fn a_tab_is_refused_with_its_line() {
        let error = pack("one\n\ntwo\tthree\n", Path::new("t.txt"), &tiny(), 16, false, 0).unwrap_err();
        assert!(error.to_string().contains("t.txt") && error.to_string().contains('3'), "{error}");
    }
}
