//! What tells the checkpoint a dump was made with, written into its manifest by bert-trace and
//! `dump_reference.py` alike:
//!
//! - the fingerprint: the first 16 hex digits of the SHA-256 of the position-embedding table
//!   (`bert.embeddings.position_embeddings.weight`, little-endian f32, row by row), every dump's
//!   since format 2;
//! - since format 3, a digest of every tensor ([`tensor_digest`]): its name, shape and a strided
//!   sample of at most [`SAMPLE`] of its values. A model that differs from the dump's in any
//!   weight it shares with it (one head's query weights, say) is then refused, where the position
//!   table alone let it through. Sampling keeps it to a few milliseconds for bert-base; a change
//!   that touches no sampled value of a tensor goes unseen, which a checkpoint's training never
//!   makes.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// How many values of a tensor its digest reads: all of a smaller one, else every
/// ⌊i · n / SAMPLE⌋-th for i from 0.
pub const SAMPLE: usize = 4096;

/// The fingerprint of a position-embedding table, its values in row-major order.
pub fn fingerprint(position_table: impl IntoIterator<Item = f32>) -> String {
    let mut hasher = Sha256::new();
    for value in position_table {
        hasher.update(value.to_le_bytes());
    }
    hasher.finalize()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The digest of one tensor: the first 16 hex digits of the SHA-256 of its name, a newline, its
/// shape (decimal, comma-separated), a newline, `float32`, a newline, then its sampled values as
/// little-endian f32 (`values` in row-major order).
pub fn tensor_digest(name: &str, shape: &[usize], values: &[f32]) -> String {
    let mut hasher = Sha256::new();
    let shape: Vec<String> = shape.iter().map(usize::to_string).collect();
    hasher.update(format!("{name}\n{}\nfloat32\n", shape.join(",")).as_bytes());
    let n = values.len();
    if n <= SAMPLE {
        values.iter().for_each(|v| hasher.update(v.to_le_bytes()));
    } else {
        (0..SAMPLE)
            .for_each(|i| hasher.update(values[(i as u128 * n as u128 / SAMPLE as u128) as usize].to_le_bytes()));
    }
    hasher.finalize()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The tensors two digest tables both have whose digests differ, by name.
pub fn differing<'a>(ours: &'a BTreeMap<String, String>, theirs: &'a BTreeMap<String, String>) -> Vec<&'a str> {
    ours.iter()
        .filter(|(name, digest)| theirs.get(*name).is_some_and(|d| d != *digest))
        .map(|(n, _)| n.as_str())
        .collect()
}
