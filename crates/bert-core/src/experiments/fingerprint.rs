//! A checkpoint's fingerprint: the first 16 hex digits of the SHA-256 of its position-embedding
//! table (`bert.embeddings.position_embeddings.weight`, little-endian f32, row by row). Every
//! checkpoint trains that table, so two checkpoints share it only if one is a copy of the other;
//! hashing it takes a millisecond where hashing every weight would take seconds.
//! `dump_reference.py` computes the same, and both write it into the manifest.

use sha2::{Digest, Sha256};

use crate::model::BertModel;
use crate::ops::Float;

impl<F: Float> BertModel<F> {
    /// The fingerprint of the checkpoint this model was loaded from.
    pub fn fingerprint(&self) -> String {
        let mut hasher = Sha256::new();
        // An f64 model holds its f32 values widened, so narrowing them back is exact.
        for value in self.embeddings.position_embeddings.view2().iter() {
            let value = value.to_f32().unwrap_or(f32::NAN);
            hasher.update(value.to_le_bytes());
        }
        hasher.finalize()[..8].iter().map(|b| format!("{b:02x}")).collect()
    }
}
