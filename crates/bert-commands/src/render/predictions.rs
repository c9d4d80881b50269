//! What the heads say: top-k tokens for each [MASK], the argmax sequence, NSP and classifier
//! probabilities; and with labels, the losses and how each labelled position fared.

use std::fmt::Write;

use bert_core::io::tokenizer::MASK;
use bert_core::model::Outputs;
use bert_core::objectives::IGNORE;
use bert_core::ops::{softmax_rows, Float};
use bert_core::{Batch, BertModel};
use ndarray::{ArrayView1, ArrayView2, ArrayView3, Axis};

use crate::render::text_table::{new_table, visible};

/// The probabilities of one row of logits: the library's softmax, in f64 so that the printed
/// probabilities keep their digits.
fn softmax(logits: ArrayView1<'_, f32>) -> Vec<f64> {
    softmax_rows(logits.mapv(f64::from)).to_vec()
}

/// The `top_k` most likely tokens at one `[MASK]`.
pub struct MaskPrediction {
    pub seq: usize,
    pub pos: usize,
    /// (token, id, probability), most likely first.
    pub top: Vec<(String, usize, f64)>,
}

/// The `top_k` tokens `logits` `[B,T,V]` predict at every position where `ids` `[B,T]` holds
/// `mask_id`, sequence by sequence; `token` names an id.
pub fn mask_predictions(
    ids: ArrayView2<'_, i64>,
    logits: ArrayView3<'_, f32>,
    mask_id: Option<i64>,
    top_k: usize,
    token: &dyn Fn(usize) -> String,
) -> Vec<MaskPrediction> {
    let mut all = Vec::new();
    for ((b, t), &id) in ids.indexed_iter() {
        if Some(id) != mask_id {
            continue;
        }
        let probs = softmax(logits.index_axis(Axis(0), b).row(t));
        // A NaN is never a guess, let alone the best one.
        let mut order: Vec<usize> = (0..probs.len()).filter(|&id| !probs[id].is_nan()).collect();
        order.sort_by(|&x, &y| probs[y].total_cmp(&probs[x]));
        let top = order.iter().take(top_k).map(|&id| (token(id), id, probs[id])).collect();
        all.push(MaskPrediction { seq: b, pos: t, top });
    }
    all
}

/// The report for every head the model has, or an empty string.
pub fn report<F: Float>(model: &BertModel<F>, batch: &Batch, outputs: &Outputs, top_k: usize) -> String {
    let mut out = String::new();
    if let Some(logits) = &outputs.mlm_logits {
        let mask_id = model.tokenizer.token_to_id(MASK).map(i64::from);
        let token = |id: usize| model.tokenizer.id_to_token(id as u32).unwrap_or_default();
        for prediction in mask_predictions(batch.ids.view(), logits.view(), mask_id, top_k, &token) {
            let mut table = new_table(&["rank", "token", "id", "probability"], &[0, 2, 3]);
            for (rank, (token, id, probability)) in prediction.top.iter().enumerate() {
                table.add_row(vec![
                    (rank + 1).to_string(),
                    visible(token),
                    id.to_string(),
                    format!("{probability:.4}"),
                ]);
            }
            let (b, t) = (prediction.seq, prediction.pos);
            let _ = writeln!(out, "\n[MASK] at position {t} of sequence {b}, top {top_k}:\n{table}");
        }
        for (b, row) in logits.outer_iter().enumerate() {
            let length = batch.tokens[b].len();
            let ids: Vec<u32> = (0..length)
                .map(|t| {
                    let probs = row.row(t);
                    let best = probs.iter().enumerate().max_by(|x, y| x.1.total_cmp(y.1)).map_or(0, |(i, _)| i);
                    best as u32
                })
                .collect();
            let tokens: Vec<String> =
                ids.iter().map(|&id| visible(&model.tokenizer.id_to_token(id).unwrap_or_default())).collect();
            let _ = writeln!(
                out,
                "\nargmax of mlm.logits, sequence {b}: {}\n  decoded: {}",
                tokens.join(" "),
                visible(&model.tokenizer.decode(&ids))
            );
        }
    }
    if let Some(logits) = &outputs.nsp_logits {
        let mut table =
            new_table(&["sequence", "logit is_next", "logit random", "P(is_next)", "P(random)"], &[0, 1, 2, 3, 4]);
        for (b, row) in logits.outer_iter().enumerate() {
            let p = softmax(row);
            table.add_row(vec![
                b.to_string(),
                format!("{:.4}", row[0]),
                format!("{:.4}", row[1]),
                format!("{:.4}", p[0]),
                format!("{:.4}", p[1]),
            ]);
        }
        let _ = writeln!(out, "\nnext sentence prediction (nsp.logits):\n{table}");
    }
    if let (Some(logits), Some(head)) = (&outputs.classifier_logits, &model.classifier) {
        let mut table = new_table(&["sequence", "label", "logit", "probability"], &[0, 2, 3]);
        for (b, row) in logits.outer_iter().enumerate() {
            let p = softmax(row);
            for (label_idx, label) in head.labels.iter().enumerate() {
                table.add_row(vec![
                    b.to_string(),
                    label.clone(),
                    format!("{:.4}", row[label_idx]),
                    format!("{:.4}", p[label_idx]),
                ]);
            }
        }
        let _ = writeln!(out, "\nclassifier (classifier.logits):\n{table}");
    }
    out
}

/// The losses, when the batch has labels: each loss, the MLM perplexity, and for each labelled
/// position the target's probability and rank; for each pair its NSP label's; for each sequence
/// its class's, on a classifier.
pub fn losses<F: Float>(model: &BertModel<F>, batch: &Batch, outputs: &Outputs) -> String {
    let mut out = String::new();
    let Some(total) = outputs.loss else { return out };
    let mut table = new_table(&["loss", "value", "what"], &[1]);
    if let (Some(loss), Some(labels)) = (outputs.mlm_loss, &batch.labels.mlm) {
        let labelled = labels.iter().filter(|&&l| l != IGNORE).count();
        let perplexity = (loss as f64).exp();
        let what = match labelled {
            0 => "no labelled position (every label is -100): a mean over nothing, 0 / 0".to_string(),
            n => format!("mean over {n} labelled position(s); perplexity exp(mlm.loss) = {perplexity:.2}"),
        };
        table.add_row(vec!["mlm.loss".into(), format!("{loss:.4}"), what]);
    }
    if let (Some(loss), Some(labels)) = (outputs.nsp_loss, &batch.labels.nsp) {
        table.add_row(vec!["nsp.loss".into(), format!("{loss:.4}"), format!("mean over {} sequence(s)", labels.len())]);
    }
    if let (Some(loss), Some(labels)) = (outputs.classifier_loss, &batch.labels.class) {
        let what = format!("mean over {} sequence(s)", labels.len());
        table.add_row(vec!["classifier.loss".into(), format!("{loss:.4}"), what]);
    }
    let sum = match (outputs.mlm_loss, outputs.nsp_loss, outputs.classifier_loss) {
        (Some(_), Some(_), None) => "mlm.loss + nsp.loss, as BertForPreTraining returns it",
        (Some(_), None, None) => "mlm.loss, as BertForMaskedLM returns it",
        (None, Some(_), None) => "nsp.loss, as BertForNextSentencePrediction returns it",
        (None, None, Some(_)) => "classifier.loss, as BertForSequenceClassification returns it",
        _ => "the sum of the losses above",
    };
    table.add_row(vec!["loss".into(), format!("{total:.4}"), sum.into()]);
    let title = if outputs.classifier_loss.is_some() { "losses" } else { "pretraining losses" };
    let _ = writeln!(out, "\n{title}:\n{table}");

    if let (Some(logits), Some(labels)) = (&outputs.mlm_logits, &batch.labels.mlm) {
        let mut table =
            new_table(&["sequence", "pos", "model sees", "target", "P(target)", "rank", "loss"], &[0, 1, 4, 5, 6]);
        for ((b, t), &label) in labels.indexed_iter().filter(|(_, &l)| l != IGNORE) {
            let row = logits.index_axis(Axis(0), b);
            let row = row.row(t);
            let p = softmax(row);
            // A NaN logit leaves no order to rank by.
            let rank = match row.iter().all(|v| !v.is_nan()) {
                true => (1 + row.iter().filter(|&&v| v > row[label as usize]).count()).to_string(),
                false => "non-finite".to_string(),
            };
            let token = |id: i64| visible(&model.tokenizer.id_to_token(id as u32).unwrap_or_default());
            table.add_row(vec![
                b.to_string(),
                t.to_string(),
                token(batch.ids[[b, t]]),
                token(label),
                format!("{:.4}", p[label as usize]),
                rank,
                format!("{:.4}", -p[label as usize].ln()),
            ]);
        }
        let _ = writeln!(out, "\nlabelled positions (input.labels != -100):\n{table}");
    }
    if let (Some(logits), Some(labels)) = (&outputs.nsp_logits, &batch.labels.nsp) {
        let mut table = new_table(&["sequence", "next_sentence_label", "P(label)", "loss"], &[0, 1, 2, 3]);
        for (b, (row, &label)) in logits.outer_iter().zip(labels).enumerate() {
            let p = softmax(row)[label as usize];
            let meaning = if label == 0 { "0 (B follows A)" } else { "1 (B is random)" };
            table.add_row(vec![b.to_string(), meaning.into(), format!("{p:.4}"), format!("{:.4}", -p.ln())]);
        }
        let _ = writeln!(out, "\nnext-sentence labels:\n{table}");
    }
    if let (Some(logits), Some(labels), Some(classifier)) =
        (&outputs.classifier_logits, &batch.labels.class, &model.classifier)
    {
        let mut table = new_table(&["sequence", "label", "P(label)", "loss"], &[0, 2, 3]);
        for (b, (row, &label)) in logits.outer_iter().zip(labels).enumerate() {
            let p = softmax(row)[label as usize];
            let name = classifier.labels.get(label as usize).cloned().unwrap_or_else(|| label.to_string());
            table.add_row(vec![b.to_string(), name, format!("{p:.4}"), format!("{:.4}", -p.ln())]);
        }
        let _ = writeln!(out, "\nclass labels (input.class_labels):\n{table}");
    }
    out
}
