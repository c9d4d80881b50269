//! A training run's checkpoint directory: what transformers' `from_pretrained` loads
//! (`config.json`, `model.safetensors`, the tokenizer's files) and what a resumed run needs
//! (`optimizer.safetensors`, `trainer_state.json`).
//!
//! It is written by the rules dumps follow (see [`crate::io::dump`]), and one more:
//!
//! - **Nothing of the user's.** A directory is ours when it is new, empty, or carries our marker
//!   file [`MARKER`] and holds nothing but what a run writes; anything else in it, or a directory
//!   of someone else's, is refused before the run starts ([`check`]). The subdirectories a run
//!   writes (`step-K/` dumps, `checkpoint-K/` checkpoints) follow their own rules, and the ones a
//!   run will write are checked before it starts too.
//! - **All or nothing.** A save into a directory that holds a checkpoint leaves, whatever fails
//!   (a full disk, a kill, a file that cannot be replaced), either the old checkpoint whole or
//!   the new one whole:
//!   - `--save DIR` keeps the model's files at DIR's top, where `from_pretrained(DIR)` needs them,
//!     beside `checkpoint-K/` and `step-K/`. A save writes every file into `DIR/.save-STEP/` and
//!     syncs it; then a journal, `DIR/.save-journal`, records that the files are whole; then each
//!     old file moves aside into `.save-STEP/old/` and the new one into its place,
//!     `trainer_state.json` first out and last in. A failure before the journal leaves the old
//!     checkpoint untouched; a failure after it is undone file by file; a kill after it is
//!     completed by the next [`CheckpointDir::claim`] or [`read_state`] of DIR.
//!   - `checkpoint-K/` is written whole as `DIR/.checkpoint-K.new/`, then exchanged with the old
//!     one in one `rename` (Linux's `RENAME_EXCHANGE`), and the old one removed.
//! - **One run at a time** per directory.
//!
//! A [`SaveObserver`] is told of every point a save passes, so that the tests can fail it, or
//! kill the process, at each.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::adamw::Moments;
use super::corpus::Corpus;
use super::{StepLog, TrainOptions, Trainer};
use crate::error::{BertError, Result};
use crate::io::dump::{self, DirLock};
use crate::io::weights::safetensors_bytes;
use crate::io::weights::{Storage, WeightStore};
use crate::model::BertModel;

/// The file that marks a directory as a checkpoint bert-trace writes.
pub const MARKER: &str = ".bert-trace-checkpoint";
const MARKER_TEXT: &str = "bert-trace train writes checkpoints here; the files it writes are replaced on every save\n";
/// The run's step, options and losses; the last file a save moves into place.
pub const STATE: &str = "trainer_state.json";
/// The version of `trainer_state.json`'s layout.
pub const FORMAT: &str = "bert-trace-train/1";
/// The names of the files a checkpoint may hold besides the marker.
const FILES: [&str; 8] = [
    "config.json",
    "model.safetensors",
    "optimizer.safetensors",
    STATE,
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
];
/// The record that a save's files are whole in its staging directory and are being moved in.
const JOURNAL: &str = ".save-journal";
/// Where the old files of a save wait, inside the staging directory, until the save is done.
const OLD: &str = "old";

/// The files that go with a model's weights: its config.json and its tokenizer's files.
#[derive(Clone, Debug)]
pub struct ModelFiles {
    pub config_json: Vec<u8>,
    /// (file name, bytes), among `vocab.txt`, `tokenizer.json`, `tokenizer_config.json` and
    /// `special_tokens_map.json`.
    pub tokenizer: Vec<(String, Vec<u8>)>,
}

/// `trainer_state.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainerState {
    pub format: String,
    /// How many steps are done.
    pub step: usize,
    pub options: TrainOptions,
    /// The training text as the run was given it, and the SHA-256 of its bytes.
    pub file: PathBuf,
    pub file_sha256: String,
    /// The heads the run made new (a checkpoint that lacked them).
    pub fresh_heads: Vec<String>,
    /// Every step's report, from step 1.
    pub log_history: Vec<StepLog>,
    /// A classifier's evaluations on held-out examples, in order (none for pretraining).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub eval_history: Vec<super::held_out::Evaluation>,
    /// A classifier's held-out file (None: a split of `file`, or none), and how often it was
    /// evaluated: a resumed run goes on the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_file: Option<PathBuf>,
    /// The SHA-256 of `eval_file`'s bytes: a resumed run checks it is given the same file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_file_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_every: Option<usize>,
}

/// A point a save passes: after each file is written and synced, after all are (`Staged`),
/// after the journal, after each file or directory is moved into place, at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SavePoint<'a> {
    Written(&'a str),
    Staged,
    Journaled,
    Moved(&'a str),
    Done,
}

/// Told of every point a save passes; an error there fails the save at that point, as a full
/// disk or a failed rename would.
pub trait SaveObserver {
    fn reached(&mut self, point: SavePoint<'_>) -> std::io::Result<()>;
}

/// The observer of a real run: nothing to be told.
pub struct Unobserved;

impl SaveObserver for Unobserved {
    fn reached(&mut self, _: SavePoint<'_>) -> std::io::Result<()> {
        Ok(())
    }
}

/// A directory a run saves checkpoints into, claimed and locked.
#[derive(Debug)]
pub struct CheckpointDir {
    dir: PathBuf,
    /// Whether the claim created it.
    created: bool,
    _lock: Option<DirLock>,
}

/// `prefix` then a step number (`checkpoint-12`): the step.
fn numbered(name: &str, prefix: &str) -> Option<usize> {
    name.strip_prefix(prefix).filter(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))?.parse().ok()
}

/// Whether `name` in a marked directory `dir` is one a checkpoint directory holds: its files,
/// their temporary names, a save's journal and staging directory, and the subdirectories of a
/// run (`step-K/` dumps and `checkpoint-K/` checkpoints, each empty or carrying its own marker,
/// and `checkpoint-K`'s own staging names).
fn is_ours(dir: &Path, name: &str, is_dir: bool) -> bool {
    let marked_or_empty = |marker: &str| {
        let sub = dir.join(name);
        std::fs::symlink_metadata(sub.join(marker)).is_ok_and(|m| m.is_file())
            || std::fs::read_dir(&sub).is_ok_and(|mut entries| entries.next().is_none())
    };
    if is_dir {
        let staging = name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".new").or_else(|| n.strip_suffix(".old")))
            .is_some_and(|n| numbered(n, "checkpoint-").is_some());
        return (numbered(name, "step-").is_some() && marked_or_empty(dump::MARKER))
            || ((numbered(name, "checkpoint-").is_some() || staging) && marked_or_empty(MARKER))
            || (numbered(name, ".save-").is_some() && marked_or_empty(MARKER));
    }
    let inner = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")).unwrap_or(name);
    name == MARKER || name == JOURNAL || inner == JOURNAL || FILES.contains(&inner)
}

/// Refuses `dir` as a place to save a checkpoint unless it is free (absent or empty) or ours
/// (see the module documentation), without writing anything: a run checks every directory it
/// will save into before its first step.
pub fn check(dir: &Path) -> Result<()> {
    let bad = |problem: String| BertError::Checkpoint { path: dir.into(), problem };
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(BertError::io(dir, e)),
        Ok(metadata) if !metadata.is_dir() => return Err(bad("exists and is not a directory".into())),
        Ok(_) => {}
    }
    let marked = std::fs::symlink_metadata(dir.join(MARKER)).is_ok_and(|m| m.is_file());
    let mut foreign = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| BertError::io(dir, e))? {
        let entry = entry.map_err(|e| BertError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // The type as the listing gives it: a symbolic link is never ours.
        let kind = entry.file_type().map_err(|e| BertError::io(dir, e))?;
        if !(marked && !kind.is_symlink() && is_ours(dir, &name, kind.is_dir())) {
            foreign.push(name);
        }
    }
    if !foreign.is_empty() {
        foreign.sort();
        let shown: Vec<&str> = foreign.iter().take(3).map(String::as_str).collect();
        let more = if foreign.len() > 3 { format!(" and {} more", foreign.len() - 3) } else { String::new() };
        return Err(bad(format!(
            "holds files that are not a bert-trace checkpoint ({}{more}), which a save never replaces; choose an empty or \
             new directory",
            shown.join(", ")
        )));
    }
    Ok(())
}

impl CheckpointDir {
    /// Creates `dir`, or checks that what it holds is ours to replace (see [`check`]), locks it,
    /// and completes a save that a killed run left half moved in. Nothing of the user's changes.
    pub fn claim(dir: &Path) -> Result<CheckpointDir> {
        let bad = |problem: String| BertError::Checkpoint { path: dir.into(), problem };
        check(dir)?;
        let created = std::fs::symlink_metadata(dir).is_err();
        std::fs::create_dir_all(dir).map_err(|e| BertError::io(dir, e))?;
        let lock = dump::lock(dir).map_err(|_| bad("another run is saving into this directory".into()))?;
        // Checked again under the lock: another run may have been writing a moment ago.
        check(dir)?;
        if std::fs::symlink_metadata(dir.join(MARKER)).is_err() {
            write_synced(&dir.join(MARKER), MARKER_TEXT.as_bytes())?;
        }
        recover(dir)?;
        Ok(CheckpointDir { dir: dir.into(), created, _lock: lock })
    }

    /// After a run that saved nothing (it diverged at its first steps): a directory the claim
    /// created, and that holds nothing but the marker, goes, so that a failed run leaves none.
    pub fn abandon(self) {
        let only_marker = std::fs::read_dir(&self.dir)
            .is_ok_and(|entries| entries.map(|e| e.map(|e| e.file_name())).all(|n| n.is_ok_and(|n| n == MARKER)));
        if self.created && only_marker {
            let _ = std::fs::remove_file(self.dir.join(MARKER));
            let _ = std::fs::remove_dir(&self.dir);
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Saves the checkpoint of `trainer` at the directory's top: the model as
    /// `BertForPreTraining`, `files` beside it, the optimizer's state and the run's state, all
    /// or nothing (see the module documentation).
    pub fn save(&self, trainer: &Trainer, files: &ModelFiles, observer: &mut dyn SaveObserver) -> Result<()> {
        let staging = self.dir.join(format!(".save-{}", trainer.step));
        remove_dir_if_present(&staging)?;
        let written = stage(&staging, trainer, files, observer);
        let names = match written {
            Ok(names) => names,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staging);
                return Err(e);
            }
        };
        let journal = Journal { staging: staging_name(&staging), files: names };
        let text = serde_json::to_string(&journal).expect("a journal serialises");
        let journaled = write_synced(&self.dir.join(JOURNAL), text.as_bytes())
            .and_then(|()| sync_dir(&self.dir))
            .and_then(|()| observed(observer, SavePoint::Journaled, &self.dir));
        if let Err(e) = journaled {
            let _ = std::fs::remove_file(self.dir.join(JOURNAL));
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
        let mut moved = Vec::new();
        let result = move_in(&self.dir, &journal, observer, &mut moved);
        if result.is_err() {
            // Undone file by file, the last moved first; if even that fails, the journal stays
            // and the next claim of the directory completes the save.
            if undo(&self.dir, &moved).is_ok() {
                let _ = std::fs::remove_file(self.dir.join(JOURNAL));
                let _ = std::fs::remove_dir_all(&staging);
            }
            return result;
        }
        finish_journal(&self.dir, &journal)?;
        observed(observer, SavePoint::Done, &self.dir)
    }

    /// Saves the checkpoint of `trainer` as the subdirectory `name` (`checkpoint-K`), all or
    /// nothing: written whole beside it, then exchanged with the old one in one rename.
    pub fn save_subdir(
        &self,
        name: &str,
        trainer: &Trainer,
        files: &ModelFiles,
        observer: &mut dyn SaveObserver,
    ) -> Result<()> {
        let target = self.dir.join(name);
        let fresh = self.dir.join(format!(".{name}.new"));
        remove_dir_if_present(&fresh)?;
        if let Err(e) = stage(&fresh, trainer, files, observer) {
            let _ = std::fs::remove_dir_all(&fresh);
            return Err(e);
        }
        let existed = std::fs::symlink_metadata(&target).is_ok();
        let swapped = match existed {
            true => exchange(&fresh, &target),
            false => std::fs::rename(&fresh, &target).map_err(|e| BertError::io(&target, e)),
        };
        if let Err(e) = swapped {
            let _ = std::fs::remove_dir_all(&fresh);
            return Err(e);
        }
        let moved = sync_dir(&self.dir).and_then(|()| observed(observer, SavePoint::Moved(name), &self.dir));
        if let Err(e) = moved {
            // Undone: the old checkpoint (now at the staging name) goes back under its name.
            let undone = match existed {
                true => exchange(&fresh, &target),
                false => std::fs::rename(&target, &fresh).map_err(|e| BertError::io(&target, e)),
            };
            if undone.is_ok() {
                let _ = std::fs::remove_dir_all(&fresh);
            }
            return Err(e);
        }
        // After the exchange, the old checkpoint is what has the staging name.
        remove_dir_if_present(&fresh)?;
        observed(observer, SavePoint::Done, &self.dir)
    }
}

/// Writes the whole checkpoint into `staging` (a new directory), each file synced, and returns
/// the names written, `trainer_state.json` last.
fn stage(
    staging: &Path,
    trainer: &Trainer,
    files: &ModelFiles,
    observer: &mut dyn SaveObserver,
) -> Result<Vec<String>> {
    std::fs::create_dir(staging).map_err(|e| BertError::io(staging, e))?;
    let mut names = Vec::new();
    let mut write = |name: &str, bytes: &[u8]| -> Result<()> {
        write_synced(&staging.join(name), bytes)?;
        observed(observer, SavePoint::Written(name), staging)?;
        names.push(name.to_string());
        Ok(())
    };
    // The staging directory is ours by its marker, like the directory it is in.
    write(MARKER, MARKER_TEXT.as_bytes())?;
    // A classifier's checkpoint when the run fine-tuned one; a pretraining run's otherwise.
    let labels = trainer.corpus.classes.as_ref().map(|c| c.names.as_slice());
    write("config.json", &checkpoint_config(&files.config_json, labels, staging)?)?;
    let weights: Vec<(String, Vec<usize>, &[f32])> = trainer
        .model
        .parameters()
        .into_iter()
        .map(|(stage, param)| (stage.hf(), param.shape().to_vec(), param.as_slice()))
        .collect();
    write("model.safetensors", &safetensors_bytes(&weights, staging)?)?;
    write("optimizer.safetensors", &safetensors_bytes(&trainer.optimizer_state(), staging)?)?;
    for (name, bytes) in &files.tokenizer {
        if !FILES.contains(&name.as_str()) {
            return Err(BertError::Checkpoint {
                path: staging.join(name),
                problem: "not a tokenizer file a checkpoint holds".into(),
            });
        }
        write(name, bytes)?;
    }
    let state = TrainerState {
        format: FORMAT.into(),
        step: trainer.step,
        options: trainer.options.clone(),
        file: trainer.corpus.path.clone(),
        file_sha256: trainer.corpus.sha256.clone(),
        fresh_heads: trainer.fresh_heads.clone(),
        log_history: trainer.log.clone(),
        eval_history: trainer.evals.clone(),
        eval_file: trainer.eval_file.clone(),
        eval_file_sha256: trainer.eval_sha256.clone(),
        eval_every: trainer.eval_every,
    };
    let text = serde_json::to_string_pretty(&state).expect("the state always serialises");
    write(STATE, format!("{text}\n").as_bytes())?;
    sync_dir(staging)?;
    observed(observer, SavePoint::Staged, staging)?;
    names.retain(|n| n != MARKER);
    Ok(names)
}

/// `.save-journal`: the staging directory (a name inside the checkpoint directory) and the
/// files it holds, in the order they move in.
#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    staging: String,
    files: Vec<String>,
}

fn staging_name(staging: &Path) -> String {
    staging.file_name().expect("a staging directory has a name").to_string_lossy().into_owned()
}

/// The order files move: `trainer_state.json` out first, then each other new file in (its old
/// one aside), then the old files the new save does not have aside, then `trainer_state.json`
/// in. Each move is recorded in `moved` (from, to), so that it can be undone.
fn move_in(
    dir: &Path,
    journal: &Journal,
    observer: &mut dyn SaveObserver,
    moved: &mut Vec<(PathBuf, PathBuf)>,
) -> Result<()> {
    let staging = dir.join(&journal.staging);
    let old = staging.join(OLD);
    std::fs::create_dir_all(&old).map_err(|e| BertError::io(&old, e))?;
    let mut shift = |from: PathBuf, to: PathBuf| -> Result<()> {
        std::fs::rename(&from, &to).map_err(|e| BertError::io(&to, e))?;
        moved.push((from, to));
        Ok(())
    };
    let present = |name: &str| std::fs::symlink_metadata(dir.join(name)).is_ok();
    // Each step is taken only if it is still to be taken, so that a save cut short anywhere is
    // completed by running this again.
    if staging.join(STATE).exists() && present(STATE) && !old.join(STATE).exists() {
        shift(dir.join(STATE), old.join(STATE))?;
    }
    for name in journal.files.iter().filter(|n| *n != STATE) {
        if !staging.join(name).exists() {
            continue;
        }
        if present(name) && !old.join(name).exists() {
            shift(dir.join(name), old.join(name))?;
        }
        shift(staging.join(name), dir.join(name))?;
        observed(observer, SavePoint::Moved(name), dir)?;
    }
    for name in FILES.iter().filter(|&&n| n != STATE && !journal.files.iter().any(|f| f == n)) {
        if present(name) {
            shift(dir.join(name), old.join(name))?;
        }
    }
    if staging.join(STATE).exists() {
        shift(staging.join(STATE), dir.join(STATE))?;
    }
    sync_dir(dir)?;
    observed(observer, SavePoint::Moved(STATE), dir)
}

/// Puts back what [`move_in`] moved, the last move first.
fn undo(dir: &Path, moved: &[(PathBuf, PathBuf)]) -> Result<()> {
    for (from, to) in moved.iter().rev() {
        std::fs::rename(to, from).map_err(|e| BertError::io(from, e))?;
    }
    sync_dir(dir)
}

/// The end of a save: the journal goes, then the staging directory with the old files.
fn finish_journal(dir: &Path, journal: &Journal) -> Result<()> {
    remove_file_if_present(&dir.join(JOURNAL))?;
    sync_dir(dir)?;
    remove_dir_if_present(&dir.join(&journal.staging))
}

/// Completes a save that a killed run left after its journal, and removes what a killed run
/// left before it (a staging directory without a journal: the old checkpoint is untouched) or
/// around a `checkpoint-K` exchange.
fn recover(dir: &Path) -> Result<()> {
    let journal_path = dir.join(JOURNAL);
    let mut completed = None;
    if journal_path.is_file() {
        let text = crate::io::files::read(&journal_path, 1 << 20)?;
        let journal: Journal = serde_json::from_slice(&text).map_err(|e| BertError::Checkpoint {
            path: journal_path.clone(),
            problem: format!("not a save's journal: {e}"),
        })?;
        if numbered(&journal.staging, ".save-").is_none() || journal.files.iter().any(|f| !FILES.contains(&f.as_str()))
        {
            return Err(BertError::Checkpoint {
                path: journal_path,
                problem: "names files a save does not write".into(),
            });
        }
        move_in(dir, &journal, &mut Unobserved, &mut Vec::new())?;
        finish_journal(dir, &journal)?;
        completed = Some(journal.staging);
    }
    for entry in std::fs::read_dir(dir).map_err(|e| BertError::io(dir, e))? {
        let entry = entry.map_err(|e| BertError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if !is_dir || completed.as_deref() == Some(name.as_str()) {
            continue;
        }
        if numbered(&name, ".save-").is_some() {
            remove_dir_if_present(&entry.path())?;
        } else if let Some(inner) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".old")) {
            // A save without the exchange was killed between its two renames.
            if std::fs::symlink_metadata(dir.join(inner)).is_err() {
                std::fs::rename(entry.path(), dir.join(inner)).map_err(|e| BertError::io(dir.join(inner), e))?;
            } else {
                remove_dir_if_present(&entry.path())?;
            }
        } else if name.starts_with('.') && name.ends_with(".new") {
            remove_dir_if_present(&entry.path())?;
        }
    }
    for name in FILES {
        remove_file_if_present(&dir.join(format!(".{name}.tmp")))?;
    }
    Ok(())
}

/// Swaps two directories in one step where the system can (Linux's `renameat2` with
/// `RENAME_EXCHANGE`); elsewhere, the old one is renamed aside first (`.NAME.old`, which
/// [`recover`] puts back if the run is killed in between).
fn exchange(fresh: &Path, target: &Path) -> Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).expect("a path has no NUL byte");
        let (from, to) = (c(fresh), c(target));
        // SAFETY: two NUL-terminated paths that live across the call.
        let done = unsafe {
            libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::RENAME_EXCHANGE)
        };
        if done == 0 {
            return Ok(());
        }
        let error = std::io::Error::last_os_error();
        // A file system without the exchange falls back to two renames.
        if !matches!(error.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) {
            return Err(BertError::io(target, error));
        }
    }
    let name = target.file_name().expect("a checkpoint has a name").to_string_lossy();
    let aside = target.with_file_name(format!(".{name}.old"));
    std::fs::rename(target, &aside).map_err(|e| BertError::io(target, e))?;
    if let Err(e) = std::fs::rename(fresh, target) {
        let _ = std::fs::rename(&aside, target);
        return Err(BertError::io(target, e));
    }
    // The old one now sits where the caller removes the staging directory from.
    std::fs::rename(&aside, fresh).map_err(|e| BertError::io(fresh, e))
}

fn observed(observer: &mut dyn SaveObserver, point: SavePoint<'_>, at: &Path) -> Result<()> {
    observer.reached(point).map_err(|e| BertError::Checkpoint { path: at.into(), problem: format!("cannot save: {e}") })
}

/// Writes `bytes` to `path` (a new file) and syncs it to disk.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let failed = |e: std::io::Error| BertError::Checkpoint { path: path.into(), problem: format!("cannot write: {e}") };
    let _ = std::fs::remove_file(path);
    // `create_new` never follows a symbolic link planted under the name.
    let mut file: File = OpenOptions::new().write(true).create_new(true).open(path).map_err(failed)?;
    file.write_all(bytes).and_then(|()| file.sync_all()).map_err(|e| {
        let _ = std::fs::remove_file(path);
        failed(e)
    })
}

/// Syncs a directory's entries (the renames in it) to disk, where the system can.
fn sync_dir(dir: &Path) -> Result<()> {
    match File::open(dir).and_then(|d| d.sync_all()) {
        // Some systems cannot sync a directory; the renames are then as durable as they can be.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(22) => Ok(()),
        Err(e) => Err(BertError::io(dir, e)),
        Ok(()) => Ok(()),
    }
}

fn remove_file_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(BertError::io(path, e)),
        _ => Ok(()),
    }
}

fn remove_dir_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(BertError::io(path, e)),
        _ => Ok(()),
    }
}

/// The checkpoint's config.json: the model's own, saying it is a `BertForPreTraining` (it now
/// has both pretraining heads, or the MLM head alone for a text without pairs), or, for a
/// classifier of `labels`, a `BertForSequenceClassification` with its `id2label` and `label2id`.
fn checkpoint_config(config_json: &[u8], labels: Option<&[String]>, dir: &Path) -> Result<Vec<u8>> {
    let mut config: serde_json::Value = serde_json::from_slice(config_json)
        .map_err(|e| BertError::Config { path: dir.join("config.json"), problem: format!("not JSON: {e}") })?;
    let object = config
        .as_object_mut()
        .ok_or_else(|| BertError::Config { path: dir.join("config.json"), problem: "not a JSON object".into() })?;
    match labels {
        Some(labels) => {
            object.insert("architectures".into(), serde_json::json!(["BertForSequenceClassification"]));
            let id2label: serde_json::Map<String, serde_json::Value> =
                labels.iter().enumerate().map(|(i, l)| (i.to_string(), serde_json::json!(l))).collect();
            let label2id: serde_json::Map<String, serde_json::Value> =
                labels.iter().enumerate().map(|(i, l)| (l.clone(), serde_json::json!(i))).collect();
            object.insert("id2label".into(), id2label.into());
            object.insert("label2id".into(), label2id.into());
            // Single-label classification: transformers' cross-entropy on class ids.
            object.insert("problem_type".into(), serde_json::json!("single_label_classification"));
        }
        None => {
            object.insert("architectures".into(), serde_json::json!(["BertForPreTraining"]));
        }
    }
    let mut text = serde_json::to_string_pretty(&config).expect("JSON always serialises");
    text.push('\n');
    Ok(text.into_bytes())
}

/// Reads `dir/trainer_state.json`: the step, options and losses of the run saved there, each
/// checked (a state that contradicts itself is refused, naming the field). A save that a
/// killed run left half moved in is completed first.
pub fn read_state(dir: &Path) -> Result<TrainerState> {
    let path = dir.join(STATE);
    let bad = |problem: String| BertError::Checkpoint { path: dir.into(), problem };
    if !dir.is_dir() {
        return Err(bad("not a directory; give a checkpoint directory that `bert-trace train` saved".into()));
    }
    if dir.join(JOURNAL).is_file() {
        drop(CheckpointDir::claim(dir)?);
    }
    if !path.is_file() {
        return Err(bad(format!(
            "has no {STATE}: it is not a complete checkpoint of `bert-trace train` (a save that did not finish, or another program's model)"
        )));
    }
    let text = crate::io::files::read(&path, 64 << 20)?;
    let state: TrainerState = serde_json::from_slice(&text)
        .map_err(|e| BertError::Checkpoint { path: path.clone(), problem: format!("not a trainer state: {e}") })?;
    let field = |problem: String| BertError::Checkpoint { path: path.clone(), problem };
    if state.format != FORMAT {
        return Err(field(format!(
            "format {}, expected {FORMAT}; written by another version of bert-trace",
            state.format
        )));
    }
    state.options.check_saved(&path)?;
    if state.step > state.options.steps {
        return Err(field(format!(
            "step {} is beyond options.steps {}: a run never goes past its last step",
            state.step, state.options.steps
        )));
    }
    if state.log_history.len() != state.step {
        return Err(field(format!("step {} but log_history holds {} steps", state.step, state.log_history.len())));
    }
    if let Some((at, log)) =
        state.log_history.iter().enumerate().find(|(at, l)| l.step != at + 1 || !l.loss.is_finite())
    {
        return Err(field(format!(
            "log_history[{at}] is step {} with loss {}: each entry is the next step, with a finite loss",
            log.step, log.loss
        )));
    }
    let mut last = 0;
    for (at, eval) in state.eval_history.iter().enumerate() {
        let n = eval.classes.len();
        let counted: usize = eval.confusion.iter().flatten().sum();
        let square = eval.confusion.len() == n && eval.confusion.iter().all(|row| row.len() == n);
        // A classifier's table counts its examples; the MLM's evaluation has none.
        let table = (n == 0 && eval.confusion.is_empty()) || (square && counted == eval.examples);
        if eval.step < last
            || eval.step > state.step
            || !eval.loss.is_finite()
            || eval.perplexity.is_some_and(|p| !p.is_finite())
            || !eval.accuracy.is_finite()
            || !table
            || eval.correct > eval.examples
        {
            return Err(field(format!(
                "eval_history[{at}] (step {}, loss {}) does not fit: evaluations come in order of their steps, up to step {}, \
                 with a finite loss and perplexity and a confusion table of their examples",
                eval.step, eval.loss, state.step
            )));
        }
        last = eval.step;
    }
    Ok(state)
}

impl Trainer {
    /// Continues the run saved in `dir` at the step it reached: `model` is `dir`'s model, loaded,
    /// `state` its [`read_state`], `corpus` the same text (checked by its SHA-256). The weights
    /// and the optimizer's state are checked finite: a run never continues from NaN or inf.
    pub fn resume(model: BertModel, corpus: Corpus, state: TrainerState, dir: &Path) -> Result<Trainer> {
        if corpus.sha256 != state.file_sha256 {
            return Err(BertError::Training(format!(
                "{}: not the text the run in {} was trained on ({}: its SHA-256 differs)",
                corpus.path.display(),
                dir.display(),
                state.file.display()
            )));
        }
        model.check_finite(&dir.join("model.safetensors"))?;
        let path = dir.join("optimizer.safetensors");
        let store = WeightStore::new(&path, Storage::map(&path)?)?;
        let mut moments = Vec::new();
        for (stage, param) in model.parameters() {
            let read = |kind: &str| -> Result<Vec<f32>> {
                let name = format!("{kind}.{}", stage.hf());
                let values = store.get::<f32>(&name, param.shape())?.as_slice().to_vec();
                if let Some((index, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
                    return Err(BertError::NonFinite { path: path.clone(), tensor: name, index, value });
                }
                Ok(values)
            };
            moments.push(Moments { exp_avg: read("exp_avg")?, exp_avg_sq: read("exp_avg_sq")? });
        }
        let mut trainer = Trainer::with_state(model, corpus, state.options, moments, state.step, state.log_history)?;
        trainer.fresh_heads = state.fresh_heads;
        trainer.evals = state.eval_history;
        trainer.eval_file = state.eval_file;
        trainer.eval_sha256 = state.eval_file_sha256;
        trainer.eval_every = state.eval_every;
        trainer.resumed_from = Some(dir.into());
        Ok(trainer)
    }
}
