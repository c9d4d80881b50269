//! The grid of `bert-trace compare --json`: how much each attention head of a model changed
//! against another's (the Jensen-Shannon divergence of where it looks), drawn as layers × heads
//! cells, as an SVG or PNG picture or an HTML page holding that picture.

use std::path::Path;

use anyhow::{bail, Context, Result};
use bert_core::checkpoints::FORMAT;
use bert_core::load::files;
use ndarray::Array2;

use super::picture::{self, Label, Picture, Scale};
use super::{budget, colors};

/// The most bytes a comparison's JSON may have: a few numbers per stage and per head.
const MAX_JSON: u64 = 64 << 20;

/// The picture of the grid in the comparison JSON at `path`.
pub fn picture(path: &Path) -> Result<(Picture, String)> {
    let bytes = files::read(path, MAX_JSON)?;
    let json: serde_json::Value =
        serde_json::from_slice(&bytes).with_context(|| format!("{}: not a dump and not valid JSON", path.display()))?;
    if json.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
        bail!("{}: not the JSON of `bert-trace compare --json` (its format is not {FORMAT})", path.display());
    }
    let rows: Vec<Vec<f64>> = serde_json::from_value(json["grid"].clone())
        .with_context(|| format!("{}: its grid is not a list of layers of numbers", path.display()))?;
    let heads = rows.iter().map(Vec::len).max().unwrap_or(0);
    if rows.is_empty() || heads == 0 {
        bail!(
            "{}: the comparison has no attention heads to draw (neither dump had attention probabilities)",
            path.display()
        );
    }
    if rows.iter().flatten().any(|v| !v.is_finite() || *v < 0.0) {
        bail!("{}: the grid holds a value that is not a divergence (negative, NaN or infinite)", path.display());
    }
    budget::check_cells("the heads grid", rows.len() * heads, "layers × heads", false)?;
    // A layer with fewer heads than the widest is drawn with its missing cells at 0.
    let values = Array2::from_shape_fn((rows.len(), heads), |(l, h)| rows[l].get(h).copied().unwrap_or(0.0) as f32);
    let label = |text: String| Label { text, colour: colors::TEXT };
    let row_labels: Vec<Label> = (0..rows.len()).map(|l| label(format!("layer {l}"))).collect();
    let col_labels: Vec<Label> = (0..heads).map(|h| label(format!("head {h}"))).collect();
    let max = rows.iter().flatten().copied().fold(0.0, f64::max);
    let scale = Scale::Sequential { min: 0.0, max: if max > 0.0 { max } else { std::f64::consts::LN_2 } };
    let a = json["model_a"].as_str().unwrap_or_default();
    let b = json["model_b"].as_str().unwrap_or_default();
    let title = format!("Jensen-Shannon divergence per head, {a} against {b}");
    Ok((picture::heatmap(values.view(), &row_labels, Some(&col_labels), scale), title))
}

/// A page that shows the grid's picture and says what it is.
pub fn page(picture: &Picture, title: &str) -> String {
    let escape = |text: &str| text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{0}</title></head>\n<body>\n<h1>{0}</h1>\n\
         <p>Each cell: how differently the head distributes its attention in the two models, averaged over the real \
         query tokens (natural log: 0 the same, ln 2 = 0.693 at most).</p>\n{1}\n</body></html>\n",
        escape(title),
        picture.svg
    )
}
