//! `bert-trace ablate --target WORD TEXT`: each head ablated alone (bert-core's
//! `experiments/ablate.rs` runs them), printed as a layers × heads grid of the change in the
//! target's log-probability, then the most harmful heads.

use anyhow::Result;
use bert_core::experiments::ablate::HeadScan;
use bert_core::experiments::intervention::AblateWith;

use crate::cli::{AblateArgs, AblateWithArg};
use crate::experiment_input::Experiment;
use crate::table::new_table;

pub fn run(args: &AblateArgs) -> Result<i32> {
    let experiment = Experiment::load(&args.input)?;
    let position = experiment.mask()?;
    let target = experiment.target(&args.target)?;
    let with = match args.with {
        AblateWithArg::Zero => AblateWith::Zero,
        AblateWithArg::Mean => AblateWith::Mean,
    };
    let scan = experiment.model.scan_heads(&experiment.batch, position, (&args.target, target), with)?;
    if args.input.json {
        let mut json = serde_json::to_value(&scan)?;
        json["model"] = experiment.model_name.clone().into();
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{}", report(&scan, &experiment, args.top));
    }
    Ok(0)
}

fn report(scan: &HeadScan, experiment: &Experiment, top: usize) -> String {
    let vocab = experiment.model.config.vocab_size;
    let mut out = format!(
        "{} at position {}: log p({}) = {:.4}, rank {} of {vocab}, with every head\n",
        bert_core::io::tokenizer::MASK,
        scan.position.1,
        scan.target,
        scan.log_prob,
        rank(scan.rank)
    );
    let heads = scan.grid.first().map_or(0, Vec::len);
    let mut header = vec!["layer".to_string()];
    header.extend((0..heads).map(|h| format!("head {h}")));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut grid = new_table(&header, &(0..=heads).collect::<Vec<_>>());
    for (layer, row) in scan.grid.iter().enumerate() {
        let mut cells = vec![layer.to_string()];
        cells.extend(row.iter().map(|change| format!("{change:+.4}")));
        grid.add_row(cells);
    }
    out += &format!(
        "\nthe change in log p({}) with each head ablated alone ({}; negative: the head helped)\n{grid}\n",
        scan.target, scan.with
    );
    // A head whose change is NaN is not ranked among the others.
    let ranked: Vec<_> = scan.heads.iter().filter(|h| !h.change.is_nan()).collect();
    let shown = ranked.len().min(top);
    out += &format!("\n{shown} heads ranked by the change, the most harmful ablation first:\n");
    for (place, head) in ranked.iter().take(top).enumerate() {
        out += &format!(
            "{:>3}. layer{}.head{:<3} {:+.4}   rank of {} after: {}\n",
            place + 1,
            head.layer,
            head.head,
            head.change,
            scan.target,
            rank(head.rank)
        );
    }
    let unranked: Vec<String> =
        scan.heads.iter().filter(|h| h.change.is_nan()).map(|h| format!("layer{}.head{}", h.layer, h.head)).collect();
    if !unranked.is_empty() {
        out += &format!("not ranked (the prediction is NaN with them ablated): {}\n", unranked.join(", "));
    }
    out
}

/// A rank as printed: a number, or `non-finite` where the prediction has a NaN.
fn rank(rank: Option<usize>) -> String {
    rank.map_or("non-finite".into(), |r| r.to_string())
}
