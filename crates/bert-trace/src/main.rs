//! bert-trace: the command a learner types. This crate is only the command line: `cli/mod.rs`
//! parses it, each command's file in `cli/` turns its arguments into the library's request
//! (`bert_commands`), and prints the report; every error becomes one line on stderr and exit
//! status 2. Options are named here as flags (`--max-len`); the library names them by field.

mod cli;
mod color;
mod progress;

use std::process::ExitCode;

use bert_core::words::{in_dialect, Dialect};
use clap::Parser;

use crate::cli::{
    ablate, attribute, compare, diff, evaluate, explain, finetune, heads, inspect, lens, padding, rollout, stages,
    step, tolerances, trace, train, view, Cli, Command,
};

fn main() -> ExitCode {
    #[cfg(unix)]
    // SAFETY: setting two signals' dispositions at start-up, before any thread exists.
    unsafe {
        // Like other Unix tools, end quietly when the reader of our output goes away
        // (`bert-trace ... | head`), instead of failing to print.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        // A file-size limit (`ulimit -f`) then makes a write fail with an error we report,
        // instead of killing the process without a word.
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    // A pass frees and allocates hundreds of large arrays; reusing the freed memory instead of
    // fresh pages took a quarter off a forward and backward pass (BENCHMARKS.md). Whether the
    // allocator took the setting changes only the speed.
    bert_core::ops::keep_freed_memory();
    // A bug must still end in one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("error: internal error in bert-trace ({info}); please report it");
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return argument_error(error),
    };
    let result = cli::settings::prepare(&cli).and_then(|()| match &cli.command {
        None => trace::run(&cli.trace),
        Some(Command::Diff(args)) => diff::run(args),
        Some(Command::Stages(args)) => stages::run(args),
        Some(Command::Inspect(args)) => inspect::run(args),
        Some(Command::Compare(args)) => compare::run(args),
        Some(Command::Padding(args)) => padding::run(args),
        Some(Command::Tolerances(args)) => tolerances::run(args),
        Some(Command::Rollout(args)) => rollout::run(args),
        Some(Command::View(args)) => view::run(args),
        Some(Command::Ablate(args)) => ablate::run(args),
        Some(Command::Lens(args)) => lens::run(args),
        Some(Command::Attribute(args)) => attribute::run(args),
        Some(Command::Explain(args)) => explain::run(args),
        Some(Command::Step(args)) => step::run(args),
        Some(Command::Train(args)) => train::run(args),
        Some(Command::Finetune(args)) => finetune::run(args),
        Some(Command::Heads(args)) => heads::run(args),
        Some(Command::Evaluate(args)) => evaluate::run(args),
    });
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(error) => {
            // The library names options by their field (see bert_core::words); here they are flags.
            eprintln!("error: {}", in_dialect(&format!("{error:#}"), Dialect::Flags));
            ExitCode::from(2)
        }
    }
}

/// `--help` and `--version` as clap prints them; any other argument error in one line, with
/// clap's tip when it has one, like every other error.
fn argument_error(error: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(error.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = error.print();
        return ExitCode::SUCCESS;
    }
    eprintln!("error: {} (see bert-trace --help)", cli::one_line(&error));
    ExitCode::from(2)
}

/// `text` with the library's option words spelled as flags.
pub fn flags(text: &str) -> String {
    in_dialect(text, Dialect::Flags)
}

/// Prints a command's report: its notes on stderr, then the report as JSON with `--json`, else
/// as text.
pub fn show<R: bert_commands::Report>(reported: &bert_commands::Reported<R>, json: bool) {
    let text = if json { reported.report.json() } else { reported.report.text() };
    print(&reported.notes, &text);
}

/// Prints a report: its notes on stderr, its text on stdout, options spelled as flags.
pub fn print(notes: &[String], text: &str) {
    for note in notes {
        eprintln!("{}", in_dialect(note, Dialect::Flags));
    }
    print!("{}", in_dialect(text, Dialect::Flags));
}
