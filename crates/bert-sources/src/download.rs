//! Downloading one file of a hub repo into the cache, with hf-hub's blocking API (ureq, rustls):
//! the blob, the snapshot link and `refs/<revision>` land where huggingface_hub puts them; a
//! progress bar goes to stderr when it is a terminal; `HF_ENDPOINT` and `HF_TOKEN` are honoured;
//! a download that breaks off leaves `blobs/<etag>.part`, which the next run resumes with an HTTP
//! Range request.
//!
//! Three things hf-hub does not do are done here:
//! - It sets no timeout: a server that accepts the connection and never answers would hang the
//!   command. A watchdog ends the run with one line when no byte has arrived for
//!   `HF_HUB_DOWNLOAD_TIMEOUT` seconds (10 by default, huggingface_hub's variable and default).
//! - It never checks a finished download. A server that ignores the Range header of a resumed
//!   download answers with the whole file, which hf-hub appends to the part it has and renames
//!   into place as if complete. So every blob fetched here is checked against its name, which
//!   the hub makes the file's sha256 (large files) or its git blob sha1 (small ones); a blob that
//!   does not match is deleted together with its snapshot link, so nothing that looks complete
//!   is left behind.
//! - Its errors keep the HTTP status only inside ureq's error; it is read here, with the hub's
//!   `X-Error-Code`, to tell a missing file (fine for an optional one) from a missing repo or
//!   revision, and to say each in one line.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hf_hub::api::sync::{Api, ApiBuilder, ApiError};
use hf_hub::api::Progress;
use hf_hub::{Repo, RepoType};
use sha2::Digest;

use super::cache::{hf_home, Env, HubCache};
use super::id::HubId;
use super::{HubError, HubFailure};
use crate::error::{Error, Result};

/// The hub, unless `HF_ENDPOINT` names another (a mirror, or a test server).
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Fetches files of hub repos into one cache.
pub struct Downloader {
    api: Api,
    pub endpoint: String,
    cache: HubCache,
    progress: bool,
    /// How long a download may go without a byte before it is given up.
    timeout: Duration,
}

impl Downloader {
    pub fn new(cache: &HubCache, env: Env<'_>) -> Result<Downloader> {
        let endpoint = env("HF_ENDPOINT")
            .map(|e| e.trim_end_matches('/').to_string())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let progress = !env("HF_HUB_DISABLE_PROGRESS_BARS")
            .is_some_and(|v| ["1", "ON", "YES", "TRUE"].contains(&v.to_uppercase().as_str()));
        let timeout = match env("HF_HUB_DOWNLOAD_TIMEOUT") {
            None => Duration::from_secs(10),
            Some(text) => match text.trim().parse::<f64>() {
                Ok(seconds) if seconds.is_finite() && seconds > 0.0 => Duration::from_secs_f64(seconds),
                _ => {
                    return Err(Error::Request(format!(
                        "HF_HUB_DOWNLOAD_TIMEOUT is `{text}`, expected a number of seconds greater than 0"
                    )))
                }
            },
        };
        let api = ApiBuilder::from_cache(hf_hub::Cache::new(cache.dir.clone()))
            .with_endpoint(endpoint.clone())
            .with_token(token(env))
            .with_progress(false)
            .build()
            .map_err(|e| Error::Request(format!("cannot set up the HTTP client: {e}")))?;
        Ok(Downloader { api, endpoint, cache: cache.clone(), progress, timeout })
    }

    /// A download of `file` that has sent nothing for longer than the timeout.
    fn stalled(&self, id: &HubId, file: &str) -> Error {
        let seconds = self.timeout.as_secs_f64();
        let problem = format!(
            "{file} from {}: timed out: no data for {seconds:.1} s (set HF_HUB_DOWNLOAD_TIMEOUT to wait longer)",
            self.endpoint
        );
        HubError::new(id, HubFailure::Network, problem).into()
    }

    /// The URL a file is downloaded from.
    pub fn url(&self, id: &HubId, file: &str) -> String {
        self.repo(id).url(file)
    }

    fn repo(&self, id: &HubId) -> hf_hub::api::sync::ApiRepo {
        self.api.repo(Repo::with_revision(id.repo.clone(), RepoType::Model, id.revision.clone()))
    }

    /// Downloads `file` of `id` into the cache and returns its path in the snapshot, or `None`
    /// when the repo has no such file (HTTP 404).
    pub fn fetch(&self, id: &HubId, file: &str) -> Result<Option<PathBuf>> {
        let url = self.url(id, file);
        let watch = Watch::start();
        let bar = (self.progress && std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .then(indicatif::ProgressBar::no_length);
        // The download runs on a thread of its own, and this one waits for it while data comes:
        // a download that stalls is given up with an error the caller reports (a notebook's
        // kernel lives on), its thread left to end with its connection.
        let (repo, name, watched) = (self.repo(id), file.to_string(), Watched { watch: watch.clone(), bar });
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = send.send(repo.download_with_progress(&name, watched));
        });
        let result = loop {
            match receive.recv_timeout(Duration::from_millis(50).min(self.timeout)) {
                Ok(result) => break result,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if watch.quiet() <= self.timeout => continue,
                // Nothing of the user's is being written: the output directory is touched only
                // after the model is loaded, and a partial download is kept for the next run.
                _ => return Err(self.stalled(id, file)),
            }
        };
        match result {
            Ok(path) => {
                self.verify(id, file, &path)?;
                Ok(Some(path))
            }
            Err(ApiError::RequestError(error)) => match *error {
                ureq::Error::Status(status, response) => {
                    let code = response.header("x-error-code").unwrap_or_default().to_string();
                    self.refused(id, file, &url, status, &code)
                }
                // ureq's message names the URL, the kind of failure and its cause.
                ureq::Error::Transport(transport) => Err(HubError::new(
                    id,
                    HubFailure::Network,
                    format!("cannot download {file} from {}: {transport}", self.endpoint),
                )
                .into()),
            },
            Err(ApiError::IoError(error)) => Err(HubError::new(
                id,
                HubFailure::Broken,
                format!(
                    "the download of {file} from {url} broke off ({error}); what arrived is kept in {} and the next \
                     run resumes it",
                    self.cache.repo_dir(&id.repo).join("blobs").display()
                ),
            )
            .into()),
            Err(ApiError::MissingHeader(header)) => Err(HubError::new(
                id,
                HubFailure::Network,
                format!(
                    "{url} answered without the {header} header that a Hugging Face hub sends; is HF_ENDPOINT ({}) a hub?",
                    self.endpoint
                ),
            )
            .into()),
            Err(other) => {
                Err(HubError::new(id, HubFailure::Network, format!("downloading {file} from {url} failed: {other}")).into())
            }
        }
    }

    /// What an HTTP error status means for `file`: `Ok(None)` for a file the repo does not have.
    fn refused(&self, id: &HubId, file: &str, url: &str, status: u16, code: &str) -> Result<Option<PathBuf>> {
        let (kind, problem) = match (status, code) {
            (_, "RepoNotFound") => (
                HubFailure::NotFound,
                format!(
                    "no such model on {} (or it is private or gated: set HF_TOKEN to a token that may read it)",
                    self.endpoint
                ),
            ),
            (_, "RevisionNotFound") => {
                (HubFailure::NotFound, format!("the model has no revision `{}` on {}", id.revision, self.endpoint))
            }
            (404, _) => return Ok(None),
            (401 | 403, _) => (
                HubFailure::Access,
                format!(
                    "{url} refused access (HTTP {status}): the model is gated or private; accept its terms on the \
                     hub and set HF_TOKEN"
                ),
            ),
            (416, _) => (
                HubFailure::Broken,
                format!(
                    "{url} refused to resume the download of {file} (HTTP 416); delete the *.part files in {} and \
                     run again",
                    self.cache.repo_dir(&id.repo).join("blobs").display()
                ),
            ),
            _ => (
                HubFailure::Network,
                format!(
                    "{url} answered HTTP {status}{}",
                    if code.is_empty() { String::new() } else { format!(" ({code})") }
                ),
            ),
        };
        Err(HubError::new(id, kind, problem).into())
    }

    /// Checks the blob behind `path` against the hash in its name, deleting both when they
    /// disagree. Blobs named otherwise (a mirror's own etags) are not checked.
    fn verify(&self, id: &HubId, file: &str, path: &Path) -> Result<()> {
        let blob = match std::fs::read_link(path) {
            Ok(target) => path.parent().expect("a snapshot file has a parent").join(target),
            Err(_) => path.to_path_buf(),
        };
        let etag = blob.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let Some(actual) = digest_like(&blob, &etag).map_err(|e| Error::io(&blob, e))? else {
            return Ok(());
        };
        if actual == etag {
            return Ok(());
        }
        let size = std::fs::metadata(&blob).map(|m| m.len()).unwrap_or(0);
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_file(&blob);
        Err(HubError::new(
            id,
            HubFailure::Broken,
            format!(
                "the downloaded {file} ({size} bytes) does not match its hash {etag} (got {actual}); it was deleted, \
                 run again to download it afresh"
            ),
        )
        .into())
    }
}

/// The time of a download's last sign of life, shared by the thread that downloads and the one
/// that waits for it.
#[derive(Clone)]
struct Watch {
    start: Instant,
    /// Milliseconds from `start` to the last byte (or to the start).
    last: Arc<AtomicU64>,
}

impl Watch {
    fn start() -> Watch {
        Watch { start: Instant::now(), last: Arc::new(AtomicU64::new(0)) }
    }

    fn alive(&self) {
        self.last.store(self.start.elapsed().as_millis() as u64, Ordering::Release);
    }

    /// How long since the last sign of life.
    fn quiet(&self) -> Duration {
        self.start.elapsed().saturating_sub(Duration::from_millis(self.last.load(Ordering::Acquire)))
    }
}

/// hf-hub's progress callbacks, which mark the download alive and draw the bar.
struct Watched {
    watch: Watch,
    bar: Option<indicatif::ProgressBar>,
}

impl Progress for Watched {
    fn init(&mut self, size: usize, filename: &str) {
        self.watch.alive();
        if let Some(bar) = &mut self.bar {
            bar.init(size, filename);
        }
    }

    fn update(&mut self, size: usize) {
        self.watch.alive();
        if let Some(bar) = &mut self.bar {
            bar.update(size);
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = &mut self.bar {
            Progress::finish(bar);
        }
    }
}

/// The hash of `blob` of the kind its name `etag` is: sha256 for 64 hex digits, git's blob
/// sha1 for 40. `None` for any other name.
fn digest_like(blob: &Path, etag: &str) -> std::io::Result<Option<String>> {
    let hex = etag.bytes().all(|b| b.is_ascii_hexdigit());
    let mut file = std::fs::File::open(blob)?;
    let hash = match etag.len() {
        64 if hex => hash_of(sha2::Sha256::new(), &mut file)?,
        40 if hex => {
            // git hashes "blob <size>\0" followed by the content.
            let mut git = sha1::Sha1::new();
            git.update(format!("blob {}\0", file.metadata()?.len()).as_bytes());
            hash_of(git, &mut file)?
        }
        _ => return Ok(None),
    };
    Ok(Some(hash))
}

/// `digest` fed the rest of `file`, in hex.
fn hash_of<D: Digest>(mut digest: D, file: &mut std::fs::File) -> std::io::Result<String> {
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        digest.update(&buffer[..n]);
    }
    Ok(digest.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// `HF_TOKEN`, else the token file huggingface_hub's `hf auth login` writes.
fn token(env: Env<'_>) -> Option<String> {
    if let Some(token) = env("HF_TOKEN") {
        return Some(token);
    }
    let path = env("HF_TOKEN_PATH").map(PathBuf::from).unwrap_or_else(|| hf_home(env).join("token"));
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_those_the_hub_names_blobs_by() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("blob");
        std::fs::write(&path, b"hello\n").unwrap();
        // `printf 'hello\n' | sha256sum` and `printf 'hello\n' | git hash-object --stdin`.
        let cases = [
            ("5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03", true),
            ("ce013625030ba8dba906f756967f9e9ca394464a", true),
            ("0000000000000000000000000000000000000000", false),
        ];
        for (etag, matches) in cases {
            let got = digest_like(&path, etag).unwrap().unwrap();
            assert_eq!(got == etag, matches, "{etag}: got {got}");
        }
        assert_eq!(digest_like(&path, "\"W/abc\"").unwrap(), None);
    }
}
