//! What the `bert-trace` command does, as a library: the commands (trace, diff, stages,
//! inspect, view, compare, the experiments ablate, lens and attribute, and train), where models come from (a directory, the Hugging Face cache, a hub id, the
//! built-in tiny model), and how results are printed and drawn. `main.rs` only parses the
//! arguments and reports errors; the fuzz targets and the tests reach the same code here.

pub mod ablate_cmd;
pub mod attribute_cmd;
pub mod cli;
pub mod compare_cmd;
pub mod diff_cmd;
pub mod experiment_input;
pub mod hub_cache;
pub mod hub_download;
pub mod hub_id;
pub mod hub_model;
pub mod inspect_cmd;
pub mod lens_cmd;
pub mod model_source;
pub mod owned_file;
pub mod predictions;
pub mod preview;
pub mod stages_cmd;
pub mod stats;
pub mod table;
pub mod terminal_heatmap;
pub mod tokens_table;
pub mod trace_cmd;
pub mod train_cmd;
pub mod view;
