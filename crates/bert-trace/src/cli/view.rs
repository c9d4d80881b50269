//! `bert-trace view DUMP`: a dump, or a command's JSON, drawn (`bert_commands::view`).

use anyhow::Result;
use bert_commands::view::{self, ViewRequest};

use crate::cli::ViewArgs;

pub fn run(args: &ViewArgs) -> Result<i32> {
    let report = view::view(&ViewRequest {
        dump: args.dump.clone(),
        out: args.out.clone(),
        stage: args.stage.clone(),
        head: args.head,
        seq: args.seq,
        lines: args.lines,
        svg: args.svg.clone(),
        png: args.png.clone(),
        heatmaps: args.heatmaps.clone(),
        model: args.model.model.clone(),
        words: args.words.clone(),
    })?;
    crate::print(&report.notes, &report.text);
    Ok(0)
}
