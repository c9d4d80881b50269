//! The fenced blocks of the README and the walkthrough, and the commands of their `console`
//! blocks: what each runs, where, and what it must print.
//!
//! A console block is trycmd's notation: `$ bert-trace ...`, then `? N` when the command exits
//! with N rather than 0, then its output, standard output and standard error interleaved as a
//! terminal shows them. The output is compared byte for byte: nothing is normalised (trycmd, which
//! ran these blocks before, turned every `\` into `/`, so `\ 0.033` in the tool's output passed as
//! `/ 0.033` in the text).

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// One fenced block: its info string, its text (each line ending in a newline) and the line of
/// its opening fence.
pub struct Block {
    pub lang: String,
    pub text: String,
    pub line: usize,
}

/// Every fenced block of `markdown`, in order.
pub fn blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut current: Option<Block> = None;
    for (idx, line) in markdown.lines().enumerate() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(info)) => {
                current = Some(Block { lang: info.trim().to_string(), text: String::new(), line: idx + 1 })
            }
            (Some(_), Some(rest)) if rest.trim().is_empty() => blocks.push(current.take().expect("open")),
            (Some(block), _) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}

/// One command of a console block.
#[derive(Clone, Debug)]
pub struct Step {
    /// The command line after `$ `, as a shell reads it.
    pub command: String,
    /// The exit status the block gives (`? N`), 0 without one.
    pub status: i32,
    /// The output the block gives: its lines, each ending in a newline.
    pub output: String,
    /// The line of the markdown file where the command is.
    pub line: usize,
    /// The markdown lines (0-based, end excluded) that hold the status line and the output.
    pub output_lines: std::ops::Range<usize>,
}

/// The commands of the console block `block`.
pub fn steps(block: &Block) -> Vec<Step> {
    let lines: Vec<&str> = block.text.lines().collect();
    let mut steps: Vec<Step> = Vec::new();
    for (idx, line) in lines.iter().enumerate() {
        // The block's text starts on the line after the fence (1-based `block.line`).
        let at = block.line + idx;
        if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step {
                command: command.to_string(),
                status: 0,
                output: String::new(),
                line: at + 1,
                output_lines: at + 1..at + 1,
            });
            continue;
        }
        let step = steps.last_mut().unwrap_or_else(|| panic!("line {}: a console block starts with `$ `", at + 1));
        match line.strip_prefix("? ") {
            Some(status) if step.output.is_empty() && step.output_lines.is_empty() => {
                step.status = status.trim().parse().unwrap_or_else(|_| panic!("line {}: `? N` gives a number", at + 1));
            }
            _ => {
                step.output.push_str(line);
                step.output.push('\n');
            }
        }
        step.output_lines.end = at + 1;
    }
    steps
}

/// What one command did: its exit status and everything it printed, in order.
pub struct Ran {
    pub status: Option<i32>,
    pub output: String,
}

/// Runs `step` in `dir` with the `bert-trace` this test was built with, as a reader would at a
/// shell, standard error merged into standard output as a terminal shows them. No command of the
/// docs reaches the network: hub ids resolve against an empty cache.
pub fn run(step: &Step, dir: &Path) -> Ran {
    let command = match step.command.strip_prefix("bert-trace") {
        Some(rest) => format!("'{}'{rest}", env!("CARGO_BIN_EXE_bert-trace")),
        None => step.command.clone(),
    };
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!("exec 2>&1; {command}"))
        .current_dir(dir)
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HUB_CACHE", "dumps/hf-cache")
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{}`: {e}", step.command));
    Ran { status: output.status.code(), output: String::from_utf8_lossy(&output.stdout).into_owned() }
}

/// The first difference between `expected` and `got`, as two lines with their line number, or
/// None when they are the same bytes.
pub fn first_difference(expected: &str, got: &str) -> Option<String> {
    if expected == got {
        return None;
    }
    let (want, have): (Vec<&str>, Vec<&str>) = (expected.split('\n').collect(), got.split('\n').collect());
    let idx = want.iter().zip(&have).position(|(a, b)| a != b).unwrap_or(want.len().min(have.len()));
    Some(format!(
        "output line {}:\n  expected: {:?}\n  got:      {:?}",
        idx + 1,
        want.get(idx).copied().unwrap_or("(the end)"),
        have.get(idx).copied().unwrap_or("(the end)")
    ))
}

/// The dumps a chapter names (`dumps/NN-name`, and the pictures it draws, `dumps/pictures/NAME`),
/// removed before it runs, so that no chapter reads a dump an earlier run left. Only these: the
/// chapters run side by side in one directory, and a path under another directory
/// (`../golden/tiny/dumps/mask`) is not the chapter's.
pub fn clear_dumps(markdown: &str, dir: &Path) {
    let named = |rest: &str| -> String {
        rest.chars().take_while(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.')).collect()
    };
    for (at, _) in markdown.match_indices("dumps/") {
        let before = markdown[..at].chars().next_back();
        if before.is_some_and(|c| c == '/' || c.is_alphanumeric()) {
            continue;
        }
        let rest = &markdown[at + "dumps/".len()..];
        let name = named(rest);
        let target = match name.as_str() {
            "" | "hf-cache" => continue,
            "pictures" => match named(rest["pictures".len()..].strip_prefix('/').unwrap_or("")) {
                picture if !picture.is_empty() => dir.join("dumps/pictures").join(picture),
                _ => continue,
            },
            _ => dir.join("dumps").join(name.trim_end_matches('.')),
        };
        if target.is_dir() {
            let _ = std::fs::remove_dir_all(&target);
        } else {
            let _ = std::fs::remove_file(&target);
        }
    }
}
