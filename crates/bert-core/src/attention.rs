//! `BertAttention`: multi-head self-attention, then the output projection, the residual and
//! LayerNorm (BERT normalises after adding the residual: post-norm).

use ndarray::linalg::general_mat_mul;
use ndarray::{s, Array2, Array3, Array4, ArrayView1, ArrayView4, ArrayViewMut2};

use crate::config::BertConfig;
use crate::error::Result;
use crate::gemm::{self, Matrix, MatrixMut};
use crate::layer_norm::LayerNorm;
use crate::linear::{rows, unrows, Linear};
use crate::simd::{self, vectorized, LANES};
use crate::stage::{Stage, StageKind};
use crate::threads::{self, PARALLEL_MIN_LEN};
use crate::trace::{Halt, Tracer};
use crate::weights::WeightStore;

/// `attention.self`: the query, key and value projections, `[H]` -> `[H]` each.
pub struct BertSelfAttention {
    pub query: Linear,
    pub key: Linear,
    pub value: Linear,
    pub n_heads: usize,
}

/// `attention.output`: the projection back to H and the LayerNorm after the residual.
pub struct BertSelfOutput {
    pub dense: Linear,
    pub layer_norm: LayerNorm,
}

/// `bert.encoder.layer.{i}.attention`
pub struct BertAttention {
    pub self_attention: BertSelfAttention,
    pub output: BertSelfOutput,
}

impl BertAttention {
    pub fn load(store: &WeightStore, config: &BertConfig, prefix: &str) -> Result<BertAttention> {
        let h = config.hidden_size;
        let linear = |name: &str| Linear::load(store, &format!("{prefix}.{name}"), h, h);
        Ok(BertAttention {
            self_attention: BertSelfAttention {
                query: linear("self.query")?,
                key: linear("self.key")?,
                value: linear("self.value")?,
                n_heads: config.num_attention_heads,
            },
            output: BertSelfOutput {
                dense: linear("output.dense")?,
                layer_norm: LayerNorm::load(store, &format!("{prefix}.output.LayerNorm"), h, config.eps())?,
            },
        })
    }

    /// `[B,T,H]` -> `[B,T,H]`
    ///
    /// `mask_add` `[B,T]` is 0 for real tokens and f32::MIN for padding; it is added to every
    /// query's scores for the padded keys, so softmax gives them zero weight.
    pub(crate) fn forward(
        &self,
        layer_idx: usize,
        x: &Array3<f32>,
        mask_add: &Array2<f32>,
        tracer: &mut Tracer,
    ) -> Result<Array3<f32>, Halt> {
        let stage = |kind| Stage::layer(layer_idx, kind);
        let (b, t, h) = x.dim();
        let nh = self.self_attention.n_heads;
        let hs = h / nh;

        // [B,T,H] -> [B,T,nh,hs]: the H features of a token are nh consecutive groups of hs.
        let split =
            |linear: &Linear| linear.forward(rows(x)).into_shape_with_order((b, t, nh, hs)).expect("H = nh * hs");
        let query = split(&self.self_attention.query);
        tracer.f32(stage(StageKind::AttnQuery), heads_first(&query))?;
        let key = split(&self.self_attention.key);
        tracer.f32(stage(StageKind::AttnKey), heads_first(&key))?;
        let value = split(&self.self_attention.value);
        tracer.f32(stage(StageKind::AttnValue), heads_first(&value))?;

        // [B,nh,T,T]: scores[b,h,i,j] = q_i · k_j / √hs + mask[b,j]. Dividing by √hs keeps the
        // dot products of hs-long vectors near unit variance, so softmax does not saturate.
        let scale = (hs as f32).powf(-0.5);
        let mut scores = Array4::<f32>::zeros((b, nh, t, t));
        // The heads are independent: the threads share them, each head's product on one thread.
        let blocks = scores.as_slice_mut().expect("a new array is contiguous");
        threads::for_each_part(blocks, t * t, 1, |first, part| {
            for (i, out) in part.chunks_exact_mut(t * t).enumerate() {
                let (bi, hi) = ((first + i) / nh, (first + i) % nh);
                head_scores(&query, &key, (bi, hi), scale, mask_add.row(bi), out);
            }
        });
        tracer.f32(stage(StageKind::AttnScores), scores.view())?;

        // [B,nh,T,T]: each query row becomes a distribution over the keys. The rows are
        // independent, so the threads share them once there are enough (512 tokens make 3
        // million scores per layer).
        let mut probs = scores;
        let values = probs.as_slice_mut().expect("a new array is contiguous");
        threads::for_each_part(values, t, PARALLEL_MIN_LEN.div_ceil(t), |_, rows| {
            for row in rows.chunks_exact_mut(t) {
                softmax_inplace(row);
            }
        });
        tracer.f32(stage(StageKind::AttnProbs), probs.view())?;

        // [B,nh,T,hs]: each head's weighted sum of values, the heads shared by the threads.
        let mut per_head = Array4::<f32>::zeros((b, nh, t, hs));
        let blocks = per_head.as_slice_mut().expect("a new array is contiguous");
        threads::for_each_part(blocks, t * hs, 1, |first, part| {
            for (i, out) in part.chunks_exact_mut(t * hs).enumerate() {
                head_context(&probs, &value, ((first + i) / nh, (first + i) % nh), out);
            }
        });
        // [B,nh,T,hs] -> [B,T,nh,hs] -> [B,T,H]: the heads merged back (one copy).
        let context = per_head
            .permuted_axes([0, 2, 1, 3])
            .as_standard_layout()
            .into_owned()
            .into_shape_with_order((b, t, h))
            .expect("nh * hs = H");
        tracer.f32(stage(StageKind::AttnContext), context.view())?;

        let output = unrows(self.output.dense.forward(rows(&context)), b, t);
        tracer.f32(stage(StageKind::AttnOutput), output.view())?;
        // The residual is added in place: the output buffer becomes the residual.
        let mut hidden = output;
        hidden += x;
        tracer.f32(stage(StageKind::AttnResidual), hidden.view())?;
        self.output.layer_norm.forward_hidden(&mut hidden);
        tracer.f32(stage(StageKind::AttnLayerNorm), hidden.view())?;
        Ok(hidden)
    }
}

vectorized! {
    /// softmax(x)_j = exp(x_j - max x) / Σ_k exp(x_k - max x); subtracting the max avoids
    /// overflow and makes the padded keys' f32::MIN scores come out as exactly 0.
    pub fn softmax_inplace(row: &mut [f32]) {
        let mut max = [f32::NEG_INFINITY; LANES];
        let mut chunks = row.chunks_exact(LANES);
        for chunk in &mut chunks {
            for (m, &v) in max.iter_mut().zip(chunk) {
                *m = m.max(v);
            }
        }
        let max = chunks.remainder().iter().chain(&max).copied().fold(f32::NEG_INFINITY, f32::max);

        let mut sum = [0.0f32; LANES];
        let mut chunks = row.chunks_exact_mut(LANES);
        for chunk in &mut chunks {
            for (s, v) in sum.iter_mut().zip(chunk) {
                *v = simd::exp(*v - max);
                *s += *v;
            }
        }
        let mut tail = 0.0;
        for v in chunks.into_remainder() {
            *v = simd::exp(*v - max);
            tail += *v;
        }
        let inv_sum = 1.0 / (sum.iter().sum::<f32>() + tail);
        for v in row.iter_mut() {
            *v *= inv_sum;
        }
    }
}

/// `[T,T]`: one head's scores, `scores[i,j] = (q_i · k_j) · scale + mask[j]`, into `out`.
fn head_scores(
    query: &Array4<f32>,
    key: &Array4<f32>,
    (bi, hi): (usize, usize),
    scale: f32,
    mask: ArrayView1<'_, f32>,
    out: &mut [f32],
) {
    let t = query.dim().1;
    // scoresᵀ [keys,queries] = K Qᵀ, so that the keys, which run along a row of scores, are the
    // side [`gemm::product`] keeps in vector registers. As in HF: the product, then the scale,
    // then the mask.
    let transposed = MatrixMut { values: &mut *out, row_stride: 1, col_stride: t };
    let hs = query.dim().3;
    if !gemm::product(head(key, bi, hi), head(query, bi, hi), None, scale, (t, hs, t), transposed) {
        let q = query.slice(s![bi, .., hi, ..]); // [T,hs], a strided view: no copy
        let k = key.slice(s![bi, .., hi, ..]); // [T,hs]
        let mut view = ArrayViewMut2::from_shape((t, t), &mut *out).expect("[T,T]");
        general_mat_mul(scale, &q, &k.t(), 0.0, &mut view);
    }
    // HF adds no mask to a sequence without padding; adding zeros would change nothing but the
    // time taken.
    if mask.iter().any(|&m| m != 0.0) {
        let mut view = ArrayViewMut2::from_shape((t, t), out).expect("[T,T]");
        view += &mask;
    }
}

/// `[T,hs]`: one head's context, `context[i] = Σ_j probs[i,j] · v_j`, into `out`.
fn head_context(probs: &Array4<f32>, value: &Array4<f32>, (bi, hi): (usize, usize), out: &mut [f32]) {
    let (_, t, nh, hs) = value.dim();
    let p = probs.slice(s![bi, hi, .., ..]); // [T,T]
                                             // contextᵀ [hs,queries] = Vᵀ Pᵀ: the hs values of a head are the side kept in vector
                                             // registers, read from V's rows; P is read by rows, as stored.
    let v_t = Matrix { row_stride: 1, col_stride: nh * hs, ..head(value, bi, hi) };
    let p_rows = Matrix::row_major(p.to_slice().expect("a [T,T] block of a new array"), t);
    let transposed = MatrixMut { values: &mut *out, row_stride: 1, col_stride: hs };
    if !gemm::product(v_t, p_rows, None, 1.0, (hs, t, t), transposed) {
        let v = value.slice(s![bi, .., hi, ..]); // [T,hs]
        let mut view = ArrayViewMut2::from_shape((t, hs), out).expect("[T,hs]");
        general_mat_mul(1.0, &p, &v, 0.0, &mut view);
    }
}

/// Head `hi` of sequence `bi` of a `[B,T,nh,hs]` array, as the matrix `[T,hs]` (rows H apart).
fn head(a: &Array4<f32>, bi: usize, hi: usize) -> Matrix<'_> {
    let (_, t, nh, hs) = a.dim();
    let values = a.as_slice().expect("projections are new arrays");
    Matrix::row_major(&values[(bi * t * nh + hi) * hs..], nh * hs)
}

/// `[B,T,nh,hs]` seen as `[B,nh,T,hs]` (a transposed view, no copy), as HF's `transpose(1, 2)`.
fn heads_first(a: &Array4<f32>) -> ArrayView4<'_, f32> {
    a.view().permuted_axes([0, 2, 1, 3])
}
