//! BERT's random masking, judged over thousands of seeds on golden/tiny's tokenizer: the share
//! of eligible tokens chosen is P, the chosen ones split 80/10/10 into `[MASK]`, a random token
//! and the token itself, special tokens and padding are never chosen, the labels are the
//! original ids exactly where a token was chosen and -100 elsewhere, and a seed always gives
//! the same masks. The bounds are four standard errors of each share, so an implementation
//! with the right rules passes and one with a wrong split (say 80/20/0) or a wrong P cannot.
//!
//! Every sequence gets at least one masked token: one whose draws with probability P chose
//! nothing gets one more, marked `guaranteed`. The share chosen is measured over the draws with
//! probability P alone (the guaranteed ones are extra), and the guarantee is checked on its own:
//! it happens to a sequence exactly when its draws chose nothing, which has probability
//! (1 - P)^n for n maskable tokens, and it adds exactly one.

use std::path::Path;

use bert_core::objectives::{mask_tokens, ReplacementKind, IGNORE};
use bert_core::BertModel;

const SEEDS: u64 = 4000;
const P: f64 = 0.15;

fn tiny() -> BertModel {
    BertModel::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../golden/tiny")).unwrap()
}

/// Whether `got`, a share of `n` trials, is within four standard errors of `p`.
fn within(what: &str, got: f64, p: f64, n: usize) -> Result<(), String> {
    let bound = 4.0 * (p * (1.0 - p) / n as f64).sqrt();
    if (got - p).abs() <= bound {
        Ok(())
    } else {
        Err(format!("{what}: expected {p} ± {bound:.4} over {n}, got {got:.4}"))
    }
}

#[test]
fn masking_chooses_p_of_the_eligible_tokens_and_splits_them_80_10_10() {
    let model = tiny();
    let texts = ["When in Rome, do as the Romans do.".to_string(), "All roads lead to Rome.".to_string()];
    let pairs = ["Rome was not built in a day.".to_string(), "Rome is far.".to_string()];
    let plain = model.encode(&texts, Some(&pairs), false).unwrap();
    let specials = model.tokenizer.special_ids();
    let mask_id = i64::from(model.tokenizer.token_to_id("[MASK]").unwrap());
    let vocab = model.tokenizer.vocab_len() as i64;
    let eligible: Vec<(usize, usize)> = plain
        .ids
        .indexed_iter()
        .filter(|&((s, p), id)| plain.attention_mask[[s, p]] == 1 && !specials.contains(id))
        .map(|(index, _)| index)
        .collect();
    assert!(plain.attention_mask.iter().any(|&m| m == 0), "the batch must have padding to show it is never chosen");

    let (mut chosen, mut trials) = (0usize, 0usize);
    // Per sequence: how many seeds needed the guarantee.
    let mut guaranteed = vec![0usize; plain.ids.nrows()];
    let mut kinds = [0usize; 3];
    let mut random_ids = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for seed in 0..SEEDS {
        let mut batch = plain.clone();
        trials += eligible.len();
        mask_tokens(&mut batch, &model.tokenizer, P, seed).unwrap();
        for (seq, count) in guaranteed.iter_mut().enumerate() {
            let mine: Vec<_> = batch.labels.replacements.iter().filter(|r| r.seq == seq).collect();
            match mine.iter().filter(|r| r.guaranteed).count() {
                0 if mine.is_empty() => failures.push(format!("seed {seed}: sequence {seq} has no masked token")),
                0 => {}
                1 if mine.len() == 1 => *count += 1,
                n => failures.push(format!("seed {seed}: sequence {seq}: {n} guaranteed among {} chosen", mine.len())),
            }
        }
        let labels = batch.labels.mlm.as_ref().unwrap();
        if batch.labels.original_ids.as_ref() != Some(&plain.ids) {
            failures.push(format!("seed {seed}: input.original_ids is not the tokenizer's ids"));
        }
        for r in &batch.labels.replacements {
            if !eligible.contains(&(r.seq, r.pos)) {
                failures.push(format!("seed {seed}: chose ({}, {}), a special token or padding", r.seq, r.pos));
            }
            let ok = match r.kind {
                ReplacementKind::Mask => r.shown == mask_id,
                ReplacementKind::Random => (0..vocab).contains(&r.shown),
                ReplacementKind::Keep => r.shown == r.original,
            };
            if !ok || batch.ids[[r.seq, r.pos]] != r.shown || r.original != plain.ids[[r.seq, r.pos]] {
                failures.push(format!("seed {seed}: {r:?} is not what the batch shows"));
            }
            kinds[r.kind as usize] += 1;
            if r.kind == ReplacementKind::Random {
                random_ids.insert(r.shown);
            }
        }
        chosen += batch.labels.replacements.iter().filter(|r| !r.guaranteed).count();
        // Labels: the original id where chosen, -100 everywhere else; ids unchanged elsewhere.
        for ((s, p), &label) in labels.indexed_iter() {
            let replaced = batch.labels.replacements.iter().any(|r| (r.seq, r.pos) == (s, p));
            let want = if replaced { plain.ids[[s, p]] } else { IGNORE };
            if label != want || (!replaced && batch.ids[[s, p]] != plain.ids[[s, p]]) {
                failures.push(format!("seed {seed}: label {label} at ({s}, {p}), expected {want}"));
            }
        }
        // The same seed gives the same masks.
        let mut again = plain.clone();
        mask_tokens(&mut again, &model.tokenizer, P, seed).unwrap();
        if again != batch {
            failures.push(format!("seed {seed}: a second run masked differently"));
        }
    }
    let split = kinds.iter().sum::<usize>();
    let per_sequence: Vec<usize> =
        (0..plain.ids.nrows()).map(|seq| eligible.iter().filter(|(s, _)| *s == seq).count()).collect();
    let mut shares = vec![
        within("share chosen", chosen as f64 / trials as f64, P, trials),
        within("[MASK] share of chosen", kinds[ReplacementKind::Mask as usize] as f64 / split as f64, 0.8, split),
        within("random share of chosen", kinds[ReplacementKind::Random as usize] as f64 / split as f64, 0.1, split),
        within("kept share of chosen", kinds[ReplacementKind::Keep as usize] as f64 / split as f64, 0.1, split),
    ];
    // The guarantee: no token chosen among a sequence's n maskable ones has probability (1 - P)^n.
    for (seq, (&count, &n)) in guaranteed.iter().zip(&per_sequence).enumerate() {
        let what = format!("sequence {seq} ({n} maskable) needing the guarantee");
        shares.push(within(&what, count as f64 / SEEDS as f64, (1.0 - P).powi(n as i32), SEEDS as usize));
    }
    println!(
        "{SEEDS} seeds, {} eligible tokens each: {chosen} chosen with probability P of {trials}; mask/random/keep \
         {kinds:?}; guaranteed one per sequence {guaranteed:?} times; {} distinct random ids of {vocab}",
        eligible.len(),
        random_ids.len()
    );
    failures.extend(shares.into_iter().filter_map(Result::err));
    // The random replacements cover the vocabulary (about 1,200 draws over 245 ids).
    if (random_ids.len() as f64) < 0.9 * vocab as f64 {
        failures.push(format!("random replacements hit only {} of {vocab} ids", random_ids.len()));
    }
    failures.truncate(20);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
