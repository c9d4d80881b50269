//! The token table: each sequence's tokens as the model sees them, with their ids, types and
//! mask, and when the input has MLM labels, what is to be predicted where and how each chosen
//! token was replaced.

use bert_core::objectives::IGNORE;
use bert_core::ops::Float;
use bert_core::{Batch, BertModel};

use crate::render::text_table::{new_table, visible};

/// One table per sequence, each with its title line.
pub fn render<F: Float>(model: &BertModel<F>, batch: &Batch) -> String {
    let mut out = String::new();
    let (b, t) = batch.dims();
    let labels = batch.labels.mlm.as_ref();
    let token = |id: i64| visible(&model.tokenizer.id_to_token(id as u32).unwrap_or_else(|| format!("#{id}")));
    for seq in 0..b {
        let mut header = vec!["pos", "token", "id", "type", "mask"];
        if labels.is_some() {
            header.extend(["predict", "masking"]);
        }
        let mut table = new_table(&header, &[0, 2, 3, 4]);
        for pos in 0..t {
            let id = batch.ids[[seq, pos]];
            let mut row = vec![
                pos.to_string(),
                token(id),
                id.to_string(),
                batch.token_type_ids[[seq, pos]].to_string(),
                batch.attention_mask[[seq, pos]].to_string(),
            ];
            if let Some(labels) = labels {
                let label = labels[[seq, pos]];
                let replacement = batch.labels.replacements.iter().find(|r| r.seq == seq && r.pos == pos);
                let (predict, how) = match (label, replacement) {
                    (IGNORE, _) => (String::new(), String::new()),
                    (label, Some(r)) => {
                        (token(label), format!("{} → {} ({})", token(r.original), token(r.shown), r.kind.name()))
                    }
                    (label, None) => (token(label), "typed [MASK]".to_string()),
                };
                row.extend([predict, how]);
            }
            table.add_row(row);
        }
        let title = if b > 1 { format!("tokens of sequence {seq}") } else { "tokens".into() };
        out += &format!("{title} ({} of {t} real):\n{table}\n", batch.tokens[seq].len());
    }
    out
}
