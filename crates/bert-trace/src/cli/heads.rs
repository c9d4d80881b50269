//! `bert-trace heads`: which heads matter (`bert_commands::heads`).

use anyhow::Result;
use bert_commands::heads::{self, HeadsRequest};

use crate::cli::HeadsArgs;

pub fn run(args: &HeadsArgs) -> Result<i32> {
    let request = HeadsRequest {
        texts: args.texts.clone(),
        file: args.file.clone(),
        model: args.model.model.clone(),
        pair: args.pair.clone(),
        mlm_targets: args.losses.mlm_targets.clone(),
        nsp_labels: args.losses.nsp_labels.clone(),
        labels: args.losses.labels.clone(),
        importance: args.importance,
        statistics: args.statistics,
        batch_size: args.batch_size,
        settings: crate::cli::settings::of(&args.pass)?,
    };
    let reported = heads::heads(&request, &mut crate::progress::bar("passes"))?;
    crate::show(&reported, args.json);
    Ok(0)
}
