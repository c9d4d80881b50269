//! Arbitrary bytes as a whole model.safetensors: see `common/load.rs` for what is run.
//!
//! Seeds: fuzz/seeds/safetensors (golden/tiny's 123 KB checkpoint and a 1.4 KB file of three
//! tensors). Most of what the large seed's mutants change is tensor data; the
//! `safetensors_header` target spends its time on the header instead.
#![no_main]

#[path = "common/load.rs"]
mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::load(data.to_vec());
});
