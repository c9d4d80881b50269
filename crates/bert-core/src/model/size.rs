//! Parameter counts per part of the model, from config.json alone (no weights needed).

use crate::io::config::BertConfig;
use crate::stage::OutputHeads;

/// How many parameters each part holds. The MLM decoder's weight is the word embedding table
/// (tied), so it is counted once, in the embeddings; only its bias belongs to the head.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ParamCounts {
    pub embeddings: usize,
    pub encoder: usize,
    pub per_layer: usize,
    pub pooler: usize,
    pub mlm: usize,
    pub nsp: usize,
    pub classifier: usize,
}

impl ParamCounts {
    /// Counts for `config` with the given heads; `n_labels` sizes the classifier.
    pub fn new(config: &BertConfig, heads: OutputHeads, n_labels: usize) -> ParamCounts {
        let (h, i, v) = (config.hidden_size, config.intermediate_size, config.vocab_size);
        let linear = |inputs: usize, outputs: usize| inputs * outputs + outputs;
        let layer_norm = 2 * h;
        let embeddings = (v + config.max_position_embeddings + config.type_vocab_size) * h + layer_norm;
        // Q, K, V and the attention output are H -> H; then H -> I -> H; two LayerNorms.
        let per_layer = 4 * linear(h, h) + linear(h, i) + linear(i, h) + 2 * layer_norm;
        let when = |present: bool, count: usize| if present { count } else { 0 };
        ParamCounts {
            embeddings,
            encoder: per_layer * config.num_hidden_layers,
            per_layer,
            pooler: when(heads.pooler, linear(h, h)),
            mlm: when(heads.mlm, linear(h, h) + layer_norm + v),
            nsp: when(heads.nsp, linear(h, 2)),
            classifier: when(heads.classifier, linear(h, n_labels)),
        }
    }

    pub fn total(&self) -> usize {
        self.embeddings + self.encoder + self.pooler + self.mlm + self.nsp + self.classifier
    }
}
