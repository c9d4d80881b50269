//! The pictures of the commands that print JSON: `bert-trace compare --json` (how much each
//! attention head of a model changed against another's), `bert-trace ablate --json` (how much
//! each head's ablation moves a prediction), `bert-trace heads --json` (each head's importance
//! and where it looks, a layers × heads grid per measure), `bert-trace attribute --json` (the
//! tokens coloured by their attribution) and `bert-trace rollout --json` (what each layer's
//! output reads from the input, a tokens × tokens grid per layer, or words × words), as an SVG or
//! PNG picture or an HTML page holding it.

use std::path::Path;

use crate::error::refuse;
use crate::error::{Error, Result};
use bert_core::divergence::two_models::FORMAT as COMPARE;
use bert_core::experiments::ablation::FORMAT as ABLATE;
use bert_core::experiments::attention_flow::FORMAT as ROLLOUT;
use bert_core::experiments::head_importance::FORMAT as HEADS;
use bert_core::experiments::token_importance::FORMAT as ATTRIBUTE;
use bert_core::io::files;
use ndarray::Array2;
use serde_json::Value;

use super::picture::{self, Label, Picture, Scale};
use super::{budget, colors};
use bert_core::io::tokenizer::visible;

/// The most bytes such a JSON file may have: a few numbers per stage, head or token.
const MAX_JSON: u64 = 64 << 20;

/// A drawn grid, with what the page says about it.
pub struct Grid {
    pub picture: Picture,
    pub title: String,
    /// What one cell means.
    pub caption: String,
    /// What the grid is, for the line that says it was written.
    pub what: &'static str,
}

/// The grid of the JSON file at `path`.
pub fn picture(path: &Path) -> Result<Grid> {
    let bytes = files::read(path, MAX_JSON)?;
    let json: Value = serde_json::from_slice(&bytes)
        .map_err(|e| not_json(format!("{}: not a dump and not valid JSON", path.display()), e))?;
    picture_of(&json, &path.display().to_string())
}

/// The grid of a command's JSON report, `name` saying where it came from in messages.
pub fn picture_of(json: &Value, name: &str) -> Result<Grid> {
    let path = name;
    let format = json.get("format").and_then(Value::as_str).unwrap_or_default();
    let model = json.get("model").and_then(Value::as_str).unwrap_or("model not named");
    match format {
        COMPARE => {
            let rows = rows_of(path, &json["grid"])?;
            let (values, heads) = layers_by_heads(
                path,
                &rows,
                "the comparison has no attention heads to draw \
                 (neither dump had attention probabilities)",
            )?;
            if rows.iter().flatten().any(|v| *v < 0.0) {
                refuse!("{}: the grid holds a value that is not a divergence (negative)", path);
            }
            let max = rows.iter().flatten().copied().fold(0.0, f64::max);
            let scale = Scale::Sequential { min: 0.0, max: if max > 0.0 { max } else { std::f64::consts::LN_2 } };
            let a = json["model_a"].as_str().unwrap_or_default();
            let b = json["model_b"].as_str().unwrap_or_default();
            Ok(Grid {
                picture: picture::heatmap(values.view(), &layer_labels(rows.len()), Some(&head_labels(heads)), scale),
                title: format!("Jensen-Shannon divergence per head, {a} against {b}"),
                caption: "Each cell: how differently the head distributes its attention in the two models, averaged \
                          over the real query tokens (natural log: 0 the same, ln 2 = 0.693 at most)."
                    .into(),
                what: "the heads grid",
            })
        }
        ABLATE => {
            let rows = rows_of(path, &json["grid"])?;
            let (values, heads) = layers_by_heads(path, &rows, "the scan has no heads to draw")?;
            let target = visible(json["target"].as_str().unwrap_or_default());
            Ok(Grid {
                picture: picture::heatmap(
                    values.view(),
                    &layer_labels(rows.len()),
                    Some(&head_labels(heads)),
                    diverging(rows.iter().flatten()),
                ),
                title: format!("change in log p({target}) with each head ablated alone, {model}"),
                caption: format!(
                    "Each cell: log p({target}) at the [MASK] with that head ablated ({}), minus log p({target}) with \
                     every head. Negative (one colour): the head helped; positive (the other): it stood in the way.",
                    json["with"].as_str().unwrap_or("zero")
                ),
                what: "the heads grid",
            })
        }
        ATTRIBUTE => {
            let examples = json["examples"]
                .as_array()
                .filter(|e| !e.is_empty())
                .ok_or_else(|| Error::Request(format!("{}: the attribution has no texts to draw", path)))?;
            let mut rows = Vec::new();
            for example in examples {
                // By words when the report has them (`--words`), else by tokens.
                let (items, key) = match example["words"].as_array() {
                    Some(words) => (words.as_slice(), "word"),
                    None => (example["tokens"].as_array().map(Vec::as_slice).unwrap_or_default(), "token"),
                };
                let mut tokens = Vec::new();
                for token in items {
                    let value = token["attribution"].as_f64().filter(|c| c.is_finite());
                    let (Some(value), Some(name)) = (value, token[key].as_str()) else {
                        refuse!("{}: a token without a finite attribution and a text", path);
                    };
                    tokens.push((visible(name), value));
                }
                budget::check_cells("the tokens", tokens.len(), "tokens", false)?;
                let target = visible(example["target"]["name"].as_str().unwrap_or_default());
                let text = example["text"].as_str().unwrap_or_default();
                rows.push((format!("{target}: {text}"), tokens));
            }
            let method = json["method"].as_str().unwrap_or_default();
            let of = match json["of"].as_str() {
                Some("logit") => "the target's logit",
                _ => "the target's log-probability",
            };
            Ok(Grid {
                picture: picture::tokens(&rows, diverging(rows.iter().flat_map(|(_, t)| t.iter().map(|(_, v)| v)))),
                title: format!("{method} of {of}, {model}"),
                caption: "Each token coloured by its attribution: one colour where it raises the target's score, the \
                          other where it lowers it; white where it does neither. [CLS], [SEP] and the [MASK] are not \
                          attributed."
                    .into(),
                what: "the tokens",
            })
        }
        HEADS => {
            let mut parts = Vec::new();
            let grid = |title: String, value: &Value, scale: fn(&[Vec<f64>]) -> Scale| -> Result<(String, Picture)> {
                let rows = rows_of(path, value)?;
                let (values, heads) = layers_by_heads(path, &rows, "the report has no heads to draw")?;
                let picture =
                    picture::heatmap(values.view(), &layer_labels(rows.len()), Some(&head_labels(heads)), scale(&rows));
                Ok((title, picture))
            };
            let sequential = |rows: &[Vec<f64>]| {
                let max = rows.iter().flatten().copied().fold(0.0, f64::max);
                Scale::Sequential { min: 0.0, max: if max > 0.0 { max } else { 1.0 } }
            };
            if json["importance"].is_object() {
                parts.push(grid(
                    "importance |∂L/∂ξ|, each layer divided by its ℓ2 norm (Michel et al. 2019)".into(),
                    &json["importance"]["normalized"],
                    sequential,
                )?);
                let mut points = Vec::new();
                for point in json["importance"]["curve"].as_array().map(Vec::as_slice).unwrap_or_default() {
                    let (Some(share), Some(loss)) = (point["share"].as_f64(), point["loss"].as_f64()) else {
                        refuse!("{}: a point of the pruning curve without a share and a finite loss", path);
                    };
                    if !loss.is_finite() || !share.is_finite() {
                        refuse!("{}: a point of the pruning curve without a share and a finite loss", path);
                    }
                    points.push((share, loss));
                }
                if !points.is_empty() {
                    parts.push((
                        "the loss with the least important heads masked (the pruning curve)".into(),
                        picture::curve(&points, "share of the heads masked", "loss"),
                    ));
                }
            }
            let statistics = [
                ("cls", "attention to [CLS]"),
                ("sep", "attention to [SEP]"),
                ("punctuation", "attention to punctuation"),
                ("self", "attention to the token itself"),
                ("previous", "attention to the previous token"),
                ("next", "attention to the next token"),
                ("entropy", "entropy of each query's attention, in nats"),
            ];
            if json["statistics"].is_object() {
                for (key, title) in statistics {
                    parts.push(grid(format!("{title} (Clark et al. 2019)"), &json["statistics"][key], sequential)?);
                }
            }
            if parts.is_empty() {
                refuse!("{}: the report has neither importance nor statistics to draw", path);
            }
            Ok(Grid {
                picture: picture::stack(&parts),
                title: format!("which heads matter, {model}"),
                caption: "Each grid: layers down, heads across; the darker the cell, the larger the measure.".into(),
                what: "the heads grids",
            })
        }
        ROLLOUT => {
            // By words when the report reads by words, else by tokens.
            let by_words = json["words"].is_object();
            let names: Vec<String> = match by_words {
                true => json["words"]["words"].as_array().map(Vec::as_slice).unwrap_or_default().iter(),
                false => json["tokens"].as_array().map(Vec::as_slice).unwrap_or_default().iter(),
            }
            .map(|name| visible(name["text"].as_str().or(name.as_str()).unwrap_or_default()))
            .collect();
            let labels: Vec<Label> = names.iter().map(|n| Label { text: n.clone(), colour: colors::TEXT }).collect();
            let n = names.len();
            let mut parts = Vec::new();
            for (what, key, words_key) in [("rollout", "rollout", "rollout_by_word"), ("flow", "flow", "flow_by_word")]
            {
                let layers = &json[if by_words { words_key } else { key }];
                if layers.is_null() {
                    continue;
                }
                let layers: Vec<Vec<Vec<Option<f64>>>> = serde_json::from_value(layers.clone())
                    .map_err(|e| not_json(format!("{path}: its {what} is not a list of layers of matrices"), e))?;
                budget::check_cells(what, layers.len() * n * n, "layers × rows × columns", false)?;
                for (layer, matrix) in layers.iter().enumerate() {
                    if matrix.len() != n || matrix.iter().any(|row| row.len() != n) {
                        refuse!("{}: its {what} of layer {layer} is not {n} × {n}, as its tokens are", path);
                    }
                    if matrix.iter().flatten().any(|v| v.is_none_or(|v| !(0.0..=1.0 + 1e-9).contains(&v))) {
                        refuse!("{}: its {what} of layer {layer} holds a value outside 0 to 1", path);
                    }
                    let values = Array2::from_shape_fn((n, n), |(r, c)| matrix[r][c].unwrap_or(0.0) as f32);
                    let scale = Scale::Sequential { min: 0.0, max: 1.0 };
                    let picture = picture::heatmap(values.view(), &labels, Some(&labels), scale);
                    parts.push((format!("{what} after layer {layer}: rows read the input's columns"), picture));
                }
            }
            if parts.is_empty() {
                refuse!("{}: the report has no rollout to draw", path);
            }
            let source = json["source"].as_str().unwrap_or("the report");
            Ok(Grid {
                picture: picture::stack(&parts),
                title: format!("attention through the layers, {source}"),
                caption: format!(
                    "Each grid: what each {} of a layer's output (rows) reads from the input's (columns), through \
                     every layer up to it; each row sums to 1.",
                    if by_words { "word" } else { "token" }
                ),
                what: "the rollout grids",
            })
        }
        _ => refuse!(
            "{}: not the JSON report of compare, ablate, attribute, heads or rollout (its format is not {COMPARE}, \
             {ABLATE}, {ATTRIBUTE}, {HEADS} or {ROLLOUT})",
            path
        ),
    }
}

/// A list of layers of finite numbers.
fn rows_of(path: &str, grid: &Value) -> Result<Vec<Vec<f64>>> {
    let rows: Vec<Vec<Option<f64>>> = serde_json::from_value(grid.clone())
        .map_err(|e| not_json(format!("{}: its grid is not a list of layers of numbers", path), e))?;
    // The commands write a value that is not finite as null: a head with no measure.
    if rows.iter().flatten().any(|v| v.is_none_or(|v| !v.is_finite())) {
        refuse!(
            "{}: the grid holds a head with no measure (NaN or infinite, null in the JSON): nothing to draw it by",
            path
        );
    }
    Ok(rows.into_iter().map(|row| row.into_iter().flatten().collect()).collect())
}

/// The layers × heads cells; a layer with fewer heads than the widest has its missing cells at 0.
fn layers_by_heads(path: &str, rows: &[Vec<f64>], empty: &str) -> Result<(Array2<f32>, usize)> {
    let heads = rows.iter().map(Vec::len).max().unwrap_or(0);
    if rows.is_empty() || heads == 0 {
        refuse!("{}: {empty}", path);
    }
    budget::check_cells("the heads grid", rows.len() * heads, "layers × heads", false)?;
    let values = Array2::from_shape_fn((rows.len(), heads), |(l, h)| rows[l].get(h).copied().unwrap_or(0.0) as f32);
    Ok((values, heads))
}

/// A scale centred at 0 that holds every value.
fn diverging<'a>(values: impl Iterator<Item = &'a f64>) -> Scale {
    let m = values.fold(0.0f64, |m, v| m.max(v.abs()));
    Scale::Diverging { m: if m > 0.0 { m } else { 1.0 } }
}

fn layer_labels(n: usize) -> Vec<Label> {
    (0..n).map(|l| Label { text: format!("layer {l}"), colour: colors::TEXT }).collect()
}

fn head_labels(n: usize) -> Vec<Label> {
    (0..n).map(|h| Label { text: format!("head {h}"), colour: colors::TEXT }).collect()
}

/// A page that shows the grid's picture and says what it is.
pub fn page(grid: &Grid) -> String {
    let escape = |text: &str| text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{0}</title></head>\n<body>\n<h1>{0}</h1>\n\
         <p>{1}</p>\n{2}\n</body></html>\n",
        escape(&grid.title),
        escape(&grid.caption),
        grid.picture.svg
    )
}

/// `what` went wrong reading JSON: `error` said why.
fn not_json(what: String, error: serde_json::Error) -> Error {
    Error::Request(format!("{what}: not the JSON expected: {error}"))
}
