//! bert-trace's tests, one binary: each module is what one file of tests/ was. One binary is
//! compiled and linked once (31 binaries took about 200 s of a fresh clone's compiling on 2
//! cores) and its tests run side by side, where cargo ran the binaries one after another.
//!
//! The modules share `common` (running the built binary, the console blocks of the docs) and
//! `hub_server` (a hub on 127.0.0.1 for `hub.rs`).

mod common;
mod hub_server;

mod attribute;
mod backward;
mod bad_input;
mod cli;
mod compare;
mod course;
mod docs;
mod dump_forms;
mod dump_properties;
mod dumps_from_anywhere;
mod evaluate;
mod experiments;
mod explain;
mod finetune;
mod golden_integrity;
mod heads;
mod hub;
mod isolate;
mod models;
mod padding;
mod precision;
mod robustness;
mod rollout;
mod step;
mod tidy;
mod tolerances;
mod train;
mod translation;
mod trust;
mod truth;
mod view;
mod view_robustness;
mod view_serve;
mod whole_dumps;
