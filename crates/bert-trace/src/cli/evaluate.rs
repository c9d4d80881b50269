//! `bert-trace evaluate`: a model measured on held-out text (`bert_commands::evaluate`).

use anyhow::Result;
use bert_commands::evaluate::{self, EvaluateRequest};

use crate::cli::EvaluateArgs;

pub fn run(args: &EvaluateArgs) -> Result<i32> {
    let request = EvaluateRequest {
        model: args.model.model.clone(),
        file: args.file.clone(),
        documents: args.documents,
        max_len: args.max_len,
        batch_size: args.batch_size,
        seed: args.seed,
        each_token: args.each_token,
        pass: crate::cli::settings::of(&args.pass)?,
    };
    let report = evaluate::evaluate(&request)?;
    let text = match args.json {
        true => {
            let mut json = serde_json::to_value(&report).expect("a report serialises");
            json["format"] = "bert-trace-evaluate/1".into();
            format!("{}\n", serde_json::to_string_pretty(&json)?)
        }
        false => report.to_string(),
    };
    crate::print(&report.notes, &text);
    Ok(0)
}
