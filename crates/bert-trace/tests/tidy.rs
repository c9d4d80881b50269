//! Keeps docs in step with code: every source file opens with a `//!` comment saying what it is,
//! every stage name appears in the walkthrough's index, and every chapter is linked from it.

use std::path::{Path, PathBuf};

use bert_core::trace::stage::STAGES;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn every_source_file_says_what_it_is() {
    let mut files = Vec::new();
    for krate in ["bert-core", "bert-trace"] {
        rust_files(&root().join("crates").join(krate).join("src"), &mut files);
    }
    let missing: Vec<String> = files
        .iter()
        .filter(|f| !std::fs::read_to_string(f).unwrap().starts_with("//!"))
        .map(|f| f.display().to_string())
        .collect();
    assert!(missing.is_empty(), "files without a leading //! comment:\n{}", missing.join("\n"));
}

#[test]
fn every_stage_appears_in_the_walkthrough_index() {
    let index = std::fs::read_to_string(root().join("walkthrough/README.md")).expect("walkthrough/README.md");
    let missing: Vec<String> =
        STAGES.iter().map(|s| s.pattern.replace("{i}", "0")).filter(|name| !index.contains(name.as_str())).collect();
    assert!(missing.is_empty(), "stages missing from walkthrough/README.md: {missing:?}");
}

#[test]
fn every_chapter_is_linked_from_the_index() {
    let dir = root().join("walkthrough");
    let index = std::fs::read_to_string(dir.join("README.md")).expect("walkthrough/README.md");
    let unlinked: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md") && name != "README.md")
        .filter(|name| !index.contains(&format!("({name})")))
        .collect();
    assert!(unlinked.is_empty(), "chapters not linked from walkthrough/README.md: {unlinked:?}");
}
