//! `stages`: every stage name in execution order, with its shape for this model.

use std::path::Path;

use bert_core::stage::Dim;
use bert_core::BertModel;

use crate::error::Result;
use crate::experiment::ExperimentReport;
use crate::render::table::new_table;
use crate::source;

/// Every stage of the model `model` names (None: the built-in one): the names alone, one per
/// line (for scripts), or a table with shapes, Hugging Face names and formulas.
pub fn stages(model: Option<&Path>, names_only: bool) -> Result<ExperimentReport> {
    let loaded = source::load(model)?;
    let notes = if names_only { Vec::new() } else { loaded.notes };
    let text = match names_only {
        true => loaded.model.plan(Default::default()).iter().map(|stage| format!("{stage}\n")).collect(),
        false => format!("{}\n", table(&loaded.model)),
    };
    Ok(ExperimentReport { notes, text })
}

fn table(model: &BertModel) -> comfy_table::Table {
    let dims = model.dims(0, 0);
    let mut table = new_table(&["stage", "shape", "for this model", "Hugging Face", "formula"], &[]);
    for stage in model.plan(Default::default()) {
        // B and T depend on the input, so they stay symbolic; the rest come from config.json.
        let sizes: Vec<String> = stage
            .info()
            .shape
            .iter()
            .map(|&d| match d {
                Dim::B | Dim::T => d.symbol().to_string(),
                _ => dims.size(d).to_string(),
            })
            .collect();
        table.add_row(vec![
            stage.name(),
            stage.shape_symbols(),
            format!("[{}]", sizes.join(", ")),
            stage.hf(),
            stage.formula().to_string(),
        ]);
    }
    table
}
