//! `bert-trace view DUMP`: a dump drawn (by bert-view) as one self-contained HTML page, or one
//! stage of it as a picture in SVG or PNG, or the grid of a command's JSON report; this module
//! reads the request, finds the model that names the tokens, and writes each drawing by
//! `owned_file`'s rule.

use std::path::{Path, PathBuf};

use bert_core::experiments::segmentation::WORDS;
use bert_core::io::dump::Dump;
use bert_core::BertModel;
use bert_view::{budget, grid, png, PictureOptions};
use globset::{Glob, GlobSet, GlobSetBuilder};

mod page_session;
pub mod serve;

pub use bert_view::{draw, page_html, svg_of_report, Names, HEAD, HEATMAP, LINES, PNG, SEQ, STAGE, SVG};

use crate::error::{drawn, Error, Result};
use crate::owned_file::{self, Format};
use crate::refuse;
use crate::source;

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
    /// An attention picture by words: Some("") those found automatically (WordPiece's, and jieba's for Chinese), Some(words) those given.
    pub words: Option<String>,
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
    let model = names_model(args.model.as_deref(), &dump)?;
    let names = Names { model: model.as_ref() };
    if args.svg.is_some() || args.png.is_some() {
        let stage = args.stage.as_deref().ok_or_else(|| {
            Error::Request(format!("{SVG} and {PNG} draw one stage: give it with {}", STAGE.with("NAME")))
        })?;
        let options =
            PictureOptions { seq: args.seq, head: args.head, lines: args.lines, words: args.words.as_deref() };
        let picture = bert_view::picture(&dump, &names, stage, options).map_err(drawn)?;
        if let Some(path) = &args.svg {
            owned_file::write(path, picture.svg.as_bytes(), Format::Text, "picture")?;
        }
        if let Some(path) = &args.png {
            budget::check_pixels(stage, picture.width, picture.height, bert_view::stage_is_attention(stage))
                .map_err(drawn)?;
            let bytes = png::of_svg(&picture.svg).map_err(drawn)?;
            owned_file::write(path, &bytes, Format::Png, "picture")?;
        }
        let written: Vec<String> =
            [&args.svg, &args.png].into_iter().flatten().map(|p| p.display().to_string()).collect();
        let text = format!("wrote {stage} ({} × {} px) to {}\n", picture.width, picture.height, written.join(" and "));
        return Ok(ViewReport { notes: Vec::new(), text });
    }
    if args.stage.is_some() || args.head.is_some() || args.lines || args.seq != 0 || args.words.is_some() {
        refuse!(
            "{STAGE}, {HEAD}, {SEQ}, {LINES} and {WORDS} choose one picture: give {} or {} too (the page shows every \
             sequence)",
            SVG.with("FILE"),
            PNG.with("FILE")
        );
    }
    let chosen = chosen_heatmaps(&dump, &args.dump, &args.heatmaps)?;
    let (page, left_out) = page_html(&dump, &names, chosen.as_ref()).map_err(drawn)?;
    let notes: Vec<String> = left_out_note(&left_out).into_iter().collect();
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("view.html"));
    owned_file::write(&out, page.as_bytes(), Format::Text, "page")?;
    let text = format!(
        "wrote {} ({:.1} MB): open it in a browser; it needs no network\n",
        out.display(),
        page.len() as f64 / 1e6
    );
    Ok(ViewReport { notes, text })
}

/// The heatmaps `globs` choose (None: the page's own choice), each of which must match a stage
/// of `dump` (read from `path`).
fn chosen_heatmaps(dump: &Dump, path: &Path, globs: &[String]) -> Result<Option<GlobSet>> {
    if globs.is_empty() {
        return Ok(None);
    }
    let mut set = GlobSetBuilder::new();
    for glob in globs {
        let glob = Glob::new(glob)
            .map_err(|e| Error::Request(format!("{} is not a valid glob: {e}", HEATMAP.with(format!("`{glob}`")))))?;
        let matcher = glob.compile_matcher();
        if !dump.manifest.stages.iter().any(|s| matcher.is_match(&s.name)) {
            refuse!("{} matches no stage of {}", HEATMAP.with(format!("`{}`", glob.glob())), path.display());
        }
        set.add(glob);
    }
    Ok(Some(set.build().map_err(|e| Error::Request(format!("not a valid glob: {e}")))?))
}

/// What the page left out to keep to its size, when it left something out.
fn left_out_note(left_out: &[String]) -> Option<String> {
    (!left_out.is_empty()).then(|| {
        format!(
            "note: {} heatmap stage(s) left out to keep the page under about 55 MB ({}); choose heatmaps with {}",
            left_out.len(),
            left_out.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
                + if left_out.len() > 3 { ", ..." } else { "" },
            HEATMAP.with("GLOB")
        )
    })
}

/// `view RESULT.json`: the grid of `bert-trace compare --json`, `ablate --json` or
/// `attribute --json`, as a picture or a page.
fn comparison(args: &ViewRequest) -> Result<ViewReport> {
    if args.stage.is_some() || args.head.is_some() || args.lines || !args.heatmaps.is_empty() || args.words.is_some() {
        refuse!(
            "{STAGE}, {HEAD}, {LINES}, {HEATMAP} and {WORDS} choose what to draw of a dump; a JSON result (compare, \
             ablate, attribute, heads, rollout) is drawn whole, by words when it was made by words"
        );
    }
    let grid = grid::picture(&args.dump).map_err(drawn)?;
    let picture = &grid.picture;
    let mut written = Vec::new();
    if let Some(path) = &args.svg {
        owned_file::write(path, picture.svg.as_bytes(), Format::Text, "picture")?;
        written.push(path.display().to_string());
    }
    if let Some(path) = &args.png {
        budget::check_pixels(grid.what, picture.width, picture.height, false).map_err(drawn)?;
        owned_file::write(path, &png::of_svg(&picture.svg).map_err(drawn)?, Format::Png, "picture")?;
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
pub(crate) fn names_model(model: Option<&Path>, dump: &Dump) -> Result<Option<BertModel>> {
    if model.is_some() {
        return Ok(Some(source::load(model)?.model));
    }
    let named = &dump.manifest.model;
    if let Some(builtin) = source::Builtin::of_manifest(named) {
        return Ok(builtin.load_as().ok());
    }
    let dir = Path::new(named);
    let dir = if dir.is_relative() && !dir.exists() { dump.dir.join(dir) } else { dir.to_path_buf() };
    Ok(dir.join("config.json").is_file().then(|| BertModel::load(&dir).ok()).flatten())
}
