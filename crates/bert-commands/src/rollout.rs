//! `rollout DUMP`: what each layer's output reads from the input tokens through every layer
//! below it, by attention rollout and, with `--flow`, attention flow (bert-core's
//! `experiments/rollout`), and which tokens the `[MASK]` (else `[CLS]`) reads most after each
//! layer.

use std::fmt::Write;
use std::path::PathBuf;

use bert_core::experiments::rollout::{rollout as roll, Rollout, RolloutOptions};
use bert_core::io::tokenizer::{visible, MASK};
use bert_core::stage::{Stage, StageKind};
use bert_core::words::{Choice, Opt};
use bert_core::Dump;
use serde::Serialize;

use crate::error::Result;
use crate::refuse;
use crate::render::table::new_table;
use crate::report::{Report, Reported};
use crate::view::names_model;

pub const TOP: Opt = Opt("top");

/// How many tokens each layer's line names unless told.
pub const TOP_DEFAULT: usize = 5;

/// The dump, what to compute of which sequence, and the model whose tokenizer names the tokens
/// (None: the one the manifest names, if found).
#[derive(Clone, Debug)]
pub struct RolloutRequest {
    pub dump: PathBuf,
    pub options: RolloutOptions,
    pub top: usize,
    pub model: Option<PathBuf>,
}

/// The tokens the focus row reads most after one layer, by rollout and by flow.
#[derive(Clone, Debug, Serialize)]
pub struct FocusRow {
    pub layer: usize,
    pub rollout: Vec<Share>,
    pub flow: Option<Vec<Share>>,
}

/// One input token's share of what a row reads.
#[derive(Clone, Debug, Serialize)]
pub struct Share {
    pub position: usize,
    pub token: String,
    pub share: f64,
}

/// Rollout and flow of one sequence, its real tokens named, and the focus row's reading.
#[derive(Clone, Debug, Serialize)]
pub struct RolloutReport {
    pub format: &'static str,
    pub dump: String,
    /// The real tokens, in the order of the matrices' rows and columns.
    pub tokens: Vec<String>,
    /// The row followed layer by layer: the first `[MASK]`, else `[CLS]` (position 0).
    pub focus: usize,
    #[serde(flatten)]
    pub rollout: Rollout,
    pub focus_rows: Vec<FocusRow>,
}

/// Rollout (and flow) of the dump's sequence.
pub fn rollout(request: &RolloutRequest) -> Result<Reported<RolloutReport>> {
    if request.top == 0 {
        refuse!("{}: expected 1 or more", TOP.with(0));
    }
    let dump = Dump::open(&request.dump)?;
    rollout_of(&dump, request)
}

/// [`rollout`] of a dump already open (Python's traces in memory among them); `request.dump`
/// names it in the report.
pub fn rollout_of(dump: &Dump, request: &RolloutRequest) -> Result<Reported<RolloutReport>> {
    if request.top == 0 {
        refuse!("{}: expected 1 or more", TOP.with(0));
    }
    let rolled = roll(dump, &request.options)?;
    let tokens = token_names(dump, request, &rolled.positions)?;
    let focus = tokens.iter().position(|t| t == MASK).unwrap_or(0);
    let share =
        |(index, share): (usize, f64)| Share { position: rolled.positions[index], token: tokens[index].clone(), share };
    let focus_rows = (0..rolled.rollout.len())
        .map(|layer| FocusRow {
            layer,
            rollout: Rollout::top(&rolled.rollout[layer], focus, request.top).into_iter().map(share).collect(),
            flow: rolled
                .flow
                .as_ref()
                .map(|flow| Rollout::top(&flow[layer], focus, request.top).into_iter().map(share).collect()),
        })
        .collect();
    let report = RolloutReport {
        format: "bert-trace-rollout/1",
        dump: request.dump.display().to_string(),
        tokens,
        focus,
        rollout: rolled,
        focus_rows,
    };
    Ok(Reported { notes: Vec::new(), report })
}

/// The real tokens' names: as the dump spells them, else by the model's tokenizer, else by id.
fn token_names(dump: &Dump, request: &RolloutRequest, positions: &[usize]) -> Result<Vec<String>> {
    let seq = request.options.seq;
    if let Some(spelled) = dump.manifest.inputs.tokens.as_ref().and_then(|rows| rows.get(seq)) {
        if positions.iter().all(|&p| p < spelled.len()) {
            return Ok(positions.iter().map(|&p| visible(&spelled[p])).collect());
        }
    }
    let model = names_model(request.model.as_deref(), dump)?;
    let ids = match dump.entry(&Stage::new(StageKind::InputIds).name()) {
        Some(entry) => Some(dump.read(entry)?.to_f64()),
        None => None,
    };
    Ok(positions
        .iter()
        .map(|&p| {
            let id = ids.as_ref().and_then(|ids| ids.get([seq, p]).copied()).map(|id| id as i64);
            match (id, &model) {
                (Some(id), Some(model)) => {
                    visible(&model.tokenizer.id_to_token(id as u32).unwrap_or_else(|| format!("#{id}")))
                }
                (Some(id), None) => format!("#{id}"),
                (None, _) => format!("@{p}"),
            }
        })
        .collect())
}

impl Report for RolloutReport {
    fn text(&self) -> String {
        let r = &self.rollout;
        let mut out = format!(
            "{} (sequence {}, {} real tokens): heads fused by {}, residual weight {}\n",
            self.dump,
            r.seq,
            self.tokens.len(),
            r.heads.name(),
            r.residual
        );
        let _ = writeln!(
            out,
            "what {} at position {} reads from the input after each layer:",
            self.tokens[self.focus], r.positions[self.focus]
        );
        let shares = |shares: &[Share]| {
            shares.iter().map(|s| format!("{} {:.3}", s.token, s.share)).collect::<Vec<_>>().join(", ")
        };
        let mut columns = vec!["layer", "rollout"];
        if r.flow.is_some() {
            columns.push("flow");
        }
        let mut table = new_table(&columns, &[0]);
        for row in &self.focus_rows {
            let mut cells = vec![row.layer.to_string(), shares(&row.rollout)];
            if let Some(flow) = &row.flow {
                cells.push(shares(flow));
            }
            table.add_row(cells);
        }
        let _ = writeln!(out, "{table}");
        out
    }
}
