//! `BertEmbeddings`: word + token type + position embeddings, then LayerNorm.

use ndarray::{Array3, Axis};

use crate::config::BertConfig;
use crate::error::{BertError, Result};
use crate::layer_norm::LayerNorm;
use crate::stage::{Stage, StageKind};
use crate::tokenize::Batch;
use crate::trace::{Halt, Tracer};
use crate::weights::{Param, WeightStore};

/// The three lookup tables and the LayerNorm, named as in `bert.embeddings.*`.
pub struct BertEmbeddings {
    /// `[V,H]`; also the MLM decoder's weight (tied).
    pub word_embeddings: Param,
    /// `[max_position_embeddings,H]`
    pub position_embeddings: Param,
    /// `[type_vocab_size,H]`
    pub token_type_embeddings: Param,
    pub layer_norm: LayerNorm,
}

impl BertEmbeddings {
    pub fn load(store: &WeightStore, config: &BertConfig) -> Result<BertEmbeddings> {
        let h = config.hidden_size;
        Ok(BertEmbeddings {
            word_embeddings: store.get("bert.embeddings.word_embeddings.weight", &[config.vocab_size, h])?,
            position_embeddings: store
                .get("bert.embeddings.position_embeddings.weight", &[config.max_position_embeddings, h])?,
            token_type_embeddings: store
                .get("bert.embeddings.token_type_embeddings.weight", &[config.type_vocab_size, h])?,
            layer_norm: LayerNorm::load(store, "bert.embeddings.LayerNorm", h, config.eps())?,
        })
    }

    /// Checks that every id indexes its table, before any work is done.
    pub fn check_ids(&self, batch: &Batch) -> Result<()> {
        let (_, tokens) = batch.dims();
        let max_positions = self.position_embeddings.shape()[0];
        if tokens > max_positions {
            return Err(BertError::Input {
                index: 0,
                problem: format!("{tokens} tokens, more than the {max_positions} positions the model has"),
            });
        }
        let tables = [
            (&batch.ids, &self.word_embeddings, "token id", "vocab_size"),
            (&batch.token_type_ids, &self.token_type_embeddings, "token type id", "type_vocab_size"),
        ];
        for (ids, table, what, field) in tables {
            let rows = table.shape()[0];
            for ((index, _), &id) in ids.indexed_iter() {
                if id < 0 || id as usize >= rows {
                    return Err(BertError::Input {
                        index,
                        problem: format!("{what} {id} is outside the table of {field} = {rows} rows"),
                    });
                }
            }
        }
        Ok(())
    }

    /// `[B,T]` ids -> `[B,T,H]` hidden states, emitting each of the five embedding stages.
    pub(crate) fn forward(&self, batch: &Batch, tracer: &mut Tracer) -> Result<Array3<f32>, Halt> {
        let (b, t) = batch.dims();
        let h = self.word_embeddings.shape()[1];
        // [B,T,H]: row ids[b,t] of the word table.
        let word = gather(&self.word_embeddings, &batch.ids, h);
        tracer.f32(Stage::new(StageKind::EmbWord), word.view())?;
        // [T,H] broadcast to [B,T,H]: every sequence starts at position 0.
        let position_table = self.position_embeddings.view2();
        let position = position_table.slice(ndarray::s![..t, ..]);
        let position = position.broadcast((b, t, h)).expect("[T,H] broadcasts to [B,T,H]");
        tracer.f32(Stage::new(StageKind::EmbPosition), position)?;
        let token_type = gather(&self.token_type_embeddings, &batch.token_type_ids, h);
        tracer.f32(Stage::new(StageKind::EmbTokenType), token_type.view())?;
        // HF adds in this order, (word + token_type) + position; f32 addition is not associative,
        // so we keep it.
        let mut sum = word + &token_type;
        sum += &position;
        tracer.f32(Stage::new(StageKind::EmbSum), sum.view())?;
        let mut hidden = sum;
        self.layer_norm.forward_hidden(&mut hidden);
        tracer.f32(Stage::new(StageKind::EmbLayerNorm), hidden.view())?;
        Ok(hidden)
    }
}

/// `[B,T]` ids -> `[B,T,H]`: the rows of `table` `[rows,H]` that the ids name (checked in range).
fn gather(table: &Param, ids: &ndarray::Array2<i64>, h: usize) -> Array3<f32> {
    let (b, t) = ids.dim();
    let table = table.view2();
    let mut out = Array3::zeros((b, t, h));
    for ((bi, ti), &id) in ids.indexed_iter() {
        out.index_axis_mut(Axis(0), bi).row_mut(ti).assign(&table.row(id as usize));
    }
    out
}
