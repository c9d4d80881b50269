//! The training loop's own rules, which PyTorch does not check for us: every epoch reads every
//! line once, the NSP negatives are other lines' sentence Bs, a step's batch depends on the seed
//! and the step alone, and an update keeps the MLM decoder tied to the word embeddings.
//! (Losses and updates against PyTorch: crates/bert-trace/tests/train.rs.)

use std::path::Path;

use bert_core::train::corpus::{Batching, Corpus};
use bert_core::BertModel;

fn tiny() -> BertModel {
    BertModel::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../golden/tiny")).unwrap()
}

fn corpus(lines: usize, pairs: bool) -> Corpus {
    let words = ["the", "man", "city", "road", "book", "house", "water", "dog"];
    let text: String = (0..lines)
        .map(|i| {
            let a = format!("{} {}", words[i % 8], words[(i / 8) % 8]);
            if pairs {
                format!("{a}\tline {i}\n")
            } else {
                format!("{a}\n")
            }
        })
        .collect();
    Corpus::parse(&text, Path::new("text.txt")).unwrap()
}

fn batching(batch_size: usize, seed: u64) -> Batching {
    Batching { batch_size, max_len: 32, mask_prob: 0.15, nsp_negatives: 0.5, seed }
}

#[test]
fn every_epoch_reads_every_line_once_in_its_own_order() {
    for (lines, batch_size) in [(1, 1), (7, 3), (20, 8), (16, 4), (5, 9)] {
        let corpus = corpus(lines, false);
        let per_epoch = corpus.batches_per_epoch(batch_size);
        let mut orders = Vec::new();
        for epoch in 0..3 {
            let mut seen: Vec<usize> =
                (0..per_epoch).flat_map(|b| corpus.lines_of(epoch * per_epoch + b, batch_size, 7)).collect();
            orders.push(seen.clone());
            seen.sort_unstable();
            assert_eq!(seen, (0..lines).collect::<Vec<_>>(), "{lines} lines, batches of {batch_size}, epoch {epoch}");
        }
        if lines >= 7 {
            assert_ne!(orders[0], orders[1], "{lines} lines: two epochs in the same order");
        }
    }
}

#[test]
fn a_negative_pair_takes_another_lines_sentence_b() {
    let model = tiny();
    let corpus = corpus(12, true);
    let (mut negatives, mut total) = (0, 0);
    for step in 0..60 {
        let (batch, inputs) = corpus.batch(step, &model.tokenizer, &batching(4, 11)).unwrap();
        let labels = batch.labels.nsp.as_ref().expect("pairs have NSP labels");
        let lines = corpus.lines_of(step, 4, 11);
        let pairs = inputs.pair.as_ref().unwrap();
        for ((&line, &label), b) in lines.iter().zip(labels.iter()).zip(pairs) {
            let own = &corpus.pairs.as_ref().unwrap()[line];
            match label {
                0 => assert_eq!(b, own, "step {step}: label 0 keeps line {line}'s sentence B"),
                1 => assert_ne!(b, own, "step {step}: label 1 on line {line} kept its own sentence B"),
                other => panic!("NSP label {other}"),
            }
            negatives += label;
            total += 1;
        }
        assert_eq!(inputs.nsp_label.as_deref(), Some(labels.as_slice().unwrap()), "the manifest's labels");
    }
    let share = negatives as f64 / total as f64;
    assert!((0.35..0.65).contains(&share), "{negatives} negatives of {total} with --nsp-negatives 0.5");
}

#[test]
fn a_steps_batch_depends_on_the_seed_and_the_step_alone() {
    let model = tiny();
    let corpus = corpus(9, true);
    let make = |step, seed| corpus.batch(step, &model.tokenizer, &batching(3, seed)).unwrap().0;
    let (a, again) = (make(5, 1), make(5, 1));
    assert_eq!(a.ids, again.ids);
    assert_eq!(a.labels.mlm, again.labels.mlm);
    assert_eq!(a.labels.nsp, again.labels.nsp);
    let differs = |x: &bert_core::Batch, y: &bert_core::Batch| x.ids != y.ids || x.labels.mlm != y.labels.mlm;
    assert!(differs(&a, &make(5, 2)), "another seed, the same batch");
    assert!(differs(&make(0, 1), &make(3, 1)), "steps 0 and 3 (the same lines, another epoch) share masks");
}

#[test]
fn an_update_keeps_the_decoder_tied_to_the_word_embeddings() {
    let mut model = tiny();
    let before = model.embeddings.word_embeddings.as_slice().to_vec();
    model
        .update_parameters(|_, values| {
            values.iter_mut().for_each(|v| *v += 1.0);
            Ok::<(), ()>(())
        })
        .unwrap();
    let mlm = model.mlm.as_ref().unwrap();
    let (table, decoder) = (model.embeddings.word_embeddings.as_slice(), mlm.decoder.weight.as_slice());
    assert!(std::ptr::eq(table, decoder), "the decoder holds a copy of the table, not the table");
    assert!(table.iter().zip(&before).all(|(after, b)| *after == b + 1.0), "the table changed once, in place");
    let names: Vec<String> = model.parameters().iter().map(|(stage, _)| stage.hf()).collect();
    assert_eq!(names.iter().filter(|n| n.contains("word_embeddings")).count(), 1, "{names:?}");
}
