//! `stages`: every stage name in execution order, with its shape for this model.

use std::path::Path;

use bert_core::stage::Dim;
use bert_core::BertModel;
use serde::Serialize;

use crate::error::Result;
use crate::render::text_table::new_table;
use crate::report::{Report, Reported};
use crate::source;

/// One stage of the model, as `stages` lists it.
#[derive(Clone, Debug, Serialize)]
pub struct StageRow {
    pub name: String,
    /// The shape in the stage table's letters: `[B,T,H]`.
    pub shape: String,
    /// The shape for this model: B and T stay letters (they depend on the input), the rest
    /// are the sizes in config.json.
    pub sizes: Vec<String>,
    pub hf: String,
    pub formula: String,
}

/// Every stage of one model, in execution order; `names_only` prints the names alone.
#[derive(Clone, Debug, Serialize)]
pub struct StagesReport {
    pub model: String,
    pub stages: Vec<StageRow>,
    #[serde(skip)]
    pub names_only: bool,
}

impl Report for StagesReport {
    fn text(&self) -> String {
        match self.names_only {
            true => self.stages.iter().map(|stage| format!("{}\n", stage.name)).collect(),
            false => {
                let mut table = new_table(&["stage", "shape", "for this model", "Hugging Face", "formula"], &[]);
                for stage in &self.stages {
                    let sizes = format!("[{}]", stage.sizes.join(", "));
                    table.add_row(vec![&stage.name, &stage.shape, &sizes, &stage.hf, &stage.formula]);
                }
                format!("{table}\n")
            }
        }
    }
}

/// Every stage of the model `model` names (None: the built-in one): the names alone, one per
/// line (for scripts), or a table with shapes, Hugging Face names and formulas.
pub fn stages(model: Option<&Path>, names_only: bool) -> Result<Reported<StagesReport>> {
    let loaded = source::load(model)?;
    let notes = if names_only { Vec::new() } else { loaded.notes };
    let report = StagesReport { model: loaded.name, stages: rows(&loaded.model), names_only };
    Ok(Reported { notes, report })
}

fn rows(model: &BertModel) -> Vec<StageRow> {
    let dims = model.dims(0, 0);
    let sizes = |dim: Dim| match dim {
        Dim::B | Dim::T => dim.symbol().to_string(),
        _ => dims.size(dim).to_string(),
    };
    model
        .plan(Default::default())
        .into_iter()
        .map(|stage| StageRow {
            name: stage.name(),
            shape: stage.shape_symbols(),
            sizes: stage.info().shape.iter().map(|&d| sizes(d)).collect(),
            hf: stage.hf(),
            formula: stage.formula().to_string(),
        })
        .collect()
}
