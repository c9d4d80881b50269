//! What `bert-trace diff` does with dumps it did not write, and with dumps that disagree with
//! themselves (issue 25): each defect found by trying it as a new user would is one case here,
//! with the exit status and the line it must give. The forms a learner's numpy writes are
//! `dump_forms.rs`; this file holds the ones that must be refused or handled with care.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{npy_header, root};

/// What a run did.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

fn run(args: &[&str]) -> Ran {
    let start = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_bert-trace"))
        .args(args)
        .current_dir(root())
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .expect("bert-trace runs");
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        elapsed: start.elapsed(),
    }
}

/// What a case must give: an exit status, and text on stderr (2) or stdout (0, 1).
struct Expect {
    code: i32,
    says: &'static str,
}

fn check(ran: &Ran, want: &Expect) -> Result<(), String> {
    let errors: Vec<&str> = ran.stderr.lines().filter(|l| !l.starts_with("note:")).collect();
    if ran.stderr.contains("panicked") || ran.code == Some(101) {
        return Err("a panic reached the user".into());
    }
    if ran.code != Some(want.code) {
        return Err(format!("expected exit {}, got {:?}", want.code, ran.code));
    }
    if want.code == 2 && errors.len() != 1 {
        return Err(format!("expected one error line, got {}", errors.len()));
    }
    let text = if want.code == 2 { &ran.stderr } else { &ran.stdout };
    if !text.contains(want.says) && !ran.stderr.contains(want.says) {
        return Err(format!("expected `{}`", want.says));
    }
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
    }
}

fn golden(case: &str) -> PathBuf {
    root().join("golden/tiny/dumps").join(case)
}

/// A copy of golden/tiny's `mask` dump in `dir`, its manifest changed by `change`.
fn with_manifest(dir: &Path, change: impl Fn(&mut serde_json::Value)) -> PathBuf {
    copy_dir(&golden("mask"), dir);
    let path = dir.join("manifest.json");
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    change(&mut manifest);
    std::fs::write(&path, manifest.to_string()).unwrap();
    dir.to_path_buf()
}

/// A `.npy` file of float32 `values` of `shape`, as numpy writes it.
fn npy(path: &Path, shape: &[usize], values: &[f32]) {
    let mut bytes = npy_header("<f4", shape);
    bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn dumps_that_disagree_with_themselves_or_lead_outside_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let mask = golden("mask");
    let mask = mask.to_str().unwrap();
    let outside = t.join("outside.npy");
    npy(&outside, &[1, 13, 32], &[0.0; 13 * 32]);

    // A manifest that lists a stage twice: the second entry was never read, and passed.
    let twice = with_manifest(&t.join("twice"), |m| {
        let first = m["stages"][5].clone();
        m["stages"].as_array_mut().unwrap().push(first);
    });
    // A stage file that is a symbolic link to a file outside the dump.
    let linked = t.join("linked");
    copy_dir(&golden("mask"), &linked);
    std::fs::remove_file(linked.join("embeddings.sum.npy")).unwrap();
    std::os::unix::fs::symlink(&outside, linked.join("embeddings.sum.npy")).unwrap();
    // The same in a directory without a manifest, one folder down.
    let plain_linked = t.join("plain-linked");
    npy(&plain_linked.join("embeddings/word.npy"), &[1, 13, 32], &[0.0; 13 * 32]);
    std::os::unix::fs::symlink(&outside, plain_linked.join("embeddings/sum.npy")).unwrap();
    // A link inside the dump is followed.
    let inner_link = t.join("inner-link");
    npy(&inner_link.join("real.npy"), &[1, 13, 32], &[0.0; 13 * 32]);
    std::os::unix::fs::symlink(inner_link.join("real.npy"), inner_link.join("embeddings.sum.npy")).unwrap();
    // Two dumps of 0 tokens "passed 43 of 43".
    let empty = t.join("empty");
    npy(&empty.join("embeddings.sum.npy"), &[1, 0, 32], &[]);
    std::fs::write(
        empty.join("input.ids.npy"),
        [
            b"\x93NUMPY\x01\x00".as_slice(),
            &118u16.to_le_bytes(),
            format!("{:<117}\n", "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 0), }").as_bytes(),
        ]
        .concat(),
    )
    .unwrap();
    // The same stage twice, flat and nested.
    let both = t.join("both");
    npy(&both.join("embeddings.sum.npy"), &[1, 13, 32], &[0.0; 13 * 32]);
    npy(&both.join("embeddings/sum.npy"), &[1, 13, 32], &[0.0; 13 * 32]);
    // A directory with neither a manifest nor a .npy file.
    let nothing = t.join("nothing");
    std::fs::create_dir_all(&nothing).unwrap();
    std::fs::write(nothing.join("notes.txt"), "my notes").unwrap();
    // A manifest of a newer major format.
    let newer = with_manifest(&t.join("newer"), |m| m["format"] = "bert-trace-dump/9".into());
    // Only integer stages in common.
    let ints = t.join("ints");
    std::fs::create_dir_all(&ints).unwrap();
    std::fs::copy(golden("mask").join("input.ids.npy"), ints.join("input.ids.npy")).unwrap();
    // A learner's names that are not stage names, beside real ones.
    let misnamed = t.join("misnamed");
    copy_dir(&golden("mask"), &misnamed);
    std::fs::remove_file(misnamed.join("manifest.json")).unwrap();
    std::fs::remove_file(misnamed.join(".bert-trace-dump")).ok();
    std::fs::rename(misnamed.join("layer0.attention.probs.npy"), misnamed.join("layer0.attn.probs.npy")).unwrap();

    let s = |p: &Path| p.display().to_string();
    let cases: Vec<(&str, Vec<String>, Expect)> = vec![
        (
            "a stage listed twice",
            vec![s(&twice)],
            Expect { code: 2, says: "lists stage `embeddings.token_type` twice" },
        ),
        ("a link to a file outside", vec![s(&linked)], Expect { code: 2, says: "outside the dump" }),
        ("a nested link to outside", vec![s(&plain_linked)], Expect { code: 2, says: "outside the dump" }),
        (
            "a link inside the dump",
            vec![s(&inner_link)],
            Expect { code: 1, says: "first failing stage: embeddings.sum" },
        ),
        ("0 tokens", vec![s(&empty)], Expect { code: 2, says: "0 tokens" }),
        ("a stage given twice, flat and nested", vec![s(&both)], Expect { code: 2, says: "two files give stage" }),
        (
            "no manifest and no .npy",
            vec![s(&nothing)],
            Expect { code: 2, says: "neither a manifest.json nor any .npy" },
        ),
        ("a newer format", vec![s(&newer)], Expect { code: 2, says: "written by a newer bert-trace" }),
        ("only integers in common", vec![s(&ints)], Expect { code: 2, says: "no float stage in common" }),
        (
            "names that are not stages",
            vec![s(&misnamed)],
            Expect { code: 0, says: "did you mean layer0.attention.probs" },
        ),
    ];
    let mut failures = Vec::new();
    for (what, dumps, want) in &cases {
        for (reference, trace) in [(mask.to_string(), dumps[0].clone()), (dumps[0].clone(), mask.to_string())] {
            let ran = run(&["diff", &reference, &trace]);
            let result = check(&ran, want);
            println!(
                "{what} ({}): expected exit {} with `{}`; got {:?}",
                if trace == mask { "as reference" } else { "as trace" },
                want.code,
                want.says,
                ran.code
            );
            if let Err(problem) = result {
                failures.push(format!(
                    "{what}: {problem}\n  stdout: {}\n  stderr: {}",
                    ran.stdout.trim(),
                    ran.stderr.trim()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len() * 2, failures.join("\n"));
}

#[test]
fn diff_is_linear_in_the_number_of_stages() {
    // Stages of one value each, named outside the stage table, in one safetensors file a side.
    // Two slow paths were found here: the comparison of a manifest of 100,000 stages took over a
    // minute when each name was looked up by a linear search (10k/20k/40k stages: 1.7/4.7/15.9 s),
    // and 20,000 tensors did not finish in two minutes when each read parsed the whole header
    // again. Four times the stages must take about four times as long, not sixteen: a ratio, so
    // that a slow machine cannot fail it and a quadratic step cannot pass. (One file a side, not
    // a directory of 100,000 `.npy` files, whose writing alone took over a minute of the test.)
    let tmp = tempfile::tempdir().unwrap();
    let compare = |n: usize| {
        let path = tmp.path().join(format!("many-{n}.safetensors"));
        let values: Vec<[u8; 4]> = (0..n).map(|i| (i as f32).to_le_bytes()).collect();
        let sum = 0.5f32.to_le_bytes();
        let tensor = |bytes| safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1], bytes).unwrap();
        let mut views: Vec<(String, safetensors::tensor::TensorView<'_>)> =
            values.iter().enumerate().map(|(i, v)| (format!("mine.{i}"), tensor(&v[..]))).collect();
        views.push(("embeddings.sum".into(), tensor(&sum[..])));
        std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
        let path = path.display().to_string();
        let ran = run(&["diff", &path, &path]);
        println!("{n} stages compared in {:.2} s", ran.elapsed.as_secs_f64());
        assert_eq!(ran.code, Some(0), "{}\n{}", ran.stdout.lines().last().unwrap_or_default(), ran.stderr);
        assert!(ran.stdout.contains(&format!("{} of {} stages in common pass", n + 1, n + 1)));
        ran.elapsed.as_secs_f64()
    };
    let (small, large) = (compare(10_000), compare(40_000));
    assert!(large < 8.0 * small, "10,000 stages in {small:.2} s, 40,000 in {large:.2} s: more than linear");
}

#[test]
fn masking_messages_say_what_to_do() {
    let text = "When in Rome, do as the [MASK] do.";
    // (what, arguments, expected exit, text on stderr)
    let cases: [(&str, Vec<&str>, i32, &str); 4] = [
        (
            "a negative probability",
            vec!["--mask-prob", "-0.1", "--seed", "1", "--no-dump", text],
            2,
            "expected greater than 0, at most 1",
        ),
        (
            "a probability over 1",
            vec!["--mask-prob", "1.5", "--seed", "1", "--no-dump", text],
            2,
            "expected greater than 0, at most 1",
        ),
        // 1e-300 is a valid probability: it chooses nothing, so the guarantee masks one token.
        (
            "a tiny probability",
            vec!["--mask-prob", "1e-300", "--seed", "1", "--no-dump", text],
            0,
            "so one was chosen in each",
        ),
        (
            "a text with no maskable token",
            vec!["--mask-prob", "0.15", "--seed", "1", "--no-dump", "[MASK]"],
            2,
            "no token that can be masked",
        ),
    ];
    let mut failures = Vec::new();
    for (what, args, code, says) in cases {
        let ran = run(&args);
        let errors: Vec<&str> = ran.stderr.lines().filter(|l| !l.starts_with("note:")).collect();
        let long_number = ran.stderr.split_whitespace().any(|w| w.len() > 40);
        println!("{what}: expected exit {code} with `{says}`; got {:?}: {}", ran.code, ran.stderr.trim());
        if ran.code != Some(code) || !ran.stderr.contains(says) || (code == 2 && errors.len() != 1) || long_number {
            failures.push(format!("{what}: {}", ran.stderr.trim()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
