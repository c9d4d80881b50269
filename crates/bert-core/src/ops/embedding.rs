//! The embedding lookup: a table's rows picked by ids.

use ndarray::{Array2, Array3, ArrayView2, ArrayView3, Axis};

/// `[B,T]` ids -> `[B,T,H]`: row `ids[b,t]` of `table` `[rows,H]`, as `nn.Embedding`. The ids
/// must index the table (the model checks them before the forward pass).
pub fn embedding<A: Clone + num_traits::Zero>(table: ArrayView2<'_, A>, ids: ArrayView2<'_, i64>) -> Array3<A> {
    let (b, t) = ids.dim();
    let mut out = Array3::zeros((b, t, table.ncols()));
    for ((bi, ti), &id) in ids.indexed_iter() {
        out.index_axis_mut(Axis(0), bi).row_mut(ti).assign(&table.row(id as usize));
    }
    out
}

/// The backward of [`embedding`]: d loss / d out `[B,T,H]` -> d loss / d table `[rows,H]`.
/// Each token's gradient is added into its id's row (a scatter-add): a word used twice gets
/// both gradients, and a row no id picked gets none.
pub fn embedding_backward<A: Clone + num_traits::Zero + std::ops::AddAssign>(
    ids: ArrayView2<'_, i64>,
    d_out: ArrayView3<'_, A>,
    rows: usize,
) -> Array2<A> {
    let mut d_table = Array2::zeros((rows, d_out.dim().2));
    for ((bi, ti), &id) in ids.indexed_iter() {
        let mut row = d_table.row_mut(id as usize);
        for (d, g) in row.iter_mut().zip(d_out.index_axis(Axis(0), bi).row(ti)) {
            *d += g.clone();
        }
    }
    d_table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gradcheck;

    #[test]
    fn backward_adds_every_use_of_a_row_and_matches_finite_differences() {
        let table = gradcheck::values(&[5, 3], 9).into_dimensionality::<ndarray::Ix2>().unwrap();
        // Row 2 is used three times, row 4 never.
        let ids = ndarray::arr2(&[[2, 0, 2], [1, 2, 3]]);
        let upstream = gradcheck::values(&[2, 3, 3], 10);
        let got = embedding_backward(ids.view(), upstream.view().into_dimensionality().unwrap(), 5);
        let forward =
            |t: &ndarray::ArrayD<f64>| embedding(t.view().into_dimensionality().unwrap(), ids.view()).into_dyn();
        let expected = gradcheck::numeric(forward, &table.clone().into_dyn(), &upstream);
        gradcheck::assert_close("embedding_backward", &got.clone().into_dyn(), &expected);
        assert!(got.row(4).iter().all(|&v| v == 0.0), "an unused row gets no gradient");
    }
}
