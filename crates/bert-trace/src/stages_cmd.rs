//! `bert-trace stages`: every stage name in execution order, with its shape for this model.

use anyhow::Result;
use bert_core::stage::Dim;
use bert_core::BertModel;

use crate::cli::StagesArgs;
use crate::model_source;
use crate::table::new_table;

pub fn run(args: &StagesArgs) -> Result<i32> {
    let (model, embedded) = model_source::load(&args.model)?;
    if embedded && !args.names {
        eprintln!("{}", model_source::embedded_note(&model));
    }
    if args.names {
        for stage in model.plan(Default::default()) {
            println!("{stage}");
        }
    } else {
        println!("{}", table(&model));
    }
    Ok(0)
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
