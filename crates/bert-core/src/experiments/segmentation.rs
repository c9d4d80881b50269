//! Words instead of word pieces: which of a sequence's tokens make one word, and a token × token
//! matrix read word × word. A learner thinks "Rome", not "ro ##me"; in Chinese a word is several
//! characters, each its own token in bert-base-chinese.
//!
//! The words come from WordPiece's `##` (a piece that starts with it continues the word before
//! it) and, for Chinese, from jieba-rs (the Rust port of jieba, with jieba 0.42.1's own dictionary
//! of 349,046 words): a run of Chinese characters, each its own token, is cut into words as
//! `jieba.cut(text)` cuts it (its HMM on, jieba's default). Or they come from the user's own
//! segmentation: words separated by spaces, whose characters must be the tokens' in order.
//! Special tokens (`[CLS]`, `[SEP]`, `[MASK]`, `[UNK]`, ...) are words of their own.
//!
//! A matrix of attention (rows read columns) is read by word as Clark et al. (2019) do: what a
//! word reads is the mean of its pieces' rows, and what is read of a word is the sum over its
//! pieces' columns, so that every row still sums to 1.

use std::sync::OnceLock;

use serde::Serialize;

use crate::words::Opt;

/// The option that asks for words, in every command that reads by words.
pub const WORDS: Opt = Opt("words");

/// One word: its text and the tokens (indices into the tokens it was made from) that spell it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Word {
    pub text: String,
    pub pieces: Vec<usize>,
}

/// A sequence's tokens grouped into words, in order; every token in exactly one word.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Segmentation {
    /// Where the words came from: [`BY_WORDPIECE`], [`BY_JIEBA`] or [`BY_GIVEN`].
    pub by: &'static str,
    pub words: Vec<Word>,
}

/// Words from WordPiece's `##` alone.
pub const BY_WORDPIECE: &str = "wordpiece";
/// Words from WordPiece's `##`, and Chinese characters' words from jieba-rs.
pub const BY_JIEBA: &str = "wordpiece; Chinese by jieba-rs 0.11 with jieba 0.42.1's dictionary";
/// The words the user gave.
pub const BY_GIVEN: &str = "given";

/// BERT's unknown token.
const UNK: &str = "[UNK]";

/// Whether `c` is a CJK ideograph, which BERT's tokenizer makes a token of its own (the ranges
/// of `BasicTokenizer._is_chinese_char`).
fn is_cjk(c: char) -> bool {
    matches!(u32::from(c),
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F | 0x2B740..=0x2B81F
        | 0x2B820..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

/// Whether a token is one of BERT's special tokens, `[CLS]` and the like, a word of its own.
fn is_special(token: &str) -> bool {
    token.len() > 2 && token.starts_with('[') && token.ends_with(']')
}

impl Segmentation {
    /// Words by WordPiece: a token that starts with `##` continues the word before it.
    pub fn wordpiece(tokens: &[String]) -> Segmentation {
        let mut words: Vec<Word> = Vec::new();
        for (index, token) in tokens.iter().enumerate() {
            match (token.strip_prefix("##"), words.last_mut()) {
                (Some(rest), Some(word)) if !is_special(&word.text) => {
                    word.text.push_str(rest);
                    word.pieces.push(index);
                }
                _ => words.push(Word { text: token.clone(), pieces: vec![index] }),
            }
        }
        Segmentation { by: BY_WORDPIECE, words }
    }

    /// The words `words` asks for: "" for the automatic ones ([`Segmentation::automatic`]),
    /// else the words given ([`Segmentation::given`]). Err: where the words given and the tokens
    /// part.
    pub fn asked(tokens: &[String], words: &str) -> Result<Segmentation, String> {
        match words {
            "" => Ok(Segmentation::automatic(tokens)),
            given => Segmentation::given(tokens, given),
        }
    }

    /// Words by WordPiece, and each run of Chinese characters (consecutive tokens that are one
    /// CJK character each) cut into words by jieba-rs, as `jieba.cut(run)` cuts it. An `[UNK]`
    /// ends a run: the character it stands for is not in the tokens.
    pub fn automatic(tokens: &[String]) -> Segmentation {
        let pieces = Segmentation::wordpiece(tokens);
        let is_character = |word: &Word| {
            let mut chars = word.text.chars();
            matches!((chars.next(), chars.next()), (Some(c), None) if is_cjk(c))
        };
        if !pieces.words.iter().any(is_character) {
            return pieces;
        }
        let mut words = Vec::with_capacity(pieces.words.len());
        let mut run: Vec<Word> = Vec::new();
        for word in pieces.words {
            if is_character(&word) {
                run.push(word);
            } else {
                cut_run(&mut run, &mut words);
                words.push(word);
            }
        }
        cut_run(&mut run, &mut words);
        Segmentation { by: BY_JIEBA, words }
    }

    /// The words `given` (separated by white space), matched to `tokens` character by character
    /// (case aside, `##` dropped); the special tokens are words of their own and are not given.
    /// Err: where the words and the tokens part.
    pub fn given(tokens: &[String], given: &str) -> Result<Segmentation, String> {
        let plain = |text: &str| text.trim_start_matches("##").to_lowercase();
        let mut words = Vec::new();
        let mut wanted = given.split_whitespace().map(|w| (w, plain(w)));
        let mut current: Option<(&str, String, Word)> = None;
        for (index, token) in tokens.iter().enumerate() {
            if is_special(token) && token != UNK && current.is_none() {
                // A special token the user wrote as a word (`[MASK]`) is matched like any word.
                let next = wanted.clone().next();
                if next.is_some_and(|(w, _)| w == token) {
                    wanted.next();
                }
                words.push(Word { text: token.clone(), pieces: vec![index] });
                continue;
            }
            // The word this token continues, or the next one given.
            let (word, rest, mut built) = match current.take() {
                Some(open) => open,
                None => {
                    let Some((word, text)) = wanted.next() else {
                        return Err(format!("the words end before the tokens do, at token {index} `{token}`"));
                    };
                    (word, text, Word { text: word.to_string(), pieces: Vec::new() })
                }
            };
            let rest = match token == UNK {
                // An unknown token stands for one character of a Chinese word (each is its own
                // token), or for the rest of a word in an alphabet (WordPiece gives up on a
                // whole word).
                true => {
                    let mut chars = rest.chars();
                    match chars.next() {
                        Some(c) if is_cjk(c) => chars.as_str().to_string(),
                        _ => String::new(),
                    }
                }
                false => {
                    let piece = plain(token);
                    let Some(left) = rest.strip_prefix(piece.as_str()) else {
                        return Err(format!("the word `{word}` does not continue with token {index} `{token}`"));
                    };
                    left.to_string()
                }
            };
            built.pieces.push(index);
            match rest.is_empty() {
                true => words.push(built),
                false => current = Some((word, rest, built)),
            }
        }
        if let Some((word, _, _)) = current {
            return Err(format!("the tokens end inside the word `{word}`"));
        }
        if let Some((word, _)) = wanted.next() {
            return Err(format!("the word `{word}` is beyond the tokens"));
        }
        Ok(Segmentation { by: BY_GIVEN, words })
    }

    /// `matrix` (token rows reading token columns, over the tokens this was made from) read word
    /// by word: a word's row the mean of its pieces' rows, summed over each word's columns.
    pub fn by_words(&self, matrix: &[Vec<f64>]) -> Vec<Vec<f64>> {
        self.words
            .iter()
            .map(|reader| {
                let n = reader.pieces.len() as f64;
                self.words
                    .iter()
                    .map(|read| {
                        let total: f64 =
                            reader.pieces.iter().map(|&r| read.pieces.iter().map(|&c| matrix[r][c]).sum::<f64>()).sum();
                        total / n
                    })
                    .collect()
            })
            .collect()
    }

    /// The word that holds token `index`.
    pub fn word_of(&self, index: usize) -> usize {
        self.words.iter().position(|w| w.pieces.contains(&index)).unwrap_or(0)
    }
}

/// The Chinese characters of `run` (one token each, in order) cut into words by jieba-rs and
/// added to `words`; `run` is left empty.
fn cut_run(run: &mut Vec<Word>, words: &mut Vec<Word>) {
    if run.is_empty() {
        return;
    }
    let text: String = run.iter().map(|w| w.text.as_str()).collect();
    let mut characters = run.drain(..);
    for cut in jieba().cut(&text, true) {
        let mut word = Word { text: String::new(), pieces: Vec::new() };
        for character in characters.by_ref().take(cut.word.chars().count()) {
            word.text.push_str(&character.text);
            word.pieces.extend(character.pieces);
        }
        if !word.pieces.is_empty() {
            words.push(word);
        }
    }
    // jieba's words spell the text they cut, so no character is left; were one left, it would
    // be a word of its own rather than lost.
    words.extend(characters);
}

/// jieba's dictionary, as Python's jieba 0.42.1 ships it, gzipped (`data/README.md`).
pub const JIEBA_DICTIONARY: &[u8] = include_bytes!("../../data/jieba-dict.txt.gz");

/// jieba-rs with jieba's dictionary, loaded once, on first use.
fn jieba() -> &'static jieba_rs::Jieba {
    static JIEBA: OnceLock<jieba_rs::Jieba> = OnceLock::new();
    JIEBA.get_or_init(|| {
        let mut dictionary = std::io::BufReader::new(flate2::read::GzDecoder::new(JIEBA_DICTIONARY));
        jieba_rs::Jieba::with_dict(&mut dictionary).expect("the embedded dictionary loads (a test loads it)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(text: &str) -> Vec<String> {
        text.split(' ').map(String::from).collect()
    }

    #[test]
    fn wordpiece_joins_the_pieces_and_keeps_special_tokens_alone() {
        let words = Segmentation::wordpiece(&tokens("[CLS] when in ro ##me , do as the [MASK] do . [SEP]"));
        let texts: Vec<&str> = words.words.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(texts, ["[CLS]", "when", "in", "rome", ",", "do", "as", "the", "[MASK]", "do", ".", "[SEP]"]);
        assert_eq!(words.words[3].pieces, [3, 4]);
    }

    #[test]
    fn a_given_segmentation_must_spell_the_tokens() {
        let chars = tokens("[CLS] 床 前 明 月 光 [SEP]");
        let words = Segmentation::given(&chars, "床前 明月光").unwrap();
        let pieces: Vec<&[usize]> = words.words.iter().map(|w| w.pieces.as_slice()).collect();
        assert_eq!(pieces, [&[0][..], &[1, 2], &[3, 4, 5], &[6]]);
        for (bad, says) in [
            ("床前 明月", "end before the tokens"),
            ("床前 明月光 疑", "beyond"),
            ("床 前明 月光x", "does not continue"),
        ] {
            let message = Segmentation::given(&chars, bad).unwrap_err();
            assert!(message.contains(says), "{bad}: {message}");
        }
    }

    #[test]
    fn an_unknown_token_is_one_chinese_character_or_the_rest_of_a_word() {
        let chars = tokens("[CLS] [UNK] 前 明 月 [UNK] ， [UNK] 是 [SEP]");
        let words = Segmentation::given(&chars, "床前 明月光 ， 疑是").unwrap();
        let pieces: Vec<&[usize]> = words.words.iter().map(|w| w.pieces.as_slice()).collect();
        assert_eq!(pieces, [&[0][..], &[1, 2], &[3, 4, 5], &[6], &[7, 8], &[9]]);
        let english = Segmentation::given(&tokens("[CLS] when in [UNK] , [SEP]"), "When in Rōme ,").unwrap();
        let texts: Vec<&str> = english.words.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(texts, ["[CLS]", "When", "in", "Rōme", ",", "[SEP]"]);
    }

    /// A sentence whose every word is one token reads by words as it reads by tokens, exactly.
    #[test]
    fn words_of_one_token_each_leave_the_matrix_as_it_is() {
        let words = Segmentation::automatic(&tokens("[CLS] when in rome , do as the [MASK] do . [SEP]"));
        assert!(words.words.iter().all(|w| w.pieces.len() == 1), "{words:?}");
        let n = words.words.len();
        let matrix: Vec<Vec<f64>> =
            (0..n).map(|r| (0..n).map(|c| ((r * 7 + c * 3) % 11) as f64 / 97.0 + 1e-3 * r as f64).collect()).collect();
        assert_eq!(words.by_words(&matrix), matrix);
    }

    #[test]
    fn rows_read_by_word_still_sum_to_one() {
        let words = Segmentation::wordpiece(&tokens("[CLS] ro ##me [SEP]"));
        let matrix = vec![
            vec![0.1, 0.2, 0.3, 0.4],
            vec![0.25, 0.25, 0.25, 0.25],
            vec![0.5, 0.0, 0.5, 0.0],
            vec![0.0, 0.0, 0.0, 1.0],
        ];
        let by = words.by_words(&matrix);
        assert_eq!(by.len(), 3);
        for row in &by {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-15, "{row:?}");
        }
        // rome reads [CLS] with the mean of its pieces' 0.25 and 0.5, and reads itself with the
        // mean of their sums over its two columns, 0.5 and 0.5.
        assert!((by[1][0] - 0.375).abs() < 1e-15 && (by[1][1] - 0.5).abs() < 1e-15, "{by:?}");
    }
}
