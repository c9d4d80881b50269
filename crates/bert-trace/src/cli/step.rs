//! `bert-trace step TEXT`: a session (`bert_commands::step`) fed one command line at a time. On a
//! terminal: a prompt with line editing, history and completion of commands and stage names, and
//! a bad command is a message and the prompt again. Otherwise the commands come from `-c`,
//! `--script` or standard input, plain text goes out, and a bad command ends the run (exit 2).

use std::io::{BufRead, IsTerminal};

use anyhow::Result;
use bert_commands::step::{StepRequest, StepSession, COMMANDS};
use bert_commands::trace::{Output, TraceRequest};
use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Context as LineContext, Editor, Helper};

use crate::cli::StepArgs;

pub fn run(args: &StepArgs) -> Result<i32> {
    let request = StepRequest {
        trace: TraceRequest {
            texts: args.texts.clone(),
            file: args.file.clone(),
            model: args.model.model.clone(),
            pair: args.pair.clone(),
            mlm_targets: args.mlm_target.clone(),
            output: match &args.out {
                Some(out) => Output::Dump { out: out.clone(), force: args.force, npz: false },
                None => Output::Nowhere,
            },
            ..TraceRequest::default()
        },
    };
    // The script is read before the model is loaded: a bad one is refused first.
    let script: Option<Vec<String>> = match (&args.commands, &args.script) {
        (Some(commands), _) => Some(commands.split(';').map(str::to_string).collect()),
        (None, Some(path)) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => anyhow::anyhow!("--script {}: not found", path.display()),
                    _ => anyhow::anyhow!("--script {}: {e}", path.display()),
                })?
                .lines()
                .map(str::to_string)
                .collect(),
        ),
        (None, None) => None,
    };
    let mut session = StepSession::start(&request)?;
    crate::print(&session.notes, "");
    let lines: Vec<String> = match script {
        Some(lines) => lines,
        None if std::io::stdin().is_terminal() => return interactive(&mut session),
        None => std::io::stdin().lock().lines().collect::<std::io::Result<_>>()?,
    };
    for line in lines {
        let reply = session.run(&line)?;
        print!("{}", crate::flags(&reply.text));
        if reply.done {
            break;
        }
    }
    if let Some(note) = session.unwritten() {
        eprintln!("{}", crate::flags(&note));
    }
    Ok(0)
}

/// The prompt on a terminal, until `quit` or the end of input.
fn interactive(session: &mut StepSession) -> Result<i32> {
    let mut editor: Editor<Completion, rustyline::history::MemHistory> =
        Editor::with_history(rustyline::Config::default(), rustyline::history::MemHistory::new())?;
    editor.set_helper(Some(Completion { stages: session.stage_names() }));
    println!("stepping through the pass: type help for the commands");
    loop {
        match editor.readline("(step) ") {
            Ok(line) => {
                let _ = editor.add_history_entry(line.as_str());
                match session.run(&line) {
                    Ok(reply) => {
                        print!("{}", crate::flags(&reply.text));
                        if reply.done {
                            break;
                        }
                    }
                    Err(error) => println!("{}", crate::flags(&error.to_string())),
                }
            }
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(error) => return Err(error.into()),
        }
    }
    if let Some(note) = session.unwritten() {
        eprintln!("{}", crate::flags(&note));
    }
    Ok(0)
}

/// Completes the first word as a command, and later words as stage names.
struct Completion {
    stages: Vec<String>,
}

impl Helper for Completion {}
impl Highlighter for Completion {}
impl Validator for Completion {}
impl Hinter for Completion {
    type Hint = String;
}

impl Completer for Completion {
    type Candidate = Pair;

    fn complete(&self, line: &str, pos: usize, _: &LineContext<'_>) -> rustyline::Result<(usize, Vec<Pair>)> {
        let before = &line[..pos];
        let start = before.rfind(char::is_whitespace).map_or(0, |i| i + 1);
        let word = &before[start..];
        let pool: Vec<&str> = match start {
            0 => COMMANDS.to_vec(),
            _ => self.stages.iter().map(String::as_str).collect(),
        };
        let found = pool
            .into_iter()
            .filter(|c| c.starts_with(word))
            .map(|c| Pair { display: c.to_string(), replacement: c.to_string() })
            .collect();
        Ok((start, found))
    }
}
