//! Loading a checkpoint: `config.json` ([`config`]), the safetensors weights ([`weights`]), the
//! tokenizer ([`tokenize`]), the whole model directory ([`checkpoint`]), and the care taken with
//! every file a user names ([`files`]) and with memory ([`memory`]).

pub mod checkpoint;
pub mod config;
pub mod files;
pub mod memory;
pub mod tokenize;
pub mod weights;
