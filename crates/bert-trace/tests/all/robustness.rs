//! The promises of the README's "Dumps you can trust" and of one clear line for bad input, tried
//! the way an adversarial user would, one class of attack per test:
//!
//! - nothing of the user's is ever deleted or replaced, with or without `--force`, and a run
//!   refused for bad input leaves the previous dump as it was;
//! - nothing non-finite, and nothing at all, passes a diff;
//! - nothing hangs or crashes: FIFOs, directories and devices where a file is expected, a server
//!   that never answers, inputs whose activations cannot fit, a file-size limit;
//! - the smaller ones: tolerances, thread counts, argument errors, inputs that can never fit.
//!
//! Each case states what is done and what must come of it; a case that fails prints what it got.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{copy_dir, one_line, poison_tensor, root, set_stage, snapshot, tiny, unchanged, Cases, Ran};
use ndarray::{ArrayD, IxDyn};
use ndarray_npy::ReadNpyExt;

/// `bert-trace ARGS` on the built-in tiny model, whose shapes and vocabulary the cases are
/// written against (`common::tiny`).
fn run(args: &[String]) -> Ran {
    common::run(&tiny(args))
}

/// [`run`] with `env`, killed after `limit`.
fn run_with(args: &[String], env: &[(&str, &str)], limit: std::time::Duration) -> Ran {
    common::run_with(&tiny(args), env, limit)
}

const TEXT: &str = "When in Rome, do as the [MASK] do.";

fn args(list: &[&str], dir: &Path) -> Vec<String> {
    list.iter().map(|a| a.replace("{dir}", &dir.display().to_string())).collect()
}

fn tiny_dump(case: &str) -> PathBuf {
    root().join("golden/tiny/dumps").join(case)
}

/// A trace of golden/tiny's `case` inputs into `out` (exit status and all).
fn trace_case(case: &str, out: &Path, extra: &[&str]) -> Ran {
    let manifest = bert_core::Dump::open(&tiny_dump(case)).unwrap().manifest;
    let mut list: Vec<String> = vec!["--out".into(), out.display().to_string()];
    for pair in manifest.inputs.pair.iter().flatten() {
        list.extend(["--pair".into(), pair.clone()]);
    }
    list.extend(extra.iter().map(|s| s.to_string()));
    list.extend(manifest.inputs.texts.iter().cloned());
    run(&list)
}

#[test]
fn nothing_of_the_users_is_ever_deleted_or_replaced() {
    let mut cases = Cases::default();
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path();

    // A manifest that claims to be bert-trace's, without the marker, listing the user's thesis.
    for (name, marked, force) in
        [("unmarked", false, false), ("unmarked, --force", false, true), ("marked", true, false)]
    {
        let dir = base.join(format!("claims-{}", name.replace([',', ' ', '-'], "")));
        std::fs::create_dir_all(&dir).unwrap();
        if marked {
            std::fs::write(dir.join(".bert-trace-dump"), b"").unwrap();
        }
        let manifest = serde_json::json!({"format": "bert-trace-dump/1", "producer": {"name": "bert-trace"},
            "model": "x", "inputs": {"texts": ["x"], "pair": null},
            "stages": [{"name": "embeddings.sum", "shape": [1], "dtype": "float32", "file": "thesis.pdf"}]});
        std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
        std::fs::write(dir.join("thesis.pdf"), b"years of work").unwrap();
        let before = snapshot(&dir);
        let mut list = vec!["--out", "{dir}", TEXT];
        if force {
            list.insert(0, "--force");
        }
        let ran = run(&args(&list, &dir));
        let expected = if marked { "not a bert-trace dump (thesis.pdf)" } else { "without the marker file" };
        let result = one_line(&ran, expected).and_then(|_| unchanged(&before, &dir));
        cases.check(&format!("a manifest claiming to be ours lists the user's file ({name})"), result, Some(&ran));
    }
    // In a directory bert-trace marked, with --force, the user's file stays and the run goes on.
    {
        let dir = base.join("marked-force");
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(run(&args(&["--out", "{dir}", TEXT], &dir)).code, Some(0));
        std::fs::write(dir.join("thesis.pdf"), b"years of work").unwrap();
        let ran = run(&args(&["--force", "--out", "{dir}", TEXT], &dir));
        let kept = std::fs::read(dir.join("thesis.pdf")).ok() == Some(b"years of work".to_vec());
        cases.check(
            "--force in a marked directory keeps the user's file",
            if ran.code == Some(0) && kept { Ok(()) } else { Err(format!("exit {:?}, file kept {kept}", ran.code)) },
            Some(&ran),
        );
    }
    // --out the same directory as --reference, however spelled.
    for spelling in ["{dir}", "{dir}/../reference", "{dir}/."] {
        let dir = base.join("reference");
        copy_dir(&tiny_dump("mask"), &dir);
        let before = snapshot(&dir);
        let out = spelling.replace("{dir}", &dir.display().to_string());
        let ran = run(&args(&["--out", &out, "--reference", "{dir}", "--force", TEXT], &dir));
        let result = one_line(&ran, "is the --reference directory").and_then(|_| unchanged(&before, &dir));
        cases.check(&format!("--out {spelling} is --reference"), result, Some(&ran));
    }
    // The user's trace.npz, a stage file of theirs, a symbolic link named like a stage: refused
    // with --npz or not, with --force or not.
    type Make = fn(&Path);
    let theirs: [(&str, Make); 3] = [
        ("the user's trace.npz", |d| std::fs::write(d.join("trace.npz"), b"my archive").unwrap()),
        ("the user's embeddings.sum.npy", |d| std::fs::write(d.join("embeddings.sum.npy"), b"mine").unwrap()),
        ("a symbolic link named like a stage", |d| {
            std::os::unix::fs::symlink("../target", d.join("layer0.attention.probs.npy")).unwrap()
        }),
    ];
    for (what, make) in theirs {
        for flags in [&[][..], &["--force"][..], &["--npz"][..], &["--npz", "--force"][..]] {
            let dir = base.join(format!("theirs-{}-{}", what.len(), flags.join("")));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(base.join("target"), b"the link's target").unwrap();
            make(&dir);
            let before = snapshot(&dir);
            let mut list: Vec<&str> = flags.to_vec();
            list.extend(["--out", "{dir}", TEXT]);
            let ran = run(&args(&list, &dir));
            let target_kept = std::fs::read(base.join("target")).unwrap() == b"the link's target";
            let result = one_line(&ran, "did not write but would replace")
                .and_then(|_| unchanged(&before, &dir))
                .and_then(|_| if target_kept { Ok(()) } else { Err("the link's target changed".into()) });
            cases.check(&format!("{what}, {flags:?}"), result, Some(&ran));
        }
    }
    // .npy then --npz then .npy into one directory: each run leaves only its own files, and
    // each diffs clean against the golden, the archive given as a directory or as the file.
    {
        let dir = base.join("mixed");
        let mut result = Ok(());
        for npz in [false, true, false] {
            let ran = trace_case("mask", &dir, if npz { &["--npz"] } else { &[] });
            let names: Vec<String> = snapshot(&dir).into_iter().map(|(n, _)| n).collect();
            let npy_files = names.iter().filter(|n| n.ends_with(".npy")).count();
            let has_archive = names.iter().any(|n| n == "trace.npz");
            let target = if npz { dir.join("trace.npz") } else { dir.clone() };
            let diff = run(&["diff".into(), tiny_dump("mask").display().to_string(), target.display().to_string()]);
            if ran.code != Some(0) || has_archive != npz || (npz && npy_files > 0) || (!npz && npy_files < 40) {
                result = Err(format!("npz {npz}: exit {:?}, files {names:?}", ran.code));
            } else if diff.code != Some(0) {
                result = Err(format!("npz {npz}: diff against the golden exited {:?}: {}", diff.code, diff.stdout));
            }
        }
        cases.check(".npy, --npz and .npy runs into one directory", result, None);
    }
    // A run refused for bad input after a good run leaves the previous dump byte for byte.
    let refusals: [(&str, &[&str]); 7] = [
        ("an unknown --stop-at", &["--stop-at", "layer9.nonsense"]),
        ("an --only that matches nothing", &["--only", "layer7.*"]),
        ("a --mlm-target count that differs", &["--mlm-target", "romans", "--mlm-target", "rome"]),
        ("an --mlm-target that is two tokens", &["--mlm-target", "rome"]),
        ("a missing --reference", &["--reference", "/nonexistent/reference"]),
        ("a masking probability of 0", &["--mask-prob", "0", "--seed", "1"]),
        ("an --nsp-label for a model asked without pairs", &["--nsp-label", "1"]),
    ];
    for (what, flags) in refusals {
        let dir = base.join(format!("previous-{}", what.len()));
        assert_eq!(trace_case("mask", &dir, &[]).code, Some(0));
        let before = snapshot(&dir);
        let mut list: Vec<&str> = flags.to_vec();
        list.extend(["--out", "{dir}", TEXT]);
        let ran = run(&args(&list, &dir));
        let result = if ran.code == Some(2) { unchanged(&before, &dir) } else { Err(format!("exit {:?}", ran.code)) };
        cases.check(&format!("a run refused for {what} leaves the previous dump"), result, Some(&ran));
    }
    // A stage file the user hard-linked elsewhere keeps its values after a rerun.
    {
        let dir = base.join("linked");
        assert_eq!(trace_case("mask", &dir, &[]).code, Some(0));
        let kept = base.join("kept-logits.npy");
        std::fs::hard_link(dir.join("mlm.logits.npy"), &kept).unwrap();
        let before = std::fs::read(&kept).unwrap();
        let ran = run(&args(&["--out", "{dir}", "A different sentence, so that every value changes."], &dir));
        let result = if ran.code == Some(0) && std::fs::read(&kept).unwrap() == before {
            Ok(())
        } else {
            Err(format!("exit {:?}; the kept link changed: {}", ran.code, std::fs::read(&kept).unwrap() != before))
        };
        cases.check("a hard-linked stage file keeps its values", result, Some(&ran));
    }
    cases.finish("ownership");
}

#[test]
fn nothing_non_finite_and_nothing_at_all_passes_a_diff() {
    let mut cases = Cases::default();
    let tmp = tempfile::tempdir().unwrap();
    let diff = |reference: &Path, trace: &Path| {
        run(&["diff".into(), reference.display().to_string(), trace.display().to_string()])
    };
    // (what, golden case, stage, how the reference changes, how the trace changes, exit status,
    // text the report must hold)
    type Change = fn(&mut ArrayD<f32>);
    let first: Change = |a| a.as_slice_mut().unwrap()[0] = f32::INFINITY;
    let neg_inf: Change = |a| a.as_slice_mut().unwrap()[0] = f32::NEG_INFINITY;
    let very_negative: Change = |a| a.as_slice_mut().unwrap()[0] = -1e31;
    let nan_first: Change = |a| a.as_slice_mut().unwrap()[0] = f32::NAN;
    let all_nan: Change = |a| a.fill(f32::NAN);
    let none: Change = |_| {};
    // In `batch`, sequence 1 is padded from position 7: a padded query row, and a padded key.
    let padded_row: Change = |a| a[IxDyn(&[1, 10, 3])] = f32::NAN;
    let real_key: Change = |a| a[IxDyn(&[0, 0, 0, 1])] = f32::NEG_INFINITY;
    let masked_key_inf: Change = |a| a[IxDyn(&[1, 0, 0, 10])] = f32::NEG_INFINITY;
    let cases_table: [(&str, &str, &str, Change, Change, i32, &str); 9] = [
        ("+inf against +inf", "mask", "embeddings.sum", first, first, 1, "FAIL (1 NaN/Inf)"),
        ("-inf against -1e31 outside the scores", "mask", "embeddings.sum", neg_inf, very_negative, 1, "FAIL"),
        ("NaN against NaN", "mask", "layer0.ffn.output", nan_first, nan_first, 1, "FAIL (1 NaN/Inf)"),
        ("NaN in a padded query row", "batch", "layer0.ffn.output", padded_row, padded_row, 1, "NaN/Inf there fail"),
        (
            "a stage all NaN on both sides",
            "batch",
            "mlm.logits",
            all_nan,
            all_nan,
            1,
            "first failing stage: mlm.logits",
        ),
        ("-inf at a real key of the scores", "batch", "layer0.attention.scores", real_key, real_key, 1, "FAIL"),
        ("NaN in the reference only", "mask", "pooler.output", nan_first, none, 1, "FAIL"),
        (
            "a masked key written as -inf on one side",
            "batch",
            "layer0.attention.scores",
            masked_key_inf,
            none,
            0,
            "stages in common pass",
        ),
        (
            "a masked key written as -inf on both sides",
            "batch",
            "layer1.attention.scores",
            masked_key_inf,
            masked_key_inf,
            0,
            "stages in common pass",
        ),
    ];
    for (what, case, stage, reference_change, trace_change, code, needle) in cases_table {
        let (reference, trace) =
            (tmp.path().join(format!("r-{}", what.len())), tmp.path().join(format!("t-{}", what.len())));
        copy_dir(&tiny_dump(case), &reference);
        copy_dir(&tiny_dump(case), &trace);
        set_stage(&reference, stage, reference_change);
        set_stage(&trace, stage, trace_change);
        let ran = diff(&reference, &trace);
        let result = if ran.code != Some(code) {
            Err(format!("exit {:?}, expected {code}", ran.code))
        } else if !ran.stdout.contains(needle) {
            Err(format!("expected `{needle}` in the report"))
        } else {
            Ok(())
        };
        cases.check(what, result, Some(&ran));
    }
    // Comparing nothing is an error, not a pass.
    let empty_manifest = |dir: &Path, stages: serde_json::Value| {
        std::fs::create_dir_all(dir).unwrap();
        let manifest = serde_json::json!({"format": "bert-trace-dump/1", "producer": {"name": "test"},
            "model": "x", "inputs": {"texts": ["x"], "pair": null}, "stages": stages});
        std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    };
    let (a, b) = (tmp.path().join("empty-a"), tmp.path().join("empty-b"));
    empty_manifest(&a, serde_json::json!([]));
    empty_manifest(&b, serde_json::json!([]));
    let ran = diff(&a, &b);
    cases.check("two empty manifests", one_line(&ran, "nothing to compare"), Some(&ran));
    let c = tmp.path().join("disjoint");
    copy_dir(&tiny_dump("mask"), &c);
    let ran = diff(&a, &c);
    cases.check("an empty manifest against a whole dump", one_line(&ran, "nothing to compare"), Some(&ran));
    // A trace whose values are NaN shows NaN in its statistics, not min inf and max -inf.
    let model = tmp.path().join("nan-model");
    copy_dir(&root().join("golden/tiny"), &model);
    poison_tensor(&model.join("model.safetensors"), "bert.embeddings.LayerNorm.weight");
    let ran = run(&["--model".into(), model.display().to_string(), "--no-dump".into(), TEXT.into()]);
    let row = ran.stdout.lines().find(|l| l.contains("embeddings.layernorm ")).unwrap_or_default().to_string();
    let result = if ran.code == Some(0) && row.matches("NaN").count() >= 4 && !row.contains("inf") {
        Ok(())
    } else {
        Err(format!("exit {:?}, row `{row}`", ran.code))
    };
    cases.check("an all-NaN stage's statistics", result, Some(&ran));
    cases.finish("non-finite");
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Puts something that is not a regular file at `path`: a FIFO, a directory, or a link to
/// /dev/zero.
fn not_a_file(path: &Path, kind: &str) {
    let _ = std::fs::remove_file(path);
    match kind {
        "FIFO" => mkfifo(path),
        "directory" => std::fs::create_dir(path).unwrap(),
        "/dev/zero" => std::os::unix::fs::symlink("/dev/zero", path).unwrap(),
        _ => unreachable!(),
    }
}

#[test]
fn nothing_hangs_and_nothing_crashes() {
    let mut cases = Cases::default();
    let tmp = tempfile::tempdir().unwrap();
    let limit = Duration::from_secs(20);
    let kinds = [("FIFO", "is a FIFO"), ("directory", "is a directory"), ("/dev/zero", "is a device")];
    // Where a dump's file is expected.
    for file in ["manifest.json", "layer0.attention.probs.npy", "input.ids.npy"] {
        for (k, (kind, says)) in kinds.iter().enumerate() {
            let dump = tmp.path().join(format!("dump-{file}-{k}"));
            copy_dir(&tiny_dump("mask"), &dump);
            not_a_file(&dump.join(file), kind);
            let ran = run_with(&args(&["diff", &tiny_dump("mask").display().to_string(), "{dir}"], &dump), &[], limit);
            // A stage file linked to /dev/zero leads outside the dump, which is refused first.
            let says = if *kind == "/dev/zero" && file.ends_with(".npy") { "outside the dump" } else { says };
            cases.check(&format!("{kind} as the dump's {file}"), one_line(&ran, says), Some(&ran));
        }
    }
    // A stage whose .npy header nests brackets forty levels deep: the header parser backtracks
    // at every level, so believing it would take hours (the dump fuzz target's second finding).
    {
        let dump = tmp.path().join("dump-nested-header");
        copy_dir(&tiny_dump("mask"), &dump);
        let dict =
            format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {}1{}, }}\n", "[".repeat(40), "]".repeat(40));
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend((dict.len() as u16).to_le_bytes());
        bytes.extend(dict.as_bytes());
        std::fs::write(dump.join("layer0.attention.probs.npy"), bytes).unwrap();
        let ran = run_with(&args(&["diff", &tiny_dump("mask").display().to_string(), "{dir}"], &dump), &[], limit);
        cases.check("a .npy header nesting 40 brackets", one_line(&ran, "nests brackets deeper"), Some(&ran));
    }
    // Where --file is expected.
    for (k, (kind, says)) in kinds.iter().enumerate() {
        let path = tmp.path().join(format!("texts-{k}"));
        not_a_file(&path, kind);
        let ran = run_with(&args(&["--no-dump", "--file", "{dir}"], &path), &[], limit);
        cases.check(&format!("{kind} as --file"), one_line(&ran, says), Some(&ran));
    }
    // Where a model's files are expected.
    for file in ["config.json", "vocab.txt", "tokenizer_config.json", "model.safetensors"] {
        for (k, (kind, says)) in kinds.iter().enumerate() {
            let model = tmp.path().join(format!("model-{file}-{k}"));
            copy_dir(&root().join("golden/tiny"), &model);
            not_a_file(&model.join(file), kind);
            let ran = run_with(&args(&["--model", "{dir}", "--no-dump", TEXT], &model), &[], limit);
            cases.check(&format!("{kind} as the model's {file}"), one_line(&ran, says), Some(&ran));
        }
    }
    // A hub that accepts the connection and never answers.
    {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = std::sync::Arc::clone(&held);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                keep.lock().unwrap().push(stream);
            }
        });
        let home = tmp.path().join("hf-home");
        let env = [
            ("HF_HOME", home.to_str().unwrap()),
            ("HF_ENDPOINT", endpoint.as_str()),
            ("HF_HUB_OFFLINE", "0"),
            ("HF_HUB_DOWNLOAD_TIMEOUT", "1"),
        ];
        let ran = run_with(&["--model".into(), "org/silent".into(), "--no-dump".into(), TEXT.into()], &env, limit);
        let result = one_line(&ran, "timed out").and_then(|_| {
            if ran.elapsed < Duration::from_secs(10) {
                Ok(())
            } else {
                Err(format!("took {:?}", ran.elapsed))
            }
        });
        cases.check("a hub that never answers", result, Some(&ran));
    }
    // Activations that cannot fit: a model with 65,536 positions and a 60,000-token input.
    {
        let model = tmp.path().join("long-model");
        write_tiny_variant(&model, |config, tensors| {
            config["max_position_embeddings"] = 65_536.into();
            tensors.insert(
                "bert.embeddings.position_embeddings.weight".into(),
                (vec![65_536, 32], vec![0.0; 65_536 * 32]),
            );
        });
        let text = tmp.path().join("60000.txt");
        std::fs::write(&text, "the ".repeat(60_000)).unwrap();
        let list = ["--model", &model.display().to_string(), "--no-dump", "--file", &text.display().to_string()];
        let ran = run_with(&list.map(String::from), &[], limit);
        cases.check("activations of 60,000 tokens", one_line(&ran, "needs about"), Some(&ran));
    }
    // An f16 checkpoint whose f32 copy is 64 GiB (a sparse file: nothing is written to disk).
    {
        let model = tmp.path().join("huge-f16");
        std::fs::create_dir_all(&model).unwrap();
        let (vocab, hidden) = (262_144u64, 65_536u64);
        let config = serde_json::json!({"model_type": "bert", "hidden_size": hidden, "num_hidden_layers": 1,
            "num_attention_heads": 1, "intermediate_size": 1, "vocab_size": vocab, "max_position_embeddings": 8});
        std::fs::write(model.join("config.json"), config.to_string()).unwrap();
        std::fs::copy(root().join("golden/tiny/vocab.txt"), model.join("vocab.txt")).unwrap();
        let bytes = vocab * hidden * 2;
        let header = serde_json::json!({"bert.embeddings.word_embeddings.weight":
            {"dtype": "F16", "shape": [vocab, hidden], "data_offsets": [0, bytes]}})
        .to_string();
        let mut header = header.into_bytes();
        while !header.len().is_multiple_of(8) {
            header.push(b' ');
        }
        let path = model.join("model.safetensors");
        let mut prefix = (header.len() as u64).to_le_bytes().to_vec();
        prefix.extend_from_slice(&header);
        std::fs::write(&path, &prefix).unwrap();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(prefix.len() as u64 + bytes).unwrap();
        let ran =
            run_with(&["--model".into(), model.display().to_string(), "--no-dump".into(), TEXT.into()], &[], limit);
        cases.check("an f16 checkpoint whose f32 copy is 64 GiB", one_line(&ran, "needs about 64.0 GiB"), Some(&ran));
    }
    // A file-size limit, with SIGXFSZ left at its default (which kills a process that writes
    // past the limit unless the process ignores it): one line, no temporary file. At 64 KiB the
    // archive's first members fit and a later one does not (zip's writer used to print its own
    // raw `ZipWriter drop failed: Io(...)` line before the error).
    for (npz, limit) in [(false, 1024), (true, 1024), (true, 64 << 10)] {
        let out = tmp.path().join(format!("limited-{npz}-{limit}"));
        let ran = trace_with_file_limit(&out, npz, limit);
        let leftovers: Vec<String> = std::fs::read_dir(&out)
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".tmp"))
                    .collect()
            })
            .unwrap_or_default();
        let result = one_line(&ran, "cannot write").and_then(|_| {
            if leftovers.is_empty() && !out.join("manifest.json").exists() {
                Ok(())
            } else {
                Err(format!("left {leftovers:?}, manifest {}", out.join("manifest.json").exists()))
            }
        });
        cases.check(&format!("a file-size limit of {limit} bytes (npz {npz})"), result, Some(&ran));
    }
    cases.finish("hangs and crashes");
}

/// golden/tiny with `change` applied to its config and tensors (name -> (shape, values)),
/// written to `dir` as a new checkpoint.
fn write_tiny_variant(
    dir: &Path,
    change: impl Fn(&mut serde_json::Value, &mut std::collections::BTreeMap<String, (Vec<usize>, Vec<f32>)>),
) {
    use safetensors::tensor::{Dtype, TensorView};
    copy_dir(&root().join("golden/tiny"), dir);
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    let bytes = std::fs::read(root().join("golden/tiny/model.safetensors")).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: std::collections::BTreeMap<String, (Vec<usize>, Vec<f32>)> = file
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            let values = view.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
            (name, (view.shape().to_vec(), values))
        })
        .collect();
    change(&mut config, &mut tensors);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let raw: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .into_iter()
        .map(|(name, (shape, values))| (name, shape, values.iter().flat_map(|v| v.to_le_bytes()).collect()))
        .collect();
    let views: Vec<(String, TensorView<'_>)> = raw
        .iter()
        .map(|(name, shape, data)| (name.clone(), TensorView::new(Dtype::F32, shape.clone(), data).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

/// Runs a trace of golden/tiny into `out` with every file it writes limited to `limit` bytes
/// (`RLIMIT_FSIZE`); SIGXFSZ is not touched, so the binary must deal with it.
fn trace_with_file_limit(out: &Path, npz: bool, limit: u64) -> Ran {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bert-trace"));
    command.current_dir(root()).arg("--out").arg(out).arg(TEXT);
    if npz {
        command.arg("--npz");
    }
    common::limit(&mut command, common::Limit::FileSize, limit);
    let start = Instant::now();
    let output = command.output().unwrap();
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        elapsed: start.elapsed(),
    }
}

#[test]
fn the_smaller_ones() {
    let mut cases = Cases::default();
    let tmp = tempfile::tempdir().unwrap();
    let dump = tiny_dump("mask").display().to_string();
    let too_many_threads = (bert_core::ops::max_threads() + 1).to_string();
    // (what, arguments, text of the one line)
    let table: Vec<(&str, Vec<String>, &str)> = vec![
        (
            "--atol nan",
            vec!["diff".into(), "--atol".into(), "nan".into(), dump.clone(), dump.clone()],
            "not a tolerance",
        ),
        ("--rtol -1", vec!["diff".into(), "--rtol=-1".into(), dump.clone(), dump.clone()], "not a tolerance"),
        ("--atol inf", vec!["--atol".into(), "inf".into(), TEXT.into()], "not a tolerance"),
        (
            "--threads beyond the machine",
            vec!["--threads".into(), too_many_threads, "--no-dump".into(), TEXT.into()],
            "expected a whole number of threads",
        ),
        ("an unknown argument", vec!["--colour".into(), TEXT.into()], "unexpected argument '--colour'"),
        ("an option without its value", vec![TEXT.into(), "--out".into()], "a value is required for '--out"),
        ("--nsp-label without --pair", vec!["--nsp-label".into(), "1".into(), TEXT.into()], "--pair"),
        (
            "--nsp-label 2",
            vec!["--pair".into(), "B".into(), "--nsp-label".into(), "2".into(), TEXT.into()],
            "--nsp-label 2: expected 0 (B follows A) or 1 (B is random)",
        ),
        ("--mask-prob without --seed", vec!["--mask-prob".into(), "0.15".into(), TEXT.into()], "--seed"),
        (
            "--mask-prob 0",
            vec!["--mask-prob".into(), "0".into(), "--seed".into(), "1".into(), "--no-dump".into(), TEXT.into()],
            "greater than 0",
        ),
        ("--kernels fastest", vec!["--kernels".into(), "fastest".into(), TEXT.into()], "'--kernels"),
        (
            "--mlm-target for no [MASK]",
            vec!["--mlm-target".into(), "rome".into(), "--no-dump".into(), "No mask here.".into()],
            "1 target word(s) for 0 [MASK]",
        ),
    ];
    for (what, list, needle) in table {
        let ran = run(&list);
        let usage_printed = ran.stderr.contains("Usage:");
        let result =
            one_line(&ran, needle).and_then(|_| if usage_printed { Err("clap's usage block".into()) } else { Ok(()) });
        cases.check(what, result, Some(&ran));
    }
    // --help is not an error.
    let ran = run(&["--help".into()]);
    cases.check(
        "--help",
        if ran.code == Some(0) && ran.stdout.contains("Usage:") { Ok(()) } else { Err(format!("exit {:?}", ran.code)) },
        Some(&ran),
    );
    // [CLS] and [SEP] alone take more positions than the model has: --truncate cannot help.
    let model = tmp.path().join("one-position");
    write_tiny_variant(&model, |config, tensors| {
        config["max_position_embeddings"] = 1.into();
        let table = tensors.get_mut("bert.embeddings.position_embeddings.weight").unwrap();
        *table = (vec![1, 32], table.1[..32].to_vec());
    });
    let ran =
        run(&["--model".into(), model.display().to_string(), "--truncate".into(), "--no-dump".into(), TEXT.into()]);
    let result = one_line(&ran, "so no input fits, cut or not");
    cases.check("[CLS] and [SEP] alone do not fit, with --truncate", result, Some(&ran));
    // A 10 MB line is refused without tokenizing all of it.
    let long = tmp.path().join("long.txt");
    std::fs::write(&long, "rome ".repeat(2_000_000)).unwrap();
    let ran = run_with(&args(&["--no-dump", "--file", "{dir}"], &long), &[], Duration::from_secs(20));
    let result = one_line(&ran, "pass --truncate").and_then(|_| {
        if ran.elapsed < Duration::from_secs(3) {
            Ok(())
        } else {
            Err(format!("took {:?}", ran.elapsed))
        }
    });
    cases.check("a 10 MB line", result, Some(&ran));
    // The same line with --truncate is cut, and cut the same as the tokenizer would cut it.
    let ran = run_with(
        &args(&["--no-dump", "--truncate", "--stop-at", "input.ids", "--file", "{dir}"], &long),
        &[],
        Duration::from_secs(20),
    );
    let result = if ran.code == Some(0) && ran.stdout.contains("[1, 64]") && ran.elapsed < Duration::from_secs(3) {
        Ok(())
    } else {
        Err(format!("exit {:?} after {:?}", ran.code, ran.elapsed))
    };
    cases.check("a 10 MB line with --truncate", result, Some(&ran));
    cases.finish("smaller");
}

/// `stages --names` prints bare names for scripts; on a terminal, tables fit its width.
#[test]
fn stage_names_for_scripts_and_tables_for_the_terminal() {
    let ran = run(&["stages".into(), "--names".into()]);
    let names: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert_eq!(names.first(), Some(&"input.ids"));
    assert_eq!(names.last(), Some(&"nsp.logits"));
    assert!(names.iter().all(|n| bert_core::stage::parse(n).is_some()), "{names:?}");
    assert!(ran.stderr.is_empty(), "--names prints nothing else: {}", ran.stderr);
    // Under a terminal of 80 columns (util-linux's `script` gives the command one), every line of
    // the stage table fits.
    let output = Command::new("script")
        .args(["-qec", &format!("stty cols 80; {} stages", env!("CARGO_BIN_EXE_bert-trace")), "/dev/null"])
        .current_dir(root())
        .output()
        .expect("script (util-linux) runs");
    let text = String::from_utf8_lossy(&output.stdout);
    // The table's lines (the note on stderr is a sentence, which the terminal wraps).
    let table = text.lines().filter(|l| l.starts_with(['│', '┌', '└', '╞']));
    let widest = table.map(|l| l.trim_end_matches('\r').chars().count()).max().unwrap_or(0);
    assert!(output.status.success() && text.contains("nsp.logits"), "{text}");
    assert!(widest <= 80, "a line of {widest} characters on an 80-column terminal:\n{text}");
}

/// The stage files in `out` written since `since` (a file being written has a hidden name
/// until it is whole, and an earlier dump's files are older).
fn stage_files_since(out: &Path, since: std::time::SystemTime) -> usize {
    std::fs::read_dir(out).map_or(0, |entries| {
        entries
            .filter_map(|e| e.ok())
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let new = e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t >= since);
                name.ends_with(".npy") && !name.starts_with('.') && new
            })
            .count()
    })
}

/// A run killed midway, from outside, as a user's `kill -9` or the kernel's OOM killer would: a
/// batch big enough that writing its stages takes a while, killed (SIGKILL) as soon as `after`
/// of its stage files are in `out`. The binary has no hook for it.
fn kill_after(out: &Path, texts: &Path, after: usize) -> std::process::ExitStatus {
    // A file's time is the kernel's coarse clock (a few ms behind this one): an earlier dump's
    // files are 200 ms older than the start, and the run's own are counted from 20 ms before it.
    std::thread::sleep(Duration::from_millis(200));
    let since = std::time::SystemTime::now() - Duration::from_millis(20);
    let mut child = Command::new(env!("CARGO_BIN_EXE_bert-trace"))
        .current_dir(root())
        .args(["--out", &out.display().to_string(), "--threads", "1", "--file", &texts.display().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while stage_files_since(out, since) < after
        && start.elapsed() < Duration::from_secs(60)
        && child.try_wait().unwrap().is_none()
    {
        std::thread::sleep(Duration::from_micros(200));
    }
    child.kill().ok();
    child.wait().unwrap()
}

/// Killed after about 1, 20 and 42 of golden/tiny's 43 stages, into an empty directory or over
/// a whole dump: no manifest, every stage file present is whole, and the next run cleans up.
#[test]
fn a_run_killed_midway_leaves_nothing_that_looks_complete() {
    let tmp = tempfile::tempdir().unwrap();
    // 256 texts of about 40 tokens (golden/tiny takes 64): each stage is megabytes, so the
    // writing takes long enough to be caught midway.
    let texts = tmp.path().join("texts.txt");
    let line = "when in rome do as the romans do and all roads lead to rome ".repeat(3);
    std::fs::write(&texts, format!("{}\n", line.trim()).repeat(256)).unwrap();
    for (over_a_dump, after) in [(false, 1), (false, 20), (true, 1), (true, 42)] {
        let out = tmp.path().join(format!("t-{over_a_dump}-{after}"));
        if over_a_dump {
            assert_eq!(run(&["--out".into(), out.display().to_string(), TEXT.into()]).code, Some(0));
        }
        let status = kill_after(&out, &texts, after);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "the run into {} ended before it was killed: {status}", out.display());
        let when = format!("killed after {after} stages (over a dump: {over_a_dump})");
        assert!(!out.join("manifest.json").exists(), "{when}: a manifest was left");
        for entry in std::fs::read_dir(&out).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(".npy") && !name.starts_with('.') {
                let readable = ArrayD::<f32>::read_npy(std::fs::File::open(&path).unwrap()).is_ok()
                    || ArrayD::<i64>::read_npy(std::fs::File::open(&path).unwrap()).is_ok();
                assert!(readable, "{when}: {name} looks complete by name but does not read back");
            }
        }
        let ran = run(&["--out".into(), out.display().to_string(), TEXT.into()]);
        assert_eq!(ran.code, Some(0), "{when}: the next run: {}", ran.stderr);
        let dump = bert_core::Dump::open(&out).unwrap();
        let mut listed: Vec<String> = dump.manifest.stages.iter().map(|s| s.file.clone()).collect();
        listed.extend(["manifest.json".into(), bert_core::io::dump::MARKER.into()]);
        listed.sort();
        let found: Vec<String> = snapshot(&out).into_iter().map(|(n, _)| n).collect();
        assert_eq!(found, listed, "{when}: the next run left files its manifest does not list");
    }
}
