//! `bert-trace view DUMP`: a dump drawn, as one self-contained HTML page (tokens, head view,
//! model view, heatmaps, layer plots, predictions; no network request of any kind), or as one
//! picture of one stage, in SVG or PNG, for slides and papers.
//!
//! The page's code is `assets/` (view.js, view.css, page.html), embedded as it is; this module
//! reads the dump into the page's data (`data.rs`), draws the pictures as the page draws them
//! (`picture.rs`, with `assets/COLORS.md`'s constants in `colors.rs`) and renders PNG
//! (`png.rs`).

mod budget;
pub(crate) mod colors;
mod data;
mod grid;
pub(crate) mod picture;
mod png;
mod shapes;

use std::path::{Path, PathBuf};

use bert_core::io::dump::Dump;
use bert_core::stage::{self, StageKind};
use bert_core::words::Opt;
use bert_core::BertModel;
use globset::{Glob, GlobSet, GlobSetBuilder};
use ndarray::{Axis, Ix3, Ix4};

pub use self::data::Names;
use self::data::{Sequences, Stages};
use self::picture::{Label, Scale};
use crate::error::{Error, OrRefuse, Result};
use crate::owned_file::{self, Format};
use crate::refuse;
use crate::source;

pub const STAGE: Opt = Opt("stage");
pub const HEAD: Opt = Opt("head");
pub const SEQ: Opt = Opt("seq");
pub const LINES: Opt = Opt("lines");
pub const SVG: Opt = Opt("svg");
pub const PNG: Opt = Opt("png");
pub const HEATMAP: Opt = Opt("heatmap");

/// What to draw, and where: a dump's page (`out`, `heatmaps`), or one stage as a picture
/// (`stage`, `head`, `seq`, `lines`; `svg`, `png`); or the grid of a command's JSON.
#[derive(Clone, Debug, Default)]
pub struct ViewRequest {
    pub dump: PathBuf,
    pub out: Option<PathBuf>,
    pub stage: Option<String>,
    pub head: Option<usize>,
    pub seq: usize,
    pub lines: bool,
    pub svg: Option<PathBuf>,
    pub png: Option<PathBuf>,
    pub heatmaps: Vec<String>,
    /// The model whose tokenizer names the tokens; None: the one the manifest names, if found.
    pub model: Option<PathBuf>,
}

/// What every page and picture says wrote it. Whether bert-trace may write over a file rests on
/// its marker alone (`owned_file`), never on this text, which anyone's notes can contain.
pub const GENERATOR: &str = "bert-trace view";

const PAGE: &str = include_str!("assets/page.html");
const STYLE: &str = include_str!("assets/view.css");
const SCRIPT: &str = include_str!("assets/view.js");

/// The picture of a command's JSON report (`attribute`, `heads`, `ablate`, `compare`), as SVG:
/// what Python's reports show in a notebook.
pub fn svg_of_report(report: &serde_json::Value) -> Result<String> {
    Ok(grid::picture_of(report, "the report")?.picture.svg)
}

/// What `view` wrote, as it says it, and its notes.
#[derive(Clone, Debug, Default)]
pub struct ViewReport {
    pub notes: Vec<String>,
    pub text: String,
}

/// Draws what `request` asks for; the report says what was written.
pub fn view(request: &ViewRequest) -> Result<ViewReport> {
    let args = request;
    if args.dump.is_file() && args.dump.extension().is_some_and(|e| e == "json") {
        return comparison(args);
    }
    let dump = Dump::open(&args.dump)?;
    let model = names_model(args, &dump)?;
    let names = Names { model: model.as_ref() };
    if args.svg.is_some() || args.png.is_some() {
        let stage = args.stage.as_deref().ok_or_else(|| {
            Error::Request(format!("{SVG} and {PNG} draw one stage: give it with {}", STAGE.with("NAME")))
        })?;
        let picture = picture(&dump, &names, stage, args)?;
        if let Some(path) = &args.svg {
            owned_file::write(path, picture.svg.as_bytes(), Format::Text, "picture")?;
        }
        if let Some(path) = &args.png {
            budget::check_pixels(stage, picture.width, picture.height, stage_is_attention(stage))?;
            let bytes = png::of_svg(&picture.svg)?;
            owned_file::write(path, &bytes, Format::Png, "picture")?;
        }
        let written: Vec<String> =
            [&args.svg, &args.png].into_iter().flatten().map(|p| p.display().to_string()).collect();
        let text = format!("wrote {stage} ({} × {} px) to {}\n", picture.width, picture.height, written.join(" and "));
        return Ok(ViewReport { notes: Vec::new(), text });
    }
    if args.stage.is_some() || args.head.is_some() || args.lines || args.seq != 0 {
        refuse!(
            "{STAGE}, {HEAD}, {SEQ} and {LINES} choose one picture: give {} or {} too (the page shows every \
             sequence)",
            SVG.with("FILE"),
            PNG.with("FILE")
        );
    }
    let chosen = match args.heatmaps.as_slice() {
        [] => None,
        globs => {
            let mut set = GlobSetBuilder::new();
            for glob in globs {
                let glob = Glob::new(glob).map_err(|e| {
                    Error::Request(format!("{} is not a valid glob: {e}", HEATMAP.with(format!("`{glob}`"))))
                })?;
                let matcher = glob.compile_matcher();
                if !dump.manifest.stages.iter().any(|s| matcher.is_match(&s.name)) {
                    refuse!(
                        "{} matches no stage of {}",
                        HEATMAP.with(format!("`{}`", glob.glob())),
                        args.dump.display()
                    );
                }
                set.add(glob);
            }
            Some(set.build()?)
        }
    };
    let (page, left_out) = page_html(&dump, &names, chosen.as_ref())?;
    let mut notes = Vec::new();
    if !left_out.is_empty() {
        notes.push(format!(
            "note: {} heatmap stage(s) left out to keep the page under about 55 MB ({}); choose heatmaps with {}",
            left_out.len(),
            left_out.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
                + if left_out.len() > 3 { ", ..." } else { "" },
            HEATMAP.with("GLOB")
        ));
    }
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("view.html"));
    owned_file::write(&out, page.as_bytes(), Format::Text, "page")?;
    let text = format!(
        "wrote {} ({:.1} MB): open it in a browser; it needs no network\n",
        out.display(),
        page.len() as f64 / 1e6
    );
    Ok(ViewReport { notes, text })
}

/// The page of `dump`, as `bert-trace view` writes it (one self-contained HTML document), and
/// the heatmap stages left out to keep it under its size budget. `names` names the tokens;
/// `chosen` limits the heatmaps.
pub fn page_html(dump: &Dump, names: &Names<'_>, chosen: Option<&GlobSet>) -> Result<(String, Vec<String>)> {
    let (data, left_out) = data::page(dump, names, chosen)?;
    let json = serde_json::to_string(&data)?.replace('<', "\\u003c");
    let page = PAGE
        .replacen("<!--BERT_TRACE_STYLE-->", &format!("<style>\n{STYLE}</style>"), 1)
        .replacen(
            "<!--BERT_TRACE_DATA-->",
            &format!("<script type=\"application/json\" id=\"bert-trace-data\">{json}</script>"),
            1,
        )
        .replacen("<!--BERT_TRACE_SCRIPT-->", &format!("<script>\n{SCRIPT}</script>"), 1);
    Ok((page, left_out))
}

/// The page's data and, for `stage`, the SVG of its picture, as [`view`] makes them but written
/// nowhere; `model`'s tokenizer names the tokens. This is the data layer, which the `view` fuzz
/// target drives with damaged dumps: whatever the dump holds, it returns an error or a drawing.
pub fn draw(
    dump: &Dump,
    model: Option<&BertModel>,
    stage: Option<&str>,
) -> Result<(serde_json::Value, Option<String>)> {
    let names = Names { model };
    let (data, _) = data::page(dump, &names, None)?;
    let svg = match stage {
        Some(stage) => {
            let args = ViewRequest { dump: dump.dir.clone(), stage: Some(stage.to_string()), ..ViewRequest::default() };
            Some(picture(dump, &names, stage, &args)?.svg)
        }
        None => None,
    };
    Ok((data, svg))
}

/// `view RESULT.json`: the grid of `bert-trace compare --json`, `ablate --json` or
/// `attribute --json`, as a picture or a page.
fn comparison(args: &ViewRequest) -> Result<ViewReport> {
    if args.stage.is_some() || args.head.is_some() || args.lines || !args.heatmaps.is_empty() {
        refuse!(
            "{STAGE}, {HEAD}, {LINES} and {HEATMAP} choose what to draw of a dump; a JSON result (compare, ablate, \
             attribute) is drawn whole"
        );
    }
    let grid = grid::picture(&args.dump)?;
    let picture = &grid.picture;
    let mut written = Vec::new();
    if let Some(path) = &args.svg {
        owned_file::write(path, picture.svg.as_bytes(), Format::Text, "picture")?;
        written.push(path.display().to_string());
    }
    if let Some(path) = &args.png {
        budget::check_pixels(grid.what, picture.width, picture.height, false)?;
        owned_file::write(path, &png::of_svg(&picture.svg)?, Format::Png, "picture")?;
        written.push(path.display().to_string());
    }
    if written.is_empty() {
        let out = args.out.clone().unwrap_or_else(|| PathBuf::from("view.html"));
        owned_file::write(&out, grid::page(&grid).as_bytes(), Format::Text, "page")?;
        written.push(out.display().to_string());
    }
    let text =
        format!("wrote {} ({} × {} px) to {}\n", grid.what, picture.width, picture.height, written.join(" and "));
    Ok(ViewReport { notes: Vec::new(), text })
}

/// The model whose tokenizer names the tokens: `model`, which must load, or else the one the
/// manifest names when it is the built-in model or a directory that is still there (best
/// effort: None if it does not load). Tokens the dump does not spell out are then shown by id.
fn names_model(args: &ViewRequest, dump: &Dump) -> Result<Option<BertModel>> {
    if args.model.is_some() {
        return Ok(Some(source::load(args.model.as_deref())?.model));
    }
    let named = &dump.manifest.model;
    if let Some(builtin) = source::Builtin::of_manifest(named) {
        return Ok(builtin.load_as().ok());
    }
    let dir = Path::new(named);
    let dir = if dir.is_relative() && !dir.exists() { dump.dir.join(dir) } else { dir.to_path_buf() };
    Ok(dir.join("config.json").is_file().then(|| BertModel::load(&dir).ok()).flatten())
}

/// The picture `args` asks for, of `stage`.
fn picture(dump: &Dump, names: &Names<'_>, stage: &str, args: &ViewRequest) -> Result<picture::Picture> {
    let stages = Stages { dump };
    let Some(entry) = dump.entry(stage) else {
        let known: Vec<&str> = dump.manifest.stages.iter().map(|s| s.name.as_str()).collect();
        let close = known.iter().filter(|n| strsim_like(n, stage)).take(3).copied().collect::<Vec<_>>();
        refuse!(
            "{}: the dump has no stage `{stage}`{}",
            args.dump.display(),
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

/// Whether `stage` holds attention probabilities (a gradient of them, `grad.*.probs`, is signed).
fn is_probability(stage: &str) -> bool {
    stage::parse(stage).is_some_and(|s| s.is_value_of(StageKind::AttnProbs))
}

/// Whether `stage` is attention scores or probabilities, `[B,nh,T,T]`, or the gradient of one.
fn stage_is_attention(stage: &str) -> bool {
    stage::parse(stage).is_some_and(|s| matches!(s.kind, StageKind::AttnScores | StageKind::AttnProbs))
}

/// Whether two stage names are close (a typo): one edit apart on their last component, or the
/// same component in another layer.
fn strsim_like(a: &str, b: &str) -> bool {
    let tail = |s: &str| s.rsplit('.').next().unwrap_or(s).to_string();
    tail(a) == tail(b)
        || a.len().abs_diff(b.len()) <= 1 && a.chars().zip(b.chars()).filter(|(x, y)| x != y).count() <= 1
}
