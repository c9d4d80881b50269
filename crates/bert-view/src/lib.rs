//! How bert-trace draws: a dump as one self-contained HTML page (tokens, head view, model view,
//! heatmaps, layer plots, predictions; no network request of any kind), one stage of it as a
//! picture in SVG or PNG, and the grid of a command's JSON report (`compare`, `ablate`,
//! `attribute`, `heads`). Nothing here writes a file: `bert-trace view` (bert-commands) decides
//! where each drawing goes.
//!
//! The page's code is `assets/` (view.js, view.css, page.html), embedded as it is; this crate
//! reads the dump into the page's data (`data.rs`), draws the pictures as the page draws them
//! (`picture.rs`, with `assets/COLORS.md`'s constants in `colors.rs`), the reports' grids
//! (`grid.rs`), checks shapes (`shapes.rs`) and sizes (`budget.rs`), and renders PNG
//! (`png.rs`).

pub mod budget;
pub mod colors;
mod data;
pub mod error;
pub mod grid;
pub mod picture;
pub mod png;
mod shapes;

use bert_core::experiments::segmentation::{Segmentation, WORDS};
use bert_core::io::dump::Dump;
use bert_core::stage::{self, StageKind};
use bert_core::words::Opt;
use bert_core::BertModel;
use globset::GlobSet;
use ndarray::{Axis, Ix3, Ix4};

pub use self::data::Names;
use self::data::{Sequences, Stages};
use self::error::{refuse, OrRefuse};
pub use self::error::{Error, Result};
use self::picture::{Label, Scale};

pub const STAGE: Opt = Opt("stage");
pub const HEAD: Opt = Opt("head");
pub const SEQ: Opt = Opt("seq");
pub const LINES: Opt = Opt("lines");
pub const SVG: Opt = Opt("svg");
pub const PNG: Opt = Opt("png");
pub const HEATMAP: Opt = Opt("heatmap");

/// What every page and picture says wrote it. Whether bert-trace may write over a file rests on
/// its marker alone (bert-commands' `owned_file`), never on this text, which anyone's notes can
/// contain.
pub const GENERATOR: &str = "bert-trace view";

const PAGE: &str = include_str!("assets/page.html");
const STYLE: &str = include_str!("assets/view.css");
const SCRIPT: &str = include_str!("assets/view.js");

/// The picture of a command's JSON report (`attribute`, `heads`, `ablate`, `compare`), as SVG:
/// what Python's reports show in a notebook.
pub fn svg_of_report(report: &serde_json::Value) -> Result<String> {
    Ok(grid::picture_of(report, "the report")?.picture.svg)
}

/// The page of `dump`, as `bert-trace view` writes it (one self-contained HTML document), and
/// the heatmap stages left out to keep it under its size budget. `names` names the tokens;
/// `chosen` limits the heatmaps.
pub fn page_html(dump: &Dump, names: &Names<'_>, chosen: Option<&GlobSet>) -> Result<(String, Vec<String>)> {
    page_of(dump, names, chosen, None)
}

/// The page of `dump` as `bert-trace view --serve` serves it: the same page, which may also
/// ask its own server (and no other address) for explanations and steps, with `served` (the
/// session's token and what the server can do) in an element `bert-trace-serve`.
pub fn served_page_html(
    dump: &Dump,
    names: &Names<'_>,
    chosen: Option<&GlobSet>,
    served: &serde_json::Value,
) -> Result<(String, Vec<String>)> {
    page_of(dump, names, chosen, Some(served))
}

fn page_of(
    dump: &Dump,
    names: &Names<'_>,
    chosen: Option<&GlobSet>,
    served: Option<&serde_json::Value>,
) -> Result<(String, Vec<String>)> {
    let (data, left_out) = data::page(dump, names, chosen)?;
    let script_json = |value: &serde_json::Value| {
        serde_json::to_string(value).expect("the page's data serialises").replace('<', "\\u003c")
    };
    let json = script_json(&data);
    let serve = served.map(|served| {
        format!("<script type=\"application/json\" id=\"bert-trace-serve\">{}</script>", script_json(served))
    });
    // Each marker is replaced before anything is inserted that could hold the next one's text.
    let mut page = PAGE
        .replacen("<!--BERT_TRACE_SERVE-->\n", serve.as_deref().unwrap_or(""), 1)
        .replacen("<!--BERT_TRACE_STYLE-->", &format!("<style>\n{STYLE}</style>"), 1)
        .replacen(
            "<!--BERT_TRACE_DATA-->",
            &format!("<script type=\"application/json\" id=\"bert-trace-data\">{json}</script>"),
            1,
        )
        .replacen("<!--BERT_TRACE_SCRIPT-->", &format!("<script>\n{SCRIPT}</script>"), 1);
    if served.is_some() {
        // The served page may reach its own origin, the server, and nothing else.
        page = page.replacen("connect-src 'none'", "connect-src 'self'", 1).replacen(
            "img-src data: blob:",
            "img-src data: blob: 'self'",
            1,
        );
    }
    Ok((page, left_out))
}

/// The page's data and, for `stage`, the SVG of its picture, as `bert-trace view` makes them but
/// written nowhere; `model`'s tokenizer names the tokens. This is the data layer, which the `view` fuzz
/// target drives with damaged dumps: whatever the dump holds, it returns an error or a drawing.
pub fn draw(
    dump: &Dump,
    model: Option<&BertModel>,
    stage: Option<&str>,
) -> Result<(serde_json::Value, Option<String>)> {
    let names = Names { model };
    let (data, _) = data::page(dump, &names, None)?;
    let svg = match stage {
        Some(stage) => Some(picture(dump, &names, stage, PictureOptions::default())?.svg),
        None => None,
    };
    Ok((data, svg))
}

/// Which picture of a stage: which sequence, which head (None: every head, for the lines; the
/// first, for a heatmap), and whether attention is drawn as lines (the head view) rather than
/// a heatmap. Each field is the `view` option of that name.
#[derive(Clone, Copy, Debug, Default)]
pub struct PictureOptions<'a> {
    pub seq: usize,
    pub head: Option<usize>,
    pub lines: bool,
    /// Attention probabilities by words: Some("") those found automatically (WordPiece's, and jieba's for Chinese), Some(words) those given,
    /// separated by spaces; padding left out.
    pub words: Option<&'a str>,
}

/// The picture of `stage` of `dump` that `args` asks for; `names` names the tokens.
pub fn picture(dump: &Dump, names: &Names<'_>, stage: &str, args: PictureOptions<'_>) -> Result<picture::Picture> {
    let stages = Stages { dump };
    let Some(entry) = dump.entry(stage) else {
        let known: Vec<&str> = dump.manifest.stages.iter().map(|s| s.name.as_str()).collect();
        let close = known.iter().filter(|n| strsim_like(n, stage)).take(3).copied().collect::<Vec<_>>();
        refuse!(
            "{}: the dump has no stage `{stage}`{}",
            dump.dir.display(),
            if close.is_empty() { String::new() } else { format!("; did you mean {}?", close.join(", ")) }
        );
    };
    let seqs = Sequences::read(&stages, names)?;
    let dims = shapes::InputShape::of(dump)?;
    let (b, t) = (dims.b, dims.t);
    if args.seq >= b {
        refuse!("{} is out of range: the dump has {b} sequence(s), 0 to {}", SEQ.with(args.seq), b - 1);
    }
    let labels: Vec<Label> = (0..t)
        .map(|pos| {
            let masked = seqs.masked[args.seq].iter().any(|m| m.0 == pos);
            let colour = if masked {
                colors::MARKED
            } else if seqs.attention_mask[[args.seq, pos]] == 0 {
                colors::PADDING_TEXT
            } else {
                colors::TEXT
            };
            Label { text: seqs.tokens[args.seq][pos].clone(), colour }
        })
        .collect();
    let shape = entry.shape.clone();
    match shape.len() {
        4 if stage_is_attention(stage) || shape[2..] == [t, t] => {
            shapes::expect_stage(dump, stage, &dims.attention(None))?;
            let heads = if args.lines { args.head.map_or(shape[1], |_| 1) } else { 1 };
            let cells = heads.saturating_mul(t).saturating_mul(t);
            budget::check_cells(stage, cells, &format!("{heads} × {t} × {t}"), true)?;
            let values = stages.f32_shaped(stage, &dims.attention(None))?.or_refuse("listed")?;
            let values = values.into_dimensionality::<Ix4>()?;
            let heads = shape[1];
            if let Some(head) = args.head.filter(|&h| h >= heads) {
                refuse!("{} is out of range: {stage} has {heads} heads, 0 to {}", HEAD.with(head), heads - 1);
            }
            let sequence = values.index_axis(Axis(0), args.seq);
            if let Some(words) = args.words {
                if !is_probability(stage) {
                    refuse!("{WORDS} reads attention probabilities by words, a `layerN.attention.probs` stage, not {stage}");
                }
                return by_words(sequence, &labels, &seqs, args, words);
            }
            if args.lines {
                if !is_probability(stage) {
                    refuse!("{LINES} draws attention probabilities, a `layerN.attention.probs` stage, not {stage}");
                }
                let chosen: Vec<usize> = args.head.map_or((0..heads).collect(), |h| vec![h]);
                let heads: Vec<_> = chosen.iter().map(|&h| (h, sequence.index_axis(Axis(0), h))).collect();
                let segments: Vec<Option<usize>> = (0..t)
                    .map(|pos| (seqs.attention_mask[[args.seq, pos]] != 0).then(|| seqs.token_type[[args.seq, pos]] as usize))
                    .collect();
                return Ok(picture::head_view(&heads, &labels, &segments));
            }
            let head = sequence.index_axis(Axis(0), args.head.unwrap_or(0));
            let scale = Scale::of(head, is_probability(stage));
            Ok(picture::heatmap(head, &labels, Some(&labels), scale))
        }
        3 => {
            if args.words.is_some() {
                refuse!("{WORDS} reads attention probabilities by words; {stage} is {shape:?}");
            }
            if args.lines || args.head.is_some() {
                refuse!("{LINES} and {HEAD} are for attention stages [B,nh,T,T]; {stage} is {shape:?}");
            }
            shapes::expect_stage(dump, stage, &dims.per_token(None))?;
            budget::check_cells(stage, t.saturating_mul(shape[2]), &format!("{t} × {}", shape[2]), false)?;
            let values = stages.f32_shaped(stage, &dims.per_token(None))?.or_refuse("listed")?;
            let values = values.into_dimensionality::<Ix3>()?;
            let rows = values.index_axis(Axis(0), args.seq);
            Ok(picture::heatmap(rows, &labels, None, Scale::of(rows, false)))
        }
        _ => refuse!(
            "{stage} is {shape:?}; a picture draws a [B,nh,T,T] stage (scores, probabilities) or a [B,T,H] or [B,T,I] one"
        ),
    }
}

/// One sequence's attention probabilities `[nh,T,T]` drawn by words (Clark et al.: a word reads
/// the mean of its pieces' rows and is read by the sum of their columns), on its real tokens:
/// one head's heatmap, or the head view's lines.
fn by_words(
    sequence: ndarray::ArrayView3<'_, f32>,
    labels: &[Label],
    seqs: &Sequences,
    args: PictureOptions<'_>,
    words: &str,
) -> Result<picture::Picture> {
    let real: Vec<usize> = (0..labels.len()).filter(|&p| seqs.attention_mask[[args.seq, p]] != 0).collect();
    let tokens: Vec<String> = real.iter().map(|&p| labels[p].text.clone()).collect();
    let segmentation = Segmentation::asked(&tokens, words).map_err(|problem| {
        Error::Request(format!("{}: {problem} (the tokens: {})", WORDS.with(words), tokens.join(" ")))
    })?;
    let word_labels: Vec<Label> = segmentation
        .words
        .iter()
        .map(|w| Label { text: w.text.clone(), colour: labels[real[w.pieces[0]]].colour })
        .collect();
    let head_by_words = |head: usize| {
        let matrix: Vec<Vec<f64>> =
            real.iter().map(|&r| real.iter().map(|&c| f64::from(sequence[[head, r, c]])).collect()).collect();
        let grouped = segmentation.by_words(&matrix);
        let n = grouped.len();
        ndarray::Array2::from_shape_fn((n, n), |(r, c)| grouped[r][c] as f32)
    };
    let heads = sequence.dim().0;
    if args.lines {
        let chosen: Vec<usize> = args.head.map_or((0..heads).collect(), |h| vec![h]);
        let matrices: Vec<(usize, ndarray::Array2<f32>)> = chosen.iter().map(|&h| (h, head_by_words(h))).collect();
        let views: Vec<(usize, ndarray::ArrayView2<'_, f32>)> = matrices.iter().map(|(h, m)| (*h, m.view())).collect();
        let segments: Vec<Option<usize>> =
            segmentation.words.iter().map(|w| Some(seqs.token_type[[args.seq, real[w.pieces[0]]]] as usize)).collect();
        return Ok(picture::head_view(&views, &word_labels, &segments));
    }
    let matrix = head_by_words(args.head.unwrap_or(0));
    let scale = Scale::of(matrix.view(), true);
    Ok(picture::heatmap(matrix.view(), &word_labels, Some(&word_labels), scale))
}

/// Whether `stage` holds attention probabilities (a gradient of them, `grad.*.probs`, is signed).
fn is_probability(stage: &str) -> bool {
    stage::parse(stage).is_some_and(|s| s.is_value_of(StageKind::AttnProbs))
}

/// Whether `stage` is attention scores or probabilities, `[B,nh,T,T]`, or the gradient of one.
pub fn stage_is_attention(stage: &str) -> bool {
    stage::parse(stage).is_some_and(|s| matches!(s.kind, StageKind::AttnScores | StageKind::AttnProbs))
}

/// Whether two stage names are close (a typo): one edit apart on their last component, or the
/// same component in another layer.
fn strsim_like(a: &str, b: &str) -> bool {
    let tail = |s: &str| s.rsplit('.').next().unwrap_or(s).to_string();
    tail(a) == tail(b)
        || a.len().abs_diff(b.len()) <= 1 && a.chars().zip(b.chars()).filter(|(x, y)| x != y).count() <= 1
}
