//! `bert-trace view DUMP --serve`: the dump's page, served from this machine with the dump's
//! model behind it, so that a click on any cell is explained and the pass can be stepped
//! through (`page_session`). The server is tiny_http's: one thread reads requests, and each is
//! answered in turn.
//!
//! Who may ask: only a request with the session's token (a random 128-bit number, in the URL
//! the command prints, and in the page it serves) and with the `Host` the server was started
//! as; another page in the same browser knows neither, and a name that resolves here by DNS
//! rebinding brings its own `Host`. What may be asked: the page and five API paths, nothing
//! from the file system by path. A bad request gets a 4xx and one line; nothing a request holds
//! writes a file.

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use bert_core::io::dump::Dump;
use bert_core::words::{in_dialect, Dialect, Opt};
use bert_view::Names;
use tiny_http::{Header, Method, Request, Response, Server};

use super::page_session::PageSession;
use super::{chosen_heatmaps, ViewRequest};
use crate::error::{drawn, Error, Result};
use crate::refuse;

pub const SERVE: Opt = Opt("serve");
pub const HOST: Opt = Opt("host");
pub const PORT: Opt = Opt("port");

/// The largest body a request may carry: a step command is one line.
const MOST_BODY: usize = 16 * 1024;

/// What to serve (the dump, its model, the heatmaps of `view`), and where.
#[derive(Clone, Debug)]
pub struct ServeRequest {
    pub view: ViewRequest,
    /// The address to listen on: 127.0.0.1 unless the caller says otherwise.
    pub host: String,
    /// The port; 0 for a free one.
    pub port: u16,
    /// How the page's messages spell options: the caller's (the command line's flags, or
    /// Python's keywords).
    pub dialect: Dialect,
}

impl Default for ServeRequest {
    fn default() -> ServeRequest {
        ServeRequest { view: ViewRequest::default(), host: "127.0.0.1".into(), port: 0, dialect: Dialect::Flags }
    }
}

/// A running server: its URL (with the token), what the caller should know, and the handle
/// that ends it.
pub struct Serving {
    pub url: String,
    pub notes: Vec<String>,
    server: Arc<Server>,
    /// Set by [`Serving::stop`], so that the end it causes is told from a failure.
    stopping: Arc<AtomicBool>,
    /// The thread that answers; it returns why it ended, when that was not [`Serving::stop`].
    thread: Option<JoinHandle<Option<String>>>,
}

impl Serving {
    /// Waits until the server ends: it ends by [`Serving::stop`] or with the process, or when it
    /// can no longer accept a connection, which is returned as the reason.
    pub fn wait(mut self) -> std::result::Result<(), String> {
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Some(failure))) => Err(failure),
            _ => Ok(()),
        }
    }

    /// Ends the server: it answers nothing more, and its port is free again.
    pub fn stop(mut self) {
        self.end();
    }

    fn end(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.end();
    }
}

/// Opens the dump and its model, makes the page, and starts answering; refuses, before
/// anything listens, what `view` would refuse and an address it cannot listen on.
pub fn serve(request: &ServeRequest) -> Result<Serving> {
    let view = &request.view;
    let drawing = view.stage.is_some()
        || view.head.is_some()
        || view.lines
        || view.seq != 0
        || view.words.is_some()
        || view.svg.is_some()
        || view.png.is_some()
        || view.out.is_some();
    if drawing {
        refuse!("{SERVE} serves the whole page: it takes none of the options that write a file or draw one picture");
    }
    if view.dump.is_file() && view.dump.extension().is_some_and(|e| e == "json") {
        refuse!("{SERVE}: {} is a command's JSON result, drawn whole by `view`; serve a dump", view.dump.display());
    }
    address(request)?;
    serve_dump(Dump::open(&view.dump)?, request)
}

/// The address `request` names. Every address at once (0.0.0.0, ::) is refused: the server
/// answers only requests sent to the address it was started as (its check of `Host`), and a
/// browser elsewhere sends this machine's own address.
fn address(request: &ServeRequest) -> Result<IpAddr> {
    let ip: IpAddr = request.host.parse().map_err(|_| {
        Error::Request(format!("{}: expected an IP address such as 127.0.0.1", HOST.with(&request.host)))
    })?;
    if ip.is_unspecified() {
        refuse!(
            "{}: the page answers only requests sent to the address it serves on; give this machine's own address \
             as the other machines reach it",
            HOST.with(&request.host)
        );
    }
    Ok(ip)
}

/// Serves `dump`, already open (a trace in memory, from Python), as [`serve`] serves the one
/// `request` names; `request.view.dump` is not read.
pub fn serve_dump(dump: Dump, request: &ServeRequest) -> Result<Serving> {
    let view = &request.view;
    let ip = address(request)?;
    let chosen = chosen_heatmaps(&dump, &dump.dir, &view.heatmaps)?;
    let session = PageSession::open(dump, view.model.as_deref())?;
    let token = token()?;
    let server = Server::http(SocketAddr::new(ip, request.port)).map_err(|e| {
        Error::Request(format!("{} {}: cannot listen there ({e})", HOST.with(ip), PORT.with(request.port)))
    })?;
    let port = server.server_addr().to_ip().map(|a| a.port()).unwrap_or(request.port);
    let authority = match ip {
        IpAddr::V6(_) => format!("[{ip}]:{port}"),
        IpAddr::V4(_) => format!("{ip}:{port}"),
    };
    let mut hosts = vec![authority.clone()];
    if ip.is_loopback() {
        hosts.push(format!("localhost:{port}"));
    }
    let served = serde_json::json!({ "token": token, "abilities": session.abilities(request.dialect) });
    let names = Names { model: session.model() };
    let (page, left_out) =
        bert_view::served_page_html(session.dump(), &names, chosen.as_ref(), &served).map_err(drawn)?;
    let mut notes = session.notes.clone();
    notes.extend(super::left_out_note(&left_out));
    let server = Arc::new(server);
    let state = State { session, page, token: token.clone(), hosts, dialect: request.dialect };
    let (listener, stopping) = (Arc::clone(&server), Arc::new(AtomicBool::new(false)));
    let stopped = Arc::clone(&stopping);
    let thread = std::thread::Builder::new()
        .name("bert-trace server".into())
        .spawn(move || answer_all(&listener, state, &stopped))
        .map_err(|e| Error::Request(format!("{SERVE}: cannot start the server's thread ({e})")))?;
    let url = format!("http://{authority}/?token={token}");
    Ok(Serving { url, notes, server, stopping, thread: Some(thread) })
}

/// What the server answers from.
struct State {
    session: PageSession,
    page: String,
    token: String,
    hosts: Vec<String>,
    dialect: Dialect,
}

/// Answers every request until the server is stopped; returns why it ended otherwise (it can no
/// longer accept a connection).
fn answer_all(server: &Server, mut state: State, stopping: &AtomicBool) -> Option<String> {
    loop {
        let request = match server.recv() {
            Ok(request) => request,
            Err(_) if stopping.load(Ordering::SeqCst) => return None,
            Err(e) => return Some(format!("the server can no longer accept connections ({e})")),
        };
        // One request's failure, even a panic in the library, is that request's 500, never the
        // server's end. The step session it was changing may be half changed: it is given up.
        let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| answer(&mut state, request)));
        if answered.is_err() {
            state.session.give_up_stepping();
            eprintln!(
                "bert-trace: a request to the server failed inside bert-trace; the server goes on, without stepping"
            );
        }
    }
}

/// One response: its status, type and body.
struct Reply {
    status: u16,
    kind: &'static str,
    body: Vec<u8>,
}

impl Reply {
    fn text(status: u16, message: &str) -> Reply {
        Reply { status, kind: "text/plain; charset=utf-8", body: format!("{message}\n").into_bytes() }
    }
    fn json(body: String) -> Reply {
        Reply { status: 200, kind: "application/json", body: body.into_bytes() }
    }
}

fn answer(state: &mut State, mut request: Request) {
    let mut reply = reply_to(state, &mut request);
    // Messages name options in the library's words: the caller's spelling here.
    if reply.kind.starts_with("text/plain") || reply.kind == "application/json" {
        let text = String::from_utf8_lossy(&reply.body).into_owned();
        reply.body = in_dialect(&text, state.dialect).into_bytes();
    }
    let header =
        |name: &str, value: &str| Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("an ASCII header");
    let response = Response::from_data(reply.body)
        .with_status_code(reply.status)
        .with_header(header("Content-Type", reply.kind))
        .with_header(header("Cache-Control", "no-store"))
        .with_header(header("X-Content-Type-Options", "nosniff"))
        .with_header(header("Referrer-Policy", "no-referrer"));
    let _ = request.respond(response);
}

fn reply_to(state: &mut State, request: &mut Request) -> Reply {
    let url = request.url().to_string();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    let Some(path) = decoded(path) else { return Reply::text(400, "the path is not valid percent-encoded UTF-8") };
    if path.split('/').any(|part| part == "..") || path.contains("..") {
        return Reply::text(400, "the path holds `..`: nothing outside the page is served");
    }
    let Some(query) = parsed_query(query) else {
        return Reply::text(400, "the query is not valid percent-encoded UTF-8");
    };
    let host = request.headers().iter().find(|h| h.field.equiv("Host")).map(|h| h.value.as_str().to_string());
    match host {
        Some(host) if state.hosts.iter().any(|ours| ours.eq_ignore_ascii_case(&host)) => {}
        Some(host) => return Reply::text(403, &format!("Host {host} is not this server's")),
        None => return Reply::text(400, "the request names no Host"),
    }
    // The page is opened by its URL, with the token in it; the page's own requests carry it in
    // a header, where no log or history of URLs keeps it.
    let in_url = || query.iter().find(|(k, _)| k == "token").map(|(_, v)| v.clone());
    let given = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("X-Bert-Trace-Token"))
        .map(|h| h.value.as_str().to_string())
        .or_else(|| if path == "/" { in_url() } else { None });
    if !given.is_some_and(|given| same_secret(&given, &state.token)) {
        return Reply::text(403, "a missing or wrong token: open the page by the URL its server gave");
    }
    let body = match request.body_length() {
        Some(n) if n > MOST_BODY => return Reply::text(413, &format!("a body of {n} bytes; at most {MOST_BODY}")),
        _ => {
            let mut body = Vec::new();
            match request.as_reader().take(MOST_BODY as u64 + 1).read_to_end(&mut body) {
                Ok(_) if body.len() > MOST_BODY => {
                    return Reply::text(413, &format!("a body of more than {MOST_BODY} bytes"));
                }
                Ok(_) => body,
                Err(e) => return Reply::text(400, &format!("the body could not be read ({e})")),
            }
        }
    };
    let arg = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let answered: Result<Reply> = match (request.method(), path.as_str()) {
        (Method::Get, "/") => {
            Ok(Reply { status: 200, kind: "text/html; charset=utf-8", body: state.page.clone().into_bytes() })
        }
        (Method::Get, "/api/explain") => match arg("target") {
            Some(target) => state.session.explain(target).map(Reply::json),
            None => Ok(Reply::text(400, "explain: give target=STAGE[INDEX]")),
        },
        (Method::Get, "/api/state") => state.session.state().map(|a| Reply::json(json(&a))),
        (Method::Post, "/api/step") => match String::from_utf8(body) {
            Ok(line) if line.trim().contains('\n') => Ok(Reply::text(400, "step: one command per request")),
            Ok(line) => state.session.step(&line).map(|a| Reply::json(json(&a))),
            Err(_) => Ok(Reply::text(400, "step: the command is not UTF-8")),
        },
        (Method::Get, "/api/picture") => {
            let number = |name: &str| -> std::result::Result<Option<usize>, Reply> {
                match arg(name) {
                    None | Some("") => Ok(None),
                    Some(n) => n
                        .parse()
                        .map(Some)
                        .map_err(|_| Reply::text(400, &format!("picture: {name}={n} is not a count from 0"))),
                }
            };
            match (number("seq"), number("head")) {
                // A stage with no picture (the ids, the pooler's [B,H]) is an answer, not a bad
                // request: the SVG, or why there is none.
                (Ok(seq), Ok(head)) => state.session.picture(seq.unwrap_or(0), head).map(|picture| {
                    Reply::json(match picture {
                        Ok(svg) => json(&serde_json::json!({ "svg": svg })),
                        Err(why) => json(&serde_json::json!({ "svg": null, "why": why })),
                    })
                }),
                (Err(reply), _) | (_, Err(reply)) => Ok(reply),
            }
        }
        (_, "/" | "/api/explain" | "/api/state" | "/api/step" | "/api/picture") => {
            Ok(Reply::text(405, &format!("{} is not answered at {path}", request.method())))
        }
        _ => Ok(Reply::text(404, &format!("nothing is served at {path}"))),
    };
    // The library's refusals (a malformed index, an unknown stage, a bad command) are the
    // request's fault: 400 with their one line.
    answered.unwrap_or_else(|error| Reply::text(400, &error.to_string().replace('\n', " ")))
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("an answer is JSON")
}

/// A random 128-bit token, in hex.
fn token() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::Request(format!("{SERVE}: no randomness for the session's token ({e})")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Compares a given token with the session's without stopping at the first difference.
fn same_secret(given: &str, ours: &str) -> bool {
    given.len() == ours.len() && given.bytes().zip(ours.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// `text` with its %XX escapes decoded; None when an escape is malformed or the result is not
/// UTF-8.
fn decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// A query string's pairs, decoded (`+` is a space, as a form writes it).
fn parsed_query(query: &str) -> Option<Vec<(String, String)>> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            Some((decoded(&key.replace('+', " "))?, decoded(&value.replace('+', " "))?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_decode_and_malformed_ones_are_refused() {
        assert_eq!(decoded("/a%2e%2E/b").as_deref(), Some("/a../b"));
        assert_eq!(decoded("%zz"), None);
        assert_eq!(decoded("%2"), None);
        assert_eq!(decoded("%ff"), None);
        let query = parsed_query("target=layer0.attention.probs%5B0%2C0%2C3%2C5%5D&x=a+b").expect("decodes");
        assert_eq!(query[0].1, "layer0.attention.probs[0,0,3,5]");
        assert_eq!(query[1].1, "a b");
    }

    #[test]
    fn a_token_is_the_same_only_when_every_character_is() {
        assert!(same_secret("abcd", "abcd"));
        assert!(!same_secret("abce", "abcd"));
        assert!(!same_secret("abc", "abcd"));
    }
}
