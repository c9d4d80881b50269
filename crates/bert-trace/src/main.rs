//! bert-trace: the command a learner types. The work is in bert-core; this binary parses the
//! command line, prints, and turns every error into one line on stderr and exit status 2.

mod cli;
mod diff_cmd;
mod hub_cache;
mod hub_download;
mod hub_id;
mod hub_model;
mod inspect_cmd;
mod model_source;
mod npz;
mod predictions;
mod preview;
mod stages_cmd;
mod stats;
mod table;
mod trace_cmd;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away
    // (`bert-trace ... | head`), instead of failing to print.
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to its default at start-up, before any thread.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // A bug must still end in one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("error: internal error in bert-trace ({info}); please report it");
    }));
    let cli = Cli::parse();
    let result = match &cli.command {
        None => trace_cmd::run(&cli.trace),
        Some(Command::Diff(args)) => diff_cmd::run(args),
        Some(Command::Stages(args)) => stages_cmd::run(args),
        Some(Command::Inspect(args)) => inspect_cmd::run(args),
    };
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}
