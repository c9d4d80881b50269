//! Reading and writing files: a checkpoint's `config.json` ([`config`]), its safetensors weights
//! ([`weights`]) and tokenizer ([`tokenizer`]) with the Simplified forms of Traditional
//! characters ([`simplified`]), its fingerprint ([`fingerprint`]), the dumps a
//! pass writes and a diff reads ([`dump`]), and the care taken with every file a user names
//! ([`files`]) and with memory ([`memory`]). Putting them together into a model is the model's
//! own business (`model/load.rs`): nothing here knows what a model is.

pub mod config;
pub mod dump;
pub mod files;
pub mod fingerprint;
pub mod memory;
pub mod simplified;
pub mod tokenizer;
pub mod weights;
