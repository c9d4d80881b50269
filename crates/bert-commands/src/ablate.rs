//! `ablate --target WORD TEXT`: each head ablated alone (bert-core's `experiments/ablation.rs`
//! runs them), reported as a layers × heads grid of the change in the target's
//! log-probability, then the most harmful heads.

use bert_core::experiments::ablation::HeadScan;
use bert_core::experiments::intervention::AblateWith;
use bert_core::experiments::AttentionHead;

use crate::error::Result;
use serde::Serialize;

use crate::experiment::{Experiment, ExperimentRequest};
use crate::render::text_table::new_table;
use crate::report::{Report, Reported};

/// How many of the most harmful heads the report lists unless told.
pub const TOP_DEFAULT: usize = 10;

/// Which text and target, how an ablated head's slice is replaced, and how many heads to list.
#[derive(Clone, Debug)]
pub struct AblateRequest {
    pub input: ExperimentRequest,
    pub target: String,
    pub with: AblateWith,
    pub top: usize,
}

/// Each head ablated alone, of the model named; how many heads the text lists.
#[derive(Clone, Debug, Serialize)]
pub struct AblateReport {
    #[serde(flatten)]
    pub scan: HeadScan,
    pub model: String,
    /// The size of the vocabulary, which a rank is out of.
    #[serde(skip)]
    pub vocab_size: usize,
    /// How many heads the text ranks.
    #[serde(skip)]
    pub top: usize,
}

impl Report for AblateReport {
    fn text(&self) -> String {
        text(&self.scan, self.vocab_size, self.top)
    }
}

/// Ablates each head alone.
pub fn ablate(request: &AblateRequest) -> Result<Reported<AblateReport>> {
    let experiment = Experiment::load(&request.input)?;
    let position = experiment.mask()?;
    let target = experiment.target(&request.target)?;
    let scan = experiment.model.scan_heads(&experiment.batch, position, (&request.target, target), request.with)?;
    let vocab_size = experiment.model.config.vocab_size;
    let report = AblateReport { scan, model: experiment.model_name, vocab_size, top: request.top };
    Ok(Reported { notes: experiment.notes, report })
}

fn text(scan: &HeadScan, vocab: usize, top: usize) -> String {
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
