//! The text a run trains on, and the batch of each step.
//!
//! For pretraining, the file holds one example per line: a text, or a sentence pair with
//! sentence B after a tab (then the run trains NSP as well). Blank lines are skipped. For
//! fine-tuning a classifier, the examples come with their classes (`labelled.rs` reads them),
//! and a batch carries those instead of masks.
//!
//! Step s (counted from 0) reads batch `s mod n` of epoch `s div n`, where n is the number of
//! batches of an epoch; each epoch goes through the lines in its own random order. Every random
//! choice of a step (that order, the NSP negatives, the masking) comes from the run's seed and
//! the step's number alone, so a run resumed at step s makes the batches an uninterrupted run
//! makes.

use std::path::{Path, PathBuf};

use ndarray::Array1;
use sha2::{Digest, Sha256};

pub use super::options::Batching;
use super::options::MAX_LEN;
use crate::error::{BertError, Result};
use crate::io::dump::manifest::Inputs;
use crate::io::tokenizer::{Batch, BertTokenizer};
use crate::objectives::mask_tokens;
use crate::objectives::splitmix::SplitMix64;

/// The lines of a training text.
#[derive(Clone, Debug)]
pub struct Corpus {
    pub path: PathBuf,
    /// Sentence A of every example.
    pub texts: Vec<String>,
    /// Sentence B of every example, when the lines are pairs.
    pub pairs: Option<Vec<String>>,
    /// The line of the file each example is on, counted from 1.
    pub lines: Vec<usize>,
    /// The SHA-256 of the file's bytes, in hex: a resumed run checks it is given the same text.
    pub sha256: String,
    /// For fine-tuning: the classes and each example's; None for pretraining.
    pub classes: Option<Classes>,
    /// Of each example, when packing learnt it (`documents.rs`): how many of its tokens can be
    /// masked. The check reads these instead of tokenizing the examples again; None for an
    /// example it must tokenize.
    pub maskable: Option<Vec<Option<Maskable>>>,
}

/// How many tokens of an example can be masked: sentence A's, and sentence B's for a pair; a
/// sequence holds all of them.
pub type Maskable = (usize, Option<usize>);

/// A classifier's classes (a class id is its index in `names`) and the class of each example.
#[derive(Clone, Debug, PartialEq)]
pub struct Classes {
    pub names: Vec<String>,
    pub of_example: Vec<usize>,
}

/// What a random choice is for: each gets its own numbers.
#[derive(Clone, Copy)]
enum Purpose {
    Order = 1,
    Negatives = 2,
    Masking = 3,
    Split = 4,
    HeldOut = 5,
}

/// The seed of one purpose at one step (or epoch): SplitMix64's mixing of the run's seed with
/// both, so that neighbouring steps get unrelated numbers.
fn seed_for(seed: u64, index: usize, purpose: Purpose) -> u64 {
    let salt = (index as u64).wrapping_mul(4).wrapping_add(purpose as u64);
    // The first three purposes share one space of salts (index · 4 + purpose), as they always
    // have; the evaluation's purposes get a space of their own, so that no held-out mask reuses
    // the numbers of a training step's order or masks.
    let space = match purpose {
        Purpose::Order | Purpose::Negatives | Purpose::Masking => 0,
        Purpose::Split | Purpose::HeldOut => 0x5EED_E7A1_0000_0000,
    };
    SplitMix64::new(seed ^ space ^ salt.wrapping_mul(0xD1B5_4A32_D192_ED03)).next_u64()
}

/// The text of a training or labelled file: at most 1 GiB, UTF-8.
pub(crate) fn read_text(path: &Path) -> Result<String> {
    let bytes = crate::io::files::read(path, 1 << 30)?;
    String::from_utf8(bytes).map_err(|e| BertError::Corpus {
        path: path.into(),
        line: 0,
        problem: format!("not UTF-8 text (byte {} is not)", e.utf8_error().valid_up_to()),
    })
}

/// The SHA-256 of a file's text, in hex: a resumed run checks it is given the same file.
pub(crate) fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

impl Corpus {
    /// Reads the file at `path`.
    pub fn read(path: &Path) -> Result<Corpus> {
        Corpus::parse(&read_text(path)?, path)
    }

    /// Reads `text` (the contents of the file at `path`).
    pub fn parse(text: &str, path: &Path) -> Result<Corpus> {
        let bad = |line: usize, problem: String| BertError::Corpus { path: path.into(), line, problem };
        let (mut texts, mut pairs, mut lines) = (Vec::new(), Vec::new(), Vec::new());
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
            lines.push(number);
            if is_pair {
                pairs.push(parts[1].to_string());
            }
        }
        if texts.is_empty() {
            return Err(bad(0, "no text to train on (the file is empty or blank)".into()));
        }
        let is_pairs = first_kind.is_some_and(|(_, pair)| pair);
        let sha256 = sha256_hex(text);
        Ok(Corpus {
            path: path.into(),
            texts,
            pairs: is_pairs.then_some(pairs),
            lines,
            sha256,
            classes: None,
            maskable: None,
        })
    }

    /// Refuses, before a run starts, a text that a step would fail on: `max_len` too short for
    /// a token to mask, or a line that leaves nothing to mask (only special tokens, or all cut
    /// off at `max_len`), named by its number.
    pub fn check(&self, tokenizer: &BertTokenizer, batching: &Batching) -> Result<()> {
        // [CLS] and [SEP] (and a second [SEP] for pairs) plus one token of each sentence.
        let least = if self.pairs.is_some() { 5 } else { 3 };
        if batching.max_len < least {
            let what = match (self.pairs.is_some(), self.classes.is_some()) {
                (true, _) => "a pair's [CLS] and two [SEP]s take 3, and each sentence needs a token",
                (false, true) => "[CLS] and [SEP] take 2, and an example needs a token of its text",
                (false, false) => "[CLS] and [SEP] take 2, and a line needs a token to mask",
            };
            return Err(BertError::OptionValue {
                option: MAX_LEN,
                value: batching.max_len.to_string(),
                accepted: format!("at least {least}: {what}"),
            });
        }
        // A classifier reads every example whole, or cut: nothing must be left to mask.
        if self.classes.is_some() {
            return Ok(());
        }
        let specials = tokenizer.special_ids();
        // Each example's count of tokens that can be masked, tokenized as a batch would be (cut
        // at `max_len`); a few hundred lines at a time, so that padding stays small.
        let maskable = |texts: &[String], pairs: Option<&[String]>, max_len: usize| -> Result<Vec<usize>> {
            let batch = tokenizer.encode(texts, pairs, max_len, true)?;
            Ok(batch
                .ids
                .outer_iter()
                .zip(batch.attention_mask.outer_iter())
                .map(|(ids, mask)| ids.iter().zip(mask).filter(|(id, &m)| m == 1 && !specials.contains(id)).count())
                .collect())
        };
        const CHUNK: usize = 256;
        // A sentence whose first tokens, this many, are all special is one of special tokens only.
        const LOOK: usize = 512;
        let check_lines = |start: usize| -> Result<()> {
            let end = (start + CHUNK).min(self.len());
            let line = |index: usize| self.lines[start + index];
            let bad = |index: usize, problem: String| BertError::Corpus {
                path: self.path.clone(),
                line: line(index),
                problem,
            };
            let texts = &self.texts[start..end];
            let pairs = self.pairs.as_ref().map(|pairs| &pairs[start..end]);
            let failed = |e: BertError| bad(0, e.to_string());
            // What packing learnt, when it learnt it of every example here: each fits a
            // sequence whole, so a count at `max_len` is its count alone.
            let known: Option<Vec<Maskable>> =
                self.maskable.as_ref().and_then(|m| m[start..end].iter().copied().collect());
            if let Some(known) = known {
                let halves: [Vec<Option<usize>>; 2] =
                    [known.iter().map(|&(a, _)| Some(a)).collect(), known.iter().map(|&(_, b)| b).collect()];
                for (half, counts) in halves.iter().enumerate() {
                    if let Some(index) = counts.iter().position(|&n| n == Some(0)) {
                        let which = match (self.pairs.is_some(), half) {
                            (false, _) => "the line",
                            (true, 0) => "sentence A",
                            (true, _) => "sentence B",
                        };
                        let sentence = if half == 0 { &texts[index] } else { &pairs.expect("a sentence B")[index] };
                        return Err(bad(
                            index,
                            format!(
                                "{which} holds only special tokens ({}), so it has no token to mask",
                                sentence.trim()
                            ),
                        ));
                    }
                }
                return Ok(());
            }
            if pairs.is_none() {
                // A single text is cut from its end, so its tokens at `max_len` are the first
                // `max_len - 2` of its tokens alone: one tokenizing answers both questions below.
                let ids: Vec<Vec<u32>> = texts
                    .iter()
                    .map(|text| tokenizer.content_ids(text, LOOK - 2))
                    .collect::<Result<_>>()
                    .map_err(failed)?;
                let maskable = |ids: &[u32], first: usize| {
                    ids.iter().take(first).filter(|&&id| !specials.contains(&i64::from(id))).count()
                };
                if let Some(index) = ids.iter().position(|ids| maskable(ids, LOOK - 2) == 0) {
                    return Err(bad(
                        index,
                        format!(
                            "the line holds only special tokens ({}), so it has no token to mask",
                            texts[index].trim()
                        ),
                    ));
                }
                if let Some(index) = ids.iter().position(|ids| maskable(ids, batching.max_len - 2) == 0) {
                    return Err(bad(
                        index,
                        format!(
                            "with {} it keeps only special tokens, so it has no token to mask",
                            MAX_LEN.with(batching.max_len)
                        ),
                    ));
                }
                return Ok(());
            }
            // Each sentence alone: one made of special tokens only is no sentence.
            let halves = [Some(texts), pairs].into_iter().flatten();
            for (half, sentences) in halves.enumerate() {
                if let Some(index) = maskable(sentences, None, LOOK).map_err(failed)?.iter().position(|&n| n == 0) {
                    let which = if self.pairs.is_some() { ["sentence A", "sentence B"][half] } else { "the line" };
                    return Err(bad(
                        index,
                        format!(
                            "{which} holds only special tokens ({}), so it has no token to mask",
                            sentences[index].trim()
                        ),
                    ));
                }
            }
            if let Some(index) = maskable(texts, pairs, batching.max_len).map_err(failed)?.iter().position(|&n| n == 0)
            {
                return Err(bad(
                    index,
                    format!(
                        "with {} it keeps only special tokens, so it has no token to mask",
                        MAX_LEN.with(batching.max_len)
                    ),
                ));
            }
            Ok(())
        };
        // Tokenizing every example is most of a run's start: the threads share the chunks, and
        // the first bad line of the file is the one reported, whatever the thread count.
        let starts: Vec<usize> = (0..self.len()).step_by(CHUNK).collect();
        crate::ops::map_in_order(&starts, 1, |&start| check_lines(start)).into_iter().collect()
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
        if self.classes.is_some() {
            return self.labelled_batch(&lines, tokenizer, batching.max_len);
        }
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
        // Every line has a token to mask (`Corpus::check`), but a pair's sentence A with another
        // line's sentence B, cut to `max_len`, may not: the lines are named.
        mask_tokens(&mut batch, tokenizer, batching.mask_prob, seed).map_err(|e| match e {
            BertError::Labels(problem) => BertError::Corpus {
                path: self.path.clone(),
                line: self.lines[lines[0]],
                problem: format!(
                    "step {}: the batch of lines {} has no token to mask: {problem}",
                    step + 1,
                    lines.iter().map(|&i| self.lines[i].to_string()).collect::<Vec<_>>().join(", ")
                ),
            },
            other => other,
        })?;
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

    /// The examples `examples` (indices into the file's) as a classifier's batch: tokenized
    /// (cut to `max_len`), each with its class, and the inputs that describe it.
    pub fn labelled_batch(
        &self,
        examples: &[usize],
        tokenizer: &BertTokenizer,
        max_len: usize,
    ) -> Result<(Batch, Inputs)> {
        let classes = self.classes.as_ref().expect("a labelled corpus");
        let texts: Vec<String> = examples.iter().map(|&i| self.texts[i].clone()).collect();
        let pairs: Option<Vec<String>> =
            self.pairs.as_ref().map(|pairs| examples.iter().map(|&i| pairs[i].clone()).collect());
        let mut batch = tokenizer.encode(&texts, pairs.as_deref(), max_len, true)?;
        let ids: Vec<i64> = examples.iter().map(|&i| classes.of_example[i] as i64).collect();
        batch.labels.class = Some(Array1::from(ids));
        let names = examples.iter().map(|&i| classes.names[classes.of_example[i]].clone()).collect();
        let inputs = Inputs { texts, pair: pairs, label: Some(names), ..Inputs::default() };
        Ok((batch, inputs))
    }

    /// The held-out batch `index` of this corpus, for an evaluation: examples `index · B` on, in
    /// the file's order, as they are (a pair keeps its own sentence B), 15% of their tokens
    /// (BERT's share, whatever `mask_prob` the run trains with) chosen with numbers of the run's
    /// seed and the batch's index alone, so that every evaluation of a run judges the same
    /// positions, and each chosen one shown as `[MASK]`; a labelled corpus's batch carries its
    /// classes instead.
    pub fn held_out_batch(&self, index: usize, tokenizer: &BertTokenizer, batching: &Batching) -> Result<Batch> {
        let size = batching.batch_size.max(1);
        let examples: Vec<usize> = (index * size..((index + 1) * size).min(self.len())).collect();
        if self.classes.is_some() {
            return Ok(self.labelled_batch(&examples, tokenizer, batching.max_len)?.0);
        }
        let texts: Vec<String> = examples.iter().map(|&i| self.texts[i].clone()).collect();
        let pairs: Option<Vec<String>> =
            self.pairs.as_ref().map(|pairs| examples.iter().map(|&i| pairs[i].clone()).collect());
        let mut batch = tokenizer.encode(&texts, pairs.as_deref(), batching.max_len, true)?;
        let seed = seed_for(batching.seed, index, Purpose::HeldOut);
        // BERT's 15% whatever the run trains with: the measure is the same for every run.
        mask_tokens(&mut batch, tokenizer, super::options::DEFAULT_MASK_PROB, seed)?;
        // Every chosen token is shown as [MASK], as a learner asks the model to fill one: the
        // random and unchanged tenths of BERT's training masks are left out of the measure.
        let mask_id = tokenizer.token_to_id(crate::io::tokenizer::MASK).map(i64::from);
        if let (Some(mask_id), Some(labels)) = (mask_id, &batch.labels.mlm) {
            for (&label, id) in labels.iter().zip(batch.ids.iter_mut()) {
                if label != crate::objectives::IGNORE {
                    *id = mask_id;
                }
            }
        }
        Ok(batch)
    }

    /// Holds out ⌈`share` · N⌉ examples, chosen by a shuffle seeded by `seed`: (the rest, those
    /// held out), each in the file's order. Both keep at least one example.
    pub fn split(self, share: f64, seed: u64) -> Result<(Corpus, Corpus)> {
        let n = self.len();
        let held = (share * n as f64).ceil() as usize;
        if held == 0 || held >= n {
            return Err(BertError::Corpus {
                path: self.path.clone(),
                line: 0,
                problem: format!(
                    "{n} examples: {} holds out {held} of them, which leaves {} to train on; each side needs one at least",
                    super::options::EVAL_SPLIT.with(share),
                    n.saturating_sub(held)
                ),
            });
        }
        let mut order: Vec<usize> = (0..n).collect();
        let mut rng = SplitMix64::new(seed_for(seed, 0, Purpose::Split));
        for i in (1..n).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        let mut out: Vec<bool> = vec![false; n];
        for &i in &order[..held] {
            out[i] = true;
        }
        let pick = |keep: bool| -> Corpus {
            let chosen: Vec<usize> = (0..n).filter(|&i| out[i] != keep).collect();
            Corpus {
                path: self.path.clone(),
                texts: chosen.iter().map(|&i| self.texts[i].clone()).collect(),
                pairs: self.pairs.as_ref().map(|p| chosen.iter().map(|&i| p[i].clone()).collect()),
                lines: chosen.iter().map(|&i| self.lines[i]).collect(),
                sha256: self.sha256.clone(),
                classes: self.classes.as_ref().map(|c| Classes {
                    names: c.names.clone(),
                    of_example: chosen.iter().map(|&i| c.of_example[i]).collect(),
                }),
                maskable: self.maskable.as_ref().map(|m| chosen.iter().map(|&i| m[i]).collect()),
            }
        };
        Ok((pick(true), pick(false)))
    }
}
