//! Bad input from all over: broken model directories, broken safetensors files, broken
//! tokenizers, broken dumps and broken input files. Each gets one line on stderr that names the
//! file and the problem, exit status 2, no panic, and no dump left behind.
//!
//! Every case starts from a copy of golden/tiny (or of one of its dumps) and breaks one thing.
//! A last test makes a write fail partway through a trace, which no broken file can do.

use crate::common;

use std::path::Path;
use std::process::Command;

use ndarray::{ArrayD, IxDyn};
use ndarray_npy::WriteNpyExt;
use serde_json::Value;

use crate::common::{copy_dir, root};

const TEXT: &str = "When in Rome, do as the [MASK] do.";

/// Rewrites the safetensors file in `dir` after `change` edits its JSON header.
fn edit_header(dir: &Path, change: impl Fn(&mut serde_json::Map<String, Value>)) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Map<String, Value> = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    change(&mut header);
    let mut text = serde_json::to_string(&header).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&bytes[8 + header_len..]);
    std::fs::write(path, out).unwrap();
}

fn edit_config(dir: &Path, change: impl Fn(&mut serde_json::Map<String, Value>)) {
    let path = dir.join("config.json");
    let mut config: serde_json::Map<String, Value> = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    change(&mut config);
    std::fs::write(path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
}

/// Writes `values` with `shape` over one stage of the dump in `dir`.
fn write_stage<T: ndarray_npy::WritableElement + Clone>(dir: &Path, stage: &str, shape: &[usize], value: T) {
    let array = ArrayD::from_elem(IxDyn(shape), value);
    array.write_npy(std::fs::File::create(dir.join(format!("{stage}.npy"))).unwrap()).unwrap();
}

/// What a case runs: a trace of the broken model, or a diff of the broken dump against the golden.
enum Run {
    Trace,
    Diff,
    Args(&'static [&'static str]),
    /// A trace of golden/tiny with one environment variable set.
    Env(&'static str, &'static str),
}

struct Case {
    name: &'static str,
    run: Run,
    /// Breaks a copy (of golden/tiny for traces, of golden/tiny/dumps/mask for diffs) in `dir`.
    breaks: fn(&Path),
    /// Text the one line must contain; `{dir}` is the broken copy.
    says: &'static str,
}

fn check(case: &Case) -> Option<String> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("broken");
    let out = tmp.path().join("out");
    let source = match case.run {
        Run::Diff => root().join("golden/tiny/dumps/mask"),
        _ => root().join("golden/tiny"),
    };
    copy_dir(&source, &dir);
    (case.breaks)(&dir);
    let dir_text = dir.display().to_string();
    let args: Vec<String> = match &case.run {
        Run::Trace | Run::Env(..) => {
            vec!["--model".into(), dir_text.clone(), "--out".into(), out.display().to_string(), TEXT.into()]
        }
        Run::Diff => vec!["diff".into(), root().join("golden/tiny/dumps/mask").display().to_string(), dir_text.clone()],
        Run::Args(args) => {
            args.iter().map(|a| a.replace("{dir}", &dir_text).replace("{out}", &out.display().to_string())).collect()
        }
    };
    let mut command = Command::new(env!("CARGO_BIN_EXE_bert-trace"));
    if let Run::Env(var, value) = case.run {
        command.env(var, value);
    }
    let output = command.args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("note:")).collect();
    let says = case.says.replace("{dir}", &dir_text);
    let problem = if output.status.code() != Some(2) {
        format!("exit status {:?}, expected 2", output.status.code())
    } else if lines.len() != 1 {
        format!("{} lines on stderr, expected 1", lines.len())
    } else if !lines[0].contains(&says) {
        format!("expected `{says}` in the line")
    } else if stderr.contains("panicked") {
        "a panic reached the user".into()
    } else if out.join("manifest.json").exists() {
        "a manifest was written for a failed run".into()
    } else {
        return None;
    };
    Some(format!("{}: {problem}\n  stderr: {stderr}", case.name))
}

fn cases() -> Vec<Case> {
    let mut cases = vec![
        // The model directory.
        Case {
            name: "no config.json",
            run: Run::Trace,
            breaks: |d| std::fs::remove_file(d.join("config.json")).unwrap(),
            says: "no config.json",
        },
        Case {
            name: "config.json not JSON",
            run: Run::Trace,
            breaks: |d| std::fs::write(d.join("config.json"), "hidden_size = 32").unwrap(),
            says: "{dir}/config.json: not a valid BERT config.json",
        },
        Case {
            name: "config.json missing a field",
            run: Run::Trace,
            breaks: |d| {
                edit_config(d, |c| {
                    c.remove("hidden_size");
                })
            },
            says: "missing field `hidden_size`",
        },
        Case {
            name: "zero layers",
            run: Run::Trace,
            breaks: |d| {
                edit_config(d, |c| {
                    c.insert("num_hidden_layers".into(), 0.into());
                })
            },
            says: "num_hidden_layers is 0",
        },
        Case {
            name: "hidden not divisible by heads",
            run: Run::Trace,
            breaks: |d| {
                edit_config(d, |c| {
                    c.insert("num_attention_heads".into(), 5.into());
                })
            },
            says: "not divisible by num_attention_heads 5",
        },
        Case {
            name: "absurd vocab",
            run: Run::Trace,
            breaks: |d| {
                edit_config(d, |c| {
                    c.insert("vocab_size".into(), 1_000_000_000_000u64.into());
                })
            },
            says: "vocab_size is 1000000000000",
        },
        Case {
            name: "relative positions",
            run: Run::Trace,
            breaks: |d| {
                edit_config(d, |c| {
                    c.insert("position_embedding_type".into(), "relative_key".into());
                })
            },
            says: "relative_key",
        },
        Case {
            name: "unknown activation",
            run: Run::Trace,
            breaks: |d| {
                edit_config(d, |c| {
                    c.insert("hidden_act".into(), "swish".into());
                })
            },
            says: "hidden_act `swish`",
        },
        Case {
            name: "config disagrees with weights",
            run: Run::Trace,
            breaks: |d| {
                edit_config(d, |c| {
                    c.insert("intermediate_size".into(), 48.into());
                })
            },
            says: "expected [48, 32]",
        },
        Case {
            name: "only pytorch_model.bin",
            run: Run::Trace,
            breaks: |d| std::fs::rename(d.join("model.safetensors"), d.join("pytorch_model.bin")).unwrap(),
            says: "scripts/convert_to_safetensors.py",
        },
        Case {
            name: "no weights at all",
            run: Run::Trace,
            breaks: |d| std::fs::remove_file(d.join("model.safetensors")).unwrap(),
            says: "no model.safetensors",
        },
        // The safetensors file.
        Case {
            name: "safetensors truncated",
            run: Run::Trace,
            breaks: |d| {
                let path = d.join("model.safetensors");
                let bytes = std::fs::read(&path).unwrap();
                std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
            },
            says: "{dir}/model.safetensors: not a valid safetensors file",
        },
        Case {
            name: "header length beyond the file",
            run: Run::Trace,
            breaks: |d| {
                let path = d.join("model.safetensors");
                let mut bytes = std::fs::read(&path).unwrap();
                bytes[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
                std::fs::write(&path, bytes).unwrap();
            },
            says: "the header claims 1099511627776 bytes",
        },
        Case {
            name: "header not JSON",
            run: Run::Trace,
            breaks: |d| {
                let path = d.join("model.safetensors");
                let mut bytes = std::fs::read(&path).unwrap();
                bytes[8..24].copy_from_slice(b"this is not json");
                std::fs::write(&path, bytes).unwrap();
            },
            says: "{dir}/model.safetensors: not a valid safetensors file",
        },
        Case {
            name: "offsets out of range",
            run: Run::Trace,
            breaks: |d| {
                edit_header(d, |h| {
                    h["bert.pooler.dense.bias"]["data_offsets"][1] = Value::from(u64::MAX / 2);
                })
            },
            says: "{dir}/model.safetensors: not a valid safetensors file",
        },
        Case {
            name: "unsupported dtype",
            run: Run::Trace,
            breaks: |d| {
                edit_header(d, |h| {
                    h["bert.pooler.dense.bias"]["dtype"] = "I32".into();
                })
            },
            says: "`bert.pooler.dense.bias` has dtype I32",
        },
        Case {
            name: "tensor of the wrong shape",
            run: Run::Trace,
            breaks: |d| {
                edit_header(d, |h| {
                    h["bert.embeddings.position_embeddings.weight"]["shape"] = serde_json::json!([32, 64]);
                })
            },
            says: "`bert.embeddings.position_embeddings.weight` has shape [32, 64], expected [64, 32]",
        },
        Case {
            name: "missing tensor",
            run: Run::Trace,
            breaks: |d| {
                edit_header(d, |h| {
                    let entry = h.remove("bert.encoder.layer.1.output.dense.weight").unwrap();
                    h.insert("renamed".into(), entry);
                })
            },
            says: "`bert.encoder.layer.1.output.dense.weight` is missing",
        },
        // The tokenizer.
        Case {
            name: "no tokenizer",
            run: Run::Trace,
            breaks: |d| std::fs::remove_file(d.join("vocab.txt")).unwrap(),
            says: "no tokenizer.json and no vocab.txt",
        },
        Case {
            name: "corrupt tokenizer.json",
            run: Run::Trace,
            breaks: |d| std::fs::write(d.join("tokenizer.json"), "{\"model\": 3}").unwrap(),
            says: "{dir}/tokenizer.json: not a valid tokenizer.json",
        },
        Case {
            name: "vocab without [CLS]",
            run: Run::Trace,
            breaks: |d| {
                let vocab = std::fs::read_to_string(d.join("vocab.txt")).unwrap();
                std::fs::write(d.join("vocab.txt"), vocab.replace("[CLS]\n", "")).unwrap();
            },
            says: "no [CLS] token",
        },
        // The input.
        Case {
            name: "invalid UTF-8 in --file",
            run: Run::Args(&["--no-dump", "--file", "{dir}/input.txt"]),
            breaks: |d| std::fs::write(d.join("input.txt"), b"ok\n\xff\xfe\n").unwrap(),
            says: "{dir}/input.txt: line 2 is not valid UTF-8",
        },
        Case {
            name: "--file missing",
            run: Run::Args(&["--no-dump", "--file", "{dir}/absent.txt"]),
            breaks: |_| {},
            says: "{dir}/absent.txt: cannot read",
        },
        Case {
            name: "only empty lines in --file",
            run: Run::Args(&["--no-dump", "--file", "{dir}/input.txt"]),
            breaks: |d| std::fs::write(d.join("input.txt"), "\n\n").unwrap(),
            says: "{dir}/input.txt: holds no text (every line is blank)",
        },
        // The dumps.
        // The thread count.
        Case {
            name: "BERT_TRACE_THREADS not a number",
            run: Run::Env("BERT_TRACE_THREADS", "two"),
            breaks: |_| {},
            says: "BERT_TRACE_THREADS is `two`, expected a whole number of threads from 1 to ",
        },
        Case {
            name: "BERT_TRACE_THREADS zero",
            run: Run::Env("BERT_TRACE_THREADS", "0"),
            breaks: |_| {},
            says: "BERT_TRACE_THREADS is `0`",
        },
        Case {
            name: "--threads zero",
            run: Run::Args(&["--threads", "0", "--out", "{out}", "x"]),
            breaks: |_| {},
            says: "--threads is `0`, expected a whole number of threads from 1 to ",
        },
        Case {
            name: "--threads absurd",
            run: Run::Args(&["--threads", "100000", "--out", "{out}", "x"]),
            breaks: |_| {},
            says: "--threads is `100000`, expected",
        },
        Case {
            name: "BERT_TRACE_THREADS absurd",
            run: Run::Env("BERT_TRACE_THREADS", "100000"),
            breaks: |_| {},
            says: "BERT_TRACE_THREADS is `100000`",
        },
        Case {
            name: "reference dump missing",
            run: Run::Args(&["diff", "{dir}/absent", "{dir}"]),
            breaks: |_| {},
            says: "{dir}/absent: not found",
        },
        Case {
            name: "manifest lists a missing file",
            run: Run::Diff,
            breaks: |d| std::fs::remove_file(d.join("layer0.attention.probs.npy")).unwrap(),
            says: "layer0.attention.probs.npy: cannot open",
        },
        Case {
            name: "manifest of another format",
            run: Run::Diff,
            breaks: |d| {
                let text = std::fs::read_to_string(d.join("manifest.json")).unwrap();
                let mut manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
                manifest["format"] = "other/9".into();
                std::fs::write(d.join("manifest.json"), manifest.to_string()).unwrap();
            },
            says: "format is `other/9`",
        },
        Case {
            name: "manifest naming a path outside the dump",
            run: Run::Diff,
            breaks: |d| {
                let text = std::fs::read_to_string(d.join("manifest.json")).unwrap();
                std::fs::write(
                    d.join("manifest.json"),
                    text.replace("\"file\": \"pooler.output.npy\"", "\"file\": \"../../etc/passwd\""),
                )
                .unwrap();
            },
            says: "not a file in the dump directory",
        },
        Case {
            name: ".npy of another dtype",
            run: Run::Diff,
            breaks: |d| write_stage(d, "embeddings.sum", &[1, 13, 32], 0.5f64),
            says: "embeddings.sum.npy: holds float64, but the manifest says float32",
        },
        Case {
            name: ".npy of another shape",
            run: Run::Diff,
            breaks: |d| write_stage(d, "embeddings.sum", &[1, 13, 33], 0.5f32),
            says: "embeddings.sum.npy: shape [1, 13, 33] differs from [1, 13, 32]",
        },
        Case {
            name: ".npy truncated",
            run: Run::Diff,
            breaks: |d| {
                let path = d.join("mlm.logits.npy");
                let bytes = std::fs::read(&path).unwrap();
                std::fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
            },
            says: "mlm.logits.npy: the .npy header claims shape [1, 13, 245]",
        },
        Case {
            name: ".npy not an npy at all",
            run: Run::Diff,
            breaks: |d| std::fs::write(d.join("input.ids.npy"), "hello").unwrap(),
            says: "input.ids.npy: not a .npy file",
        },
        // The output.
        Case {
            name: "OUT under a file",
            run: Run::Args(&["--out", "{dir}/config.json/out", TEXT]),
            breaks: |_| {},
            says: "{dir}/config.json",
        },
        Case {
            name: "OUT holds files that are not ours",
            run: Run::Args(&["--out", "{dir}", TEXT]),
            breaks: |_| {},
            says: "not a bert-trace dump",
        },
        Case {
            name: "OUT is a PyTorch reference dump, with --force",
            run: Run::Args(&["--model", "{dir}", "--force", "--out", "{dir}/reference", TEXT]),
            breaks: |d| {
                copy_dir(&root().join("golden/tiny/dumps/mask"), &d.join("reference"));
            },
            says: "{dir}/reference: holds a dump written by dump_reference.py, not by bert-trace",
        },
        Case {
            name: "OUT holds another program's manifest.json, with --force",
            run: Run::Args(&["--model", "{dir}", "--force", "--out", "{dir}/web", TEXT]),
            breaks: |d| {
                std::fs::create_dir(d.join("web")).unwrap();
                std::fs::write(d.join("web/manifest.json"), "{\"name\": \"my web app\"}").unwrap();
            },
            says: "{dir}/web: holds files that bert-trace did not write but would replace (manifest.json)",
        },
    ];
    if cfg!(unix) {
        cases.push(Case {
            name: "OUT being written by another run",
            run: Run::Args(&["--out", "{dir}/dump", TEXT]),
            breaks: |d| lock_as_another_run(&d.join("dump")),
            says: "{dir}/dump: another run is writing a dump into this directory",
        });
        cases.push(Case {
            name: "OUT being written by another run, with --npz",
            run: Run::Args(&["--npz", "--out", "{dir}/dump", TEXT]),
            breaks: |d| lock_as_another_run(&d.join("dump")),
            says: "{dir}/dump: another run is writing a dump into this directory",
        });
    }
    cases
}

/// Creates `dir` and takes its lock as a run of `bert-trace` does, for as long as this test
/// process lives (the lock is leaked on purpose, so that it outlives this call).
fn lock_as_another_run(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let lock =
        bert_core::io::dump::lock(dir).unwrap().unwrap_or_else(|| panic!("{} could not be locked", dir.display()));
    std::mem::forget(lock);
}

#[test]
fn every_bad_input_gets_one_line_and_status_2() {
    let cases = cases();
    assert!(cases.len() >= 30, "issue 6 asks for at least 30 cases, have {}", cases.len());
    let failures: Vec<String> = cases.iter().filter_map(check).collect();
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

/// Runs `bert-trace` on golden/tiny into `out` with `threads` threads, every file it writes
/// limited to `max_file_bytes` (`RLIMIT_FSIZE`). `SIGXFSZ` is left as it is: bert-trace itself
/// ignores it, so that a longer write fails with an error it reports instead of killing it.
#[cfg(unix)]
fn trace_with_file_limit(out: &Path, threads: usize, max_file_bytes: Option<u64>) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bert-trace"));
    command.env("BERT_TRACE_THREADS", threads.to_string());
    command.args([
        "--model",
        &root().join("golden/tiny").display().to_string(),
        "--out",
        &out.display().to_string(),
        TEXT,
    ]);
    if let Some(limit) = max_file_bytes {
        common::limit(&mut command, common::Limit::FileSize, limit);
    }
    command.output().unwrap()
}

/// The names in `dir` that are neither a stage file nor ours to keep: the temporary names a
/// write goes through, and anything else.
#[cfg(unix)]
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| {
            let stage_file = name.ends_with(".npy") && !name.starts_with('.');
            !stage_file && name != ".bert-trace-dump" && name != "manifest.json"
        })
        .collect()
}

/// A write that fails partway through a trace (here a file-size limit: the inputs' stages fit,
/// the embeddings do not), into an empty directory or over the previous dump, with one
/// thread or several: one line naming the file, status 2, no manifest, no temporary file left
/// behind; and the next run writes a whole dump.
#[cfg(unix)]
#[test]
fn a_write_that_fails_partway_gets_one_line_and_leaves_no_temporary_file() {
    let mut failures = Vec::new();
    for (over_previous_dump, threads) in [(false, 1), (false, 2), (true, 1), (true, 2)] {
        let case = format!(
            "{} with {threads} thread(s)",
            if over_previous_dump { "over the previous dump" } else { "into an empty directory" }
        );
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        if over_previous_dump {
            let first = trace_with_file_limit(&out, threads, None);
            assert!(first.status.success(), "{case}: the first run failed: {}", String::from_utf8_lossy(&first.stderr));
        }
        let failed = trace_with_file_limit(&out, threads, Some(1024));
        let stderr = String::from_utf8_lossy(&failed.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("note:")).collect();
        let problem = if failed.status.code() != Some(2) {
            Some(format!("exit status {:?}, expected 2", failed.status.code()))
        } else if lines.len() != 1
            || !lines[0].contains(&format!("{}/", out.display()))
            || !lines[0].contains(".npy: cannot write")
        {
            // Which stage fails first depends on which thread writes first.
            Some(format!("expected one line naming a stage file in {} and `cannot write`", out.display()))
        } else if stderr.contains("panicked") {
            Some("a panic reached the user".into())
        } else if out.join("manifest.json").exists() {
            Some("a manifest was written for a failed run".into())
        } else if !leftovers(&out).is_empty() {
            Some(format!("left behind {:?}", leftovers(&out)))
        } else {
            None
        };
        if let Some(problem) = problem {
            failures.push(format!("{case}: {problem}\n  stderr: {stderr}"));
            continue;
        }
        let next = trace_with_file_limit(&out, threads, None);
        let manifest: Value = match std::fs::read_to_string(out.join("manifest.json")) {
            Ok(text) if next.status.success() => serde_json::from_str(&text).unwrap(),
            _ => {
                failures.push(format!("{case}: the next run failed: {}", String::from_utf8_lossy(&next.stderr)));
                continue;
            }
        };
        let mut listed: Vec<String> =
            manifest["stages"].as_array().unwrap().iter().map(|s| s["file"].as_str().unwrap().to_string()).collect();
        let mut present: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".npy"))
            .collect();
        listed.sort();
        present.sort();
        if listed != present || !leftovers(&out).is_empty() {
            failures.push(format!(
                "{case}: after the next run, expected exactly the manifest's {} files, found {} (and {:?})",
                listed.len(),
                present.len(),
                leftovers(&out)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
