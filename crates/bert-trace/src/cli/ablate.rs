//! `bert-trace ablate --target WORD TEXT`: each head ablated alone (`bert_commands::ablate`).

use anyhow::Result;
use bert_commands::ablate::{self, AblateRequest};
use bert_commands::experiment::ExperimentRequest;

use crate::cli::{AblateArgs, ExperimentInput};

pub fn run(args: &AblateArgs) -> Result<i32> {
    let request =
        AblateRequest { input: input(&args.input)?, target: args.target.clone(), with: args.with, top: args.top };
    crate::show(&ablate::ablate(&request)?, args.input.json);
    Ok(0)
}

/// What every experiment reads, as the library's request.
pub fn input(input: &ExperimentInput) -> Result<ExperimentRequest> {
    Ok(ExperimentRequest {
        text: input.text.clone(),
        model: input.model.model.clone(),
        settings: crate::cli::settings::of(&input.pass)?,
    })
}
