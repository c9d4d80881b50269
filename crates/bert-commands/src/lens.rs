//! `lens TEXT`: every layer's guess at the `[MASK]` (or at `pos`), read through the MLM head
//! (bert-core's `experiments/logit_lens.rs`), one row per layer.

use crate::refuse;
use bert_core::experiments::logit_lens::LensAt;
use bert_core::words::Opt;

use crate::error::Result;
use std::collections::BTreeMap;

use serde::Serialize;

use crate::experiment::{Experiment, ExperimentRequest};
use crate::render::text_table::new_table;
use crate::report::{Report, Reported};

pub const POS: Opt = Opt("pos");
pub const TOP_K: Opt = Opt("top_k");

/// How many guesses a layer shows unless told.
pub const TOP_K_DEFAULT: usize = 3;

/// Which text, which position (None: the `[MASK]`), which target to follow, how many guesses.
#[derive(Clone, Debug)]
pub struct LensRequest {
    pub input: ExperimentRequest,
    pub target: Option<String>,
    pub pos: Option<usize>,
    pub top_k: usize,
}

/// Every layer's guess at one position, of the model named; the rows' stages are the lens's.
#[derive(Clone, Debug, Serialize)]
pub struct LensReport {
    pub format: &'static str,
    pub model: String,
    /// The word whose probability and rank each row gives, if one was asked for.
    pub target: Option<String>,
    #[serde(flatten)]
    pub at: LensAt,
    /// The token at the position, as printed.
    #[serde(skip)]
    pub seen: String,
    /// Every guess's token, as printed.
    #[serde(skip)]
    pub tokens: BTreeMap<u32, String>,
}

/// Every layer's guess at the position.
pub fn lens(request: &LensRequest) -> Result<Reported<LensReport>> {
    let experiment = Experiment::load(&request.input)?;
    let position = match request.pos {
        Some(pos) => {
            let (_, tokens) = experiment.batch.dims();
            if pos >= tokens {
                refuse!("{} is beyond the text's {tokens} tokens (0 to {})", POS.with(pos), tokens - 1);
            }
            (0, pos)
        }
        None => experiment.mask()?,
    };
    let target = request.target.as_deref().map(|word| experiment.target(word)).transpose()?;
    if request.top_k == 0 {
        refuse!("{} shows nothing; give 1 or more", TOP_K.with(0));
    }
    let lens = experiment.model.lens(&experiment.batch, &[position], request.top_k, target)?;
    let at = lens.into_iter().next().expect("one position asked for");
    let seen = experiment.token(experiment.batch.ids[[0, at.position.1]] as u32);
    let tokens = at.rows.iter().flat_map(|row| row.top.iter().map(|&(id, _)| (id, experiment.token(id)))).collect();
    let report = LensReport {
        format: "bert-trace-lens/1",
        model: experiment.model_name,
        target: request.target.clone(),
        at,
        seen,
        tokens,
    };
    Ok(Reported { notes: experiment.notes, report })
}

impl Report for LensReport {
    fn text(&self) -> String {
        text(self)
    }
}

fn text(report: &LensReport) -> String {
    let (at, target) = (&report.at, report.target.as_deref());
    let token = |id: u32| report.tokens.get(&id).cloned().unwrap_or_default();
    let (_, pos) = at.position;
    let mut out = format!("position {pos} ({}): what each layer's output predicts through the MLM head\n", report.seen);
    let mut header = vec!["after".to_string(), "guesses".to_string()];
    if let Some(word) = target {
        header.extend([format!("P({word})"), "rank".to_string()]);
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = new_table(&header, &[2, 3]);
    for row in &at.rows {
        let after = row.stage.trim_start_matches("lens.").trim_end_matches(".logits").to_string();
        let guesses: Vec<String> = row.top.iter().map(|&(id, p)| format!("{} {p:.3}", token(id))).collect();
        let mut cells = vec![after, guesses.join(", ")];
        if let Some((p, rank)) = row.target {
            let rank = rank.map_or("non-finite".to_string(), |r| r.to_string());
            cells.extend([if p.is_nan() { "non-finite".into() } else { format!("{p:.4}") }, rank]);
        }
        table.add_row(cells);
    }
    out += &format!("{table}\n");
    out
}
