//! `compare A B`: two models' traces of the same input, side by side (bert-core's
//! `divergence/two_models.rs` measures; this writes the report). Nothing is pass or fail.

use std::path::PathBuf;

use bert_core::divergence::two_models::{compare as measure, Comparison};
use bert_core::experiments::AttentionHead;
use bert_core::io::dump::Dump;

use serde::Serialize;

use crate::error::Result;
use crate::render::text_table::{new_table, num, shape};
use crate::report::{Report, Reported};

/// The two dumps to compare, and how many of the most changed heads to list.
#[derive(Clone, Debug)]
pub struct CompareRequest {
    pub a: PathBuf,
    pub b: PathBuf,
    pub top: usize,
}

/// The comparison (its JSON is `bert-trace compare --json`, which `view` draws) and how many of
/// the most changed heads its text lists.
pub struct CompareReport {
    pub comparison: Comparison,
    pub top: usize,
}

/// The JSON is the comparison's own, which `view` reads back.
impl Serialize for CompareReport {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        self.comparison.serialize(serializer)
    }
}

impl Report for CompareReport {
    fn text(&self) -> String {
        report(&self.comparison, self.top)
    }
}

/// Compares the traces of two models on the same input.
pub fn compare(request: &CompareRequest) -> Result<Reported<CompareReport>> {
    let (a, b) = (Dump::open(&request.a)?, Dump::open(&request.b)?);
    compare_dumps(&a, &b, request.top)
}

/// [`compare`] of two dumps already open (Python's traces in memory among them).
pub fn compare_dumps(a: &Dump, b: &Dump, top: usize) -> Result<Reported<CompareReport>> {
    let comparison = measure(a, b)?;
    Ok(Reported { notes: Vec::new(), report: CompareReport { comparison, top } })
}

/// The text report: stages, the heads grid, the most changed heads.
fn report(contrast: &Comparison, top: usize) -> String {
    let mut out = format!(
        "A: {} ({})\nB: {} ({})\n",
        contrast.a,
        model_name(&contrast.model_a),
        contrast.b,
        model_name(&contrast.model_b)
    );
    let mut stages = new_table(&["stage", "shape", "cosine", "‖A−B‖/‖A‖"], &[2, 3]);
    for stage in &contrast.stages {
        let (cosine, relative) = match stage.non_finite {
            true => ("non-finite".to_string(), "non-finite".to_string()),
            false => (format!("{:.6}", stage.cosine), num(stage.relative_difference)),
        };
        stages.add_row(vec![stage.name.clone(), shape(&stage.shape), cosine, relative]);
    }
    out += &format!("{stages}\n");
    let non_finite = contrast.stages.iter().filter(|s| s.non_finite).count();
    if non_finite > 0 {
        out += &format!("{non_finite} stage(s) hold NaN or inf on a side: they have no measure\n");
    }
    for skipped in &contrast.skipped {
        out += &format!(
            "not compared: {} ({}): A {}, B {}\n",
            skipped.name,
            skipped.reason,
            shape(&skipped.shape_a),
            shape(&skipped.shape_b)
        );
    }
    if contrast.grid.is_empty() {
        out += "no attention probabilities in both dumps: no per-head comparison\n";
        return out;
    }
    let heads = contrast.grid.iter().map(Vec::len).max().unwrap_or(0);
    let mut header = vec!["layer".to_string()];
    header.extend((0..heads).map(|h| format!("head {h}")));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut grid = new_table(&header, &(0..=heads).collect::<Vec<_>>());
    for (layer, row) in contrast.grid.iter().enumerate() {
        let mut cells = vec![layer.to_string()];
        cells.extend(row.iter().map(|&js| if js.is_finite() { format!("{js:.4}") } else { "non-finite".into() }));
        grid.add_row(cells);
    }
    out += &format!(
        "\nwhere each head looks: the Jensen-Shannon divergence of its attention probabilities, per real query row \
         over the real keys, averaged (natural log: 0 = the same, ln 2 = 0.6931 at most)\n{grid}\n"
    );
    let ranked: Vec<_> = contrast.heads.iter().filter(|h| !h.non_finite).collect();
    let shown = ranked.len().min(top);
    out += &format!("\nthe {shown} most changed heads:\n");
    for (rank, head) in ranked.iter().take(top).enumerate() {
        let name = AttentionHead { layer: head.layer, head: head.head };
        out += &format!("{:>3}. {name}  {:.4}\n", rank + 1, head.js_divergence);
    }
    let unranked: Vec<String> = contrast
        .heads
        .iter()
        .filter(|h| h.non_finite)
        .map(|h| AttentionHead { layer: h.layer, head: h.head }.to_string())
        .collect();
    if !unranked.is_empty() {
        out += &format!("not ranked (NaN or inf in their probabilities): {}\n", unranked.join(", "));
    }
    out
}

fn model_name(model: &str) -> &str {
    if model.is_empty() {
        "model not named"
    } else {
        model
    }
}
