//! `BertEmbeddings`: word + token type + position embeddings, then LayerNorm.

use ndarray::{Array2, Array3, ArrayView2};

use super::dropout::{self, Dropout};
use super::gradients::{Grads, Record};
use super::layer_norm::LayerNorm;
use super::parameters::{param, WeightAndBias};
use crate::error::Result;
use crate::io::config::BertConfig;
use crate::io::tokenizer::Batch;
use crate::io::weights::{Param, WeightStore};
use crate::ops::{self, Float};
use crate::pass::{Halt, Tracer};
use crate::stage::{ParamKind, Stage, StageKind::*};

/// The three lookup tables and the LayerNorm, named as in `bert.embeddings.*`.
pub struct BertEmbeddings<F: Float = f32> {
    /// `[V,H]`; also the MLM decoder's weight (tied).
    pub word_embeddings: Param<F>,
    /// `[max_position_embeddings,H]`
    pub position_embeddings: Param<F>,
    /// `[type_vocab_size,H]`
    pub token_type_embeddings: Param<F>,
    pub layer_norm: LayerNorm<F>,
}

impl<F: Float> BertEmbeddings<F> {
    /// The tables and the LayerNorm, their parameters named by the stage table.
    pub fn load(store: &WeightStore, config: &BertConfig) -> Result<BertEmbeddings<F>> {
        let h = config.hidden_size;
        let lookup = |kind, rows| store.get(&param(kind).hf(), &[rows, h]);
        let layer_norm = WeightAndBias::read_by(Stage::new(EmbLayerNorm));
        Ok(BertEmbeddings {
            word_embeddings: lookup(ParamKind::WordEmbeddings, config.vocab_size)?,
            position_embeddings: lookup(ParamKind::PositionEmbeddings, config.max_position_embeddings)?,
            token_type_embeddings: lookup(ParamKind::TokenTypeEmbeddings, config.type_vocab_size)?,
            layer_norm: LayerNorm::load(store, layer_norm, h, F::of(config.layer_norm_eps))?,
        })
    }

    /// `[B,T]` ids -> `[B,T,H]` hidden states (dropped out in a training pass).
    pub(crate) fn forward(
        &self,
        batch: &Batch,
        dropout: Option<&Dropout>,
        tracer: &mut Tracer,
    ) -> Result<Array3<F>, Halt> {
        let mut word = self.word(batch.ids.view());
        tracer.float(Stage::new(EmbWord), &mut word)?;
        let mut position = self.position(batch.dims());
        tracer.float(Stage::new(EmbPosition), &mut position)?;
        let mut token_type = self.token_type(batch.token_type_ids.view());
        tracer.float(Stage::new(EmbTokenType), &mut token_type)?;
        let mut sum = sum(word, &token_type, &position);
        tracer.float(Stage::new(EmbSum), &mut sum)?;
        let mut hidden = self.layer_norm.forward(sum);
        tracer.float(Stage::new(EmbLayerNorm), &mut hidden)?;
        dropout::apply(dropout, Stage::new(EmbDropout), hidden, tracer)
    }

    /// `embeddings.word`: `[B,T]` ids -> `[B,T,H]`, row `ids[b,t]` of the word table.
    pub fn word(&self, ids: ArrayView2<'_, i64>) -> Array3<F> {
        ops::embedding(self.word_embeddings.view2(), ids)
    }

    /// `embeddings.position`: `(B,T)` -> `[B,T,H]`; every sequence counts its positions from 0,
    /// padding included.
    pub fn position(&self, (b, t): (usize, usize)) -> Array3<F> {
        ops::embedding(self.position_embeddings.view2(), positions(b, t).view())
    }

    /// `embeddings.token_type`: `[B,T]` -> `[B,T,H]`, sentence A's row for type 0, sentence B's
    /// for type 1.
    pub fn token_type(&self, token_type_ids: ArrayView2<'_, i64>) -> Array3<F> {
        ops::embedding(self.token_type_embeddings.view2(), token_type_ids)
    }

    /// The backward: `[B,T,H]` d loss / d embeddings.layernorm -> the three tables' gradients
    /// (and the LayerNorm's), added to `grads`.
    pub(crate) fn backward(
        &self,
        batch: &Batch,
        record: &Record<F>,
        d_hidden: &Array3<F>,
        pad_token_id: usize,
        grads: &mut Grads<F>,
        tracer: &mut Tracer,
    ) -> Result<(), Halt> {
        let mut d_hidden = dropout::backward(record, Stage::new(EmbDropout), d_hidden.clone(), tracer)?;
        tracer.float(Stage::new(EmbLayerNorm).grad(), &mut d_hidden)?;
        let mut d_sum = self.layer_norm.backward(record.three(Stage::new(EmbSum)), d_hidden.view(), grads);
        tracer.float(Stage::new(EmbSum).grad(), &mut d_sum)?;
        // sum = (word + token_type) + position: each lookup's gradient is d sum, scattered into
        // its table's rows.
        let (mut d_word, mut d_position, mut d_token_type) = (d_sum.clone(), d_sum.clone(), d_sum);
        tracer.float(Stage::new(EmbWord).grad(), &mut d_word)?;
        tracer.float(Stage::new(EmbPosition).grad(), &mut d_position)?;
        tracer.float(Stage::new(EmbTokenType).grad(), &mut d_token_type)?;
        let mut d_word = ops::embedding_backward(batch.ids.view(), d_word.view(), self.word_embeddings.shape()[0]);
        // nn.Embedding(padding_idx=pad_token_id) never updates the padding row from a lookup.
        if pad_token_id < d_word.nrows() {
            d_word.row_mut(pad_token_id).fill(F::zero());
        }
        grads.add(param(ParamKind::WordEmbeddings), d_word.into_dyn());
        let (b, t) = batch.dims();
        let rows = self.position_embeddings.shape()[0];
        grads.add(
            param(ParamKind::PositionEmbeddings),
            ops::embedding_backward(positions(b, t).view(), d_position.view(), rows).into_dyn(),
        );
        let rows = self.token_type_embeddings.shape()[0];
        grads.add(
            param(ParamKind::TokenTypeEmbeddings),
            ops::embedding_backward(batch.token_type_ids.view(), d_token_type.view(), rows).into_dyn(),
        );
        Ok(())
    }
}

/// `embeddings.sum`: `[B,T,H]` three times -> `[B,T,H]`. HF adds in this order,
/// (word + token_type) + position; f32 addition is not associative, so the order is kept.
/// PyTorch makes a tensor of the first sum, which a pass in a narrower format rounds
/// (`ops::narrow`, the identity in f32 and f64).
pub fn sum<F: Float>(word: Array3<F>, token_type: &Array3<F>, position: &Array3<F>) -> Array3<F> {
    ops::narrow(word + token_type) + position
}

/// `[B,T]`: the position of every token, 0, 1, ... in each sequence.
fn positions(b: usize, t: usize) -> Array2<i64> {
    Array2::from_shape_fn((b, t), |(_, i)| i as i64)
}
