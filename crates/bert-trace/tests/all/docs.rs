//! Every `console` and `python` block of the README and the walkthrough runs, in document order,
//! as a reader would run them, once: what each command prints must be its block's text byte for
//! byte, with the exit status its `? N` line gives (0 without one), and what each python block
//! prints must be the `text` block right after it, to the character.
//!
//! Each document is one test, so that the test harness runs them side by side. A chapter's
//! blocks run in walkthrough/ after the dumps it names are removed (so that no chapter reads a
//! dump an earlier run left, and no two chapters share one); the README's run in this crate's
//! directory. A document's python blocks run in one interpreter, one after another, so that
//! variables carry over as in a notebook. The interpreter is `$BERT_TRACE_PYTHON` (the README's
//! test command points it at a venv with numpy and the package just built) or `python3`; without
//! numpy the test fails rather than skipping.
//!
//! A picture the chapter shows that a python block draws is, byte for byte, what it drew.
//! (Pictures drawn by `bert-trace view` are checked by `view.rs`.)
//!
//! After a deliberate change, `DOCS=overwrite cargo test -p bert-trace --test all docs::` writes
//! what the commands and the python blocks print into the blocks; review the diff before
//! committing it.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::common::console::{blocks, clear_dumps, first_difference, run, steps, Block, Step};
use crate::common::root;

/// One test per document, and the list of documents that `every_document_is_checked` holds to
/// the files on disk.
macro_rules! documents {
    ($($test:ident => $file:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                check_document($file);
            }
        )*
        const DOCUMENTS: &[&str] = &[$($file),*];
    };
}

documents! {
    readme => "README.md",
    ch00_setup => "walkthrough/00-setup.md",
    ch01_tokenization => "walkthrough/01-tokenization.md",
    ch02_config_and_weights => "walkthrough/02-config-and-weights.md",
    ch03_embeddings => "walkthrough/03-embeddings.md",
    ch04_layernorm => "walkthrough/04-layernorm.md",
    ch05_qkv_heads => "walkthrough/05-qkv-heads.md",
    ch06_scores_softmax => "walkthrough/06-scores-softmax.md",
    ch07_context_add_norm => "walkthrough/07-context-add-norm.md",
    ch08_feed_forward => "walkthrough/08-feed-forward.md",
    ch09_layers => "walkthrough/09-layers.md",
    ch10_pooler => "walkthrough/10-pooler.md",
    ch11_mlm_head => "walkthrough/11-mlm-head.md",
    ch12_batches_pairs => "walkthrough/12-batches-pairs.md",
    ch13_pretraining_objectives => "walkthrough/13-pretraining-objectives.md",
    ch14_comparing => "walkthrough/14-comparing.md",
    ch15_experiments => "walkthrough/15-experiments.md",
    ch16_backward => "walkthrough/16-backward.md",
    ch17_pretraining => "walkthrough/17-pretraining.md",
    ch18_python => "walkthrough/18-python.md",
    ch19_explain => "walkthrough/19-explain.md",
    ch20_finetuning => "walkthrough/20-finetuning.md",
    ch21_rollout => "walkthrough/21-rollout.md",
    ch22_precision => "walkthrough/22-precision.md",
    walkthrough_index => "walkthrough/README.md",
}

/// The directory a document's blocks run in: walkthrough/ for a chapter, this crate's directory
/// for the README.
fn directory(document: &str) -> PathBuf {
    match document {
        "README.md" => Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf(),
        _ => root().join("walkthrough"),
    }
}

#[test]
fn every_document_is_checked() {
    let mut on_disk = vec!["README.md".to_string()];
    for entry in std::fs::read_dir(root().join("walkthrough")).expect("walkthrough/ exists") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            on_disk.push(format!("walkthrough/{}", path.file_name().unwrap().to_string_lossy()));
        }
    }
    on_disk.sort();
    let mut listed: Vec<String> = DOCUMENTS.iter().map(|d| d.to_string()).collect();
    listed.sort();
    assert_eq!(listed, on_disk, "docs.rs's `documents!` list and the documents on disk differ");
}

fn python() -> String {
    std::env::var("BERT_TRACE_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The interpreter's side of [`Interpreter`]: it reads a block (its length in bytes on a line,
/// then the code), runs it in the namespace the document's earlier blocks ran in, and answers on
/// its own copy of standard output with one JSON line: whether the block raised, what it printed
/// (what reached file descriptor 1 directly, from a subprocess or the extension, then what went
/// through `sys.stdout`, in the order a terminal would show a script's run) and the traceback.
const DRIVER: &str = r#"
import io, json, os, sys, tempfile, traceback
answer = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
namespace = {"__name__": "__main__"}
while True:
    header = sys.stdin.buffer.readline()
    if not header:
        break
    code = sys.stdin.buffer.read(int(header)).decode("utf-8")
    with tempfile.TemporaryFile() as direct:
        os.dup2(direct.fileno(), 1)
        printed, errors = io.StringIO(), io.StringIO()
        sys.stdout, sys.stderr = printed, errors
        failure = None
        try:
            exec(compile(code, "<block>", "exec"), namespace)
        except BaseException:
            failure = traceback.format_exc()
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        direct.seek(0)
        output = direct.read().decode("utf-8", "replace") + printed.getvalue()
    json.dump({"output": output, "failure": failure, "stderr": errors.getvalue()}, answer)
    answer.write("\n")
    answer.flush()
"#;

/// One interpreter for one document's python blocks.
struct Interpreter {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// What a python block did.
struct Ran {
    output: String,
    failure: Option<String>,
}

impl Interpreter {
    fn start(dir: &Path) -> Interpreter {
        let mut child = Command::new(python())
            .args(["-u", "-c", DRIVER])
            .current_dir(dir)
            .env("HF_HUB_OFFLINE", "1")
            .env("HF_HUB_CACHE", "dumps/hf-cache")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", python()));
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        Interpreter { child, stdin, stdout }
    }

    fn run(&mut self, code: &str) -> Ran {
        write!(self.stdin, "{}\n{code}", code.len()).and_then(|_| self.stdin.flush()).expect("the interpreter reads");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("the interpreter answers");
        if line.is_empty() {
            let mut rest = String::new();
            let _ = self.stdout.read_to_string(&mut rest);
            return Ran { output: String::new(), failure: Some(format!("the interpreter ended: {rest}")) };
        }
        let answer: serde_json::Value = serde_json::from_str(&line).expect("one JSON line");
        let failure = answer["failure"].as_str().map(|f| format!("{f}{}", answer["stderr"].as_str().unwrap_or("")));
        Ran { output: answer["output"].as_str().unwrap_or_default().to_string(), failure }
    }
}

impl Drop for Interpreter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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

/// What checking a document found.
struct Checked {
    /// The console commands and python blocks run.
    ran: usize,
    failures: Vec<String>,
    /// The document as its blocks would have it.
    rewritten: String,
}

/// Runs the blocks of `document` in `dir`, in order.
fn check(document: &Path, dir: &Path) -> Checked {
    let markdown = std::fs::read_to_string(document).expect("readable document");
    if dir.ends_with("walkthrough") {
        clear_dumps(&markdown, dir);
    }
    let blocks = blocks(&markdown);
    let mut lines: Vec<String> = markdown.lines().map(|l| l.to_string()).collect();
    // The 0-based lines to replace and what with, for DOCS=overwrite.
    let mut replaced: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    let mut failures = Vec::new();
    let mut ran = 0;
    let mut interpreter: Option<Interpreter> = None;
    for (idx, block) in blocks.iter().enumerate() {
        match block.lang.as_str() {
            "console" => {
                for step in steps(block) {
                    ran += 1;
                    check_step(document, dir, step, &mut failures, &mut replaced);
                }
            }
            "python" => {
                ran += 1;
                let python = interpreter.get_or_insert_with(|| Interpreter::start(dir));
                let got = python.run(&block.text);
                let place = format!("{}:{}", document.display(), block.line);
                match (got.failure, blocks.get(idx + 1).filter(|b| b.lang == "text")) {
                    (Some(failure), _) => failures.push(format!("{place}: python failed:\n{failure}")),
                    (None, Some(next)) if got.output != next.text => {
                        failures.push(format!(
                            "{place}: printed output differs\n--- expected\n{}--- got\n{}",
                            next.text, got.output
                        ));
                        let first = next.line;
                        replaced.push((first..first + next.text.lines().count(), got.output));
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    failures.extend(pictures_drawn_by_python(&markdown, &blocks, dir, document));
    // From the last to the first, so that the line numbers of the earlier blocks hold.
    replaced.sort_by_key(|(lines, _)| lines.start);
    for (range, text) in replaced.into_iter().rev() {
        lines.splice(range, text.lines().map(|l| l.to_string()));
    }
    let mut rewritten = lines.join("\n");
    rewritten.push('\n');
    Checked { ran, failures, rewritten }
}

/// Runs one console command and records how it differs from its block.
fn check_step(
    document: &Path,
    dir: &Path,
    step: Step,
    failures: &mut Vec<String>,
    replaced: &mut Vec<(std::ops::Range<usize>, String)>,
) {
    let got = run(&step, dir);
    let place = format!("{}:{}: `{}`", document.display(), step.line, step.command);
    if got.status != Some(step.status) {
        failures.push(format!("{place}: exited {:?}, the block says {}:\n{}", got.status, step.status, got.output));
    }
    if let Some(difference) = first_difference(&step.output, &got.output) {
        failures.push(format!("{place}: {difference}"));
    }
    if got.status != Some(step.status) || got.output != step.output {
        replaced.push((step.output_lines, block_text(got.status, &got.output)));
    }
}

/// A picture shown as `![...](pictures/NAME)` that a python block draws (to
/// `dumps/pictures/NAME`) must be, byte for byte, what the block drew: the committed picture is
/// what the chapter's code makes of the committed data.
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

/// Checks one document, and with DOCS=overwrite writes what its blocks printed into it.
fn check_document(document: &str) {
    let numpy = Command::new(python()).args(["-c", "import numpy"]).output();
    assert!(
        numpy.is_ok_and(|o| o.status.success()),
        "{} cannot import numpy: run the README's test command, which sets BERT_TRACE_PYTHON to a venv with numpy",
        python()
    );
    let overwrite = std::env::var("DOCS").is_ok_and(|v| v == "overwrite");
    let path = root().join(document);
    let checked = check(&path, &directory(document));
    if overwrite && !checked.failures.is_empty() {
        std::fs::write(&path, &checked.rewritten).expect("writable document");
    }
    println!("{document}: {} commands and python blocks run", checked.ran);
    assert!(overwrite || checked.failures.is_empty(), "{}", checked.failures.join("\n\n"));
}

/// Every document runs commands or python blocks, and all of them together are the course.
#[test]
fn the_documents_run_the_course() {
    let (mut commands, mut python) = (0, 0);
    for document in DOCUMENTS {
        let markdown = std::fs::read_to_string(root().join(document)).expect("readable");
        for block in blocks(&markdown) {
            match block.lang.as_str() {
                "console" => commands += steps(&block).len(),
                "python" => python += 1,
                _ => {}
            }
        }
    }
    assert!(commands >= 50 && python >= 50, "expected the docs' blocks, found {commands} commands, {python} python");
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

/// The whole check, end to end: a document whose blocks hold what their commands and python
/// print passes; one character changed in any block's output, or its `? N`, is one failure at
/// that block; a python block's variables reach the next block, as in a notebook.
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
    document += "```python\nword = 'carried over'\n```\n\n```python\nprint(word)\n```\n\n```text\ncarried over\n```\n";
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("chapter.md");
    std::fs::write(&file, &document).unwrap();
    let checked = check(&file, dir);
    assert_eq!((checked.ran, checked.failures.len()), (5, 0), "the document as it runs: {:?}", checked.failures);
    assert_eq!(checked.rewritten, document, "a document that passes is rewritten as it is");
    assert!(document.contains("? 2\n") && document.contains('\\'), "a status line and a backslash to change");
    // One change per block: a character of each output (the backslash of the first), then the
    // third's status, then the python block's output.
    let blocks = blocks(&document);
    let mut changes: Vec<(String, usize, char)> = Vec::new();
    for (index, block) in blocks.iter().enumerate().filter(|(_, b)| b.lang == "console") {
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
        let new = match old {
            'x' => 'y',
            '\\' => '/',
            _ => 'x',
        };
        changes.push((commands[index].to_string(), start + at, new));
    }
    let block = blocks.iter().find(|b| b.text.contains("\n? 2\n")).unwrap();
    let status = document.find(&block.text).unwrap() + block.text.find("\n? 2\n").unwrap() + 3;
    changes.push((commands[2].to_string(), status, '1'));
    changes.push(("printed output differs".to_string(), document.rfind("carried over").unwrap(), 'k'));
    for (names, at, new) in changes {
        let old = document[at..].chars().next().unwrap();
        let mut changed = document.clone();
        changed.replace_range(at..at + old.len_utf8(), &new.to_string());
        std::fs::write(&file, &changed).unwrap();
        let checked = check(&file, dir);
        assert!(!checked.failures.is_empty(), "`{old}` made `{new}` for `{names}` passed");
        assert!(
            checked.failures.iter().all(|f| f.contains(&names)),
            "`{names}`: the failures name another block: {:?}",
            checked.failures
        );
        assert_eq!(checked.rewritten, document, "DOCS=overwrite would not restore `{names}`");
    }
}
