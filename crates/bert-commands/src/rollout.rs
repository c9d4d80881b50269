//! `rollout TEXT` (a fresh pass) or `rollout --dump DUMP`: what each layer's output reads from
//! the input tokens through every layer below it, by attention rollout and, with `--flow`, attention flow (bert-core's
//! `experiments/rollout`), and which tokens the `[MASK]` (else `[CLS]`) reads most after each
//! layer.

use std::fmt::Write;
use std::path::PathBuf;

use std::path::Path;

use bert_core::experiments::rollout::{rollout as roll, rollout_of_pass, Rollout, RolloutOptions};
use bert_core::io::tokenizer::{visible, MASK};
use bert_core::model::Pass;
use bert_core::pass::Memory;
use bert_core::stage::{Stage, StageKind};
use bert_core::words::{Choice, Opt};
use bert_core::Dump;
use serde::Serialize;

use crate::error::Result;
use crate::experiment::{Experiment, ExperimentRequest};
use crate::refuse;
use crate::render::table::new_table;
use crate::report::{Report, Reported};
use crate::view::names_model;

pub const TOP: Opt = Opt("top");

/// How many tokens each layer's line names unless told.
pub const TOP_DEFAULT: usize = 5;

/// Where the attention comes from (a dump, or a fresh pass of a text), what to compute of which
/// sequence, and how many tokens each layer's line names.
#[derive(Clone, Debug)]
pub struct RolloutRequest {
    /// The dump to read; None: a fresh pass of `input.text`.
    pub dump: Option<PathBuf>,
    /// The text and how to run its pass; its model also names a dump's tokens (None: the one
    /// the dump's manifest names, if found).
    pub input: ExperimentRequest,
    pub options: RolloutOptions,
    pub top: usize,
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
    /// The dump read, or the model a fresh pass ran.
    pub source: String,
    /// The real tokens, in the order of the matrices' rows and columns.
    pub tokens: Vec<String>,
    /// The row followed layer by layer: the first `[MASK]`, else `[CLS]` (position 0).
    pub focus: usize,
    #[serde(flatten)]
    pub rollout: Rollout,
    pub focus_rows: Vec<FocusRow>,
}

/// Rollout (and flow) of the dump's sequence, or of a fresh pass of the text.
pub fn rollout(request: &RolloutRequest) -> Result<Reported<RolloutReport>> {
    let Some(path) = &request.dump else { return of_pass(request) };
    let dump = Dump::open(path)?;
    rollout_of(&dump, &path.display().to_string(), request)
}

/// [`rollout`] of a dump already open (Python's traces in memory among them), named `name` in
/// the report.
pub fn rollout_of(dump: &Dump, name: &str, request: &RolloutRequest) -> Result<Reported<RolloutReport>> {
    check(request)?;
    let rolled = roll(dump, &request.options)?;
    let tokens = token_names(dump, request, &rolled.positions)?;
    Ok(Reported { notes: Vec::new(), report: report(name, tokens, rolled, request.top) })
}

/// A fresh pass of the text, every stage kept in memory, then its rollout.
fn of_pass(request: &RolloutRequest) -> Result<Reported<RolloutReport>> {
    check(request)?;
    let experiment = Experiment::encode(&request.input)?;
    let mut memory = Memory::default();
    experiment.model.trace_with(&experiment.batch, &mut memory, Pass::default())?;
    let rolled = rollout_of_pass(&memory, Path::new("the pass"), &request.options)?;
    let ids = experiment.batch.ids.row(request.options.seq);
    let tokens = rolled.positions.iter().map(|&p| experiment.token(ids[p] as u32)).collect();
    let report = report(&experiment.model_name, tokens, rolled, request.top);
    Ok(Reported { notes: experiment.notes, report })
}

/// Refuses what the library does not check itself, before any work.
fn check(request: &RolloutRequest) -> Result<()> {
    if request.top == 0 {
        refuse!("{}: expected 1 or more", TOP.with(0));
    }
    Ok(())
}

/// The report of `rolled`, its focus row's readings ranked.
fn report(name: &str, tokens: Vec<String>, rolled: Rollout, top: usize) -> RolloutReport {
    let focus = tokens.iter().position(|t| t == MASK).unwrap_or(0);
    let share =
        |(index, share): (usize, f64)| Share { position: rolled.positions[index], token: tokens[index].clone(), share };
    let focus_rows = (0..rolled.rollout.len())
        .map(|layer| FocusRow {
            layer,
            rollout: Rollout::top(&rolled.rollout[layer], focus, top).into_iter().map(share).collect(),
            flow: rolled
                .flow
                .as_ref()
                .map(|flow| Rollout::top(&flow[layer], focus, top).into_iter().map(share).collect()),
        })
        .collect();
    RolloutReport { format: "bert-trace-rollout/1", source: name.into(), tokens, focus, rollout: rolled, focus_rows }
}

/// The real tokens' names: as the dump spells them, else by the model's tokenizer, else by id.
fn token_names(dump: &Dump, request: &RolloutRequest, positions: &[usize]) -> Result<Vec<String>> {
    let seq = request.options.seq;
    if let Some(spelled) = dump.manifest.inputs.tokens.as_ref().and_then(|rows| rows.get(seq)) {
        if positions.iter().all(|&p| p < spelled.len()) {
            return Ok(positions.iter().map(|&p| visible(&spelled[p])).collect());
        }
    }
    let model = names_model(request.input.model.as_deref(), dump)?;
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
            self.source,
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
