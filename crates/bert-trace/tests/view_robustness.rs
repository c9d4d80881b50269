//! `bert-trace view` tried the way an adversarial user would, one class of attack per test:
//!
//! - nothing of the user's is replaced: only a file whose ownership marker verifies is written
//!   over, and only this run's own temporary file is ever removed;
//! - a dump that disagrees with itself (shapes against the token count, labels against the
//!   vocabulary, no tokens at all) is one line and exit status 2, never a panic;
//! - pictures too large to draw, a `--model` that does not load, control characters in tokens
//!   and integer stages among the heatmaps are each handled in one clear way.
//!
//! Each case states what is done and what must come of it; a case that fails prints what it
//! got. Dumps are golden/tiny's `mask` dump copied and edited (manifest.json and .npy files).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::root;

/// What a run did.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `bert-trace ARGS` in `dir`.
fn run_in(dir: &Path, args: &[&str]) -> Ran {
    let output = Command::new(env!("CARGO_BIN_EXE_bert-trace"))
        .args(args)
        .current_dir(dir)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .expect("bert-trace runs");
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Whether `ran` is one error line containing every one of `needles`, exit status 2, no panic.
fn one_line(ran: &Ran, needles: &[&str]) -> Result<(), String> {
    let lines: Vec<&str> = ran.stderr.lines().filter(|l| !l.starts_with("note:")).collect();
    if ran.stderr.contains("panicked") || ran.stderr.contains("internal error") {
        Err("a panic reached the user".into())
    } else if ran.code != Some(2) {
        Err(format!("exit status {:?}, expected 2", ran.code))
    } else if lines.len() != 1 {
        Err(format!("{} lines on stderr, expected 1", lines.len()))
    } else if let Some(missing) = needles.iter().find(|n| !lines[0].contains(*n)) {
        Err(format!("expected `{missing}` in the line"))
    } else {
        Ok(())
    }
}

/// Whether `ran` succeeded.
fn succeeded(ran: &Ran) -> Result<(), String> {
    if ran.code == Some(0) && !ran.stderr.contains("error") {
        Ok(())
    } else {
        Err(format!("exit status {:?}, expected 0", ran.code))
    }
}

/// Collects the failures of a class of cases, each named, and asserts there are none.
#[derive(Default)]
struct Cases {
    count: usize,
    failures: Vec<String>,
}

impl Cases {
    fn check(&mut self, name: &str, result: Result<(), String>, ran: &Ran) {
        self.count += 1;
        if let Err(problem) = result {
            self.failures.push(format!(
                "{name}: {problem}\n  stdout: {}\n  stderr: {}",
                ran.stdout.trim(),
                ran.stderr.trim()
            ));
        }
    }

    fn finish(self, class: &str) {
        println!("{class}: {} cases", self.count);
        assert!(
            self.failures.is_empty(),
            "{class}: {} of {} cases failed:\n{}",
            self.failures.len(),
            self.count,
            self.failures.join("\n")
        );
    }
}

/// A copy of golden/tiny's `mask` dump (13 tokens, 2 layers of 4 heads, a vocabulary of 245)
/// in `dir`.
fn mask_dump(dir: &Path) -> PathBuf {
    let from = root().join("golden/tiny/dumps/mask");
    std::fs::create_dir_all(dir).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    dir.to_path_buf()
}

/// What is at `path`: a link's target, or a file's bytes.
fn what_is_at(path: &Path) -> Option<Vec<u8>> {
    let metadata = std::fs::symlink_metadata(path).ok()?;
    if metadata.file_type().is_symlink() {
        Some(std::fs::read_link(path).unwrap().into_os_string().into_encoded_bytes())
    } else {
        std::fs::read(path).ok()
    }
}

#[test]
fn files_not_written_by_bert_trace_are_never_replaced() {
    let mut cases = Cases::default();
    let tmp = tempfile::tempdir().unwrap();
    let dump = mask_dump(&tmp.path().join("dump"));
    let dump = dump.to_str().unwrap();
    let picture = ["view", dump, "--stage", "layer0.attention.probs"];
    // Each case: what is at the output path beforehand (made by `make` in `dir`), the command,
    // and the start of the refusal.
    type Make = fn(&Path) -> PathBuf;
    let refused: [(&str, Make, &str, &str); 7] = [
        (
            "notes mentioning `bert-trace view` as --out",
            |d| write(d, "notes.md", b"# my notes\nbert-trace view draws the dump\n"),
            "--out",
            "is not a page bert-trace wrote, or was edited since",
        ),
        (
            "notes with a marker line copied from a page of ours",
            |d| {
                let ours = std::fs::read(d.join("ours.html")).unwrap();
                let marker = ours.rsplit(|&b| b == b'\n').nth(1).unwrap().to_vec();
                write(d, "copied.html", &[&b"my notes\n"[..], &marker, b"\n"].concat())
            },
            "--out",
            "is not a page bert-trace wrote",
        ),
        (
            "an SVG of ours, edited by hand",
            |d| {
                let svg = std::fs::read_to_string(d.join("ours.svg")).unwrap();
                write(d, "edited.svg", svg.replacen("#ffffff", "#fffff0", 1).as_bytes())
            },
            "--svg",
            "is not a picture bert-trace wrote, or was edited since",
        ),
        (
            "a PNG of ours, one pixel byte changed",
            |d| {
                let mut png = std::fs::read(d.join("ours.png")).unwrap();
                let at = png.len() / 2;
                png[at] ^= 1;
                write(d, "edited.png", &png)
            },
            "--png",
            "is not a picture bert-trace wrote",
        ),
        (
            "a symbolic link to a page of ours",
            |d| {
                std::os::unix::fs::symlink("ours.html", d.join("link.html")).unwrap();
                d.join("link.html")
            },
            "--out",
            "is a symbolic link",
        ),
        (
            "a directory",
            |d| {
                std::fs::create_dir_all(d.join("dir.svg")).unwrap();
                d.join("dir.svg")
            },
            "--svg",
            "is not a picture bert-trace wrote",
        ),
        (
            "a user's PNG",
            |d| write(d, "mine.png", b"\x89PNG\r\n\x1a\nmy picture"),
            "--png",
            "is not a picture bert-trace wrote",
        ),
    ];
    let dir = tmp.path();
    assert_eq!(run_in(dir, &["view", dump, "--out", "ours.html"]).code, Some(0));
    assert_eq!(run_in(dir, &[&picture[..], &["--svg", "ours.svg", "--png", "ours.png"]].concat()).code, Some(0));
    for (what, make, flag, needle) in refused {
        let path = make(dir);
        let before = what_is_at(&path);
        let target = path.to_str().unwrap();
        let args: Vec<&str> =
            if flag == "--out" { vec!["view", dump, flag, target] } else { [&picture[..], &[flag, target]].concat() };
        let ran = run_in(dir, &args);
        let result = one_line(&ran, &[needle, "never written over: choose another path", target])
            .and_then(|_| (what_is_at(&path) == before).then_some(()).ok_or_else(|| "the file changed".to_string()));
        cases.check(what, result, &ran);
    }
    // Files of ours, unchanged since, are replaced; another's temporary file beside them stays.
    std::fs::write(dir.join(".ours.html.tmp"), b"the user's own file").unwrap();
    for (what, args) in [
        ("a page of ours", vec!["view", dump, "--out", "ours.html"]),
        ("pictures of ours", [&picture[..], &["--svg", "ours.svg", "--png", "ours.png"]].concat()),
    ] {
        let ran = run_in(dir, &args);
        cases.check(&format!("{what} is replaced"), succeeded(&ran), &ran);
    }
    let ran = run_in(dir, &["view", dump, "--out", "ours.html"]);
    let kept = what_is_at(&dir.join(".ours.html.tmp")).as_deref() == Some(&b"the user's own file"[..]);
    let leftovers: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") && n != ".ours.html.tmp")
        .collect();
    let result = succeeded(&ran).and_then(|_| match (kept, leftovers.is_empty()) {
        (true, true) => Ok(()),
        _ => Err(format!("the user's .ours.html.tmp kept: {kept}; temporary files left: {leftovers:?}")),
    });
    cases.check("a user's .ours.html.tmp beside the page survives, and none of ours is left", result, &ran);
    cases.finish("files not written by bert-trace");
}

/// Writes `bytes` to `dir/name`; returns the path.
fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    std::fs::write(dir.join(name), bytes).unwrap();
    dir.join(name)
}
