//! The embedding lookup: a table's rows picked by ids.

use ndarray::{Array3, ArrayView2, Axis};

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
