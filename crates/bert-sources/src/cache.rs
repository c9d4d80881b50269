//! The local Hugging Face cache, laid out and located exactly as Python's huggingface_hub does it,
//! so that a model downloaded by transformers is found here without copying, and one downloaded
//! here is found by transformers:
//!
//! ```text
//! $HF_HUB_CACHE/models--google-bert--bert-base-uncased/
//!     refs/main                     the commit hash that `main` pointed to
//!     snapshots/<commit>/config.json -> ../../blobs/<etag>
//!     blobs/<etag>                  the bytes, named by their git or sha256 hash
//!     .no_exist/<commit>/tokenizer.json   an empty marker: the repo has no such file
//! ```
//!
//! The cache directory is `HF_HUB_CACHE`, else `HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`,
//! where `HF_HOME` defaults to `$XDG_CACHE_HOME/huggingface` or `~/.cache/huggingface`.
//! `HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) set to 1, ON, YES or TRUE forbids the network.

use std::path::PathBuf;

use super::id::{is_commit_hash, HubId};

/// The files a model directory needs; the tokenizer may be either of two.
pub const CONFIG: &str = "config.json";
pub const WEIGHTS: &str = "model.safetensors";
pub const PICKLE: &str = "pytorch_model.bin";
pub const TOKENIZER_FILES: [&str; 2] = ["tokenizer.json", "vocab.txt"];

/// The hub cache directory.
#[derive(Clone, Debug)]
pub struct HubCache {
    pub dir: PathBuf,
}

/// One cached snapshot of a repo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The repo id whose cache folder holds it (the id as given, or its other spelling).
    pub repo: String,
    pub commit: String,
    pub dir: PathBuf,
}

/// How the environment variables are read; a seam for tests.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment, with empty values treated as unset.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// huggingface_hub's reading of a boolean variable.
fn is_true(value: Option<String>) -> bool {
    value.is_some_and(|v| ["1", "ON", "YES", "TRUE"].contains(&v.to_uppercase().as_str()))
}

/// Whether the network is off limits: `HF_HUB_OFFLINE`, or else `TRANSFORMERS_OFFLINE`.
pub fn offline(env: Env<'_>) -> bool {
    is_true(env("HF_HUB_OFFLINE").or_else(|| env("TRANSFORMERS_OFFLINE")))
}

/// `~` at the start of a path is the home directory, as Python's `os.path.expanduser` has it.
fn expand_home(path: String, env: Env<'_>) -> PathBuf {
    match (path.strip_prefix('~'), env("HOME")) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => PathBuf::from(format!("{home}{rest}")),
        _ => PathBuf::from(path),
    }
}

/// `HF_HOME`: where the cache, the token and the other state of huggingface_hub live.
pub fn hf_home(env: Env<'_>) -> PathBuf {
    if let Some(home) = env("HF_HOME") {
        return expand_home(home, env);
    }
    let cache = match env("XDG_CACHE_HOME") {
        Some(xdg) => expand_home(xdg, env),
        None => expand_home("~/.cache".into(), env),
    };
    cache.join("huggingface")
}

impl HubCache {
    /// The cache directory the environment names.
    pub fn from_env(env: Env<'_>) -> HubCache {
        let dir = match env("HF_HUB_CACHE").or_else(|| env("HUGGINGFACE_HUB_CACHE")) {
            Some(dir) => expand_home(dir, env),
            None => hf_home(env).join("hub"),
        };
        HubCache { dir }
    }

    /// `models--org--name`: the folder of one repo.
    pub fn repo_dir(&self, repo: &str) -> PathBuf {
        self.dir.join(format!("models--{}", repo.replace('/', "--")))
    }

    /// The snapshot `revision` of `repo` resolves to, if that snapshot folder exists: a commit
    /// hash names its folder directly, a branch or tag through `refs/<revision>`.
    pub fn snapshot(&self, repo: &str, revision: &str) -> Option<Snapshot> {
        let repo_dir = self.repo_dir(repo);
        let commit = if is_commit_hash(revision) {
            revision.to_string()
        } else {
            let text = std::fs::read_to_string(repo_dir.join("refs").join(revision)).ok()?;
            text.trim().to_string()
        };
        let dir = repo_dir.join("snapshots").join(&commit);
        dir.is_dir().then(|| Snapshot { repo: repo.to_string(), commit, dir })
    }

    /// The snapshot of `id` under either spelling of its repo id, preferring a complete one.
    pub fn find(&self, id: &HubId) -> Option<Snapshot> {
        let found: Vec<Snapshot> =
            id.cache_aliases().iter().filter_map(|repo| self.snapshot(repo, &id.revision)).collect();
        let complete = found.iter().find(|s| s.missing().is_empty()).cloned();
        complete.or_else(|| found.into_iter().next())
    }

    /// Records that `repo` at `commit` has no `file`, as huggingface_hub does after a 404.
    pub fn mark_absent(&self, repo: &str, commit: &str, file: &str) -> std::io::Result<()> {
        let marker = self.repo_dir(repo).join(".no_exist").join(commit).join(file);
        std::fs::create_dir_all(marker.parent().expect("a marker has a parent"))?;
        std::fs::File::create(marker).map(drop)
    }

    /// Whether a 404 for `file` at `commit` was recorded.
    pub fn is_marked_absent(&self, repo: &str, commit: &str, file: &str) -> bool {
        self.repo_dir(repo).join(".no_exist").join(commit).join(file).is_file()
    }
}

impl Snapshot {
    /// What this snapshot lacks to be loaded: `config.json`, `model.safetensors`, and a tokenizer
    /// (`tokenizer.json or vocab.txt`). A `pytorch_model.bin` does not stand in for the weights.
    pub fn missing(&self) -> Vec<String> {
        let has = |file: &str| self.dir.join(file).is_file();
        let mut missing = Vec::new();
        for file in [CONFIG, WEIGHTS] {
            if !has(file) {
                missing.push(file.to_string());
            }
        }
        if !TOKENIZER_FILES.iter().any(|f| has(f)) {
            missing.push(TOKENIZER_FILES.join(" or "));
        }
        missing
    }

    /// Whether the snapshot holds the pickled weights but no safetensors.
    pub fn pickle_only(&self) -> bool {
        !self.dir.join(WEIGHTS).is_file() && self.dir.join(PICKLE).is_file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn the_cache_directory_follows_huggingface_hub() {
        // (environment, expected cache directory)
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("HOME", "/home/ada")], "/home/ada/.cache/huggingface/hub"),
            (&[("HOME", "/home/ada"), ("XDG_CACHE_HOME", "/xdg")], "/xdg/huggingface/hub"),
            (&[("HOME", "/home/ada"), ("HF_HOME", "/hf")], "/hf/hub"),
            (&[("HOME", "/home/ada"), ("HF_HOME", "~/hf")], "/home/ada/hf/hub"),
            (&[("HF_HOME", "/hf"), ("HUGGINGFACE_HUB_CACHE", "/old")], "/old"),
            (&[("HF_HOME", "/hf"), ("HUGGINGFACE_HUB_CACHE", "/old"), ("HF_HUB_CACHE", "/new")], "/new"),
        ];
        for (pairs, want) in cases {
            let env = env_of(pairs);
            let got = HubCache::from_env(&env).dir;
            assert_eq!(got, PathBuf::from(want), "environment {pairs:?}");
        }
    }

    #[test]
    fn offline_is_read_like_huggingface_hub() {
        let cases: &[(&[(&str, &str)], bool)] = &[
            (&[], false),
            (&[("HF_HUB_OFFLINE", "1")], true),
            (&[("HF_HUB_OFFLINE", "yes")], true),
            (&[("HF_HUB_OFFLINE", "0")], false),
            (&[("TRANSFORMERS_OFFLINE", "TRUE")], true),
            (&[("HF_HUB_OFFLINE", "0"), ("TRANSFORMERS_OFFLINE", "1")], false),
        ];
        for (pairs, want) in cases {
            let env = env_of(pairs);
            assert_eq!(offline(&env), *want, "environment {pairs:?}");
        }
    }

    #[test]
    fn snapshots_resolve_through_refs_or_a_commit_hash() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = HubCache { dir: tmp.path().to_path_buf() };
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let repo = cache.repo_dir("google-bert/bert-base-uncased");
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::create_dir_all(repo.join("snapshots").join(commit)).unwrap();
        std::fs::write(repo.join("refs/main"), commit).unwrap();
        assert!(repo.ends_with("models--google-bert--bert-base-uncased"));
        // (id as given, whether it is found)
        let cases = [
            ("google-bert/bert-base-uncased", true),
            ("bert-base-uncased", true),
            (&*format!("bert-base-uncased@{commit}"), true),
            ("bert-base-uncased@v2", false),
            ("bert-base-cased", false),
        ];
        for (spec, want) in cases {
            let found = cache.find(&HubId::parse(spec).unwrap());
            assert_eq!(found.is_some(), want, "{spec}: {found:?}");
            if let Some(snapshot) = found {
                assert_eq!(snapshot.commit, commit);
                assert_eq!(snapshot.repo, "google-bert/bert-base-uncased");
            }
        }
    }
}
