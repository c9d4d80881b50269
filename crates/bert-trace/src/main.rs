//! bert-trace: the command a learner types. The work is in bert-core and in this crate's
//! library (`lib.rs`); this binary parses the command line and turns every error into one line
//! on stderr and exit status 2.

use std::process::ExitCode;

use bert_core::words::{render, Dialect};
use clap::Parser;

use bert_trace::cli::{Cli, Command};
use bert_trace::{
    ablate_cmd, attribute_cmd, compare_cmd, diff_cmd, inspect_cmd, lens_cmd, stages_cmd, trace_cmd, train_cmd, view,
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
    // A bug must still end in one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("error: internal error in bert-trace ({info}); please report it");
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return argument_error(error),
    };
    let result = match &cli.command {
        None => trace_cmd::run(&cli.trace),
        Some(Command::Diff(args)) => diff_cmd::run(args),
        Some(Command::Stages(args)) => stages_cmd::run(args),
        Some(Command::Inspect(args)) => inspect_cmd::run(args),
        Some(Command::Compare(args)) => compare_cmd::run(args),
        Some(Command::View(args)) => view::run(args),
        Some(Command::Ablate(args)) => ablate_cmd::run(args),
        Some(Command::Lens(args)) => lens_cmd::run(args),
        Some(Command::Attribute(args)) => attribute_cmd::run(args),
        Some(Command::Train(args)) => train_cmd::run(args),
    };
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(error) => {
            // The library names options by their field (see bert_core::words); here they are flags.
            eprintln!("error: {}", render(&format!("{error:#}"), Dialect::Flags));
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
    eprintln!("error: {} (see bert-trace --help)", bert_trace::cli::one_line(&error));
    ExitCode::from(2)
}
