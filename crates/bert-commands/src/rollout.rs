//! `rollout TEXT` (a fresh pass) or `rollout --dump DUMP`: what each layer's output reads from
//! the input tokens through every layer below it, by attention rollout and, with `--flow`,
//! attention flow (bert-core's `experiments/attention_flow`), and which tokens the `[MASK]` (else
//! `[CLS]`) reads most after each layer.

use std::fmt::Write;
use std::path::PathBuf;

use std::path::Path;

use bert_core::experiments::attention_flow::{
    rollout as roll, rollout_of_pass, AttentionKept, Rollout, RolloutOptions, FORMAT,
};
use bert_core::experiments::segmentation::{Segmentation, WORDS};
use bert_core::io::tokenizer::{visible, MASK};
use bert_core::model::Pass;
use bert_core::stage::{Stage, StageKind};
use bert_core::words::{Choice, Opt};
use bert_core::Dump;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::experiment::{Experiment, ExperimentRequest};
use crate::refuse;
use crate::render::text_table::new_table;
use crate::report::{Report, Reported};
use crate::view::names_model;

pub const TOP: Opt = Opt("top");
pub const DUMP: Opt = Opt("dump");

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
    /// Read by words: None by tokens; Some("") by the words found automatically (WordPiece's, and jieba's for Chinese); Some(words) by the words
    /// given, separated by spaces.
    pub words: Option<String>,
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
    /// The words, when the report reads by words.
    pub words: Option<Segmentation>,
    /// Per layer, rollout word × word (rows the mean of a word's pieces' rows, columns summed
    /// over a word's pieces), when the report reads by words.
    pub rollout_by_word: Option<Layers>,
    pub flow_by_word: Option<Layers>,
    /// After each layer, the inputs the focus row (the focus token's word, by words) reads most.
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
    Ok(Reported { notes: Vec::new(), report: report(name, tokens, rolled, request)? })
}

/// A fresh pass of the text, its attention probabilities kept in memory, then its rollout.
fn of_pass(request: &RolloutRequest) -> Result<Reported<RolloutReport>> {
    check(request)?;
    if request.input.text.is_empty() {
        refuse!(
            "no text given: give the text to run the model on, or {} to read a dump's attention",
            DUMP.with("DUMP")
        );
    }
    let experiment = Experiment::encode(&request.input)?;
    let mut kept = AttentionKept::default();
    experiment.model.trace_with(&experiment.batch, &mut kept, Pass::default())?;
    let rolled = rollout_of_pass(&kept.0, Path::new("the pass"), &request.options)?;
    let ids = experiment.batch.ids.row(request.options.seq);
    let tokens = rolled.positions.iter().map(|&p| experiment.token(ids[p] as u32)).collect();
    let report = report(&experiment.model_name, tokens, rolled, request)?;
    Ok(Reported { notes: experiment.notes, report })
}

/// Refuses what the library does not check itself, before any work.
fn check(request: &RolloutRequest) -> Result<()> {
    if request.top == 0 {
        refuse!("{}: expected 1 or more", TOP.with(0));
    }
    Ok(())
}

/// Per layer, a matrix of rows reading columns.
type Layers = Vec<Vec<Vec<f64>>>;

/// What the focus rows rank: the inputs' names and first positions, the focus row, and the
/// matrices, of tokens or of words.
struct Ranked<'a> {
    names: Vec<String>,
    starts: Vec<usize>,
    row: usize,
    rollout: &'a Layers,
    flow: Option<&'a Layers>,
}

/// The report of `rolled`, by words if asked, its focus row's readings ranked.
fn report(name: &str, tokens: Vec<String>, rolled: Rollout, request: &RolloutRequest) -> Result<RolloutReport> {
    let focus = tokens.iter().position(|t| t == MASK).unwrap_or(0);
    let words = match request.words.as_deref() {
        None => None,
        Some(asked) => Some(Segmentation::asked(&tokens, asked).map_err(|problem| {
            Error::Request(format!("{}: {problem} (the tokens: {})", WORDS.with(asked), tokens.join(" ")))
        })?),
    };
    let by_word = |layers: &Layers| {
        words.as_ref().map(|words| layers.iter().map(|matrix| words.by_words(matrix)).collect::<Vec<_>>())
    };
    let (rollout_by_word, flow_by_word) = (by_word(&rolled.rollout), rolled.flow.as_ref().and_then(by_word));
    // What the focus rows rank: the words' matrices and names, or the tokens'.
    let ranked = match (&words, &rollout_by_word) {
        (Some(words), Some(by)) => Ranked {
            names: words.words.iter().map(|w| w.text.clone()).collect(),
            starts: words.words.iter().map(|w| rolled.positions[w.pieces[0]]).collect(),
            row: words.word_of(focus),
            rollout: by,
            flow: flow_by_word.as_ref(),
        },
        _ => Ranked {
            names: tokens.clone(),
            starts: rolled.positions.clone(),
            row: focus,
            rollout: &rolled.rollout,
            flow: rolled.flow.as_ref(),
        },
    };
    let Ranked { names, starts, row, rollout: rolled_rows, flow: flow_rows } = ranked;
    let share = |(index, share): (usize, f64)| Share { position: starts[index], token: names[index].clone(), share };
    let top = request.top;
    let focus_rows = (0..rolled_rows.len())
        .map(|layer| FocusRow {
            layer,
            rollout: Rollout::top(&rolled_rows[layer], row, top).into_iter().map(share).collect(),
            flow: flow_rows.map(|flow| Rollout::top(&flow[layer], row, top).into_iter().map(share).collect()),
        })
        .collect();
    Ok(RolloutReport {
        format: FORMAT,
        source: name.into(),
        tokens,
        focus,
        rollout: rolled,
        words,
        rollout_by_word,
        flow_by_word,
        focus_rows,
    })
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
        match &self.words {
            Some(words) => {
                let spelled: Vec<&str> = words.words.iter().map(|w| w.text.as_str()).collect();
                let _ = writeln!(out, "by words ({}): {}", words.by, spelled.join(" | "));
                let word = &words.words[words.word_of(self.focus)];
                let _ = writeln!(out, "what the word {} reads from the input's words after each layer:", word.text);
            }
            None => {
                let _ = writeln!(
                    out,
                    "what {} at position {} reads from the input after each layer:",
                    self.tokens[self.focus], r.positions[self.focus]
                );
            }
        }
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
