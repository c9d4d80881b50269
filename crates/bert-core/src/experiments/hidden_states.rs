//! How the hidden states change through the layers, as the page's layer plots draw it: each
//! token's norm after every layer, the mean and spread of the real tokens' values, and each
//! token's cosine between consecutive layers.

use ndarray::{Array2, Array3, Axis};
use serde::Serialize;

/// The statistics of `L+1` hidden states (the embeddings', then each layer's output), each
/// `[B,T,H]`, in f64.
#[derive(Clone, Debug, Serialize)]
pub struct LayerStats {
    /// `[L+1][B][T]`: each token's ℓ2 norm.
    pub token_norms: Vec<Vec<Vec<f64>>>,
    /// `[L+1][B]`: the mean of the real tokens' values.
    pub mean: Vec<Vec<f64>>,
    /// `[L+1][B]`: their standard deviation (divided by their count).
    pub std: Vec<Vec<f64>>,
    /// `[L][B][T]`: each token's cosine between one state and the next (0 where either is 0).
    pub cosine: Vec<Vec<Vec<f64>>>,
}

/// The [`LayerStats`] of `states`; `mask` `[B,T]` says which tokens are real (1).
pub fn layer_stats(states: &[Array3<f64>], mask: &Array2<i64>) -> LayerStats {
    let b = mask.nrows();
    let token_norms = states
        .iter()
        .map(|s| s.outer_iter().map(|seq| seq.map_axis(Axis(1), |v| v.dot(&v).sqrt()).to_vec()).collect())
        .collect();
    let stat = |s: &Array3<f64>, seq: usize| {
        let real: Vec<f64> = s
            .index_axis(Axis(0), seq)
            .outer_iter()
            .zip(mask.row(seq))
            .filter(|(_, &m)| m != 0)
            .flat_map(|(row, _)| row.to_vec())
            .collect();
        let n = real.len().max(1) as f64;
        let mean = real.iter().sum::<f64>() / n;
        (mean, (real.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n).sqrt())
    };
    let mean = states.iter().map(|s| (0..b).map(|seq| stat(s, seq).0).collect()).collect();
    let std = states.iter().map(|s| (0..b).map(|seq| stat(s, seq).1).collect()).collect();
    let cosine = states
        .windows(2)
        .map(|pair| {
            (0..b)
                .map(|seq| {
                    let (x, y) = (pair[0].index_axis(Axis(0), seq), pair[1].index_axis(Axis(0), seq));
                    x.outer_iter()
                        .zip(y.outer_iter())
                        .map(|(u, v)| {
                            let denominator = (u.dot(&u) * v.dot(&v)).sqrt();
                            if denominator > 0.0 {
                                u.dot(&v) / denominator
                            } else {
                                0.0
                            }
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    LayerStats { token_norms, mean, std, cosine }
}
