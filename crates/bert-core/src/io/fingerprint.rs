//! A checkpoint's fingerprint: the first 16 hex digits of the SHA-256 of its position-embedding
//! table (`bert.embeddings.position_embeddings.weight`, little-endian f32, row by row). Every
//! checkpoint trains that table, so two checkpoints share it only if one is a copy of the other;
//! hashing it takes a millisecond where hashing every weight would take seconds.
//! `dump_reference.py` computes the same, and both write it into the manifest
//! ([`crate::model::BertModel::fingerprint`] hashes a loaded model's table with this).

use sha2::{Digest, Sha256};

/// The fingerprint of a position-embedding table, its values in row-major order.
pub fn fingerprint(position_table: impl IntoIterator<Item = f32>) -> String {
    let mut hasher = Sha256::new();
    for value in position_table {
        hasher.update(value.to_le_bytes());
    }
    hasher.finalize()[..8].iter().map(|b| format!("{b:02x}")).collect()
}
