//! The text a run trains on, and the batch of each step.
//!
//! The file holds one example per line: a text, or a sentence pair with sentence B after a tab
//! (then the run trains NSP as well). Blank lines are skipped.
//!
//! Step s (counted from 0) reads batch `s mod n` of epoch `s div n`, where n is the number of
//! batches of an epoch; each epoch goes through the lines in its own random order. Every random
//! choice of a step (that order, the NSP negatives, the masking) comes from the run's seed and
//! the step's number alone, so a run resumed at step s makes the batches an uninterrupted run
//! makes.

use std::path::{Path, PathBuf};

use ndarray::Array1;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{BertError, Result};
use crate::load::tokenize::{Batch, BertTokenizer};
use crate::objectives::mask_tokens;
use crate::objectives::splitmix::SplitMix64;
use crate::trace::manifest::Inputs;

/// The lines of a training text.
#[derive(Clone, Debug)]
pub struct Corpus {
    pub path: PathBuf,
    /// Sentence A of every example.
    pub texts: Vec<String>,
    /// Sentence B of every example, when the lines are pairs.
    pub pairs: Option<Vec<String>>,
    /// The SHA-256 of the file's bytes, in hex: a resumed run checks it is given the same text.
    pub sha256: String,
}

/// How a step's batch is made.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Batching {
    pub batch_size: usize,
    /// Sequences are cut to this many tokens, `[CLS]` and `[SEP]` included.
    pub max_len: usize,
    /// The share of tokens masked for the MLM loss (BERT's 0.15).
    pub mask_prob: f64,
    /// The chance that a pair's sentence B is replaced by another line's (label 1).
    pub nsp_negatives: f64,
    pub seed: u64,
}

/// What a random choice is for: each gets its own numbers.
#[derive(Clone, Copy)]
enum Purpose {
    Order = 1,
    Negatives = 2,
    Masking = 3,
}

/// The seed of one purpose at one step (or epoch): SplitMix64's mixing of the run's seed with
/// both, so that neighbouring steps get unrelated numbers.
fn seed_for(seed: u64, index: usize, purpose: Purpose) -> u64 {
    let salt = (index as u64).wrapping_mul(4).wrapping_add(purpose as u64);
    SplitMix64::new(seed ^ salt.wrapping_mul(0xD1B5_4A32_D192_ED03)).next_u64()
}

impl Corpus {
    /// Reads the file at `path`.
    pub fn read(path: &Path) -> Result<Corpus> {
        let bytes = crate::load::files::read(path, 1 << 30)?;
        let text = String::from_utf8(bytes).map_err(|e| BertError::Corpus {
            path: path.into(),
            line: 0,
            problem: format!("not UTF-8 text (byte {} is not)", e.utf8_error().valid_up_to()),
        })?;
        Corpus::parse(&text, path)
    }

    /// Reads `text` (the contents of the file at `path`).
    pub fn parse(text: &str, path: &Path) -> Result<Corpus> {
        let bad = |line: usize, problem: String| BertError::Corpus { path: path.into(), line, problem };
        let (mut texts, mut pairs) = (Vec::new(), Vec::new());
        let mut first_kind: Option<(usize, bool)> = None;
        for (idx, line) in text.lines().enumerate() {
            let number = idx + 1;
            if line.trim().is_empty() {
                continue;
            }
            let parts: Vec<&str> = line.split('\t').collect();
            if parts.len() > 2 {
                return Err(bad(
                    number,
                    format!("{} tabs; a line is a text, or sentence A, a tab, sentence B", parts.len() - 1),
                ));
            }
            if parts.iter().any(|p| p.trim().is_empty()) {
                return Err(bad(number, "a sentence of the pair is empty".into()));
            }
            let is_pair = parts.len() == 2;
            match first_kind {
                None => first_kind = Some((number, is_pair)),
                Some((first, pair)) if pair != is_pair => {
                    let (this, that) = if is_pair { ("a pair", "a single text") } else { ("a single text", "a pair") };
                    return Err(bad(
                        number,
                        format!("{this}, but line {first} is {that}; the file holds texts or pairs, not both"),
                    ));
                }
                _ => {}
            }
            texts.push(parts[0].to_string());
            if is_pair {
                pairs.push(parts[1].to_string());
            }
        }
        if texts.is_empty() {
            return Err(bad(0, "no text to train on (the file is empty or blank)".into()));
        }
        let is_pairs = first_kind.is_some_and(|(_, pair)| pair);
        let sha256 = Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
        Ok(Corpus { path: path.into(), texts, pairs: is_pairs.then_some(pairs), sha256 })
    }

    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    /// How many batches one pass over the file makes.
    pub fn batches_per_epoch(&self, batch_size: usize) -> usize {
        self.len().div_ceil(batch_size)
    }

    /// The lines of step `step`'s batch (its indices into the file's examples).
    pub fn lines_of(&self, step: usize, batch_size: usize, seed: u64) -> Vec<usize> {
        let per_epoch = self.batches_per_epoch(batch_size);
        let (epoch, index) = (step / per_epoch, step % per_epoch);
        // Fisher–Yates with the epoch's own numbers.
        let mut order: Vec<usize> = (0..self.len()).collect();
        let mut rng = SplitMix64::new(seed_for(seed, epoch, Purpose::Order));
        for i in (1..order.len()).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        let start = index * batch_size;
        order[start..(start + batch_size).min(self.len())].to_vec()
    }

    /// Step `step`'s batch, and the inputs that describe it (a step's dump records them in its
    /// manifest; `dump_reference.py` makes the same batch from them): its lines tokenized (cut to
    /// `max_len`), BERT's masking, and for pairs the NSP labels, with each sentence B replaced by
    /// another line's with probability `nsp_negatives` (label 1, "B is random"), as d2l's
    /// `_get_next_sentence` does.
    pub fn batch(&self, step: usize, tokenizer: &BertTokenizer, batching: &Batching) -> Result<(Batch, Inputs)> {
        let lines = self.lines_of(step, batching.batch_size, batching.seed);
        let texts: Vec<String> = lines.iter().map(|&i| self.texts[i].clone()).collect();
        let mut labels = Vec::new();
        let pairs = self.pairs.as_ref().map(|pairs| {
            let mut rng = SplitMix64::new(seed_for(batching.seed, step, Purpose::Negatives));
            lines
                .iter()
                .map(|&i| {
                    let random = self.len() > 1 && rng.uniform() < batching.nsp_negatives;
                    labels.push(i64::from(random));
                    if !random {
                        return pairs[i].clone();
                    }
                    // Any line but this one, uniformly.
                    let other = (rng.next_u64() % (self.len() as u64 - 1)) as usize;
                    pairs[if other >= i { other + 1 } else { other }].clone()
                })
                .collect::<Vec<String>>()
        });
        let mut batch = tokenizer.encode(&texts, pairs.as_deref(), batching.max_len, true)?;
        let seed = seed_for(batching.seed, step, Purpose::Masking);
        mask_tokens(&mut batch, tokenizer, batching.mask_prob, seed)?;
        if pairs.is_some() {
            batch.labels.nsp = Some(Array1::from(labels.clone()));
        }
        let inputs = Inputs {
            texts,
            pair: pairs,
            mask_prob: Some(batching.mask_prob),
            seed: Some(seed),
            nsp_label: (!labels.is_empty()).then_some(labels),
            ..Inputs::default()
        };
        Ok((batch, inputs))
    }
}
