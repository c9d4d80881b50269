//! `heads`: which heads matter (bert-core's `experiments/head_importance.rs` computes it): each
//! head's importance by the backward pass and the pruning curve, and where each head looks, as
//! layers × heads tables or JSON.

use std::path::PathBuf;

use bert_core::experiments::head_importance::{self, Importance, Statistics};
use bert_core::io::dump::manifest::Inputs;
use bert_core::objectives::IGNORE;
use bert_core::words::Opt;
use serde::Serialize;

use crate::error::Result;
use crate::render::text_table::new_table;
use crate::report::{Report, Reported};
use crate::settings::PassSettings;
use crate::source;
use crate::trace::texts;

pub const IMPORTANCE: Opt = Opt("importance");
pub const STATISTICS: Opt = Opt("statistics");
pub const BATCH_SIZE: Opt = Opt("batch_size");

/// How many texts one pass reads unless told.
pub const BATCH_SIZE_DEFAULT: usize = 16;

/// The texts and labels to measure the heads on, and which measures; each field is the option
/// of that name. Neither measure asked for: both.
#[derive(Clone, Debug, Default)]
pub struct HeadsRequest {
    pub texts: Vec<String>,
    pub file: Option<PathBuf>,
    pub model: Option<PathBuf>,
    pub pair: Vec<String>,
    pub mlm_targets: Vec<String>,
    pub nsp_labels: Vec<i64>,
    pub labels: Vec<String>,
    pub importance: bool,
    pub statistics: bool,
    /// How many texts one pass reads (None: [`BATCH_SIZE_DEFAULT`]).
    pub batch_size: Option<usize>,
    pub settings: PassSettings,
}

/// Which heads matter: the measures asked for, of the model named.
#[derive(Clone, Debug, Serialize)]
pub struct HeadsReport {
    pub format: &'static str,
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub importance: Option<Importance>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statistics: Option<Statistics>,
}

impl Report for HeadsReport {
    fn text(&self) -> String {
        text(self.importance.as_ref(), self.statistics.as_ref())
    }
}

/// Measures the heads as `request` asks; `progress` hears (passes done, passes in all) as the
/// importance goes.
pub fn heads(request: &HeadsRequest, progress: &mut dyn FnMut(usize, usize)) -> Result<Reported<HeadsReport>> {
    let (_, kernels) = request.settings.apply()?;
    let batch_size = request.batch_size.unwrap_or(BATCH_SIZE_DEFAULT);
    if batch_size == 0 {
        crate::refuse!("{}: a batch holds at least one text", BATCH_SIZE.with(0));
    }
    let texts = texts(&request.texts, request.file.as_deref())?;
    crate::trace::refuse_no_text(&texts, request.file.as_deref())?;
    let loaded = source::load(request.model.as_deref())?;
    let mut model = loaded.model;
    model.kernels = kernels;
    // The input is tokenized and labelled once, whole, so that an option given once per text is
    // checked against every text; then it is cut into batches, each padded to its own longest.
    let whole = Inputs {
        texts: texts.clone(),
        pair: (!request.pair.is_empty()).then(|| request.pair.clone()),
        nsp_label: (!request.nsp_labels.is_empty()).then(|| request.nsp_labels.clone()),
        label: (!request.labels.is_empty()).then(|| request.labels.clone()),
        mlm_targets: (!request.mlm_targets.is_empty()).then(|| request.mlm_targets.clone()),
        ..Inputs::default()
    };
    let whole = model.encode_inputs(&whole, false)?;
    let mut batches = Vec::new();
    for start in (0..texts.len()).step_by(batch_size) {
        let range = start..(start + batch_size).min(texts.len());
        let batch = whole.rows(range.clone());
        let unlabelled = |labels: &ndarray::Array2<i64>| labels.iter().all(|&l| l == IGNORE);
        if batch.labels.mlm.as_ref().is_some_and(unlabelled) {
            crate::refuse!(
                "texts {} to {} hold no [MASK]: with {} a batch has no loss without one; give every text a [MASK], \
                 or {} 1 to see which",
                range.start + 1,
                range.end,
                Opt("mlm_target"),
                BATCH_SIZE
            );
        }
        batches.push(batch);
    }
    let both = !request.importance && !request.statistics;
    // The importance is of a loss: the labels this command takes, named as it takes them.
    let no_loss = request.mlm_targets.is_empty() && request.nsp_labels.is_empty() && request.labels.is_empty();
    if (request.importance || both) && no_loss {
        let classifier = if model.classifier.is_some() { ", or a classifier's class with ‹label›" } else { "" };
        crate::refuse!(
            "the importance of a head is for a loss: give the word at the [MASK] with {}, or {} with {}{classifier} \
             ({} alone needs none)",
            Opt("mlm_target"),
            Opt("nsp_label"),
            Opt("pair"),
            STATISTICS
        );
    }
    let importance = (request.importance || both).then(|| model.head_importance(&batches, progress)).transpose()?;
    let statistics = (request.statistics || both).then(|| model.head_statistics(&batches)).transpose()?;
    let report = HeadsReport { format: head_importance::FORMAT, model: loaded.name, importance, statistics };
    Ok(Reported { notes: loaded.notes, report })
}

fn text(importance: Option<&Importance>, statistics: Option<&Statistics>) -> String {
    let mut out = String::new();
    if let Some(importance) = importance {
        out += &format!(
            "head importance |∂L/∂ξ| (Michel et al. 2019), each layer divided by its ℓ2 norm:\n{}\n",
            grid(&importance.normalized, 4)
        );
        let mut curve = new_table(&["heads masked", "share", "loss"], &[0, 1, 2]);
        for point in &importance.curve {
            curve.add_row(vec![
                point.masked.to_string(),
                format!("{:.0}%", point.share * 100.0),
                format!("{:.4}", point.loss),
            ]);
        }
        out += &format!("\nthe loss with the least important heads masked (their context zeroed):\n{curve}\n");
    }
    if let Some(stats) = statistics {
        let grids = [
            ("attention to [CLS]", &stats.cls),
            ("attention to [SEP]", &stats.sep),
            ("attention to punctuation", &stats.punctuation),
            ("attention to the token itself", &stats.own),
            ("attention to the previous token ([CLS], which has none, counting 0)", &stats.previous),
            ("attention to the next token (the last real token, which has none, counting 0)", &stats.next),
            ("entropy of each query's attention, in nats", &stats.entropy),
        ];
        for (what, values) in grids {
            if !out.is_empty() {
                out.push('\n');
            }
            out += &format!("{what}, averaged over the real query tokens (Clark et al. 2019):\n{}\n", grid(values, 3));
        }
    }
    out
}

/// A layers × heads table of `values`, with `digits` decimals.
fn grid(values: &[Vec<f64>], digits: usize) -> String {
    let heads = values.first().map_or(0, Vec::len);
    let mut header = vec!["layer".to_string()];
    header.extend((0..heads).map(|h| format!("head {h}")));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = new_table(&header, &(0..=heads).collect::<Vec<_>>());
    for (layer, row) in values.iter().enumerate() {
        let mut cells = vec![layer.to_string()];
        cells.extend(row.iter().map(|v| format!("{v:.digits$}")));
        table.add_row(cells);
    }
    table.to_string()
}
