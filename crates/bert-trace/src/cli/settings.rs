//! The passes' settings from the command line and the environment (`--threads` or
//! `BERT_TRACE_THREADS`, `--kernels` or `BERT_TRACE_KERNELS`), and matrixmultiply's thread count,
//! which it reads from `MATMUL_NUM_THREADS` at its first product: set here, at the start of
//! `main`, before any other thread exists.

use anyhow::Result;
use bert_commands::settings::PassSettings;
use bert_commands::source::process_env;

use crate::cli::{Cli, Command, PassArgs};

/// The settings the command's `--threads` and `--kernels` ask for, the environment's where they
/// are not given.
pub fn of(pass: &PassArgs) -> Result<PassSettings> {
    let given = PassSettings { threads: pass.threads, kernels: pass.kernels };
    Ok(PassSettings::from_env(given, &process_env)?)
}

/// Sets matrixmultiply's thread count for the whole run, from the command's settings.
pub fn prepare(cli: &Cli) -> Result<()> {
    let pass = match &cli.command {
        None => &cli.trace.pass,
        Some(Command::Ablate(a)) => &a.input.pass,
        Some(Command::Lens(a)) => &a.input.pass,
        Some(Command::Attribute(a)) => &a.pass,
        Some(Command::Train(a)) => &a.pass,
        Some(Command::Finetune(a)) => &a.pass,
        Some(Command::Heads(a)) => &a.pass,
        Some(Command::Evaluate(a)) => &a.pass,
        Some(_) => return Ok(()),
    };
    // The start of `main`: no other thread exists yet to read the environment.
    if let Some(value) = of(pass)?.matmul_threads() {
        std::env::set_var(bert_core::ops::MATMUL_ENV_VAR, value);
    }
    Ok(())
}
