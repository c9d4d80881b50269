//! `BertConfig::from_json` on arbitrary bytes: any result is fine, a panic is not.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz/config.json");
    if let Ok(config) = bert_core::BertConfig::from_json(data, path) {
        // What every loader asks of a config that passed validation must not panic either.
        let _ = config.head_size();
        let _ = config.activation();
        let _ = config.eps();
    }
});
