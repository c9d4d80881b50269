//! `inspect`: the config as a table and the parameter count of each part.

use std::path::Path;

use bert_core::model::size::ParamCounts;
use bert_core::stage::OutputHeads;
use bert_core::BertConfig;
use serde::Serialize;

use crate::error::Result;
use crate::render::text_table::new_table;
use crate::report::{Report, Reported};
use crate::source;

/// What to inspect: a config.json alone, or a model (None: the built-in one).
#[derive(Clone, Debug)]
pub enum Inspected<'a> {
    Config(&'a Path),
    Model(Option<&'a Path>),
}

/// A model's config, which heads it has, and how many parameters each part holds.
#[derive(Clone, Debug, Serialize)]
pub struct InspectReport {
    pub config: BertConfig,
    pub heads: OutputHeads,
    pub parameters: ParamCounts,
}

impl Report for InspectReport {
    fn text(&self) -> String {
        format!("{}\n\n{}\n", config_table(&self.config), params_table(&self.parameters, self.heads))
    }
}

/// The config and the parameter counts per part.
pub fn inspect(what: Inspected<'_>) -> Result<Reported<InspectReport>> {
    let mut notes = Vec::new();
    let (config, heads, n_labels) = match what {
        Inspected::Config(path) => {
            let config = BertConfig::from_file(path)?;
            // A config alone says nothing of the heads; count the encoder with a pooler, as
            // BertModel has one.
            let heads = OutputHeads { pooler: true, ..OutputHeads::default() };
            (config, heads, 0)
        }
        Inspected::Model(model) => {
            let loaded = source::load(model)?;
            notes = loaded.notes;
            let n_labels = loaded.model.classifier.as_ref().map_or(0, |c| c.labels.len());
            (loaded.model.config.clone(), loaded.model.output_heads(), n_labels)
        }
    };
    let parameters = ParamCounts::new(&config, heads, n_labels);
    Ok(Reported { notes, report: InspectReport { config, heads, parameters } })
}

fn config_table(config: &BertConfig) -> comfy_table::Table {
    let mut table = new_table(&["config.json", "value", "gives"], &[1]);
    let rows = [
        ("hidden_size", config.hidden_size.to_string(), "H, the width of every hidden state"),
        ("num_hidden_layers", config.num_hidden_layers.to_string(), "how many encoder layers"),
        ("num_attention_heads", config.num_attention_heads.to_string(), "nh"),
        ("(hidden_size / num_attention_heads)", config.head_size().to_string(), "hs, the size of one head"),
        ("intermediate_size", config.intermediate_size.to_string(), "I, the feed-forward width"),
        ("hidden_act", config.hidden_act.clone(), "the feed-forward activation"),
        ("layer_norm_eps", format!("{:e}", config.layer_norm_eps), "LayerNorm's epsilon"),
        ("vocab_size", config.vocab_size.to_string(), "V, rows of the word embeddings"),
        ("max_position_embeddings", config.max_position_embeddings.to_string(), "the longest input T"),
        ("type_vocab_size", config.type_vocab_size.to_string(), "rows of the token type embeddings"),
        ("pad_token_id", config.pad_token_id.to_string(), "the id used for padding"),
    ];
    for (field, value, gives) in rows {
        table.add_row(vec![field.to_string(), value, gives.to_string()]);
    }
    table
}

fn params_table(counts: &ParamCounts, heads: OutputHeads) -> comfy_table::Table {
    let mut table = new_table(&["part", "parameters", "millions (10^6)", "M (2^20)"], &[1, 2, 3]);
    let rows = [
        ("embeddings", counts.embeddings, true),
        ("encoder", counts.encoder, true),
        ("  one layer", counts.per_layer, true),
        ("pooler", counts.pooler, heads.pooler),
        ("mlm head (decoder tied to embeddings)", counts.mlm, heads.mlm),
        ("nsp head", counts.nsp, heads.nsp),
        ("classifier", counts.classifier, heads.classifier),
        ("total", counts.total(), true),
    ];
    for (part, count, _) in rows.into_iter().filter(|r| r.2) {
        table.add_row(vec![
            part.to_string(),
            count.to_string(),
            format!("{:.3}", count as f64 / 1e6),
            format!("{:.3}", count as f64 / (1u64 << 20) as f64),
        ]);
    }
    table
}
