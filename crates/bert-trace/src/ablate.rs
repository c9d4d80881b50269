//! `bert-trace ablate --target WORD TEXT`: each head ablated alone (`bert_commands::ablate`).

use anyhow::Result;
use bert_commands::ablate::{self, AblateRequest};
use bert_commands::experiment::ExperimentRequest;
use bert_core::experiments::intervention::AblateWith;

use crate::cli::{AblateArgs, AblateWithArg, ExperimentInput};

pub fn run(args: &AblateArgs) -> Result<i32> {
    let with = match args.with {
        AblateWithArg::Zero => AblateWith::Zero,
        AblateWithArg::Mean => AblateWith::Mean,
    };
    let request = AblateRequest { input: input(&args.input)?, target: args.target.clone(), with, top: args.top };
    let report = ablate::ablate(&request)?;
    crate::print(&report.notes, &report.text);
    Ok(0)
}

/// What every experiment reads, as the library's request.
pub fn input(input: &ExperimentInput) -> Result<ExperimentRequest> {
    Ok(ExperimentRequest {
        text: input.text.clone(),
        model: input.model.model.clone(),
        settings: crate::settings::of(&input.pass)?,
        json: input.json,
    })
}
