//! `bert-trace rollout TEXT` and `--dump DUMP`: the command prints what the library computes
//! (whose numbers crates/bert-core/tests/all/rollout.rs holds to the paper's code), names the
//! tokens and the row it follows, reads a fresh pass as it reads PyTorch's dump of the same
//! text, and refuses bad options and dumps in one line, before any work.

use std::path::Path;

use ndarray::{Array2, Array4};
use ndarray_npy::WriteNpyExt;

use crate::common::{one_line, run};

/// Per layer, a matrix: how the report and the reference hold rollout and flow.
type Layers = Vec<Vec<Vec<f64>>>;

fn layers(value: &serde_json::Value) -> Layers {
    serde_json::from_value(value.clone()).unwrap()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn the_report_follows_the_mask_and_its_json_holds_every_layers_matrices() {
    let ran = run(&args(&[
        "rollout",
        "--dump",
        "golden/english-small/dumps/mask",
        "--model",
        "golden/english-small",
        "--flow",
        "--top",
        "2",
    ]));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(ran.stdout.contains("what [MASK] at position 8 reads from the input after each layer"), "{}", ran.stdout);
    assert!(ran.stdout.contains("rollout") && ran.stdout.contains("flow"), "{}", ran.stdout);
    let ran = run(&args(&[
        "rollout",
        "--dump",
        "golden/english-small/dumps/mask",
        "--model",
        "golden/english-small",
        "--flow",
        "--json",
    ]));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let report: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    let reference: serde_json::Value = serde_json::from_slice(
        &std::fs::read(crate::common::root().join("golden/english-small/rollout/mask.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(report["tokens"][8], "[MASK]");
    assert_eq!(report["source"], "golden/english-small/dumps/mask");
    assert_eq!(report["focus"], 8);
    assert_eq!(report["positions"], reference["positions"]);
    for what in ["rollout", "flow"] {
        let (got, want) = (report[what].as_array().unwrap(), reference[what].as_array().unwrap());
        assert_eq!(got.len(), 4, "{what}: english-small's 4 layers");
        for (layer, (g, w)) in got.iter().zip(want).enumerate() {
            let (g, w): (Vec<Vec<f64>>, Vec<Vec<f64>>) =
                (serde_json::from_value(g.clone()).unwrap(), serde_json::from_value(w.clone()).unwrap());
            let worst = g.iter().flatten().zip(w.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            assert!(worst < 1e-12, "{what} layer {layer}: printed {worst:e} from the reference");
        }
        let top = &report["focus_rows"][3][what][0];
        assert_eq!(
            top["share"],
            report[what][3][8].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).fold(f64::MIN, f64::max)
        );
    }
}

/// A dump of `tokens` real tokens whose one layer's heads attend evenly.
fn even_dump(dir: &Path, tokens: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let probs = Array4::<f32>::from_elem((1, 2, tokens, tokens), 1.0 / tokens as f32);
    probs.write_npy(std::fs::File::create(dir.join("layer0.attention.probs.npy")).unwrap()).unwrap();
    let mask = Array2::<i64>::ones((1, tokens));
    mask.write_npy(std::fs::File::create(dir.join("input.attention_mask.npy")).unwrap()).unwrap();
}

#[test]
fn bad_options_and_dumps_are_one_line_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let long = tmp.path().join("long");
    even_dump(&long, 49);
    let long = long.display().to_string();
    let no_probs = tmp.path().join("no-probs");
    std::fs::create_dir_all(&no_probs).unwrap();
    Array2::<i64>::ones((1, 3)).write_npy(std::fs::File::create(no_probs.join("input.ids.npy")).unwrap()).unwrap();
    let no_probs = no_probs.display().to_string();
    let dump = "golden/tiny/dumps/batch";
    // (arguments, what the one line must say)
    let cases: [(&[&str], &str); 10] = [
        (&["rollout", "--dump", dump, "--residual", "1.5"], "--residual 1.5"),
        (&["rollout", "--dump", dump, "--residual", "NaN"], "--residual NaN"),
        (&["rollout", "--dump", dump, "--seq", "2"], "--seq 2"),
        (&["rollout", "--dump", dump, "--heads", "median"], "median"),
        (&["rollout", "--dump", dump, "--top", "0"], "--top 0"),
        (&["rollout", "--dump", "no/such/dump"], "no/such/dump"),
        (&["rollout", "--dump", &no_probs], "layer0.attention.probs"),
        (&["rollout", "--dump", &long, "--flow"], "has 49 real tokens, and --flow takes at most 48"),
        (&["rollout", "When in Rome.", "--model", "golden/tiny", "--seq", "1"], "--seq 1"),
        (&["rollout", "--model", "golden/tiny"], "or --dump DUMP to read a dump's attention"),
    ];
    let mut failures = Vec::new();
    for (arguments, says) in cases {
        let ran = run(&args(arguments));
        println!("{arguments:?}: {}", ran.stderr.trim());
        if let Err(problem) = one_line(&ran, says) {
            failures.push(format!("{arguments:?}: {problem}: {}", ran.stderr.trim()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Without --flow the long sequence is rolled out at once.
    let ran = run(&args(&["rollout", "--dump", &long]));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
}

#[test]
fn a_fresh_pass_reads_as_pytorchs_dump_of_the_same_text() {
    // english-small's golden `mask` dump is PyTorch's pass of this text: our float32 pass gives
    // the same probabilities up to float32 rounding, so the same rollout and flow within 1e-5.
    let text = "When in Rome, do as the [MASK] do.";
    let ran = run(&args(&["rollout", text, "--model", "golden/english-small", "--flow", "--json"]));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let report: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    let reference: serde_json::Value = serde_json::from_slice(
        &std::fs::read(crate::common::root().join("golden/english-small/rollout/mask.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(report["source"], "golden/english-small");
    assert_eq!(report["tokens"][report["focus"].as_u64().unwrap() as usize], "[MASK]");
    for what in ["rollout", "flow"] {
        let (got, want) = (layers(&report[what]), layers(&reference[what]));
        assert_eq!(got.len(), want.len(), "{what}: layers");
        let worst = got
            .iter()
            .flatten()
            .flatten()
            .zip(want.iter().flatten().flatten())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        println!("{what}: largest difference from PyTorch's dump {worst:e}");
        assert!(worst < 1e-5, "{what}: {worst:e} from the reference of PyTorch's dump");
    }
}

#[test]
fn by_words_a_word_reads_its_pieces_mean_and_is_read_by_their_sum() {
    let text = "The astronauts were unbelievably [MASK].";
    let json = |words: &str| {
        let words = match words {
            "" => "--words".to_string(),
            given => format!("--words={given}"),
        };
        let ran = run(&args(&["rollout", text, "--model", "golden/english-small", "--flow", "--json", &words]));
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
        serde_json::from_str::<serde_json::Value>(&ran.stdout).unwrap()
    };
    let report = json("");
    let words: Vec<(String, Vec<usize>)> = report["words"]["words"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["text"].as_str().unwrap().to_string(), serde_json::from_value(w["pieces"].clone()).unwrap()))
        .collect();
    let texts: Vec<&str> = words.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(texts, ["[CLS]", "the", "astronauts", "were", "unbelievably", "[MASK]", ".", "[SEP]"]);
    assert!(words.iter().any(|(_, pieces)| pieces.len() > 1), "some word is several pieces: {words:?}");
    for (what, by_word) in [("rollout", "rollout_by_word"), ("flow", "flow_by_word")] {
        let (tokens, by) = (layers(&report[what]), layers(&report[by_word]));
        for (layer, (matrix, grouped)) in tokens.iter().zip(&by).enumerate() {
            for (r, (_, readers)) in words.iter().enumerate() {
                let sum: f64 = grouped[r].iter().sum();
                assert!((sum - 1.0).abs() < 1e-12, "{what} layer {layer}: word {r}'s row sums to {sum}");
                for (c, (_, read)) in words.iter().enumerate() {
                    let want = readers.iter().map(|&i| read.iter().map(|&j| matrix[i][j]).sum::<f64>()).sum::<f64>()
                        / readers.len() as f64;
                    assert!(
                        (grouped[r][c] - want).abs() < 1e-12,
                        "{what} layer {layer} [{r}, {c}]: {} for {want}",
                        grouped[r][c]
                    );
                }
            }
        }
    }
    // The same words given by hand are the same words.
    let given = json("The astronauts were unbelievably [MASK] .");
    assert_eq!(given["words"]["by"], "given");
    assert_eq!(given["rollout_by_word"], report["rollout_by_word"]);
    let ran = run(&args(&["rollout", text, "--model", "golden/english-small", "--words=The astro nauts"]));
    assert!(one_line(&ran, "--words The astro nauts").is_ok(), "{}", ran.stderr);
}

#[test]
fn view_draws_every_layers_grid_by_tokens_or_by_words_and_refuses_a_broken_report() {
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("rollout.json");
    let ran = run(&args(&["rollout", "The astronauts were unbelievably [MASK].", "--flow", "--words", "--json"]));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    std::fs::write(&report, &ran.stdout).unwrap();
    let svg = tmp.path().join("rollout.svg");
    let ran = run(&args(&["view", &report.display().to_string(), "--svg", &svg.display().to_string()]));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let drawn = std::fs::read_to_string(&svg).unwrap();
    // english-small's 4 layers, rollout and flow, each a grid labelled by the words.
    for layer in 0..4 {
        for what in ["rollout", "flow"] {
            assert!(drawn.contains(&format!("{what} after layer {layer}")), "{what} after layer {layer}");
        }
    }
    assert!(drawn.contains(">astronauts<") && !drawn.contains("##"), "labelled by words, not pieces");
    // A report whose rows are not probabilities is refused in one line, nothing written.
    let mut broken: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    broken["rollout_by_word"][0][0][0] = serde_json::json!(2.0);
    let bad = tmp.path().join("broken.json");
    std::fs::write(&bad, broken.to_string()).unwrap();
    let out = tmp.path().join("broken.svg");
    let ran = run(&args(&["view", &bad.display().to_string(), "--svg", &out.display().to_string()]));
    assert!(one_line(&ran, "holds a value outside 0 to 1").is_ok(), "{}", ran.stderr);
    assert!(!out.exists(), "nothing written for a broken report");
}

#[test]
fn view_draws_a_heads_attention_by_words_and_refuses_words_where_they_do_not_apply() {
    let tmp = tempfile::tempdir().unwrap();
    let dump = tmp.path().join("dump").display().to_string();
    let text = "The astronauts were unbelievably [MASK].";
    // A padded batch: the second sequence's padding is left out of its words.
    let ran = run(&args(&["--only", "input.*", "--only", "layer*.attention.*", "--out", &dump, text, "Hi."]));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    for (extra, labels) in [
        (&["--head", "1"][..], &["astronauts", "unbelievably", "[MASK]"][..]),
        (&["--lines"][..], &["astronauts", "unbelievably"][..]),
        (&["--seq", "1"][..], &["hi"][..]),
    ] {
        let svg = tmp.path().join("words.svg");
        let mut arguments = vec!["view", &dump, "--stage", "layer3.attention.probs", "--words", "--svg"];
        let svg_path = svg.display().to_string();
        arguments.push(&svg_path);
        arguments.extend_from_slice(extra);
        let ran = run(&args(&arguments));
        assert_eq!(ran.code, Some(0), "{extra:?}: {}", ran.stderr);
        let drawn = std::fs::read_to_string(&svg).unwrap();
        for label in labels {
            assert!(drawn.contains(&format!(">{label}<")), "{extra:?}: the word {label} labels the picture");
        }
        assert!(!drawn.contains("##") && !drawn.contains(">[PAD]<"), "{extra:?}: words, without padding");
        std::fs::remove_file(&svg).unwrap();
    }
    let svg = tmp.path().join("refused.svg").display().to_string();
    for (arguments, says) in [
        (vec!["view", &dump, "--stage", "layer3.attention.scores", "--words", "--svg", &svg], "layerN.attention.probs"),
        (vec!["view", &dump, "--words"], "--words choose one picture"),
        (
            vec!["view", &dump, "--stage", "layer3.attention.probs", "--words=The astro", "--svg", &svg],
            "--words The astro",
        ),
    ] {
        let ran = run(&args(&arguments));
        assert!(one_line(&ran, says).is_ok(), "{arguments:?}: {}", ran.stderr);
    }
    assert!(!Path::new(&svg).exists(), "nothing written when refused");
}

#[test]
fn a_chinese_text_reads_by_the_words_given_and_draws_them() {
    // golden/tiny-chinese reads one character a token, and lacks some of these ([UNK]): each
    // stands for one character of its word.
    let tmp = tempfile::tempdir().unwrap();
    let dump = tmp.path().join("zh").display().to_string();
    let ran = run(&args(&[
        "--model",
        "golden/tiny-chinese",
        "--only",
        "input.*",
        "--only",
        "layer*.attention.probs",
        "--out",
        &dump,
        "床前明月光，疑是地上霜。",
    ]));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let words = "--words=床前 明月光 ， 疑是 地上 霜 。";
    let ran = run(&args(&["rollout", "--dump", &dump, "--model", "golden/tiny-chinese", words, "--json"]));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let report: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    let texts: Vec<&str> =
        report["words"]["words"].as_array().unwrap().iter().map(|w| w["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["[CLS]", "床前", "明月光", "，", "疑是", "地上", "霜", "。", "[SEP]"]);
    for matrix in layers(&report["rollout_by_word"]) {
        assert_eq!(matrix.len(), 9);
        assert!(matrix.iter().all(|row| (row.iter().sum::<f64>() - 1.0).abs() < 1e-12));
    }
    let svg = tmp.path().join("zh.svg");
    let svg_path = svg.display().to_string();
    let ran = run(&args(&[
        "view",
        &dump,
        "--model",
        "golden/tiny-chinese",
        "--stage",
        "layer1.attention.probs",
        words,
        "--svg",
        &svg_path,
    ]));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let drawn = std::fs::read_to_string(&svg).unwrap();
    for word in ["床前", "明月光", "疑是"] {
        assert!(drawn.contains(&format!(">{word}<")), "the word {word} labels the picture");
    }
}
