//! bert-core's integration tests, one test binary: each file below was a binary of its own, and
//! compiling and linking each against bert-core at opt-level 3 took about 210 s of a fresh
//! clone's build on 2 cores of a Zen 3 (`cargo build --timings`), the generic model instantiated
//! again in each. Run one file's tests with its module name as the filter:
//! `cargo test -p bert-core --test all training::`.

mod support;

mod checkpoint_saves;
mod dump_writer;
mod experiments;
mod fuzz_regressions;
mod golden;
mod gradients;
mod loader;
mod masking;
mod params;
mod precision;
mod rollout;
mod segmentation;
mod sentence_pooling;
mod tokenizer;
mod tokenizer_reference;
mod training;
mod training_properties;
