//! Training and the analysis commands tried with the mistakes a user makes and the files a user
//! has (issue 35's battery): each case runs the command and checks its exit status, its one
//! line, and afterwards that nothing of the user's changed and that nothing saved holds NaN or
//! inf.
//!
//! - a run never saves a model or an optimizer state with NaN or inf in it, and never starts
//!   from one;
//! - a save that fails (a file-size limit) leaves the checkpoint that was there whole;
//! - every check comes before anything is claimed, and names the option or file at fault;
//! - `trainer_state.json` reads back exactly and is checked;
//! - no analysis answers wrongly in silence: a patch that would change nothing, a gradient read
//!   as attention, stages dropped unseen, rounding blamed for another input, a float32 truth, a
//!   NaN ranked or called "the same".

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{copy_dir, one_line, poison_tensor, root, set_stage, snapshot, tiny, unchanged, Cases, Ran};
use ndarray::ArrayD;
use ndarray_npy::{ReadNpyExt, WriteNpyExt};

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
const ROMANS: &str = "walkthrough/texts/romans.txt";

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// `bert-trace train` on golden/tiny with `extra`.
fn train(extra: &[String]) -> Ran {
    let mut args = strings(&["train", "--model", "golden/tiny"]);
    args.extend(extra.iter().cloned());
    run(&args)
}

/// The first tensor of any `.safetensors` under `dir` that holds NaN or inf.
fn non_finite_under(dir: &Path) -> Option<String> {
    if !dir.exists() {
        return None;
    }
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if let Some(found) = non_finite_under(&path) {
                return Some(found);
            }
        } else if path.extension().is_some_and(|e| e == "safetensors") {
            let bytes = std::fs::read(&path).unwrap();
            let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
            for (name, view) in tensors.tensors() {
                let values: Vec<f32> =
                    view.data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
                if let Some(v) = values.iter().find(|v| !v.is_finite()) {
                    return Some(format!("{}: {name} holds {v}", path.display()));
                }
            }
        }
    }
    None
}

/// One clear line with `needle`, and nothing at `absent` afterwards.
fn refused_before_claiming(ran: &Ran, needle: &str, absent: &Path) -> Result<(), String> {
    one_line(ran, needle)?;
    if absent.exists() {
        return Err(format!("{} was created by a refused run", absent.display()));
    }
    if ran.stdout.lines().any(|l| l.starts_with("step ")) {
        return Err("a step was taken before the refusal".into());
    }
    Ok(())
}

#[test]
fn a_run_never_saves_nan_and_never_starts_from_it() {
    let mut cases = Cases::default();
    let tmp = tempfile::tempdir().unwrap();
    let t = |name: &str| tmp.path().join(name);
    // (what, options, the one line, the directory that must not exist after)
    let table: Vec<(&str, Vec<String>, &str, PathBuf)> = vec![
        ("--lr above float32's largest", strings(&["--lr", "1e39"]), "--lr 1e39: expected", t("lr")),
        ("--eps 0", strings(&["--eps", "0"]), "--eps 0.0: expected a finite number greater than 0", t("eps")),
        ("--lr -1e-4", strings(&["--lr", "-1e-4"]), "--lr -0.0001: expected a number greater than 0", t("neg-lr")),
        ("--eps -1e-8", strings(&["--eps", "-1e-8"]), "--eps -1e-8: expected", t("neg-eps")),
        ("--weight-decay -1e-2", strings(&["--weight-decay", "-1e-2"]), "--weight-decay -0.01: expected", t("neg-wd")),
        ("--max-len 0", strings(&["--max-len", "0"]), "--max-len 0: expected at least 3", t("len0")),
        ("--max-len 2", strings(&["--max-len", "2"]), "--max-len 2: expected at least 3", t("len2")),
    ];
    for (what, options, needle, save) in table {
        let mut args = strings(&["--file", ROMANS, "--steps", "3", "--save"]);
        args.push(path(&save));
        args.extend(options);
        let ran = train(&args);
        cases.check(what, refused_before_claiming(&ran, needle, &save), Some(&ran));
    }
    // An update that overflows: the rate is allowed, the weights it makes are not.
    let save = t("overflow");
    let args = strings(&["--file", ROMANS, "--steps", "2", "--lr", "3e38", "--weight-decay", "10", "--save"]);
    let ran = train(&[args, vec![path(&save)]].concat());
    let result = one_line(&ran, "step 1: the update made the weight").and_then(|_| match non_finite_under(&save) {
        Some(found) => Err(format!("saved {found}")),
        None => Ok(()),
    });
    cases.check("an update that overflows stops the run before it saves", result, Some(&ran));
    // A run that diverges at step 2 keeps its step-1 checkpoint, whose weights are finite.
    let save = t("diverged");
    let args = strings(&["--file", ROMANS, "--steps", "4", "--lr", "1e30", "--save-every", "1", "--save"]);
    let ran = train(&[args, vec![path(&save)]].concat());
    let result = one_line(&ran, "step 2: the loss is NaN").and_then(|_| match non_finite_under(&save) {
        Some(found) => Err(format!("saved {found}")),
        None if !save.join("checkpoint-1/model.safetensors").is_file() => Err("checkpoint-1 is gone".into()),
        None => Ok(()),
    });
    cases.check("a run diverging at step 2 saves nothing broken", result, Some(&ran));
    // A checkpoint whose optimizer state or weights hold a NaN is not resumed from.
    let good = t("good");
    let ran = train(
        &[strings(&["--file", ROMANS, "--steps", "4", "--save-every", "2", "--save"]), vec![path(&good)]].concat(),
    );
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    for (file, tensor) in [
        ("optimizer.safetensors", "exp_avg_sq.bert.encoder.layer.0.attention.self.query.weight"),
        ("model.safetensors", "bert.encoder.layer.1.output.dense.bias"),
    ] {
        let checkpoint = t(&format!("poisoned-{file}"));
        copy_dir(&good.join("checkpoint-2"), &checkpoint);
        poison_tensor(&checkpoint.join(file), tensor);
        let before = snapshot(&checkpoint);
        let out = t(&format!("resumed-{file}"));
        let ran = run(&strings(&["train", "--resume", &path(&checkpoint), "--save", &path(&out)]));
        let result = refused_before_claiming(&ran, &format!("{file}: tensor `{tensor}` holds NaN"), &out)
            .and_then(|_| unchanged(&before, &checkpoint));
        cases.check(&format!("a NaN in {file} is refused on --resume"), result, Some(&ran));
    }
    cases.finish("non-finite");
}

#[test]
fn every_check_comes_before_anything_is_claimed() {
    let mut cases = Cases::default();
    let tmp = tempfile::tempdir().unwrap();
    let t = |name: &str| tmp.path().join(name);
    let only_specials = t("specials.txt");
    std::fs::write(&only_specials, "[SEP] [CLS]\n[MASK]\n").unwrap();
    let one_special = t("one-special.txt");
    std::fs::write(&one_special, "the romans built roads\nin rome\n\n[SEP] [PAD]\nwhen in rome\n").unwrap();
    let specials_b = t("specials-b.txt");
    std::fs::write(&specials_b, "the romans\tbuilt roads\nin rome\t[SEP]\n").unwrap();
    let specials_first = t("specials-first.txt");
    std::fs::write(&specials_first, "the romans built roads\n[MASK] [SEP] [MASK] rome\n").unwrap();
    // (what, options, the one line)
    let table: Vec<(&str, Vec<String>, String)> = vec![
        (
            "a file of special tokens only",
            strings(&["--file", &path(&only_specials)]),
            format!("{}: line 1: the line holds only special tokens", path(&only_specials)),
        ),
        (
            "one line of special tokens, in the middle",
            strings(&["--file", &path(&one_special)]),
            format!("{}: line 4: the line holds only special tokens", path(&one_special)),
        ),
        (
            "a sentence B of special tokens",
            strings(&["--file", &path(&specials_b)]),
            format!("{}: line 2: sentence B holds only special tokens", path(&specials_b)),
        ),
        (
            "a line whose first tokens, all that --max-len 5 keeps, are special",
            strings(&["--file", &path(&specials_first), "--max-len", "5"]),
            format!("{}: line 2: with --max-len 5 it keeps only special tokens", path(&specials_first)),
        ),
        (
            "a pair file with --max-len 4",
            strings(&["--file", "walkthrough/texts/romans_pairs.txt", "--max-len", "4"]),
            "--max-len 4: expected at least 5".into(),
        ),
        (
            "--batch-size -1",
            strings(&["--file", ROMANS, "--batch-size", "-1"]),
            "invalid value '-1' for '--batch-size <N>'".into(),
        ),
        ("--save-every 0", strings(&["--file", ROMANS, "--save-every", "0"]), "--save-every 0: expected".into()),
    ];
    for (i, (what, options, needle)) in table.into_iter().enumerate() {
        let save = t(&format!("save{i}"));
        let mut args = strings(&["--steps", "4", "--save", &path(&save)]);
        args.extend(options);
        let ran = train(&args);
        cases.check(what, refused_before_claiming(&ran, &needle, &save), Some(&ran));
    }
    // A user's file inside a checkpoint-K or step-K the run will write: refused before step 1.
    for (what, sub, extra) in [
        ("a checkpoint-K of an earlier run", "checkpoint-2", strings(&["--save-every", "2"])),
        ("a step-K of an earlier run", "step-3", strings(&["--dump-step", "3"])),
    ] {
        let save = t(&format!("earlier-{sub}"));
        let mut args = strings(&["--file", ROMANS, "--steps", "4", "--save", &path(&save)]);
        args.extend(extra.iter().cloned());
        let first = train(&args);
        assert_eq!(first.code, Some(0), "{}", first.stderr);
        std::fs::write(save.join(sub).join("notes.txt"), "mine").unwrap();
        let before = snapshot(&save);
        let ran = train(&args);
        let result = one_line(&ran, &format!("{sub}: holds files that are not"))
            .and_then(|_| match ran.stdout.lines().any(|l| l.starts_with("step ")) {
                true => Err("a step was taken before the refusal".into()),
                false => unchanged(&before, &save),
            })
            .and_then(|_| match ran.stderr.contains("--out") || ran.stderr.contains("--force") {
                true => Err("it advises an option train does not have".into()),
                false => Ok(()),
            });
        cases.check(what, result, Some(&ran));
    }
    // A patch of ids outside the vocabulary is named as the patch, before --out is touched.
    let bad_ids = t("bad-ids");
    copy_dir(&root().join("golden/tiny/dumps/mask"), &bad_ids);
    let path_ids = bad_ids.join("input.ids.npy");
    let mut ids = ArrayD::<i64>::read_npy(std::fs::File::open(&path_ids).unwrap()).unwrap();
    ids[[0, 2]] = 100_000;
    ids.write_npy(std::fs::File::create(&path_ids).unwrap()).unwrap();
    let out = t("patched-out");
    let ran = run(&strings(&["--out", &path(&out), "--patch", &format!("{}:input.ids", path(&bad_ids)), TEXT]));
    let result = refused_before_claiming(&ran, &format!("--patch {}:input.ids", path(&bad_ids)), &out).and_then(|_| {
        if ran.stderr.contains("100000") {
            Ok(())
        } else {
            Err("the id is not named".into())
        }
    });
    cases.check("a patch of ids outside the vocabulary", result, Some(&ran));
    // A text too long for an experiment is not told to pass --truncate, which it lacks.
    let long = format!("{} [MASK] .", "word ".repeat(80));
    let ran = run(&strings(&["attribute", "--target", "romans", &long]));
    let result = one_line(&ran, "more than max_position_embeddings 64").and_then(|_| {
        if ran.stderr.contains("truncate") {
            Err("it advises --truncate".into())
        } else {
            Ok(())
        }
    });
    cases.check("attribute of a text too long", result, Some(&ran));
    // A model path given from the wrong directory says so before the hub's reason.
    let ran = run_with(
        &strings(&["--model", "golden/tiny-missing", "--no-dump", TEXT]),
        &[("HF_HUB_OFFLINE", "1")],
        Duration::from_secs(60),
    );
    cases.check(
        "--model of a directory that is not there",
        one_line(
            &ran,
            "--model golden/tiny-missing: no directory of that name here, so it was tried as a Hugging Face",
        ),
        Some(&ran),
    );
    cases.finish("checks first");
}

#[test]
fn a_saved_run_reads_back_exactly_and_is_checked() {
    let mut cases = Cases::default();
    let tmp = tempfile::tempdir().unwrap();
    let t = |name: &str| tmp.path().join(name);
    // A rate whose shortest decimal is long, resumed with the same rate given again.
    let run_dir = t("run");
    let lr = "9.970000000000001e-05";
    let ran = train(&strings(&[
        "--file",
        ROMANS,
        "--steps",
        "6",
        "--lr",
        lr,
        "--save-every",
        "3",
        "--save",
        &path(&run_dir),
    ]));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let resumed = t("resumed");
    let ran = run(&strings(&[
        "train",
        "--resume",
        &path(&run_dir.join("checkpoint-3")),
        "--lr",
        lr,
        "--save",
        &path(&resumed),
    ]));
    let rates = |dir: &Path| -> Vec<u64> {
        let state: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("trainer_state.json")).unwrap()).unwrap();
        state["log_history"].as_array().unwrap().iter().map(|l| l["lr"].as_f64().unwrap().to_bits()).collect()
    };
    let result = match ran.code {
        Some(0) if rates(&run_dir) == rates(&resumed) => Ok(()),
        Some(0) => Err(format!("the rates differ: {:?} and {:?}", rates(&run_dir), rates(&resumed))),
        code => Err(format!("exit {code:?}")),
    };
    cases.check("a resumed run's rates equal the uninterrupted run's, bit for bit", result, Some(&ran));
    // A state edited into something that contradicts itself is refused, by its file and field.
    type Edit<'a> = (&'a str, &'a dyn Fn(&mut serde_json::Value), &'a str);
    let edits: [Edit; 4] = [
        (
            "a negative rate",
            &|s| s["options"]["lr"] = (-1.0).into(),
            "options.lr is -1.0: expected a number greater than 0",
        ),
        ("steps below the saved step", &|s| s["options"]["steps"] = 1.into(), "step 3 is beyond options.steps 1"),
        (
            "a missing field",
            &|s| drop(s["options"].as_object_mut().unwrap().remove("warmup_steps")),
            "missing field `warmup_steps`",
        ),
        ("ε of 0", &|s| s["options"]["adamw"]["eps"] = 0.0.into(), "options.adamw.eps is 0.0"),
    ];
    for (i, (what, edit, needle)) in edits.into_iter().enumerate() {
        let checkpoint = t(&format!("edited{i}"));
        copy_dir(&run_dir.join("checkpoint-3"), &checkpoint);
        let state_path = checkpoint.join("trainer_state.json");
        let mut state: serde_json::Value = serde_json::from_slice(&std::fs::read(&state_path).unwrap()).unwrap();
        edit(&mut state);
        std::fs::write(&state_path, state.to_string()).unwrap();
        let out = t(&format!("edited-out{i}"));
        let ran = run(&strings(&["train", "--resume", &path(&checkpoint), "--save", &path(&out)]));
        let result = refused_before_claiming(&ran, needle, &out).and_then(|_| {
            match ran.stderr.contains(&path(&state_path)) && !ran.stderr.contains("--lr") {
                true => Ok(()),
                false => Err("the file is not named, or an option the user did not give is".into()),
            }
        });
        cases.check(what, result, Some(&ran));
    }
    cases.finish("trainer state");
}

/// A save that cannot write its files (a file-size limit, as a full disk) leaves the checkpoint
/// that was in the directory whole, and resumable.
#[test]
fn a_failed_save_keeps_the_checkpoint_that_was_there() {
    let tmp = tempfile::tempdir().unwrap();
    let save = tmp.path().join("run");
    let first = train(&strings(&["--file", ROMANS, "--steps", "2", "--save", &path(&save)]));
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let visible = |dir: &Path| -> Vec<(String, String)> {
        snapshot(dir).into_iter().filter(|(name, _)| !name.starts_with('.')).collect()
    };
    let before = visible(&save);
    // Large enough for the small files, too small for the model's weights (123 kB).
    for limit in [1_000u64, 60_000, 200_000] {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_bert-trace"));
        command.current_dir(root()).env("HF_HUB_OFFLINE", "1");
        command.args(["train", "--model", "golden/tiny", "--file", ROMANS, "--steps", "3", "--seed", "5", "--save"]);
        command.arg(&save);
        common::limit(&mut command, common::Limit::FileSize, limit);
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "limit {limit}: {stderr}");
        assert_eq!(visible(&save), before, "limit {limit}: the checkpoint changed: {stderr}");
        let state = bert_core::training::save::read_state(&save);
        assert!(state.is_ok(), "limit {limit}: the checkpoint no longer resumes: {:?}", state.err());
    }
}

#[test]
fn no_analysis_answers_wrongly_in_silence() {
    let mut cases = Cases::default();
    let tmp = tempfile::tempdir().unwrap();
    let t = |name: &str| tmp.path().join(name);
    // Patches of what the forward pass does not compute.
    let backward = t("backward");
    let ran = run(&strings(&["--out", &path(&backward), "--backward", "--mlm-target", "romans", TEXT]));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    for stage in [
        "grad.layer0.attention.context",
        "param.bert.encoder.layer.0.attention.self.query.weight",
        "updated.param.bert.encoder.layer.0.attention.self.query.weight",
    ] {
        let out = t("patched");
        let spec = format!("{}:{stage}", path(&backward));
        let ran = run(&strings(&["--out", &path(&out), "--patch", &spec, TEXT]));
        cases.check(
            &format!("--patch {stage}"),
            refused_before_claiming(&ran, "a patch replaces a stage of the forward pass", &out),
            Some(&ran),
        );
    }
    let out = t("after-stop");
    let spec = format!("{}:layer1.ffn.output", path(&backward));
    let ran = run(&strings(&["--out", &path(&out), "--stop-at", "layer0", "--patch", &spec, TEXT]));
    cases.check(
        "a patch after --stop-at",
        refused_before_claiming(&ran, "before it reaches layer1.ffn.output", &out),
        Some(&ran),
    );
    // compare of two --backward dumps: the heads grid is the probabilities', not their gradients'.
    let (plain_a, plain_b, grad_a, grad_b) = (t("plain-a"), t("plain-b"), t("grad-a"), t("grad-b"));
    for (dir, model, extra) in [
        (&plain_a, "golden/tiny", vec![]),
        (&plain_b, "golden/tiny-relu", vec![]),
        (&grad_a, "golden/tiny", strings(&["--backward"])),
        (&grad_b, "golden/tiny-relu", strings(&["--backward"])),
    ] {
        let mut args = strings(&["--model", model, "--out", &path(dir), "--mlm-target", "romans"]);
        args.extend(extra);
        args.push(TEXT.into());
        let ran = run(&args);
        assert_eq!(ran.code, Some(0), "{model}: {}", ran.stderr);
    }
    let grid = |a: &Path, b: &Path| -> serde_json::Value {
        let ran = run(&strings(&["compare", "--json", &path(a), &path(b)]));
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
        serde_json::from_str::<serde_json::Value>(&ran.stdout).unwrap()["grid"].clone()
    };
    let result = match (grid(&plain_a, &plain_b), grid(&grad_a, &grad_b)) {
        (plain, with_grads) if plain == with_grads => Ok(()),
        (plain, with_grads) => Err(format!("the grid moved with the gradients: {plain} against {with_grads}")),
    };
    cases.check("compare of --backward dumps", result, None);
    // compare of models of other sizes: the hidden states cannot be compared, which is said.
    let narrow = t("narrow");
    copy_dir(&plain_a, &narrow);
    let manifest_path = narrow.join("manifest.json");
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    for stage in manifest["stages"].as_array_mut().unwrap() {
        if stage["shape"] == serde_json::json!([1, 13, 32]) {
            let name = stage["name"].as_str().unwrap().to_string();
            ArrayD::<f32>::zeros(vec![1, 13, 16])
                .write_npy(std::fs::File::create(narrow.join(format!("{name}.npy"))).unwrap())
                .unwrap();
            stage["shape"] = serde_json::json!([1, 13, 16]);
        }
    }
    std::fs::write(&manifest_path, manifest.to_string()).unwrap();
    let ran = run(&strings(&["compare", &path(&plain_a), &path(&narrow)]));
    cases.check(
        "compare of models of other hidden sizes",
        one_line(&ran, "embeddings.layernorm is [1, 13, 32] there, [1, 13, 16] here"),
        Some(&ran),
    );
    // diff --isolate of two different inputs, and of a stage of another shape.
    let other = t("other-input");
    let ran = run(&strings(&["--out", &path(&other), "the romans built [MASK] in italy and in spain ."]));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let ran = run(&strings(&["diff", "--isolate", "--model", "golden/tiny", &path(&plain_a), &path(&other)]));
    cases.check("diff --isolate of two inputs", one_line(&ran, "is of another input"), Some(&ran));
    let reshaped = t("reshaped");
    copy_dir(&plain_a, &reshaped);
    ArrayD::<f32>::zeros(vec![1, 13, 16])
        .write_npy(std::fs::File::create(reshaped.join("layer1.ffn.output.npy")).unwrap())
        .unwrap();
    let manifest_path = reshaped.join("manifest.json");
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    for stage in manifest["stages"].as_array_mut().unwrap() {
        if stage["name"] == "layer1.ffn.output" {
            stage["shape"] = serde_json::json!([1, 13, 16]);
        }
    }
    std::fs::write(&manifest_path, manifest.to_string()).unwrap();
    let ran = run(&strings(&["diff", "--isolate", "--model", "golden/tiny", &path(&plain_a), &path(&reshaped)]));
    let result = match (ran.code, ran.stdout.contains("which no rounding explains"), ran.stdout.contains("compound")) {
        (Some(1), true, false) => Ok(()),
        (code, shapes, compound) => {
            Err(format!("exit {code:?}; names the shapes {shapes}; blames compounding {compound}"))
        }
    };
    cases.check("diff --isolate with a stage of another shape", result, Some(&ran));
    // --truth must be float64, and a NaN in it is never "same".
    let ran = run(&strings(&["diff", "--truth", &path(&plain_a), "golden/tiny/dumps/mask", &path(&plain_a)]));
    cases.check("a float32 --truth", one_line(&ran, "is not a float64 dump"), Some(&ran));
    let truth = t("nan-truth");
    copy_dir(&root().join("golden/tiny/truth/mask"), &truth);
    let path_truth = truth.join("layer0.ffn.output.npy");
    let mut values = ArrayD::<f64>::read_npy(std::fs::File::open(&path_truth).unwrap()).unwrap();
    values.fill(f64::NAN);
    values.write_npy(std::fs::File::create(&path_truth).unwrap()).unwrap();
    let trace = t("truth-trace");
    let ran = run(&strings(&["--out", &path(&trace), TEXT]));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let ran = run(&strings(&["diff", "--truth", &path(&truth), "golden/tiny/dumps/mask", &path(&trace)]));
    let row =
        ran.stdout.lines().find(|l| l.contains("layer0.ffn.output") && l.contains("non-finite")).map(String::from);
    let result = match row {
        Some(row) if !row.contains("same") => Ok(()),
        row => Err(format!("the NaN stage's row: {row:?}")),
    };
    cases.check("a NaN truth is non-finite, not the same", result, Some(&ran));
    // A head whose probabilities are NaN is not ranked, and not "looks exactly where it did".
    let nan_probs = t("nan-probs");
    copy_dir(&plain_a, &nan_probs);
    set_stage(&nan_probs, "layer1.attention.probs", |values| values.fill(f32::NAN));
    let ran = run(&strings(&["compare", &path(&plain_a), &path(&nan_probs)]));
    let result = match (ran.code, ran.stdout.contains("not ranked (NaN or inf in their probabilities): layer1.head0")) {
        (Some(0), true) => Ok(()),
        (code, said) => Err(format!("exit {code:?}; said so {said}")),
    };
    cases.check("compare with NaN probabilities", result, Some(&ran));
    // A model whose MLM head gives NaN: no rank is 1, no guess is a NaN.
    let broken = t("nan-model");
    copy_dir(&root().join("golden/tiny"), &broken);
    poison_tensor(&broken.join("model.safetensors"), "cls.predictions.bias");
    let ran = run(&strings(&["lens", "--model", &path(&broken), "--target", "romans", TEXT]));
    let result = match (ran.code, ran.stdout.contains("non-finite"), ran.stdout.contains(" 1 │")) {
        (Some(0), true, false) => Ok(()),
        (code, said, ranked) => Err(format!("exit {code:?}; non-finite said {said}; ranked 1 {ranked}")),
    };
    cases.check("lens of a model that gives NaN", result, Some(&ran));
    let ran = run(&strings(&["--model", &path(&broken), "--no-dump", "--mlm-target", "romans", TEXT]));
    let labelled = ran.stdout.lines().skip_while(|l| !l.starts_with("labelled positions")).nth(4).map(String::from);
    let result = match labelled {
        Some(row) if row.contains("non-finite") => Ok(()),
        row => Err(format!("the labelled position's row: {row:?}")),
    };
    cases.check("the labelled positions of a model that gives NaN", result, Some(&ran));
    // Every label -100 (a patched input.labels): the loss is a mean over no position.
    let unlabelled = t("unlabelled");
    copy_dir(&root().join("golden/tiny/dumps/mlm_target"), &unlabelled);
    let labels_path = unlabelled.join("input.labels.npy");
    let mut labels = ArrayD::<i64>::read_npy(std::fs::File::open(&labels_path).unwrap()).unwrap();
    labels.fill(-100);
    labels.write_npy(std::fs::File::create(&labels_path).unwrap()).unwrap();
    let spec = format!("{}:input.labels", path(&unlabelled));
    let ran = run(&strings(&["--no-dump", "--mlm-target", "romans", "--patch", &spec, TEXT]));
    cases.check(
        "every label -100",
        if ran.stdout.contains("no labelled position") {
            Ok(())
        } else {
            Err("the loss line counts a position".into())
        },
        Some(&ran),
    );
    cases.finish("no silent wrong answer");
}

/// A `.npy` of float32 values of `shape`, its values all 0.
fn npy_zeros(shape: &[usize]) -> Vec<u8> {
    let mut bytes = common::npy_header("<f4", shape);
    bytes.resize(bytes.len() + 4 * shape.iter().product::<usize>(), 0);
    bytes
}

/// A ZIP archive of one member `name` whose data is `data` as stored, under compression
/// `method` (0 stored, 8 deflate, 12 bzip2, ...), `size` bytes once decompressed, with `crc`.
fn zip_of(name: &str, method: u16, data: &[u8], size: u32, crc: u32) -> Vec<u8> {
    let n = name.len() as u16;
    let header = |signature: u32, central: bool| -> Vec<u8> {
        let mut h = signature.to_le_bytes().to_vec();
        if central {
            h.extend(20u16.to_le_bytes());
        }
        for v in [20u16, 0, method, 0, 0] {
            h.extend(v.to_le_bytes());
        }
        for v in [crc, data.len() as u32, size] {
            h.extend(v.to_le_bytes());
        }
        h.extend(n.to_le_bytes());
        h.extend(0u16.to_le_bytes());
        if central {
            for v in [0u16, 0, 0] {
                h.extend(v.to_le_bytes());
            }
            h.extend(0u32.to_le_bytes());
            h.extend(0u32.to_le_bytes());
        }
        h.extend(name.as_bytes());
        h
    };
    let mut zip = header(0x0403_4b50, false);
    zip.extend(data);
    let central_at = zip.len() as u32;
    let central = header(0x0201_4b50, true);
    zip.extend(&central);
    zip.extend(0x0605_4b50u32.to_le_bytes());
    for v in [0u16, 0, 1, 1] {
        zip.extend(v.to_le_bytes());
    }
    zip.extend((central.len() as u32).to_le_bytes());
    zip.extend(central_at.to_le_bytes());
    zip.extend(0u16.to_le_bytes());
    zip
}

#[test]
fn an_npz_is_read_within_what_bert_trace_reads_and_what_the_process_may_hold() {
    let mut cases = Cases::default();
    let tmp = tempfile::tempdir().unwrap();
    // A member stored as bzip2 (method 12), which bert-trace does not read.
    let npy = npy_zeros(&[1, 4]);
    let mut crc = flate2::Crc::new();
    crc.update(&npy);
    let bzip2 = tmp.path().join("bzip2.npz");
    std::fs::write(&bzip2, zip_of("embeddings.sum.npy", 12, &npy, npy.len() as u32, crc.sum())).unwrap();
    let ran = run(&strings(&["diff", &path(&bzip2), &path(&bzip2)]));
    cases.check(
        "an .npz member compressed with bzip2",
        one_line(
            &ran,
            "member embeddings.sum.npy: compressed with bzip2 (ZIP method 12), which bert-trace does not read",
        ),
        Some(&ran),
    );
    // A member that inflates to 1 GiB (its deflate stream is 1 MB), read under a 3 GB limit on
    // the address space: refused before it is read, never an abort.
    let values = 1usize << 28;
    let header = common::npy_header("<f4", &[values]);
    let mut deflate = flate2::Compress::new(flate2::Compression::fast(), false);
    let mut stream = Vec::new();
    let mut push = |input: &[u8], flush: flate2::FlushCompress, out: &mut Vec<u8>| {
        let mut buffer = Vec::with_capacity(input.len() + 1024);
        deflate.compress_vec(input, &mut buffer, flush).unwrap();
        out.extend(buffer);
    };
    push(&header, flate2::FlushCompress::Full, &mut stream);
    let zeros = vec![0u8; 1 << 20];
    let mut chunk = Vec::new();
    push(&zeros, flate2::FlushCompress::Full, &mut chunk);
    for _ in 0..(4 * values) >> 20 {
        stream.extend(&chunk);
    }
    push(&[], flate2::FlushCompress::Finish, &mut stream);
    let mut crc = flate2::Crc::new();
    crc.update(&header);
    for _ in 0..(4 * values) >> 20 {
        crc.update(&zeros);
    }
    let big = tmp.path().join("big.npz");
    let size = (header.len() + 4 * values) as u32;
    std::fs::write(&big, zip_of("embeddings.sum.npy", 8, &stream, size, crc.sum())).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_bert-trace"));
    command.current_dir(root()).args(["diff", &path(&big), &path(&big)]);
    common::limit(&mut command, common::Limit::AddressSpace, 3_000_000_000);
    let output = command.output().unwrap();
    let ran = Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        elapsed: Duration::ZERO,
    };
    cases.check(
        "an .npz member of 1 GiB under ulimit -v 3 GB",
        one_line(&ran, "under its limits (ulimit -v or -d)"),
        Some(&ran),
    );
    cases.finish("npz");
}

/// A copy of golden/tiny's `mask` dump without its manifest (as a learner saves stages from their
/// own code), with `stage` replaced by `change` of it.
fn manifestless(dir: &Path, stage: &str, change: impl Fn(ArrayD<f32>) -> ArrayD<f32>) {
    copy_dir(&root().join("golden/tiny/dumps/mask"), dir);
    std::fs::remove_file(dir.join("manifest.json")).unwrap();
    let path = dir.join(format!("{stage}.npy"));
    let values = ArrayD::<f32>::read_npy(std::fs::File::open(&path).unwrap()).unwrap();
    let changed = change(values);
    changed.write_npy(std::fs::File::create(&path).unwrap()).unwrap();
}

/// Issue 51's battery: explain on dumps laid out another way, `--explain` refused before `--out`
/// is touched, and `step` after `continue`.
#[test]
fn explain_and_step_refuse_before_writing_and_never_panic() {
    let mut cases = Cases::default();
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path();
    let tiny = root().join("golden/tiny").display().to_string();

    // Dumps saved as a learner saves them: the query before the head split ([T,H]), scores cut
    // to 5 of the keys, a narrowed embeddings.sum. Each is named, in one line, never a panic.
    // (what the learner did, the stage saved so, the element explained, how it was saved)
    type Layout = (&'static str, &'static str, &'static str, fn(ArrayD<f32>) -> ArrayD<f32>);
    let layouts: [Layout; 3] = [
        ("the query before the head split", "layer0.attention.query", "layer0.attention.scores[0,0,1,2]", |a| {
            let (t, nh, hs) = (a.shape()[2], a.shape()[1], a.shape()[3]);
            let mut flat = ndarray::Array2::<f32>::zeros((t, nh * hs));
            for ((_, h, i, d), v) in a.into_dimensionality::<ndarray::Ix4>().unwrap().indexed_iter() {
                flat[[i, h * hs + d]] = *v;
            }
            flat.into_dyn()
        }),
        ("scores cut to 5 keys", "layer0.attention.scores", "layer0.attention.probs[0,0,3,4]", |a| {
            a.slice(ndarray::s![.., .., .., ..5]).to_owned().into_dyn()
        }),
        ("a narrowed embeddings.sum", "embeddings.sum", "embeddings.layernorm[0,1,20]", |a| {
            a.slice(ndarray::s![.., .., ..16]).to_owned().into_dyn()
        }),
    ];
    for (name, stage, target, change) in layouts {
        let dir = base.join(name.replace(' ', "-"));
        manifestless(&dir, stage, change);
        let ran = run(&strings(&["explain", &dir.display().to_string(), target, "--model", &tiny]));
        cases.check(&format!("explain on {name}"), one_line(&ran, &format!("{stage} in the dump is")), Some(&ran));
    }

    // `--explain` that the pass cannot answer is refused before the dump is written: a new
    // directory is not made, and an old dump stays as it was.
    let out = base.join("out");
    let out_arg = out.display().to_string();
    for (name, explain, expected) in [
        ("a stage after --stop-at", "mlm.logits[0,1,2]", "the pass stops before it"),
        ("an unknown stage", "nosuch.stage[0]", "makes no stage nosuch.stage"),
        ("an index out of range", "layer0.attention.probs[0,0,99,0]", "out of range"),
        ("an input", "input.ids[0,0]", "an input of the pass"),
    ] {
        let ran = run(&strings(&["--out", &out_arg, "--stop-at", "layer0", "--explain", explain, TEXT]));
        let result = one_line(&ran, expected).and_then(|_| {
            if out.exists() {
                Err(format!("{} was made", out.display()))
            } else {
                Ok(())
            }
        });
        cases.check(&format!("--explain {name}, new --out"), result, Some(&ran));
    }
    assert_eq!(run(&strings(&["--out", &out_arg, TEXT])).code, Some(0));
    let before = snapshot(&out);
    for explain in ["nosuch.stage[0]", "layer0.attention.probs[0,0,3,99]"] {
        let ran = run(&strings(&["--out", &out_arg, "--force", "--explain", explain, TEXT]));
        let result = if ran.code == Some(2) { unchanged(&before, &out) } else { Err(format!("exit {:?}", ran.code)) };
        cases.check(&format!("--explain {explain} over an old dump leaves it"), result, Some(&ran));
    }

    // `step`: a bad command after `continue` ends the run with exit 2; the finished pass is still
    // read; a run asked for --out that never reaches `continue` writes nothing and says so.
    let step = |commands: &str, out: Option<&Path>| {
        let mut list = strings(&["step", "--model", &tiny, TEXT, "-c", commands]);
        if let Some(out) = out {
            list.extend(strings(&["--out", &out.display().to_string()]));
        }
        run(&list)
    };
    let ran = step("continue; frobnicate", None);
    cases.check("step: a bad command after continue", one_line(&ran, "unknown command `frobnicate`"), Some(&ran));
    let ran = step("continue; goto layer0.attention.probs; show [0,0,0,:3]", None);
    let result = match (ran.code, ran.stdout.contains("[13/43] layer0.attention.probs")) {
        (Some(0), true) => Ok(()),
        other => Err(format!("exit and goto's stage after continue: {other:?}")),
    };
    cases.check("step: goto and show after continue", result, Some(&ran));
    let unwritten = base.join("step-out");
    let ran = step("next 3", Some(&unwritten));
    let result = match (ran.code, ran.stderr.contains("nothing was written"), unwritten.exists()) {
        (Some(0), true, false) => Ok(()),
        other => Err(format!("(exit, said why, written): {other:?}")),
    };
    cases.check("step --out without continue", result, Some(&ran));
    cases.finish("explain and step before writing");
}

/// A model that differs from the dump's in one head's query weights, and nowhere the old
/// fingerprint looked, is refused by explain and diff --isolate, naming the tensor; a dump from
/// before format 3 is still explained, with a note that only its position table was checked.
#[test]
fn a_model_with_other_weights_is_never_accepted_in_silence() {
    let mut cases = Cases::default();
    let tmp = tempfile::tempdir().unwrap();
    let dump = tmp.path().join("dump");
    let dump_arg = dump.display().to_string();
    let tiny = root().join("golden/tiny").display().to_string();
    assert_eq!(run(&strings(&["--model", &tiny, "--out", &dump_arg, TEXT])).code, Some(0));
    // golden/tiny with layer 1's query weights of head 2 changed.
    let other = tmp.path().join("other");
    copy_dir(&root().join("golden/tiny"), &other);
    let path = other.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let name = "bert.encoder.layer.1.attention.self.query.weight";
    let mut owned: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .tensors()
        .into_iter()
        .map(|(n, view)| (n.to_string(), view.shape().to_vec(), view.data().to_vec()))
        .collect();
    let (_, _, data) = owned.iter_mut().find(|(n, _, _)| n == name).unwrap();
    // Rows 16..24 are head 2's outputs (hs 8): each value doubled.
    for row in 16..24 {
        for col in 0..32 {
            let at = (row * 32 + col) * 4;
            let v = f32::from_le_bytes(data[at..at + 4].try_into().unwrap()) * 2.0;
            data[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = owned
        .iter()
        .map(|(n, shape, data)| {
            (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), data).unwrap())
        })
        .collect();
    std::fs::write(&path, safetensors::tensor::serialize(views, None).unwrap()).unwrap();
    let other_arg = other.display().to_string();
    let ran = run(&strings(&["explain", &dump_arg, "layer1.attention.query[0,2,3,1]", "--model", &other_arg]));
    cases.check("explain with other query weights", one_line(&ran, name), Some(&ran));
    let ran = run(&strings(&["diff", &dump_arg, &dump_arg, "--isolate", "--model", &other_arg]));
    cases.check("diff --isolate with other query weights", one_line(&ran, name), Some(&ran));
    // An older dump records the position table's fingerprint only: explained, with a note.
    let golden = root().join("golden/tiny/dumps/mask").display().to_string();
    let ran = run(&strings(&["explain", &golden, "layer0.attention.probs[0,0,3,5]", "--model", &tiny]));
    let result = match (ran.code, ran.stderr.contains("records no digest of the model's tensors")) {
        (Some(0), true) => Ok(()),
        other => Err(format!("(exit, noted): {other:?}")),
    };
    cases.check("an older dump is checked as far as it goes, and says so", result, Some(&ran));
    cases.finish("a model with other weights");
}
