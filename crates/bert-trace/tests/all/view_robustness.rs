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

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::root;
use ndarray::{ArrayD, IxDyn};
use ndarray_npy::{WritableElement, WriteNpyExt};

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

/// Writes `values` as stage `name` of `dump`, and its shape and dtype into the manifest (as a
/// new entry if the stage was not there).
fn set_stage<T: WritableElement>(dump: &Path, name: &str, values: ArrayD<T>, dtype: &str) {
    let file = format!("{name}.npy");
    values.write_npy(std::fs::File::create(dump.join(&file)).unwrap()).unwrap();
    let path = dump.join("manifest.json");
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let stages = manifest["stages"].as_array_mut().unwrap();
    let entry = serde_json::json!({"name": name, "shape": values.shape(), "dtype": dtype, "file": file});
    match stages.iter_mut().find(|s| s["name"] == name) {
        Some(stage) => *stage = entry,
        None => stages.push(entry),
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
}

fn floats(shape: &[usize], value: f32) -> ArrayD<f32> {
    ArrayD::from_elem(IxDyn(shape), value)
}

fn ints(shape: &[usize], value: i64) -> ArrayD<i64> {
    ArrayD::from_elem(IxDyn(shape), value)
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

/// Gives `dump` `t` tokens in `b` sequences: its three input stages, and nothing else changed.
fn set_inputs(dump: &Path, b: usize, t: usize) {
    for name in ["input.ids", "input.token_type_ids", "input.attention_mask"] {
        set_stage(dump, name, ints(&[b, t], 1), "int64");
    }
}

#[test]
fn dumps_that_disagree_with_themselves_are_one_line_never_a_panic() {
    let mut cases = Cases::default();
    let tmp = tempfile::tempdir().unwrap();
    let page: &[&str] = &["view", "{dump}", "--out", "{dump}/view.html"];
    let svg: &[&str] = &["view", "{dump}", "--stage", "layer0.attention.probs", "--svg", "{dump}/p.svg"];
    let png: &[&str] = &["view", "{dump}", "--stage", "embeddings.sum", "--png", "{dump}/p.png"];
    let lines: &[&str] = &["view", "{dump}", "--stage", "layer1.attention.probs", "--lines", "--png", "{dump}/p.png"];
    type Edit = fn(&Path);
    type Commands<'a> = Vec<&'a [&'a str]>;
    // Each case: the edit to golden/tiny's mask dump (1 sequence of 13 tokens, 4 heads, a
    // vocabulary of 245), the commands tried on it, and what the one line must say.
    let cases_list: Vec<(&str, Edit, Commands, Vec<&str>)> = vec![
        ("0 tokens", |d| set_inputs(d, 1, 0), vec![page, svg, png, lines], vec!["the dump has 0 tokens"]),
        ("0 sequences", |d| set_inputs(d, 0, 13), vec![page, svg, png], vec!["the dump has 0 sequences"]),
        (
            "input.ids of rank 1",
            |d| set_stage(d, "input.ids", ints(&[13], 1), "int64"),
            vec![page, png],
            vec!["stage `input.ids` is [13], expected [B, T]"],
        ),
        (
            "a label beyond the vocabulary",
            |d| {
                let mut labels = ints(&[1, 13], -100);
                labels[[0, 8]] = 245;
                set_stage(d, "input.labels", labels, "int64");
            },
            vec![page],
            vec!["stage `input.labels` has 245 at sequence 0, position 8", "mlm.logits (0 to 244)"],
        ),
        (
            "a negative label",
            |d| {
                let mut labels = ints(&[1, 13], -100);
                labels[[0, 3]] = -7;
                set_stage(d, "input.labels", labels, "int64");
            },
            vec![page],
            vec!["stage `input.labels` has -7 at sequence 0, position 3"],
        ),
        (
            "labels for fewer tokens",
            |d| set_stage(d, "input.labels", ints(&[1, 9], -100), "int64"),
            vec![page, png],
            vec!["stage `input.labels` is [1, 9], expected [B=1, T=13]"],
        ),
        (
            "attention probabilities over 5 keys for 13 tokens",
            |d| set_stage(d, "layer0.attention.probs", floats(&[1, 4, 13, 5], 0.2), "float32"),
            vec![page, svg],
            vec!["stage `layer0.attention.probs` is [1, 4, 13, 5], expected [B=1, nh≥1, T=13, T=13]"],
        ),
        (
            "attention probabilities of 2 sequences for 1",
            |d| set_stage(d, "layer0.attention.probs", floats(&[2, 4, 13, 13], 0.2), "float32"),
            vec![page, svg],
            vec!["stage `layer0.attention.probs` is [2, 4, 13, 13], expected [B=1, nh≥1, T=13, T=13]"],
        ),
        (
            "a layer with fewer heads than the first",
            |d| set_stage(d, "layer1.attention.probs", floats(&[1, 2, 13, 13], 0.2), "float32"),
            vec![page],
            vec!["stage `layer1.attention.probs` is [1, 2, 13, 13], expected [B=1, nh=4, T=13, T=13]"],
        ),
        (
            "attention probabilities of 0 heads",
            |d| set_stage(d, "layer0.attention.probs", floats(&[1, 0, 13, 13], 0.2), "float32"),
            vec![page, svg],
            vec!["stage `layer0.attention.probs` is [1, 0, 13, 13], expected [B=1, nh≥1, T=13, T=13]"],
        ),
        (
            "scores of rank 3",
            |d| set_stage(d, "layer0.attention.scores", floats(&[1, 4, 13], 0.2), "float32"),
            vec![page, &["view", "{dump}", "--stage", "layer0.attention.scores", "--svg", "{dump}/p.svg"]],
            vec!["stage `layer0.attention.scores` is [1, 4, 13], expected [B=1, T=13, X≥1]"],
        ),
        (
            "a hidden state of 0 features",
            |d| set_stage(d, "embeddings.sum", floats(&[1, 13, 0], 0.2), "float32"),
            vec![page, png],
            vec!["stage `embeddings.sum` is [1, 13, 0], expected [B=1, T=13, X≥1]"],
        ),
        (
            "a layer output narrower than the embeddings",
            |d| set_stage(d, "layer1.ffn.layernorm", floats(&[1, 13, 16], 0.2), "float32"),
            vec![page],
            vec!["stage `layer1.ffn.layernorm` is [1, 13, 16], expected [B=1, T=13, X=32]"],
        ),
        (
            "nsp.logits of one class",
            |d| set_stage(d, "nsp.logits", floats(&[1, 1], 0.2), "float32"),
            vec![page],
            vec!["stage `nsp.logits` is [1, 1], expected [B=1, 2]"],
        ),
        (
            "classifier.logits of no class",
            |d| set_stage(d, "classifier.logits", floats(&[1, 0], 0.2), "float32"),
            vec![page],
            vec!["stage `classifier.logits` is [1, 0], expected [B=1, C≥1]"],
        ),
        (
            "mlm.logits for fewer positions than the input",
            |d| set_stage(d, "mlm.logits", floats(&[1, 5, 245], 0.2), "float32"),
            vec![page],
            vec!["stage `mlm.logits` is [1, 5, 245], expected [B=1, T=13, X≥1]"],
        ),
        (
            "an attention mask of another length",
            |d| set_stage(d, "input.attention_mask", ints(&[1, 7], 1), "int64"),
            vec![page, svg, png, lines],
            vec!["stage `input.attention_mask` is [1, 7], expected [B=1, T=13]"],
        ),
    ];
    for (i, (what, edit, commands, needles)) in cases_list.into_iter().enumerate() {
        let dump = mask_dump(&tmp.path().join(format!("case{i}")));
        edit(&dump);
        for command in commands {
            let args: Vec<String> = command.iter().map(|a| a.replace("{dump}", dump.to_str().unwrap())).collect();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let ran = run_in(tmp.path(), &args);
            let mut needles = needles.clone();
            needles.push(dump.to_str().unwrap());
            let written = ["view.html", "p.svg", "p.png"].into_iter().find(|f| dump.join(f).exists());
            let result = one_line(&ran, &needles).and_then(|_| match written {
                Some(file) => Err(format!("{file} was written")),
                None => Ok(()),
            });
            cases.check(&format!("{what}: {}", args[2..].join(" ")), result, &ran);
        }
    }
    cases.finish("dumps that disagree with themselves");
}

/// The tokens of golden/tiny's mask dump with control characters among them: a bell, an escape
/// sequence, DEL and two C1 controls.
const CONTROL_TOKENS: [&str; 13] =
    ["[CLS]", "when", "\u{7}", "\u{1b}[31m", "\u{7f}", "\u{85}x", "\u{9b}", "as", "the", "[MASK]", "do", ".", "[SEP]"];

#[test]
fn sizes_models_tokens_and_integer_stages_that_once_broke_view() {
    let mut cases = Cases::default();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();

    // A stage too wide to draw: refused before the SVG is built, or before the PNG is rendered.
    let wide = mask_dump(&dir.join("wide"));
    set_stage(&wide, "embeddings.sum", floats(&[1, 13, 400_000], 0.5), "float32");
    set_stage(&wide, "embeddings.layernorm", floats(&[1, 13, 120_000], 0.5), "float32");
    let wide = wide.to_str().unwrap();
    let too_large: [(&str, &str, &[&str]); 2] = [
        ("embeddings.sum", "--svg", &["its picture would have 5200000 cells (13 × 400000), more than the 4194304"]),
        (
            "embeddings.layernorm",
            "--png",
            &["its PNG would be 120230 × 358 px (43.0 megapixels)", "write --svg instead"],
        ),
    ];
    for (stage, flag, needles) in too_large {
        let ran = run_in(dir, &["view", wide, "--stage", stage, flag, "big"]);
        let result = one_line(&ran, &[&[stage, "--stage"][..], needles].concat()).and_then(|_| {
            if dir.join("big").exists() {
                Err("big was written".into())
            } else {
                Ok(())
            }
        });
        cases.check(&format!("{stage} {flag}: too large"), result, &ran);
    }
    let ran = run_in(dir, &["view", wide, "--stage", "embeddings.layernorm", "--svg", "wide.svg"]);
    cases.check("the same stage as SVG is within the budget", succeeded(&ran), &ran);

    // A --model that cannot be loaded is an error, not a page with tokens by id.
    let mask = root().join("golden/tiny/dumps/mask");
    let mask = mask.to_str().unwrap();
    std::fs::create_dir_all(dir.join("empty-model")).unwrap();
    for (model, needle) in [("./no-such-model-dir", "it does not exist"), ("empty-model", "no config.json")] {
        let ran = run_in(dir, &["view", mask, "--model", model, "--out", "model.html"]);
        let result = one_line(&ran, &[model, needle]).and_then(|_| {
            if dir.join("model.html").exists() {
                Err("the page was written".into())
            } else {
                Ok(())
            }
        });
        cases.check(&format!("--model {model}"), result, &ran);
    }

    // Control characters in tokens are spelled out in the SVG (which then parses), the PNG, and
    // the page.
    let control = mask_dump(&dir.join("control"));
    let path = control.join("manifest.json");
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    manifest["inputs"]["tokens"] = serde_json::json!([CONTROL_TOKENS]);
    std::fs::write(&path, manifest.to_string()).unwrap();
    let control = control.to_str().unwrap();
    let picture = ["view", control, "--stage", "layer0.attention.probs", "--svg", "c.svg", "--png", "c.png"];
    let ran = run_in(dir, &picture);
    let result = succeeded(&ran).and_then(|_| {
        let svg = std::fs::read_to_string(dir.join("c.svg")).unwrap();
        resvg::usvg::Tree::from_str(&svg, &resvg::usvg::Options::default())
            .map_err(|e| format!("the SVG does not parse: {e}"))?;
        for spelled in ["\\u{7}", "\\u{1b}[31m", "\\u{7f}", "\\u{85}x", "\\u{9b}"] {
            if !svg.contains(spelled) {
                return Err(format!("the SVG does not show {spelled}"));
            }
        }
        Ok(())
    });
    cases.check("control characters in an SVG and a PNG", result, &ran);
    let ran = run_in(dir, &["view", control, "--out", "c.html"]);
    let result = succeeded(&ran).and_then(|_| {
        let page = std::fs::read_to_string(dir.join("c.html")).unwrap();
        let shown = page.contains("\\\\u{7}") && page.contains("\\\\u{1b}[31m") && page.contains("\\\\u{9b}");
        let raw = page.contains("\\u0007") || page.contains("\\u001b") || page.contains('\u{85}');
        if shown && !raw {
            Ok(())
        } else {
            Err(format!("the page shows them spelled out: {shown}; holds them raw: {raw}"))
        }
    });
    cases.check("control characters in the page", result, &ran);

    // `--heatmap '*'` matches the integer inputs too: they are left out, not an error.
    let ran = run_in(dir, &["view", mask, "--heatmap", "*", "--out", "all.html"]);
    let result = succeeded(&ran).and_then(|_| {
        let page = std::fs::read_to_string(dir.join("all.html")).unwrap();
        let drawn = page.contains("\"stage\":\"layer1.ffn.activation\"") && !page.contains("\"stage\":\"input.ids\"");
        if drawn {
            Ok(())
        } else {
            Err("the page does not hold the float stages' heatmaps only".into())
        }
    });
    cases.check("--heatmap '*'", result, &ran);
    cases.finish("sizes, models, tokens and integer stages");
}
