//! The training loop's own rules, which PyTorch does not check for us: every epoch reads every
//! line once, the NSP negatives are other lines' sentence Bs, a step's batch depends on the seed
//! and the step alone, and an update keeps the MLM decoder tied to the word embeddings.
//! (Losses and updates against PyTorch: crates/bert-trace/tests/all/train.rs.)

use std::path::Path;

use bert_core::training::corpus::{Batching, Corpus};
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
    Batching { batch_size, max_len: 32, mask_prob: 0.15, nsp_negatives: 0.5, seed, documents: false, nsp: false }
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

/// `BertModel::from_config` draws what transformers' `BertForPreTraining(config)` draws
/// (golden/init/statistics.json, from scripts/init_reference.py): the same parameters, in the
/// same order and shapes; zeros and ones where transformers puts them (the padding row of the
/// word table included); and the drawn ones with transformers' spread (a plain normal, not a
/// truncated one) within a few standard errors.
#[test]
fn new_weights_have_the_statistics_of_transformers_init() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../golden");
    let reference: serde_json::Value =
        serde_json::from_slice(&std::fs::read(golden.join("init/statistics.json")).unwrap()).unwrap();
    // The config is the course model's; the tokenizer's files are golden/tiny's (its vocabulary
    // is smaller than the config's, which new weights do not mind).
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(golden.join("init/config.json"), dir.path().join("config.json")).unwrap();
    for file in ["vocab.txt", "tokenizer_config.json"] {
        std::fs::copy(golden.join("tiny").join(file), dir.path().join(file)).unwrap();
    }
    let model = BertModel::from_config(dir.path(), 0).unwrap();
    let ours = model.parameters();
    let expected = reference["parameters"].as_array().unwrap();
    let names: Vec<String> = ours.iter().map(|(stage, _)| stage.hf()).collect();
    let theirs: Vec<&str> = expected.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, theirs, "the parameters and their order");
    let seeds = reference["seeds"].as_f64().unwrap();
    for ((stage, param), want) in ours.iter().zip(expected) {
        let name = stage.hf();
        let shape: Vec<usize> =
            want["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
        assert_eq!(param.shape(), &shape[..], "{name}: shape");
        let values = param.as_slice();
        let n = values.len() as f64;
        let share = |f: &dyn Fn(f32) -> bool| values.iter().filter(|&&v| f(v)).count() as f64 / n;
        let (zeros, ones) = (share(&|v| v == 0.0), share(&|v| v == 1.0));
        let stat = |key: &str| want[key].as_f64().unwrap();
        println!("{name}: zeros {zeros} (transformers {}), ones {ones} ({})", stat("zeros"), stat("ones"));
        // A fill is exact, the whole tensor's; a drawn tensor has the padding row's share of
        // zeros (the word table's), and a float32 draw is now and then exactly 0 (about one in a
        // million of transformers' are).
        if stat("zeros") + stat("ones") == 1.0 {
            assert_eq!((zeros, ones), (stat("zeros"), stat("ones")), "{name}: shares of zeros and ones");
            continue;
        }
        assert!((zeros - stat("zeros")).abs() < 2e-5 && ones == 0.0, "{name}: zeros {zeros}, ones {ones}");
        let mean = values.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let std = (values.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n).sqrt();
        let range = model.config.initializer_range;
        let beyond = share(&|v| f64::from(v).abs() > 2.0 * range);
        // Standard errors of a normal's mean, standard deviation and tail share over ours and
        // transformers' (drawn `seeds` times) samples together.
        let both = (1.0 / n + 1.0 / (n * seeds)).sqrt();
        let tail = 0.0455_f64;
        let checks = [
            ("mean", mean, stat("mean"), range * both),
            ("std", std, stat("std"), range * both / 2f64.sqrt()),
            ("share beyond 2 initializer ranges", beyond, stat("beyond_2std"), (tail * (1.0 - tail)).sqrt() * both),
        ];
        for (what, got, expected, error) in checks {
            println!("{name}: {what} {got:.6} (transformers {expected:.6}, standard error {error:.2e})");
            assert!((got - expected).abs() <= 5.0 * error, "{name}: {what} {got} against transformers' {expected}");
        }
    }
}

/// The held-out measure shows every chosen token as `[MASK]` and counts a token guessed first,
/// or among the five best, as a sort of each row would.
#[test]
fn the_held_out_measure_is_fill_mask_top_1_and_top_5() {
    let model = tiny();
    let corpus = corpus(40, false);
    // The run's own share does not change the measure's (BERT's 15%).
    let batching = Batching { mask_prob: 0.6, ..batching(8, 5) };
    let evaluation = bert_core::training::held_out::evaluate(&model, &corpus, &batching, 0).unwrap();
    let mask = model.tokenizer.token_to_id("[MASK]").unwrap() as i64;
    let (mut top1, mut top5, mut count) = (0, 0, 0);
    let mut label_counts = std::collections::HashMap::<i64, usize>::new();
    for index in 0..corpus.batches_per_epoch(8) {
        let batch = corpus.held_out_batch(index, &model.tokenizer, &batching).unwrap();
        let labels = batch.labels.mlm.clone().unwrap();
        let traced = model.trace(&batch, &mut bert_core::pass::Discard, None).unwrap();
        let logits = traced.outputs.mlm_logits.unwrap();
        for ((at, &label), &id) in labels.indexed_iter().zip(batch.ids.iter()) {
            if label == -100 {
                continue;
            }
            assert_eq!(id, mask, "a chosen position at {at:?} is shown as [MASK]");
            let mut order: Vec<(usize, f32)> =
                logits.slice(ndarray::s![at.0, at.1, ..]).iter().copied().enumerate().collect();
            order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let rank = order.iter().position(|&(token, _)| token as i64 == label).unwrap();
            count += 1;
            *label_counts.entry(label).or_default() += 1;
            top1 += usize::from(rank == 0);
            top5 += usize::from(rank < 5);
        }
    }
    println!("{count} masked: top-1 {top1}, top-5 {top5}; the evaluation's {evaluation}");
    assert_eq!((evaluation.examples, evaluation.correct, evaluation.top5_correct), (count, top1, Some(top5)));
    // The guess that ignores the text: the most frequent masked token, the lowest id of equals.
    let most = label_counts.values().copied().max().unwrap();
    let token = label_counts.iter().filter(|(_, &n)| n == most).map(|(&id, _)| id).min().unwrap();
    let guess = evaluation.constant_guess.expect("an MLM measure has the constant guess");
    assert_eq!(
        (guess.token.as_str(), guess.correct),
        (model.tokenizer.id_to_token(token as u32).unwrap().as_str(), most),
        "the constant guess: expected {token} for {most} of {count}"
    );
}

/// `evaluate --each-token` on famous lines of golden/chinese-small: the same as writing each
/// character of each line as `[MASK]` in the text, one at a time, and reading the model's
/// guesses there (the measure masks ids; this masks the text and tokenizes it again): every
/// character counted once, the same summed loss, and the same right first guesses and right
/// guesses among five.
#[test]
fn the_each_token_measure_masks_every_character_in_turn() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../golden/chinese-small");
    let model = BertModel::load(&dir).unwrap();
    let lines: Vec<String> =
        std::fs::read_to_string(dir.join("famous-lines.txt")).unwrap().lines().take(6).map(String::from).collect();
    let corpus = Corpus::parse(&lines.join("\n"), Path::new("famous-lines.txt")).unwrap();
    let batching = Batching { batch_size: 7, max_len: 64, ..batching(7, 0) };
    let evaluation = bert_core::training::held_out::evaluate_each_token(&model, &corpus, &batching).unwrap();
    let (mut count, mut sum, mut top1, mut top5) = (0usize, 0.0f64, 0usize, 0usize);
    for line in &lines {
        let chars: Vec<char> = line.chars().collect();
        for at in 0..chars.len() {
            let original = chars[at].to_string();
            let Some(id) = model.tokenizer.token_to_id(&original) else { continue };
            let masked: String = chars
                .iter()
                .enumerate()
                .map(|(i, c)| if i == at { "[MASK]".to_string() } else { c.to_string() })
                .collect();
            let batch = model.encode(&[masked], None, false).unwrap();
            let traced = model.trace(&batch, &mut bert_core::pass::Discard, None).unwrap();
            let logits = traced.outputs.mlm_logits.unwrap();
            let position = batch
                .ids
                .row(0)
                .iter()
                .position(|&i| i == model.tokenizer.token_to_id("[MASK]").unwrap() as i64)
                .unwrap();
            let row: Vec<f64> = logits.slice(ndarray::s![0, position, ..]).iter().map(|&v| f64::from(v)).collect();
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let log_total = max + row.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
            sum += log_total - row[id as usize];
            let above = row.iter().enumerate().filter(|&(i, v)| i != id as usize && *v >= row[id as usize]).count();
            count += 1;
            top1 += usize::from(above == 0);
            top5 += usize::from(above < 5);
        }
    }
    println!(
        "{count} characters: loss {:.6} (the measure {:.6}), top-1 {top1}, top-5 {top5}",
        sum / count as f64,
        evaluation.loss
    );
    assert_eq!((evaluation.examples, evaluation.correct, evaluation.top5_correct), (count, top1, Some(top5)));
    assert!(evaluation.each_token);
    // The measure sums f32 losses; this sums f64 ones from the same f32 logits.
    let relative = (evaluation.loss - sum / count as f64).abs() / evaluation.loss;
    assert!(
        relative < 1e-6,
        "loss: expected {} (masked in the text), got {} (each token)",
        sum / count as f64,
        evaluation.loss
    );
}

/// The course models' recipes are reproducible: the first five steps of golden/english-small's
/// and golden/chinese-small's phase 1, from the recipe's new weights (drawn with `--from-config
/// --seed 0`) and on the batches the run drew (kept in `phase-1/first-steps/`, so that the test
/// needs no corpus), give the losses the run's log recorded, bit for bit; the Chinese run's
/// dropout masks included, which each step draws from the run's seed and the step.
#[test]
fn the_course_models_recipes_repeat_their_first_five_steps_bit_for_bit() {
    for model in ["english-small", "chinese-small"] {
        repeat_first_five_steps(model);
    }
}

fn repeat_first_five_steps(model_name: &str) {
    use bert_core::training::options::TrainOptions;
    use bert_core::training::Trainer;
    use bert_core::Discard;

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../golden").join(model_name);
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("phase-1/trainer_state.json")).unwrap()).unwrap();
    let options: TrainOptions = serde_json::from_value(state["options"].clone()).unwrap();
    let model = BertModel::from_config(&dir, options.batching.seed).unwrap();
    // The corpus only has to be one the options accept: every batch below is the run's own.
    let sample = std::fs::read_to_string(dir.join("heldout-sample.txt")).unwrap();
    let corpus = Corpus::parse(&sample, Path::new("heldout-sample.txt")).unwrap();
    let mut trainer = Trainer::new(model, corpus, options).unwrap();
    let log = state["log_history"].as_array().unwrap();
    for step in 1..=5 {
        let batch = batch_of(&dir.join(format!("phase-1/first-steps/step-{step}")));
        let got = trainer.step_with(batch, &mut Discard).unwrap();
        // The log holds each loss as the float32 it is, in its shortest decimal form.
        let want: f32 = serde_json::from_value(log[step - 1]["loss"].clone()).unwrap();
        assert_eq!(log[step - 1]["step"], step, "{model_name}: the log's entry {step}");
        assert_eq!(
            got.loss.to_bits(),
            want.to_bits(),
            "{model_name}: step {step}: loss: expected {want} (the recipe's log), got {}",
            got.loss
        );
    }
}

/// The batch a training step read, from the inputs its `--dump-step` dump wrote (the recipe
/// keeps these four files of each step): the ids the model saw, the token types, the attention
/// mask and the MLM labels.
fn batch_of(dump_dir: &Path) -> bert_core::Batch {
    let read = |name: &str| -> ndarray::Array2<i64> {
        let path = dump_dir.join(format!("{name}.npy"));
        ndarray_npy::read_npy(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let ids = read("input.ids");
    bert_core::Batch {
        tokens: vec![Vec::new(); ids.nrows()],
        ids,
        token_type_ids: read("input.token_type_ids"),
        attention_mask: read("input.attention_mask"),
        pairs: false,
        labels: bert_core::objectives::Labels { mlm: Some(read("input.labels")), ..Default::default() },
    }
}
