//! `ablate --target WORD TEXT`: each head ablated alone (bert-core's `experiments/ablate.rs`
//! runs them), reported as a layers × heads grid of the change in the target's
//! log-probability, then the most harmful heads.

use bert_core::experiments::ablate::HeadScan;
use bert_core::experiments::intervention::AblateWith;
use bert_core::experiments::AttentionHead;

use crate::error::Result;
use crate::experiment::{Experiment, ExperimentReport, ExperimentRequest};
use crate::render::table::new_table;

/// Which text and target, how an ablated head's slice is replaced, and how many heads to list.
#[derive(Clone, Debug)]
pub struct AblateRequest {
    pub input: ExperimentRequest,
    pub target: String,
    pub with: AblateWith,
    pub top: usize,
}

/// Ablates each head alone.
pub fn ablate(request: &AblateRequest) -> Result<ExperimentReport> {
    let experiment = Experiment::load(&request.input)?;
    let position = experiment.mask()?;
    let target = experiment.target(&request.target)?;
    let scan = experiment.model.scan_heads(&experiment.batch, position, (&request.target, target), request.with)?;
    let text = match request.input.json {
        true => {
            let mut json = serde_json::to_value(&scan).expect("a scan serialises");
            json["model"] = experiment.model_name.clone().into();
            format!("{}\n", serde_json::to_string_pretty(&json).expect("JSON prints"))
        }
        false => report(&scan, &experiment, request.top),
    };
    Ok(ExperimentReport { notes: experiment.notes, text })
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
    let unranked: Vec<String> = scan
        .heads
        .iter()
        .filter(|h| h.change.is_nan())
        .map(|h| AttentionHead { layer: h.layer, head: h.head }.to_string())
        .collect();
    if !unranked.is_empty() {
        out += &format!("not ranked (the prediction is NaN with them ablated): {}\n", unranked.join(", "));
    }
    out
}

/// A rank as printed: a number, or `non-finite` where the prediction has a NaN.
fn rank(rank: Option<usize>) -> String {
    rank.map_or("non-finite".into(), |r| r.to_string())
}
