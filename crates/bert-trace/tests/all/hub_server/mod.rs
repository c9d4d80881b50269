//! A small Hugging Face hub on 127.0.0.1 for the download tests: a `std::net::TcpListener` and one
//! thread per connection, serving model repos in the hub's URL layout with the headers that
//! hf-hub and Python's huggingface_hub read.
//!
//! - `GET|HEAD /{repo}/resolve/{revision}/{file}`: `revision` is `main` or the repo's commit.
//!   Small files are served there, with `ETag` = their git blob sha1, `X-Repo-Commit`,
//!   `Content-Length` and Range support. Large files (`*.safetensors`, `*.bin`) answer `302` to
//!   `http://localhost:{port}/cdn/{sha256}` (another host name, as the hub's CDN is another host)
//!   with `X-Linked-Etag` = their sha256 and `X-Linked-Size`, as the hub redirects LFS files.
//! - A legacy id (`bert-tiny`) answers `307` with a relative `Location` to its new id
//!   (`google-bert/bert-tiny`), as the hub does for the original BERT checkpoints.
//! - Errors as the hub gives them: an unknown repo `401` with `X-Error-Code: RepoNotFound`, an
//!   unknown revision `404` with `RevisionNotFound`, a missing file `404` with `EntryNotFound`.
//!
//! Faults for the tests: the body of a file can be cut after half its bytes (the connection is
//! closed), and a Range that does not start at 0 can be ignored (`200` with the whole file), as a
//! server that cannot resume does.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use sha2::Digest;

/// One repo: its commit hash, and files by path with their sha256 (worked out once).
#[derive(Clone, Debug)]
pub struct HubRepo {
    pub id: String,
    pub commit: String,
    pub files: BTreeMap<String, Vec<u8>>,
    sha256: BTreeMap<String, String>,
}

impl HubRepo {
    /// A repo with the files of `dir` (not its subfolders), minus `except`.
    pub fn from_dir(id: &str, dir: &Path, except: &[&str]) -> HubRepo {
        let mut files = BTreeMap::new();
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_file() && !except.contains(&name.as_str()) {
                files.insert(name, std::fs::read(&path).unwrap());
            }
        }
        HubRepo::new(id, files)
    }

    /// A repo whose commit hash is derived from its id and files, so it is stable across runs.
    pub fn new(id: &str, files: BTreeMap<String, Vec<u8>>) -> HubRepo {
        let mut all = id.as_bytes().to_vec();
        for (name, bytes) in &files {
            all.extend(name.as_bytes());
            all.extend(bytes);
        }
        let commit = hex(&sha1::Sha1::digest(&all));
        let sha256 = files.iter().map(|(name, bytes)| (name.clone(), sha256(bytes))).collect();
        HubRepo { id: id.into(), commit, files, sha256 }
    }

    pub fn with_file(mut self, name: &str, bytes: impl Into<Vec<u8>>) -> HubRepo {
        self.files.insert(name.into(), bytes.into());
        let files = std::mem::take(&mut self.files);
        HubRepo::new(&self.id, files)
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn sha256(bytes: &[u8]) -> String {
    hex(&sha2::Sha256::digest(bytes))
}

/// git's blob hash, the hub's ETag for files not stored in LFS.
pub fn git_sha1(bytes: &[u8]) -> String {
    let mut all = format!("blob {}\0", bytes.len()).into_bytes();
    all.extend(bytes);
    hex(&sha1::Sha1::digest(&all))
}

fn is_lfs(file: &str) -> bool {
    file.ends_with(".safetensors") || file.ends_with(".bin")
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Logged {
    pub method: String,
    pub path: String,
    pub range: Option<String>,
    pub status: u16,
    /// Body bytes sent (fewer than promised when the connection was cut).
    pub sent: usize,
}

#[derive(Default)]
struct Faults {
    /// Paths whose next N bodies are cut after half their bytes.
    cut: BTreeMap<String, usize>,
    ignore_range: bool,
}

#[derive(Default)]
struct State {
    repos: Vec<HubRepo>,
    legacy: BTreeMap<String, String>,
    /// Every request, logged when its request line arrives (status 0 until it is answered), so
    /// that "no request was made" cannot pass while one is in flight.
    log: Vec<Logged>,
    /// Every connection accepted, whether or not a request came on it.
    connections: usize,
    faults: Faults,
}

/// The running server; it stops when dropped.
pub struct HubServer {
    pub endpoint: String,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HubServer {
    pub fn start(repos: Vec<HubRepo>) -> HubServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State { repos, ..State::default() }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop, endpoint) = (Arc::clone(&state), Arc::clone(&stop), endpoint.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    state.lock().unwrap().connections += 1;
                    let (state, endpoint) = (Arc::clone(&state), endpoint.clone());
                    std::thread::spawn(move || serve(stream, &state, &endpoint));
                }
            })
        };
        HubServer { endpoint, state, stop, thread: Some(thread) }
    }

    /// Makes `legacy` redirect to `id`, as `bert-base-uncased` does to `google-bert/bert-base-uncased`.
    pub fn redirect(&self, legacy: &str, id: &str) {
        self.state.lock().unwrap().legacy.insert(legacy.into(), id.into());
    }

    /// Cuts the next `times` bodies sent for `path` after half their bytes.
    pub fn cut_after_half(&self, path: &str, times: usize) {
        self.state.lock().unwrap().faults.cut.insert(path.into(), times);
    }

    pub fn ignore_range(&self, ignore: bool) {
        self.state.lock().unwrap().faults.ignore_range = ignore;
    }

    pub fn log(&self) -> Vec<Logged> {
        self.state.lock().unwrap().log.clone()
    }

    /// How many connections were accepted since the last [`HubServer::clear_log`].
    pub fn connections(&self) -> usize {
        self.state.lock().unwrap().connections
    }

    pub fn clear_log(&self) {
        let mut state = self.state.lock().unwrap();
        state.log.clear();
        state.connections = 0;
    }
}

impl Drop for HubServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.endpoint.trim_start_matches("http://"));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What to send back.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn empty(status: u16, headers: Vec<(String, String)>) -> Reply {
        Reply { status, headers, body: Vec::new() }
    }
}

fn header(name: &str, value: impl ToString) -> (String, String) {
    (name.to_string(), value.to_string())
}

fn serve(stream: TcpStream, state: &Mutex<State>, endpoint: &str) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() || request_line.is_empty() {
        return;
    }
    let mut range = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).is_err() || line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("range") {
                range = Some(value.trim().to_string());
            }
        }
    }
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
    let logged = {
        let mut state = state.lock().unwrap();
        let entry = Logged { method: method.clone(), path: path.clone(), range: range.clone(), status: 0, sent: 0 };
        state.log.push(entry);
        state.log.len() - 1
    };
    let (reply, cut) = {
        let mut state = state.lock().unwrap();
        let reply = route(&state, &path, range.as_deref(), endpoint);
        let cut = method == "GET" && reply.body.len() > 1 && {
            let left = state.faults.cut.get_mut(&path);
            match left {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    true
                }
                _ => false,
            }
        };
        (reply, cut)
    };
    let mut stream = stream;
    let mut head = format!("HTTP/1.1 {} {}\r\n", reply.status, reason(reply.status));
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\nConnection: close\r\n\r\n", reply.body.len()));
    let _ = stream.write_all(head.as_bytes());
    let body: &[u8] = match (method.as_str(), cut) {
        ("HEAD", _) => &[],
        (_, true) => &reply.body[..reply.body.len() / 2],
        _ => &reply.body,
    };
    let _ = stream.write_all(body);
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let mut state = state.lock().unwrap();
    // A clear_log() meanwhile may have removed the entry.
    if let Some(entry) = state.log.get_mut(logged).filter(|e| e.path == path) {
        entry.status = reply.status;
        entry.sent = body.len();
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        307 => "Temporary Redirect",
        401 => "Unauthorized",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        _ => "Whatever",
    }
}

fn route(state: &State, path: &str, range: Option<&str>, endpoint: &str) -> Reply {
    if let Some(hash) = path.strip_prefix("/cdn/") {
        let file = state
            .repos
            .iter()
            .flat_map(|r| r.sha256.iter().map(move |(name, sha)| (sha, &r.files[name])))
            .find(|(sha, _)| *sha == hash)
            .map(|(_, bytes)| bytes);
        return match file {
            Some(bytes) => ranged(bytes, range, state.faults.ignore_range, vec![header("ETag", format!("\"{hash}\""))]),
            None => Reply::empty(404, vec![]),
        };
    }
    let Some((repo_id, rest)) = path.trim_start_matches('/').split_once("/resolve/") else {
        return Reply::empty(404, vec![]);
    };
    if let Some(new_id) = state.legacy.get(repo_id) {
        return Reply::empty(307, vec![header("Location", format!("/{new_id}/resolve/{rest}"))]);
    }
    let Some(repo) = state.repos.iter().find(|r| r.id == repo_id) else {
        return Reply::empty(401, vec![header("X-Error-Code", "RepoNotFound")]);
    };
    let (revision, file) = rest.split_once('/').unwrap_or((rest, ""));
    let revision = revision.replace("%2F", "/");
    if revision != "main" && revision != repo.commit {
        return Reply::empty(404, vec![header("X-Error-Code", "RevisionNotFound")]);
    }
    let commit = header("X-Repo-Commit", &repo.commit);
    let Some(bytes) = repo.files.get(file) else {
        return Reply::empty(404, vec![header("X-Error-Code", "EntryNotFound"), commit]);
    };
    if is_lfs(file) {
        let hash = &repo.sha256[file];
        return Reply::empty(
            302,
            vec![
                // Another host name for the same server, as the hub's CDN is another host.
                header("Location", format!("{}/cdn/{hash}", endpoint.replace("127.0.0.1", "localhost"))),
                header("X-Linked-Etag", format!("\"{hash}\"")),
                header("X-Linked-Size", bytes.len()),
                header("ETag", format!("\"{}\"", git_sha1(hash.as_bytes()))),
                commit,
            ],
        );
    }
    let etag = header("ETag", format!("\"{}\"", git_sha1(bytes)));
    ranged(bytes, range, state.faults.ignore_range, vec![etag, commit])
}

/// The whole file, or with `Range: bytes=a-` / `bytes=a-b` the part asked for.
fn ranged(bytes: &[u8], range: Option<&str>, ignore_range: bool, mut headers: Vec<(String, String)>) -> Reply {
    headers.push(header("Accept-Ranges", "bytes"));
    let wanted = range.and_then(|r| r.strip_prefix("bytes=")).and_then(|r| r.split_once('-'));
    // A server that cannot resume answers a range that does not start at 0 with the whole file.
    let resumes = |(start, _): &(&str, &str)| !(ignore_range && *start != "0");
    let Some((start, end)) = wanted.filter(resumes) else {
        return Reply { status: 200, headers, body: bytes.to_vec() };
    };
    let len = bytes.len();
    let start: usize = start.parse().unwrap_or(0);
    let end: usize = if end.is_empty() { len.saturating_sub(1) } else { end.parse().unwrap_or(len - 1).min(len - 1) };
    if start >= len || start > end {
        headers.push(header("Content-Range", format!("bytes */{len}")));
        return Reply::empty(416, headers);
    }
    headers.push(header("Content-Range", format!("bytes {start}-{end}/{len}")));
    Reply { status: 206, headers, body: bytes[start..=end].to_vec() }
}
