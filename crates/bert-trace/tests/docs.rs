//! Every `console` block of the README and the walkthrough is run, and what each command prints
//! must be the block's text byte for byte, with the exit status its `? N` line gives (0 without
//! one). A chapter's commands run in walkthrough/, in order, after the dumps it names are removed;
//! the README's run in this crate's directory.
//!
//! After a deliberate change, `DOCS=overwrite cargo test -p bert-trace --test docs` writes what
//! the commands print into the blocks; review the diff before committing it.

mod common;

use std::path::{Path, PathBuf};

use common::console::{blocks, clear_dumps, first_difference, run, steps, Step};

/// The documents and the directory each one's commands run in.
fn documents() -> Vec<(PathBuf, PathBuf)> {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    let walkthrough = crate_dir.join("../../walkthrough");
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(&walkthrough)
        .expect("walkthrough/ exists")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    chapters.sort();
    let mut documents = vec![(crate_dir.join("../../README.md"), crate_dir)];
    documents.extend(chapters.into_iter().map(|chapter| (chapter, walkthrough.clone())));
    documents
}

/// The block's text for a step that printed `output` and exited with `status`.
fn block_text(status: Option<i32>, output: &str) -> String {
    let status = match status {
        Some(0) => String::new(),
        Some(code) => format!("? {code}\n"),
        None => "? failed\n".to_string(),
    };
    format!("{status}{output}")
}

/// Runs the commands of `document` in `dir`; returns one message per command that printed or
/// ended otherwise than its block says, and the document as the commands would have it.
fn check(document: &Path, dir: &Path) -> (usize, Vec<String>, String) {
    let markdown = std::fs::read_to_string(document).expect("readable document");
    if dir.ends_with("walkthrough") {
        clear_dumps(&markdown, dir);
    }
    let mut lines: Vec<String> = markdown.lines().map(|l| l.to_string()).collect();
    let mut replaced: Vec<(Step, String)> = Vec::new();
    let mut failures = Vec::new();
    let mut ran = 0;
    for block in blocks(&markdown).iter().filter(|b| b.lang == "console") {
        for step in steps(block) {
            ran += 1;
            let got = run(&step, dir);
            let place = format!("{}:{}: `{}`", document.display(), step.line, step.command);
            if got.status != Some(step.status) {
                failures.push(format!("{place}: exited {:?}, the block says {}", got.status, step.status));
            }
            if let Some(difference) = first_difference(&step.output, &got.output) {
                failures.push(format!("{place}: {difference}"));
            }
            if got.status != Some(step.status) || got.output != step.output {
                replaced.push((step, block_text(got.status, &got.output)));
            }
        }
    }
    // From the last to the first, so that the line numbers of the earlier steps hold.
    for (step, text) in replaced.into_iter().rev() {
        let new: Vec<String> = text.lines().map(|l| l.to_string()).collect();
        lines.splice(step.output_lines, new);
    }
    let mut rewritten = lines.join("\n");
    rewritten.push('\n');
    (ran, failures, rewritten)
}

#[test]
fn readme_and_walkthrough_console_blocks() {
    let overwrite = std::env::var("DOCS").is_ok_and(|v| v == "overwrite");
    let mut failures = Vec::new();
    let mut ran = 0;
    for (document, dir) in documents() {
        let (count, found, rewritten) = check(&document, &dir);
        ran += count;
        if overwrite && !found.is_empty() {
            std::fs::write(&document, rewritten).expect("writable document");
        }
        failures.extend(found);
    }
    println!("{ran} commands run");
    assert!(ran >= 50, "expected the docs' commands, found {ran}");
    assert!(overwrite || failures.is_empty(), "{}", failures.join("\n"));
}

/// The comparison is of bytes: a block whose output differs from the command's by one character
/// anywhere, a `\` written `/` included, fails. Checked on a real command's output.
#[test]
fn one_changed_character_fails() {
    let step = Step {
        command: "bert-trace --model tiny --stop-at embeddings.word --no-dump 'a \\ b'".into(),
        status: 0,
        output: String::new(),
        line: 1,
        output_lines: 1..1,
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let got = run(&step, dir).output;
    assert!(got.contains('\\') && got.len() > 100, "{got}");
    assert_eq!(first_difference(&got, &got), None);
    let chars: Vec<char> = got.chars().collect();
    for at in (0..chars.len()).step_by(7).chain(chars.iter().position(|&c| c == '\\')) {
        let mut changed = chars.clone();
        changed[at] = match chars[at] {
            '\\' => '/',
            'a' => 'b',
            _ => 'a',
        };
        let changed: String = changed.into_iter().collect();
        assert!(first_difference(&changed, &got).is_some(), "a change at character {at} passed");
    }
}

/// The whole check, end to end: a document whose blocks hold what their commands print passes;
/// one character changed in any block's output, or its `? N`, is one failure at that block.
#[test]
fn a_document_with_one_changed_character_fails_there() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let commands = [
        "bert-trace --stop-at embeddings.word --no-dump 'a \\ b'",
        "bert-trace stages",
        "bert-trace --stop-at no.such.stage --no-dump 'a'",
    ];
    let mut document = String::from("# A chapter\n\n");
    for command in commands {
        let step = Step { command: command.into(), status: 0, output: String::new(), line: 1, output_lines: 1..1 };
        let got = run(&step, dir);
        document += &format!("Text.\n\n```console\n$ {command}\n{}```\n\n", block_text(got.status, &got.output));
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("chapter.md");
    std::fs::write(&file, &document).unwrap();
    let (ran, failures, _) = check(&file, dir);
    assert_eq!((ran, failures.len()), (3, 0), "the document as the commands print it: {failures:?}");
    assert!(document.contains("? 2\n") && document.contains('\\'), "a status line and a backslash to change");
    // One change per block: a character of each output (the backslash of the first), then the
    // third's status.
    let blocks = blocks(&document);
    let mut changes: Vec<(usize, usize, char)> = Vec::new();
    for (index, block) in blocks.iter().enumerate() {
        let start = document.find(&block.text).unwrap();
        // The output: after the `$` line and any `? N` line.
        let mut output = block.text.find('\n').unwrap() + 1;
        if block.text[output..].starts_with("? ") {
            output += block.text[output..].find('\n').unwrap() + 1;
        }
        let at = match block.text[output..].find('\\') {
            Some(backslash) if index == 0 => output + backslash,
            _ => output + (block.text.len() - output) / 2,
        };
        let at = (at..).find(|&i| block.text.is_char_boundary(i)).unwrap();
        let old = block.text[at..].chars().next().unwrap();
        changes.push((
            index,
            start + at,
            if old == 'x' {
                'y'
            } else if old == '\\' {
                '/'
            } else {
                'x'
            },
        ));
    }
    let (index, block) = blocks.iter().enumerate().find(|(_, b)| b.text.contains("\n? 2\n")).unwrap();
    let status = document.find(&block.text).unwrap() + block.text.find("\n? 2\n").unwrap() + 3;
    changes.push((index, status, '1'));
    for (index, at, new) in changes {
        let old = document[at..].chars().next().unwrap();
        let mut changed = document.clone();
        changed.replace_range(at..at + old.len_utf8(), &new.to_string());
        std::fs::write(&file, &changed).unwrap();
        let (_, failures, _) = check(&file, dir);
        assert!(!failures.is_empty(), "block {index}: `{old}` made `{new}` passed");
        assert!(
            failures.iter().all(|f| f.contains(commands[index])),
            "block {index}: the failures name another block: {failures:?}"
        );
    }
}
