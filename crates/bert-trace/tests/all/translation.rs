//! The Chinese course (`walkthrough/zh/`) cannot drift from the English one unseen:
//!
//! - every English chapter (and the index) has a zh chapter of the same file name;
//! - each zh chapter's first line records the sha256 of the English chapter it translates, so
//!   that a change to the English names the zh chapter to bring up to date;
//! - every fenced block (commands, outputs, Python, Rust excerpts) is the English chapter's,
//!   byte for byte and in the same order, and there are no others: the English blocks are the
//!   ones `docs.rs` executes and `tidy.rs` checks, so nothing runs twice and what the zh reader
//!   sees is what runs;
//! - a zh chapter links the same source files as the English one, so the code can be held
//!   beside either;
//! - the top README and the two indexes link both versions.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::common::root;

/// The English chapters and index: `walkthrough/*.md`.
fn english() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("walkthrough"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files
}

/// The fenced blocks of a Markdown text: each opening line and everything up to its closing one.
fn blocks(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let fence = line.trim_start().starts_with("```");
        match (&mut current, fence) {
            (None, true) => current = Some(format!("{line}\n")),
            (Some(block), true) => {
                block.push_str(line);
                found.push(current.take().expect("open"));
            }
            (Some(block), false) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, false) => {}
        }
    }
    found
}

/// The repository files under `crates/` a chapter links, relative to the repository root.
fn source_links(text: &str, dir: &Path) -> BTreeSet<String> {
    let mut links = BTreeSet::new();
    for block in text.split("```").step_by(2) {
        let mut rest = block;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = rest[..end].split('#').next().unwrap_or_default();
            if target.contains("crates/") {
                let path = dir.join(target);
                let path = path.canonicalize().unwrap_or(path);
                let root = root().canonicalize().unwrap();
                links.insert(path.strip_prefix(&root).unwrap_or(&path).display().to_string());
            }
        }
    }
    links
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn every_zh_chapter_translates_the_current_english_one() {
    let zh_dir = root().join("walkthrough/zh");
    let mut failures = Vec::new();
    let mut checked = 0;
    for english_path in english() {
        let name = english_path.file_name().unwrap().to_string_lossy().into_owned();
        let zh_path = zh_dir.join(&name);
        let place = format!("walkthrough/zh/{name}");
        let Ok(zh) = std::fs::read_to_string(&zh_path) else {
            failures.push(format!("{place}: missing; translate walkthrough/{name}"));
            continue;
        };
        checked += 1;
        let english_bytes = std::fs::read(&english_path).unwrap();
        let english = String::from_utf8(english_bytes.clone()).unwrap();
        let hash = sha256_hex(&english_bytes);
        let want = format!("<!-- translation-of: ../{name} sha256:{hash} -->");
        let first = zh.lines().next().unwrap_or_default();
        if first != want {
            failures.push(format!(
                "{place}: translates another version of walkthrough/{name} (first line `{first}`); bring it up to \
                 date with the English, then record `{want}`"
            ));
        }
        let (ours, theirs) = (blocks(&zh), blocks(&english));
        if ours.len() != theirs.len() {
            failures.push(format!("{place}: {} fenced blocks, the English has {}", ours.len(), theirs.len()));
        }
        for (index, (z, e)) in ours.iter().zip(&theirs).enumerate() {
            if z != e {
                let line = z.lines().next().unwrap_or_default();
                failures.push(format!("{place}: block {} (`{line}`) differs from the English one", index + 1));
            }
        }
        let (zh_links, english_links) =
            (source_links(&zh, &zh_dir), source_links(&english, &root().join("walkthrough")));
        if zh_links != english_links {
            let missing: Vec<_> = english_links.difference(&zh_links).collect();
            let extra: Vec<_> = zh_links.difference(&english_links).collect();
            failures.push(format!("{place}: source links differ: missing {missing:?}, not in the English {extra:?}"));
        }
    }
    let extra: Vec<String> = std::fs::read_dir(&zh_dir)
        .map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    for name in extra.iter().filter(|n| n.ends_with(".md")) {
        if !root().join("walkthrough").join(name).exists() {
            failures.push(format!("walkthrough/zh/{name}: translates no English chapter"));
        }
    }
    println!("{checked} zh chapters checked against the English");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn both_versions_are_linked_from_the_readme_and_the_indexes() {
    let read = |path: &str| std::fs::read_to_string(root().join(path)).unwrap();
    // (file, what it must link, within its first lines)
    let cases = [
        ("README.md", "walkthrough/README.md", 12),
        ("README.md", "walkthrough/zh/README.md", 12),
        ("walkthrough/README.md", "zh/README.md", 8),
        ("walkthrough/zh/README.md", "../README.md", 8),
    ];
    let mut failures = Vec::new();
    for (file, link, within) in cases {
        let text = read(file);
        let head: Vec<&str> = text.lines().take(within).collect();
        let found = head.iter().any(|l| l.contains(&format!("]({link})")));
        println!("{file}: link to {link} in the first {within} lines: {found}");
        if !found {
            failures.push(format!("{file}: no link to {link} in its first {within} lines"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
