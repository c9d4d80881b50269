//! Every `python` block of the walkthrough runs, in document order, against dumps that the
//! chapter's own `console` commands have just written, with the `bert-trace` this test was built
//! with; a `text` block right after a `python` block is the output it must print, to the
//! character.
//!
//! Each chapter starts from an empty dump directory: the dumps it names (`dumps/NN-...`) are
//! removed before its commands run, so that no chapter reads a dump an earlier run left. A
//! command must end as its block says: with status 0, or with the status of the `? N` line
//! below it (the notation `docs.rs` checks too).
//!
//! A picture the chapter shows that a python block draws is, byte for byte, what it drew.
//!
//! Each python block runs in a fresh interpreter after the chapter's earlier python blocks, so
//! variables carry over as they would in a notebook. The interpreter is `$BERT_TRACE_PYTHON`
//! (the README's test command points it at a venv with numpy) or `python3`; without numpy the
//! test fails rather than skipping.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::console::{blocks, clear_dumps, run, steps, Block};

fn python() -> String {
    std::env::var("BERT_TRACE_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Runs the commands of a console block for the files they write (`docs.rs` checks what they
/// print); returns one line per command whose exit status is not the one the block gives.
fn run_console(block: &Block, dir: &Path, chapter: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    for step in steps(block) {
        let ran = run(&step, dir);
        if ran.status != Some(step.status) {
            failures.push(format!(
                "{}:{}: `{}` exited {:?}, the block says {}:\n{}",
                chapter.display(),
                step.line,
                step.command,
                ran.status,
                step.status,
                ran.output
            ));
        }
    }
    failures
}

fn check_chapter(chapter: &Path) -> Vec<String> {
    check_markdown(chapter, chapter.parent().expect("in a directory"), true)
}

/// The python blocks of `chapter`, run in `dir`; with `consoles`, its commands too.
fn check_markdown(chapter: &Path, dir: &Path, consoles: bool) -> Vec<String> {
    let markdown = std::fs::read_to_string(chapter).expect("readable chapter");
    let blocks = blocks(&markdown);
    if consoles {
        clear_dumps(&markdown, dir);
    }
    let mut earlier = String::new();
    let mut failures = Vec::new();
    for (idx, block) in blocks.iter().enumerate() {
        match block.lang.as_str() {
            "console" if consoles => failures.extend(run_console(block, dir, chapter)),
            "python" => {
                let script = format!(
                    "{earlier}\nimport sys, io\n_bt_out = io.StringIO()\n_bt_real = sys.stdout\nsys.stdout = _bt_out\n{}\nsys.stdout = _bt_real\nprint(_bt_out.getvalue(), end='')\n",
                    block.text
                );
                let output = Command::new(python())
                    .arg("-c")
                    .arg(&script)
                    .current_dir(dir)
                    .output()
                    .unwrap_or_else(|e| panic!("cannot run {}: {e}", python()));
                let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
                let place = format!("{}:{}", chapter.display(), block.line);
                if !output.status.success() {
                    failures.push(format!("{place}: python failed:\n{}", String::from_utf8_lossy(&output.stderr)));
                } else if let Some(next) = blocks.get(idx + 1).filter(|b| b.lang == "text") {
                    if stdout != next.text {
                        failures.push(format!(
                            "{place}: printed output differs\n--- expected\n{}--- got\n{stdout}",
                            next.text
                        ));
                    }
                }
                // Earlier blocks run again silently, so later ones see their variables.
                earlier.push_str(&format!(
                    "import sys, io\n_bt_keep = sys.stdout\nsys.stdout = io.StringIO()\n{}\nsys.stdout = _bt_keep\n",
                    block.text
                ));
            }
            _ => {}
        }
    }
    failures.extend(pictures_drawn_by_python(&markdown, &blocks, dir, chapter));
    failures
}

/// A picture shown as `![...](pictures/NAME)` that a python block draws (to
/// `dumps/pictures/NAME`) must be, byte for byte, what the block drew: the committed picture is
/// what the chapter's code makes of the committed data. (Pictures drawn by `bert-trace view`
/// are checked by `view.rs`.)
fn pictures_drawn_by_python(markdown: &str, blocks: &[Block], dir: &Path, chapter: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    for line in markdown.lines().filter(|l| l.starts_with("![") && l.contains("](pictures/")) {
        let name = line.split("](pictures/").nth(1).unwrap().trim_end_matches(')');
        let drawn = format!("dumps/pictures/{name}");
        if !blocks.iter().any(|b| b.lang == "python" && b.text.contains(&drawn)) {
            continue;
        }
        let (got, committed) = (std::fs::read(dir.join(&drawn)), std::fs::read(dir.join("pictures").join(name)));
        match (got, committed) {
            (Ok(got), Ok(committed)) if got == committed => {}
            (Ok(_), Ok(_)) => failures.push(format!(
                "{}: pictures/{name} is not what its python block draws ({drawn}); copy it over after review",
                chapter.display()
            )),
            (got, committed) => failures.push(format!(
                "{}: pictures/{name}: drawn {:?}, committed {:?}",
                chapter.display(),
                got.map(|b| b.len()),
                committed.map(|b| b.len())
            )),
        }
    }
    failures
}

#[test]
fn walkthrough_python_blocks() {
    let numpy = Command::new(python()).args(["-c", "import numpy"]).output();
    assert!(
        numpy.is_ok_and(|o| o.status.success()),
        "{} cannot import numpy: run the README's test command, which sets BERT_TRACE_PYTHON to a venv with numpy",
        python()
    );
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../walkthrough");
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("walkthrough/ exists")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    chapters.sort();
    let mut ran = 0;
    let mut failures = Vec::new();
    for chapter in &chapters {
        ran +=
            blocks(&std::fs::read_to_string(chapter).expect("readable")).iter().filter(|b| b.lang == "python").count();
        failures.extend(check_chapter(chapter));
    }
    println!("{ran} python blocks in {} chapters", chapters.len());
    assert!(ran > 0, "no python blocks found in {}", dir.display());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The README's python blocks (the Python package's section) run like the walkthrough's, from
/// this crate's directory, where `docs.rs` runs the README's commands.
#[test]
fn readme_python_blocks() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = crate_dir.join("../../README.md");
    let count =
        blocks(&std::fs::read_to_string(&readme).expect("readable")).iter().filter(|b| b.lang == "python").count();
    assert!(count > 0, "the README has no python block");
    let failures = check_markdown(&readme, crate_dir, false);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
