//! `bert-trace view DUMP --serve`, tested as a learner and as an attacker would use it:
//!
//! - in headless Chromium (`tests/browser/check_serve.mjs`), a click on a cell of the heatmap
//!   shows what `bert-trace explain --json` says of that element (its formula, steps,
//!   recomputation and reads), the cells it reads light up in their own stage's picture, a line
//!   of the head view (a query kept, a key clicked) is explained the same way, step
//!   mode's next and back walk the stages as `bert-trace step` does, and a set changes the
//!   predictions exactly as `step -c 'goto …; set …; continue'` does;
//! - over raw HTTP, every request without the session's token or with another `Host`, every path
//!   with `..` (plain or percent-encoded), a malformed index, an unknown stage, a body too large
//!   and a request that is not HTTP gets a 4xx and one line, the server answers afterwards, and
//!   the dump is unchanged; two servers on one dump both answer; SIGINT ends the server at once.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{root, snapshot, unchanged};

/// The texts of the served dump: a batch of two, the second padded, with a mask to fill.
const TEXTS: [&str; 2] = ["When in Rome, do as the [MASK] do.", "Rome was not built in a day."];

/// A server started by `bert-trace view DUMP --serve`, killed when dropped.
struct Server {
    child: Child,
    /// `127.0.0.1:PORT`
    authority: String,
    token: String,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn serve(dump: &Path) -> Server {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bert-trace"));
    command
        .args(["view"])
        .arg(dump)
        .arg("--serve")
        .current_dir(root())
        .env("HF_HUB_OFFLINE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // A shell without job control starts its background commands with SIGINT ignored, and an
    // ignored signal stays ignored across exec: the tests run that way would see a server that
    // Ctrl-C cannot end, as nohup intends. The server is started as a terminal starts it.
    // SAFETY: between fork and exec the child only resets a signal's disposition, which is
    // async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        })
    };
    let mut child = command.spawn().expect("bert-trace starts");
    let stdout = child.stdout.take().unwrap();
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                break;
            }
        }
    });
    let line = receive.recv_timeout(Duration::from_secs(120)).unwrap_or_else(|_| {
        child.kill().ok();
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).ok();
        panic!("view --serve printed no URL: {err}")
    });
    let url = line.rsplit(' ').next().unwrap().to_string();
    assert!(line.starts_with("serving ") && url.starts_with("http://127.0.0.1:"), "the first line: {line}");
    let authority = url.trim_start_matches("http://").split('/').next().unwrap().to_string();
    let token = url.split("token=").nth(1).expect("the URL carries the token").to_string();
    Server { child, authority, token, url }
}

/// Sends `request` (raw bytes) and returns the status and the body.
fn raw(authority: &str, request: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(authority).expect("the server accepts");
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).ok();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// A GET of `path` with `Host` and `token` (None: no token).
fn get(server: &Server, path: &str, host: &str, token: Option<&str>) -> (u16, String) {
    let token = token.map(|t| format!("X-Bert-Trace-Token: {t}\r\n")).unwrap_or_default();
    raw(
        &server.authority,
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{token}Connection: close\r\n\r\n").as_bytes(),
    )
}

/// A POST of one step command, with the token.
fn step_request(server: &Server, command: &str) -> (u16, String) {
    let request = format!(
        "POST /api/step HTTP/1.1\r\nHost: {}\r\nX-Bert-Trace-Token: {}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{command}",
        server.authority,
        server.token,
        command.len()
    );
    raw(&server.authority, request.as_bytes())
}

fn explain_json(dump: &Path, target: &str) -> Value {
    let out = crate::common::bert_trace(&["explain".as_ref(), dump.as_os_str(), target.as_ref(), "--json".as_ref()]);
    assert!(out.status.success(), "explain {target}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("explain --json is JSON")
}

/// A dump of [`TEXTS`] by english-small, the default model, in `dir`.
fn dump_in(dir: &Path) -> PathBuf {
    let dump = dir.join("served");
    let mut args: Vec<&std::ffi::OsStr> = TEXTS.iter().map(|t| t.as_ref()).collect();
    args.extend(["--out".as_ref(), dump.as_os_str()]);
    let out = crate::common::bert_trace(&args);
    assert!(out.status.success(), "the trace: {}", String::from_utf8_lossy(&out.stderr));
    dump
}

/// Opens `dump`'s served page in Chromium and does what `plan` says (`check_serve.mjs`); what
/// the page then showed, and the screenshot it took.
fn in_browser(dump: &Path, plan: &Value, shots: &Path) -> Value {
    let browser = root().join("crates/bert-trace/tests/browser");
    assert!(
        browser.join("node_modules/playwright-core").is_dir(),
        "playwright-core is not installed in {}: run the README's test command (it runs `npm ci` there)",
        browser.display()
    );
    let server = serve(dump);
    let plan_file = shots.join("plan.json");
    std::fs::create_dir_all(shots).unwrap();
    std::fs::write(&plan_file, plan.to_string()).unwrap();
    let output = Command::new("node")
        .arg(browser.join("check_serve.mjs"))
        .arg(&server.url)
        .arg(shots)
        .arg(&plan_file)
        .output()
        .expect("node runs (Node 20 or later)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}: the browser check failed:\n{stderr}", dump.display());
    serde_json::from_slice(&output.stdout).expect("check_serve prints JSON")
}

/// What `bert-trace step ARGS -c COMMANDS` prints (ARGS: the model, the options and the texts
/// that made the dump).
fn step(made_by: &[&str], commands: &str) -> String {
    let mut args: Vec<&str> = vec!["step"];
    args.extend(made_by);
    args.extend(["-c", commands]);
    let out = crate::common::bert_trace(&args);
    assert!(out.status.success(), "step -c '{commands}': {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The panel's text as chapter 19 quotes it: the title, the formula, the steps, the largest
/// terms, the recomputation and the reads, a line each.
fn panel_text(panel: &Value) -> String {
    let mut lines: Vec<String> =
        ["title", "formula", "steps"].iter().filter_map(|field| panel[field].as_str().map(str::to_string)).collect();
    lines.extend(panel["terms"].as_array().into_iter().flatten().filter_map(|t| t.as_str().map(str::to_string)));
    lines.extend(panel["recomputed"].as_str().map(str::to_string));
    lines.push("reads".to_string());
    lines.extend(panel["reads"].as_array().into_iter().flatten().filter_map(|r| r.as_str().map(str::to_string)));
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Checks what the page showed against what `explain --json` and `step` print for the same
/// dump (`made_by` names its model, options and texts) and plan.
fn same_as_the_commands(page: &Value, dump: &Path, made_by: &[&str], plan: &Value) {
    let panel = &page["panel"];
    let click = &plan["click"];
    let index: Vec<String> = click["index"].as_array().unwrap().iter().map(|i| i.to_string()).collect();
    let target = format!("{}[{}]", click["stage"].as_str().unwrap(), index.join(","));
    let expected = explain_json(dump, &target);
    let steps = expected["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| format!("{} {}", s["name"].as_str().unwrap(), s["value"]))
        .collect::<Vec<_>>()
        .join(", ");
    let recomputed = format!("recomputed {} by", expected["recomputed"]);
    let checks: Vec<(&str, String, String)> = vec![
        (
            "title",
            format!("{target} = {} ({})", expected["value"], expected["dtype"].as_str().unwrap()),
            panel["title"].as_str().unwrap_or_default().to_string(),
        ),
        ("formula", expected["formula"].as_str().unwrap().to_string(), panel["formula"].as_str().unwrap_or("").into()),
        ("steps", format!("steps {steps}"), panel["steps"].as_str().unwrap_or("").into()),
        (
            "recomputed",
            recomputed.clone(),
            panel["recomputed"].as_str().unwrap_or("").chars().take(recomputed.chars().count()).collect(),
        ),
    ];
    for (what, want, got) in &checks {
        assert_eq!(want, got, "{target}: the panel's {what}: expected {want:?}, got {got:?}");
    }
    // The element explained is outlined in its picture, and its operands' link opens their stage
    // with exactly the elements read lit.
    let last_two: Vec<u64> =
        click["index"].as_array().unwrap().iter().rev().take(2).rev().map(|i| i.as_u64().unwrap()).collect();
    assert_eq!(panel["litTarget"], serde_json::json!(last_two), "{target}: the outlined cell");
    let inputs = expected["inputs"].as_array().unwrap();
    let operand_stage = inputs[0]["stage"].as_str().unwrap();
    let mut want_lit: Vec<[u64; 2]> = inputs
        .iter()
        .filter(|i| i["stage"] == operand_stage)
        .map(|i| [i["index"][2].as_u64().unwrap(), i["index"][3].as_u64().unwrap()])
        .collect();
    let mut got_lit: Vec<[u64; 2]> = serde_json::from_value(page["litOperand"]["lit"].clone()).unwrap();
    want_lit.sort();
    got_lit.sort();
    assert_eq!(page["litOperand"]["stage"], operand_stage, "the operand's link opens its stage");
    assert_eq!(want_lit, got_lit, "{operand_stage}: the cells lit against those {target} reads");

    // Step mode walks the stages in `step`'s order.
    let n = plan["steps"].as_u64().unwrap() as usize;
    let walked = step(made_by, &vec!["next"; n].join("; "));
    let names: Vec<&str> = walked
        .lines()
        .filter(|l| l.starts_with('['))
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|n| n.contains('.'))
        .collect();
    let got: Vec<&str> = page["walked"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(names, got, "next × {n} in the page against `step`");
    assert_eq!(page["back"], names[n - 2], "back from {}", names[n - 1]);
    let goto = plan["goto"].as_str().unwrap();
    assert_eq!(page["went"]["cursor"], goto, "go to {goto}");
    assert_eq!(page["set"]["error"], Value::Null, "the set was refused");

    // A set moves the predictions exactly as `step` moves them, and back drops it.
    let (set_index, set_value) = (plan["set"]["index"].as_str().unwrap(), plan["set"]["value"].as_str().unwrap());
    let set = step(made_by, &format!("goto {goto}; set {set_index} {set_value}; continue"));
    let plain = step(made_by, "continue");
    let (after, before) = (page["effect"]["after"].as_str().unwrap(), page["effect"]["before"].as_str().unwrap());
    assert!(set.ends_with(after), "the page's predictions after the set are not `step`'s:\n{after}\n---\n{set}");
    assert!(plain.ends_with(before), "the page's predictions before the set are not `step`'s:\n{before}\n---\n{plain}");
    assert_ne!(after, before, "the set moved nothing");
    assert_eq!(page["effect"]["changed"][0], goto, "the first stage the set changed");
    assert_eq!(page["effect"]["picture"], true, "the stage under the cursor is drawn");
    assert_eq!(page["afterBack"]["changes"], serde_json::json!(["none"]), "back drops the set");
}

#[test]
fn the_served_page_explains_steps_and_sets_as_the_commands_do() {
    let tmp = tempfile::tempdir().unwrap();
    let dump = dump_in(tmp.path());
    let plan = serde_json::json!({
        "click": {"stage": "layer0.attention.probs", "index": [1, 0, 3, 5]},
        "line": {"layer": 2, "head": 1, "query": 8, "key": 2},
        "steps": 5,
        "goto": "layer1.attention.probs",
        "set": {"index": "[0,0,8,3]", "value": "0.9"},
    });
    let page = in_browser(&dump, &plan, &tmp.path().join("shots"));
    same_as_the_commands(&page, &dump, &["--model", "english-small", TEXTS[0], TEXTS[1]], &plan);
    // The head view's line from query 8 to key 2 of head 1 in layer 2 is that probability.
    let target = "layer2.attention.probs[1,1,8,2]";
    let expected = explain_json(&dump, target);
    assert_eq!(page["line"]["target"], target, "the head view's line asked for another element");
    assert_eq!(
        page["line"]["title"],
        format!("{target} = {} ({})", expected["value"], expected["dtype"].as_str().unwrap()),
        "the head view's line: the panel's title"
    );
}

/// Chapter 19's section on the page: its command, the panel's text it quotes (in English and in
/// Chinese), and its screenshot, made here (`DOCS=overwrite` writes it).
#[test]
fn chapter_19s_page_is_what_the_server_shows() {
    let tmp = tempfile::tempdir().unwrap();
    let dump = tmp.path().join("19-why");
    let text = "When in Rome, do as the [MASK] do.";
    let out = crate::common::bert_trace(&[
        "--model".as_ref(),
        "golden/tiny".as_ref(),
        "--mlm-target".as_ref(),
        "romans".as_ref(),
        "--out".as_ref(),
        dump.as_os_str(),
        text.as_ref(),
    ]);
    assert!(out.status.success(), "the chapter's trace: {}", String::from_utf8_lossy(&out.stderr));
    let plan = serde_json::json!({
        "click": {"stage": "layer0.attention.probs", "index": [0, 0, 9, 9]},
        "steps": 3,
        "goto": "layer0.attention.probs",
        "set": {"index": "[0,0,9,9]", "value": "1"},
    });
    let shots = tmp.path().join("shots");
    let page = in_browser(&dump, &plan, &shots);
    same_as_the_commands(&page, &dump, &["--model", "golden/tiny", "--mlm-target", "romans", text], &plan);
    let shown = panel_text(&page["panel"]);
    for chapter in ["walkthrough/19-explain.md", "walkthrough/zh/19-explain.md"] {
        let markdown = std::fs::read_to_string(root().join(chapter)).unwrap();
        assert!(markdown.contains("`bert-trace view dumps/19-why --serve`"), "{chapter}: the command");
        let section = markdown.split("<!-- served-panel -->").nth(1).unwrap_or_else(|| panic!("{chapter}: no panel"));
        let quoted = crate::common::console::blocks(section).into_iter().next().expect("a block after the marker");
        assert_eq!(quoted.text, shown, "{chapter}: the panel's text it quotes, against the page's");
    }
    let picture = root().join("walkthrough/pictures/19-served.png");
    let made = std::fs::read(shots.join("served.png")).unwrap();
    if std::env::var("DOCS").is_ok_and(|v| v == "overwrite") {
        std::fs::write(&picture, &made).unwrap();
    }
    // Pixels are not compared (a font's rendering may differ between machines); the picture's
    // size and the text it shows are.
    let committed = std::fs::read(&picture).expect("walkthrough/pictures/19-served.png: DOCS=overwrite writes it");
    assert_eq!(&committed[16..24], &made[16..24], "19-served.png: its width and height against the page's");
}

#[test]
fn the_server_refuses_what_it_must_and_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dump = dump_in(tmp.path());
    let before = snapshot(&dump);
    let server = serve(&dump);
    let second = serve(&dump);
    let host = server.authority.clone();
    let token = Some(server.token.as_str());
    let explain = "/api/explain?target=layer0.attention.probs%5B0,0,3,5%5D";

    // The answer is `explain --json`'s object, and a second server on the dump answers too.
    let (status, body) = get(&server, explain, &host, token);
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["explanation"], explain_json(&dump, "layer0.attention.probs[0,0,3,5]"), "the explanation");
    let (status, body) = get(&second, explain, &second.authority, Some(&second.token));
    assert_eq!(status, 200, "the second server: {body}");
    assert_eq!(get(&second, explain, &second.authority, token).0, 403, "one server's token opens the other");

    let long_body = format!(
        "POST /api/step HTTP/1.1\r\nHost: {host}\r\nX-Bert-Trace-Token: {}\r\nContent-Length: 100000000\r\n\
         Connection: close\r\n\r\nnext",
        server.token
    );
    let refusals: Vec<(&str, (u16, String), u16)> = vec![
        ("no token", get(&server, explain, &host, None), 403),
        ("a wrong token", get(&server, explain, &host, Some("0123456789abcdef0123456789abcdef")), 403),
        ("the page without its token", get(&server, "/", &host, None), 403),
        ("a foreign Host", get(&server, explain, "evil.example:80", token), 403),
        ("a rebinding Host with the port", get(&server, explain, &format!("evil.example:{}", &host[10..]), token), 403),
        ("..", get(&server, "/../manifest.json", &host, token), 400),
        ("%2e%2e", get(&server, "/%2e%2e/manifest.json", &host, token), 400),
        ("%2E%2E%2F", get(&server, "/api/%2E%2E%2F%2E%2E%2Fmanifest.json", &host, token), 400),
        ("a file of the dump by name", get(&server, "/manifest.json", &host, token), 404),
        ("a malformed index", get(&server, "/api/explain?target=layer0.attention.probs%5B0,0,3", &host, token), 400),
        (
            "an index out of range",
            get(&server, "/api/explain?target=layer0.attention.probs%5B0,0,3,99%5D", &host, token),
            400,
        ),
        ("an unknown stage", get(&server, "/api/explain?target=layer9.attention.probs%5B0%5D", &host, token), 400),
        ("no target", get(&server, "/api/explain", &host, token), 400),
        ("a bad escape", get(&server, "/api/explain?target=%zz", &host, token), 400),
        ("a bad picture head", get(&server, "/api/picture?head=-1", &host, token), 400),
        ("a body too large", raw(&host, long_body.as_bytes()), 413),
        ("a step command the session refuses", step_request(&server, "goto nope"), 400),
        ("not HTTP", raw(&host, b"\x00\x01\x02 garbage\r\n\r\n"), 400),
        ("a GET of the step", get(&server, "/api/step", &host, token), 405),
        ("a row (30,522 explanations)", get(&server, "/api/explain?target=mlm.logits%5B0,3,:%5D", &host, token), 400),
        ("a patch, which would read another file", step_request(&server, "patch /etc:layer0.attention.probs"), 400),
        (
            "the token in an API request's URL (the page sends it in a header)",
            get(&server, &format!("{explain}&token={}", server.token), &host, None),
            403,
        ),
        ("a step past any pass's end", step_request(&server, "next 18446744073709551615"), 400),
        ("a step's explanation of a row", step_request(&server, "explain [0,3,:]"), 400),
    ];
    for (what, (status, body), want) in refusals {
        assert_eq!(status, want, "{what}: expected {want}, got {status}: {body}");
        let lines: Vec<&str> = body.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(lines.len() <= 1, "{what}: more than one line: {body}");
        assert_eq!(get(&server, explain, &host, token).0, 200, "{what}: the server no longer answers");
    }
    let (_, row) = get(&server, "/api/explain?target=mlm.logits%5B0,3,:%5D", &host, token);
    assert!(
        row.contains("the page explains one element; `bert-trace explain` explains a row"),
        "a row is refused for another reason, or not in the command line's words: {row}"
    );
    let refused = Command::new(env!("CARGO_BIN_EXE_bert-trace"))
        .args(["view", dump.to_str().unwrap(), "--serve", "--host", "0.0.0.0"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "--host 0.0.0.0: {said}");
    assert!(said.starts_with("error: --host 0.0.0.0: the page answers only requests sent to"), "{said}");
    // At a stage: a picture of it, and the bad ones refused as requests, not as "no picture".
    assert_eq!(step_request(&server, "goto layer0.attention.probs").0, 200, "goto");
    let (status, picture) = get(&server, "/api/picture?seq=1&head=2", &host, token);
    assert!(status == 200 && picture.contains("\"svg\":\"<svg"), "the stage's picture: {status} {picture}");
    for (query, needle) in [("head=99", "has no such head"), ("seq=2", "has 2 sequence(s)")] {
        let (status, body) = get(&server, &format!("/api/picture?{query}"), &host, token);
        assert!(status == 400 && body.contains(needle), "picture?{query}: {status} {body}");
    }
    assert_eq!(step_request(&server, "goto input.ids").0, 200, "goto input.ids");
    let (status, body) = get(&server, "/api/picture", &host, token);
    assert!(status == 200 && body.contains("\"svg\":null"), "input.ids has no picture, as an answer: {status} {body}");
    unchanged(&before, &dump).unwrap_or_else(|e| panic!("the requests changed the dump: {e}"));

    // SIGINT (Ctrl-C) ends the server at once.
    let mut server = server;
    let pid = server.child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let start = Instant::now();
    while server.child.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < Duration::from_secs(2), "the server was still running 2 s after SIGINT");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(TcpStream::connect(&host).is_err(), "the port still accepts after SIGINT");
}

#[test]
fn a_dump_whose_model_is_not_found_is_served_read_only_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let dump = dump_in(tmp.path());
    let manifest = dump.join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let moved = text.replace("\"model\": \"golden/english-small\"", "\"model\": \"no/such-model-dir\"");
    assert_ne!(text, moved, "the manifest names golden/english-small");
    std::fs::write(&manifest, moved).unwrap();
    let server = serve(&dump);
    let token = Some(server.token.as_str());
    let (status, page) = get(&server, &format!("/?token={}", server.token), &server.authority, None);
    assert_eq!(status, 200, "the page: {page}");
    assert!(page.contains("\"explain\":false") && page.contains("no/such-model-dir"), "the page does not say why");
    let (status, body) =
        get(&server, "/api/explain?target=layer0.attention.probs%5B0,0,3,5%5D", &server.authority, token);
    assert_eq!(status, 400, "{body}");
    assert!(body.starts_with("cannot explain: ") && body.contains("no/such-model-dir"), "{body}");
    let (status, body) = get(&server, "/api/state", &server.authority, token);
    assert_eq!(status, 400, "{body}");
    assert!(body.starts_with("cannot step: "), "{body}");
}
