//! Arbitrary bytes as the JSON header of a model.safetensors whose data section is
//! golden/tiny's (118 KB): the file is the input's length as a little-endian u64, the input, then
//! that data. See `common/load.rs` for what is run. A header that keeps golden/tiny's offsets
//! loads a whole model, so mutations of names, dtypes, shapes and offsets reach every check of
//! the loader without the fuzzer carrying the data in each input.
//!
//! Seed: fuzz/seeds/safetensors_header/tiny.json, golden/tiny's header. To reproduce an
//! artifact outside the fuzzer, build the same file (see fuzz/README.md).
#![no_main]

#[path = "common/load.rs"]
mod common;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// golden/tiny's data section: everything after its header.
fn data_section() -> &'static [u8] {
    static DATA: OnceLock<Vec<u8>> = OnceLock::new();
    DATA.get_or_init(|| {
        let file =
            std::fs::read(std::path::Path::new(common::TINY).join("model.safetensors")).expect("golden/tiny weights");
        let header_len = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
        file[8 + header_len..].to_vec()
    })
}

fuzz_target!(|header: &[u8]| {
    let data = data_section();
    let mut file = Vec::with_capacity(8 + header.len() + data.len());
    file.extend((header.len() as u64).to_le_bytes());
    file.extend(header);
    file.extend(data);
    common::load(file);
});
