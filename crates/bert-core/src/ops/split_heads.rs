//! Splitting the hidden features into attention heads and merging them back.

use ndarray::{Array3, Array4, ArrayView4};

/// `[B,T,H]` -> `[B,nh,T,hs]`: a token's H features are nh consecutive groups of hs, one group
/// per head. As HF's `x.view(B, T, nh, hs).transpose(1, 2)`: the axes are relabelled, nothing
/// is copied.
pub fn split_heads<A: Clone>(x: Array3<A>, n_heads: usize) -> Array4<A> {
    let (b, t, h) = x.dim();
    // A view needs the values in row-major order. A dense layer's output always is, and then
    // this line moves the array without copying; any other layout is copied into it first.
    let x = x.as_standard_layout().into_owned();
    x.into_shape_with_order((b, t, n_heads, h / n_heads)).expect("H = nh * hs").permuted_axes([0, 2, 1, 3])
}

/// `[B,nh,T,hs]` -> `[B,T,H]`: the heads side by side again, as HF's
/// `x.transpose(1, 2).reshape(B, T, H)`. The values are copied once, into token order.
pub fn merge_heads<A: Clone>(x: Array4<A>) -> Array3<A> {
    let (b, nh, t, hs) = x.dim();
    let tokens_first = x.permuted_axes([0, 2, 1, 3]);
    tokens_first.as_standard_layout().into_owned().into_shape_with_order((b, t, nh * hs)).expect("nh * hs = H")
}

/// `[B,nh,T,hs]` -> `[B,nh,hs,T]`: the last two axes swapped, as `k.transpose(-2, -1)` (a view,
/// no copy).
pub fn transpose<A>(x: ArrayView4<'_, A>) -> ArrayView4<'_, A> {
    x.permuted_axes([0, 1, 3, 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_undoes_split_and_head_h_holds_features_h_hs_to_h_hs_plus_hs() {
        let x = Array3::from_shape_fn((2, 3, 12), |(b, t, i)| (b * 100 + t * 20 + i) as i64);
        let heads = split_heads(x.clone(), 4);
        assert_eq!(heads.dim(), (2, 4, 3, 3));
        assert_eq!(heads[[1, 2, 0, 1]], x[[1, 0, 2 * 3 + 1]]);
        assert_eq!(merge_heads(heads), x);
    }
}
