//! The passes' settings from the command line and the environment (`--threads` or
//! `BERT_TRACE_THREADS`, `--kernels` or `BERT_TRACE_KERNELS`), and matrixmultiply's thread count,
//! which it reads from `MATMUL_NUM_THREADS` at its first product: set here, at the start of
//! `main`, before any other thread exists.

use anyhow::Result;
use bert_commands::settings::PassSettings;
use bert_commands::source::process_env;
use bert_core::ops::Kernels;

use crate::cli::{Cli, Command};

/// The settings `threads` and `kernels` (the command's options) ask for, the environment's
/// where they are not given.
pub fn of(threads: Option<usize>, kernels: Option<&str>) -> Result<PassSettings> {
    let given = PassSettings { threads, kernels: kernels.map(|k| Kernels::parse(k).expect("clap checked the name")) };
    Ok(PassSettings::from_env(given, &process_env)?)
}

/// Sets matrixmultiply's thread count for the whole run, from the command's settings.
pub fn prepare(cli: &Cli) -> Result<()> {
    let (threads, kernels) = match &cli.command {
        None => (cli.trace.threads, cli.trace.kernels.as_deref()),
        Some(Command::Ablate(a)) => (a.input.threads, a.input.kernels.as_deref()),
        Some(Command::Lens(a)) => (a.input.threads, a.input.kernels.as_deref()),
        Some(Command::Attribute(a)) => (a.threads, a.kernels.as_deref()),
        Some(Command::Train(a)) => (a.threads, a.kernels.as_deref()),
        Some(Command::Finetune(a)) => (a.threads, a.kernels.as_deref()),
        Some(Command::Heads(a)) => (a.threads, a.kernels.as_deref()),
        Some(Command::Evaluate(a)) => (a.threads, a.kernels.as_deref()),
        Some(_) => (None, None),
    };
    // The start of `main`: no other thread exists yet to read the environment.
    if let Some(value) = of(threads, kernels)?.matmul_threads() {
        std::env::set_var(bert_core::ops::MATMUL_ENV_VAR, value);
    }
    Ok(())
}
