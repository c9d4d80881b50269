//! `bert-trace step`, scripted through standard input and `-c`: the stages come in execution
//! order, `back` and `goto` land on the values of a fresh pass, a `set` is the matching
//! `--patch`, `--out` writes the stepped pass with its changes recorded, and a bad command is one
//! line and exit 2.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::{bert_trace, one_line, root, run};
use ndarray::ArrayD;
use ndarray_npy::{ReadNpyExt, WriteNpyExt};

const TEXT: &str = "When in Rome, do as the [MASK] do.";

/// `bert-trace step` on the tiny model with `commands` on standard input: its exit status and output.
fn step(commands: &str) -> (Option<i32>, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bert-trace"))
        .args(["step", "--model", "golden/tiny", "--mlm-target", "romans", TEXT])
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(commands.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A fresh pass of the same input, dumped.
fn fresh(dir: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["--model", "golden/tiny", "--mlm-target", "romans", "--out", dir.to_str().unwrap()];
    args.extend(extra);
    args.push(TEXT);
    let traced = bert_trace(&args);
    assert!(traced.status.success(), "{}", String::from_utf8_lossy(&traced.stderr));
    serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap()
}

/// The value `explain` gives in a step's output, on the line `STAGE[INDEX] = VALUE (float32)`.
fn explained(output: &str, target: &str) -> f32 {
    let line = output.lines().find(|l| l.starts_with(&format!("{target} = "))).unwrap_or_else(|| panic!("{output}"));
    line[target.len() + 3..].split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn the_stages_come_in_execution_order() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = fresh(&tmp.path().join("pass"), &[]);
    let expected: Vec<&str> =
        manifest["stages"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    let (code, stdout, stderr) = step(&"next\n".repeat(expected.len()));
    assert_eq!(code, Some(0), "{stderr}");
    // Each `next` prints `[K/N] STAGE SHAPE ...`, K counting from 1.
    let got: Vec<&str> = stdout
        .lines()
        .filter_map(|l| {
            let (counter, rest) = l.strip_prefix('[')?.split_once("] ")?;
            let (k, n) = counter.split_once('/')?;
            (k.parse::<usize>().is_ok() && n.parse::<usize>().is_ok()).then(|| rest.split(' ').next().unwrap())
        })
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn back_and_goto_land_on_a_fresh_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pass");
    fresh(&dir, &[]);
    let probs = ArrayD::<f32>::read_npy(std::fs::File::open(dir.join("layer1.attention.probs.npy")).unwrap()).unwrap();
    let scores =
        ArrayD::<f32>::read_npy(std::fs::File::open(dir.join("layer1.attention.scores.npy")).unwrap()).unwrap();
    let commands = "goto layer1.ffn.output\ngoto layer1.attention.probs\nexplain [0,2,9,4]\nback\nexplain [0,2,9,4]\n";
    let (code, stdout, stderr) = step(commands);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(explained(&stdout, "layer1.attention.probs[0,2,9,4]"), probs[[0, 2, 9, 4]]);
    assert_eq!(explained(&stdout, "layer1.attention.scores[0,2,9,4]"), scores[[0, 2, 9, 4]]);
}

/// `set` at a stage gives the pass `--patch` gives with a dump whose stage has that one value
/// changed: the same predictions and losses; and going back before it drops it.
#[test]
fn a_set_is_the_matching_patch() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pass");
    fresh(&dir, &[]);
    let file = dir.join("layer1.ffn.layernorm.npy");
    let mut values = ArrayD::<f32>::read_npy(std::fs::File::open(&file).unwrap()).unwrap();
    values[[0, 9, 3]] = 50.0;
    values.write_npy(std::fs::File::create(&file).unwrap()).unwrap();
    let patch = format!("{}:layer1.ffn.layernorm", dir.display());
    let patched =
        bert_trace(&["--model", "golden/tiny", "--mlm-target", "romans", "--no-dump", "--patch", &patch, TEXT]);
    assert!(patched.status.success(), "{}", String::from_utf8_lossy(&patched.stderr));
    let patched = String::from_utf8_lossy(&patched.stdout).into_owned();
    let (code, stepped, stderr) = step("goto layer1.ffn.layernorm\nset [0,9,3] 50\ncontinue\n");
    assert_eq!(code, Some(0), "{stderr}");
    // Everything from the predictions on: the same text.
    let tail = |text: &str| text[text.find("[MASK] at position").unwrap_or_else(|| panic!("{text}"))..].to_string();
    let tail_of = |text: &str| tail(text).split("\nwrote").next().unwrap().trim_end().to_string();
    assert_eq!(tail_of(&stepped), tail_of(&patched));
    // A set dropped by going back before it: the plain pass's predictions.
    let plain = bert_trace(&["--model", "golden/tiny", "--mlm-target", "romans", "--no-dump", TEXT]);
    let plain = String::from_utf8_lossy(&plain.stdout).into_owned();
    let (_, undone, _) = step("goto layer1.ffn.layernorm\nset [0,9,3] 50\ngoto layer1.ffn.residual\ncontinue\n");
    assert_eq!(tail_of(&undone), tail_of(&plain));
    assert_ne!(tail_of(&plain), tail_of(&patched), "the set changes the prediction");
}

#[test]
fn a_bad_command_is_one_line_and_exit_2() {
    let cases = [
        ("an unknown command", "next; bogus", "unknown command `bogus`"),
        ("a stage the pass lacks", "goto layer7.attention.probs", "no such stage"),
        ("an index out of range", "goto layer0.attention.probs; set [0,0,3,13] 1", "out of range"),
        ("not a number", "goto layer0.attention.probs; set [0,0,3,1] many", "not a finite number"),
        ("beyond float32", "goto layer0.attention.scores; set [0,0,1,1] 1e39", "outside the range"),
        ("before the first stage", "show", "before the first stage"),
        ("past the end", "next 99", "the pass has 47 stages"),
        ("a head out of range", "head 4", "from 0 to 3"),
        ("a slice out of range", "goto embeddings.word; show [0,20:30]", "has 13 entries"),
        (
            "an ablation before the cursor",
            "goto layer1.attention.query; ablate layer0.head0",
            "it changes layer0.attention.context, before the cursor (layer1.attention.query)",
        ),
        (
            "a patch of another shape",
            "next; patch golden/tiny/dumps/pair:layer0.attention.context",
            "[1, 13, 32] in this run",
        ),
        ("an ablation of no head", "ablate layer9.head0", "the model has 2 layers"),
        ("an id past the vocabulary", "next; set [0,1] 99999", "99999"),
    ];
    let mut failures = Vec::new();
    for (what, commands, needle) in cases {
        let args: Vec<String> = ["step", "--model", "golden/tiny", "--mlm-target", "romans", TEXT, "-c", commands]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let ran = run(&args);
        if let Err(problem) = one_line(&ran, needle) {
            failures.push(format!("{what}: {problem}: {}", ran.stderr.trim()));
        }
    }
    let script = ["step", "--model", "golden/tiny", TEXT, "--script", "no/such/file"].map(String::from);
    if let Err(problem) = one_line(&run(&script), "--script no/such/file: not found") {
        failures.push(format!("a script that is not there: {problem}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `--out` writes the pass `continue` ran, every change recorded; a bad one leaves the session
/// going on a terminal, and nothing is written before `continue` (or at all, for a directory
/// that is not ours).
#[test]
fn out_writes_the_stepped_pass_with_its_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("stepped");
    let out_arg = out.display().to_string();
    let commands = "ablate layer1.head2; goto layer1.ffn.layernorm; set [0,9,3] 50; continue";
    let args = ["step", "--model", "golden/tiny", "--mlm-target", "romans", "--out", &out_arg, TEXT, "-c", commands];
    let ran = run(&args.map(String::from));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(
        manifest["interventions"],
        serde_json::json!([{"ablate": "layer1.head2", "with": "zero"}, {"set": "layer1.ffn.layernorm[0,9,3]", "value": 50.0}])
    );
    let values = ArrayD::<f32>::read_npy(std::fs::File::open(out.join("layer1.ffn.layernorm.npy")).unwrap()).unwrap();
    assert_eq!(values[[0, 9, 3]], 50.0);
    // Isolation says which stages were changed by hand, and blames none of them.
    let isolated = bert_trace(&["diff", &out_arg, &out_arg, "--isolate", "--model", "golden/tiny", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&isolated.stdout).unwrap();
    assert!(report["culprit"].is_null(), "{report}");
    let text = serde_json::to_string(&report).unwrap();
    assert!(text.contains("set layer1.ffn.layernorm[0,9,3] to 50"), "{text}");
    // A directory that is not a dump is refused before the model is loaded.
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), "mine").unwrap();
    let foreign_arg = foreign.display().to_string();
    let refused =
        run(&["step", "--model", "golden/tiny", "--out", &foreign_arg, TEXT, "-c", "continue"].map(String::from));
    assert!(one_line(&refused, "holds files that are not a bert-trace dump").is_ok(), "{}", refused.stderr);
    assert_eq!(std::fs::read_dir(&foreign).unwrap().count(), 1, "nothing written into it");
    // Nor is the dump a patch reads.
    let typed = format!("patch {out_arg}:layer0.attention.output; continue");
    let refused = run(&["step", "--model", "golden/tiny", "--out", &out_arg, TEXT, "-c", &typed].map(String::from));
    assert!(one_line(&refused, "which the pass would be written over").is_ok(), "{}", refused.stderr);
    // A set of the word embeddings: explain still knows the model, by its fingerprint.
    let words = tmp.path().join("words").display().to_string();
    let args = [
        "step",
        "--model",
        "golden/tiny",
        "--out",
        &words,
        TEXT,
        "-c",
        "goto embeddings.word; set [0,1,3] 5; continue",
    ];
    assert_eq!(run(&args.map(String::from)).code, Some(0));
    let explained = bert_trace(&["explain", &words, "embeddings.sum[0,1,3]", "--model", "golden/tiny"]);
    assert!(explained.status.success(), "{}", String::from_utf8_lossy(&explained.stderr));
}

/// A set of a label changes what the loss is of, and `continue` reports the loss of the label
/// the pass used: the same table a trace prints with that target.
#[test]
fn a_set_label_is_the_label_the_report_names() {
    let (code, stepped, stderr) = step("goto input.labels\nset [0,9] 100\ncontinue\n");
    assert_eq!(code, Some(0), "{stderr}");
    let tiny = bert_core::BertModel::load(&root().join("golden/tiny")).unwrap();
    let word = tiny.tokenizer.id_to_token(100).unwrap();
    let traced = bert_trace(&["--model", "golden/tiny", "--mlm-target", &word, "--no-dump", TEXT]);
    let traced = String::from_utf8_lossy(&traced.stdout).into_owned();
    let losses = |text: &str| text[text.find("pretraining losses:").unwrap_or_else(|| panic!("{text}"))..].to_string();
    assert_eq!(losses(&stepped), losses(&traced));
}
