//! `--model ID`: a model from the Hugging Face hub, found in the local cache, or downloaded into it
//! file by file: config.json first (so that a model that is not BERT is refused before its weights
//! are fetched), then the tokenizer files and the sentence-transformers pooling config that exist,
//! then model.safetensors. A cached snapshot that has everything is used without any network.

use std::path::{Path, PathBuf};

use bert_core::model::sentence_pooling::DEFAULT_POOLING_DIR;
use bert_core::BertConfig;

use super::cache::{offline, Env, HubCache, Snapshot, CONFIG, PICKLE, TOKENIZER_FILES, WEIGHTS};
use super::download::Downloader;
use super::id::HubId;
use super::{HubError, HubFailure};
use crate::error::{Error, Result, Within};

/// Files fetched when the repo has them; a 404 is recorded in `.no_exist` and not asked again.
fn optional_files() -> Vec<String> {
    vec![
        "tokenizer_config.json".into(),
        TOKENIZER_FILES[0].into(),
        TOKENIZER_FILES[1].into(),
        "modules.json".into(),
        format!("{DEFAULT_POOLING_DIR}/config.json"),
    ]
}

/// The snapshot directory holding `id`, from the cache or downloaded.
pub fn snapshot_dir(id: &HubId, env: Env<'_>, notes: &mut Vec<String>) -> Result<PathBuf> {
    let cache = HubCache::from_env(env);
    let cached = cache.find(id);
    if let Some(snapshot) = &cached {
        if snapshot.pickle_only() {
            return Err(HubError::new(id, HubFailure::Unsupported, pickle_only(&snapshot.dir)).into());
        }
        if snapshot.missing().is_empty() {
            notes.push(format!(
                "note: {id} is commit {} from the Hugging Face cache, {}",
                short(&snapshot.commit),
                snapshot.dir.display()
            ));
            return Ok(snapshot.dir.clone());
        }
    }
    if offline(env) {
        return Err(HubError::new(id, HubFailure::Offline, offline_problem(id, &cache, cached.as_ref())).into());
    }
    download(id, &cache, env)
}

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(10)]
}

/// The one line for a snapshot that has only the pickled weights.
fn pickle_only(dir: &Path) -> String {
    format!(
        "the snapshot {} has only {PICKLE} (a pickle, never loaded here); convert it with \
         `python scripts/convert_to_safetensors.py {}`, then run again",
        dir.display(),
        dir.display()
    )
}

/// Why an offline run cannot use the cache: nothing cached, or what the snapshot lacks.
fn offline_problem(id: &HubId, cache: &HubCache, cached: Option<&Snapshot>) -> String {
    match cached {
        Some(snapshot) => format!(
            "the cached snapshot {} lacks {}, and HF_HUB_OFFLINE forbids downloading; run once \
             without HF_HUB_OFFLINE to complete it",
            snapshot.dir.display(),
            snapshot.missing().join(", ")
        ),
        None => {
            let folders: Vec<String> = id
                .cache_aliases()
                .iter()
                .map(|repo| cache.repo_dir(repo).file_name().unwrap().to_string_lossy().into_owned())
                .collect();
            format!(
                "not in the Hugging Face cache {} (looked for {} at revision {}), and HF_HUB_OFFLINE \
                 forbids downloading it; run once without HF_HUB_OFFLINE, or give a model directory",
                cache.dir.display(),
                folders.join(" and "),
                id.revision
            )
        }
    }
}

/// The snapshot directory a downloaded `file` sits in (`file` may have folders).
fn snapshot_of(path: &Path, file: &str) -> PathBuf {
    let depth = Path::new(file).components().count();
    path.ancestors().nth(depth).expect("a snapshot file is inside its snapshot").to_path_buf()
}

fn download(id: &HubId, cache: &HubCache, env: Env<'_>) -> Result<PathBuf> {
    let downloader = Downloader::new(cache, env)?;
    eprintln!("note: downloading {id} from {} into {}", downloader.endpoint, cache.dir.display());
    let config = downloader.fetch(id, CONFIG)?.ok_or_else(|| {
        HubError::new(
            id,
            HubFailure::NotFound,
            format!("the model has no {CONFIG} ({} answered 404)", downloader.url(id, CONFIG)),
        )
    })?;
    let snapshot = snapshot_of(&config, CONFIG);
    let commit = snapshot.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
    BertConfig::from_file(&config).within(|| id.to_string())?;
    let same_snapshot = |path: &Path, file: &str| -> Result<()> {
        let found = snapshot_of(path, file);
        if found != snapshot {
            let problem = format!(
                "the repository changed while downloading ({CONFIG} is from {}, {file} from {}); run again",
                snapshot.display(),
                found.display()
            );
            return Err(HubError::new(id, HubFailure::Broken, problem).into());
        }
        Ok(())
    };
    for file in optional_files() {
        if snapshot.join(&file).is_file() || cache.is_marked_absent(&id.repo, &commit, &file) {
            continue;
        }
        match downloader.fetch(id, &file)? {
            Some(path) => same_snapshot(&path, &file)?,
            None => cache.mark_absent(&id.repo, &commit, &file).map_err(|e| Error::io(&cache.dir, e))?,
        }
    }
    if !TOKENIZER_FILES.iter().any(|f| snapshot.join(f).is_file()) {
        let problem = format!("the model has neither {} nor {}", TOKENIZER_FILES[0], TOKENIZER_FILES[1]);
        return Err(HubError::new(id, HubFailure::NotFound, problem).into());
    }
    if !snapshot.join(WEIGHTS).is_file() {
        eprintln!("note: downloading {id} {WEIGHTS}");
        match downloader.fetch(id, WEIGHTS)? {
            Some(path) => same_snapshot(&path, WEIGHTS)?,
            None => {
                cache.mark_absent(&id.repo, &commit, WEIGHTS).map_err(|e| Error::io(&cache.dir, e))?;
                return Err(no_weights(id, &downloader, cache, &commit, &snapshot)?.into());
            }
        }
    }
    Ok(snapshot)
}

/// The one line for a repo without model.safetensors: sharded weights are not supported, and
/// pickled ones are downloaded so that they can be converted in place.
fn no_weights(
    id: &HubId,
    downloader: &Downloader,
    cache: &HubCache,
    commit: &str,
    snapshot: &Path,
) -> Result<HubError> {
    let index = "model.safetensors.index.json";
    if downloader.fetch(id, index)?.is_some() {
        let problem =
            format!("the weights are split into several safetensors files ({index}), which bert-trace does not read");
        return Ok(HubError::new(id, HubFailure::Unsupported, problem));
    }
    cache.mark_absent(&id.repo, commit, index).map_err(|e| Error::io(&cache.dir, e))?;
    eprintln!("note: {id} has no {WEIGHTS}; downloading {PICKLE} so that it can be converted");
    match downloader.fetch(id, PICKLE)? {
        Some(_) => Ok(HubError::new(id, HubFailure::Unsupported, pickle_only(snapshot))),
        None => {
            cache.mark_absent(&id.repo, commit, PICKLE).map_err(|e| Error::io(&cache.dir, e))?;
            let problem =
                format!("the model has no {WEIGHTS} and no {PICKLE} ({} answered 404)", downloader.url(id, WEIGHTS));
            Ok(HubError::new(id, HubFailure::NotFound, problem))
        }
    }
}
