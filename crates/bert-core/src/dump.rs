//! Dump directories: writing `OUT/<stage>.npy` + `OUT/manifest.json` as a [`Sink`]; reading them
//! back (ours or `scripts/dump_reference.py`'s) is `dump/read.rs`.
//!
//! A dump is whole or visibly incomplete: each `.npy` is written under a temporary name and
//! renamed (on Linux a new file is written with no name and linked into place: see
//! `dump/atomic.rs`), and the manifest is written last, so a killed run never leaves a directory
//! whose manifest lists a file that is not complete. We only ever delete files that our own previous
//! manifest lists.
//!
//! The `.npy` files are written by the forward pass's thread pool whenever its threads have no
//! arithmetic to do (between parallel loops, and while one thread waits for the other at the end
//! of one), so that the file system takes the previous stages while the pass computes the next
//! ones, without a third thread taking a core from one of the pass's threads.
//!
//! A rerun into the same directory writes into the previous run's files rather than deleting
//! them and creating new ones: creating a file and giving the file system new pages for it costs
//! far more than reusing both (on the machine in BENCHMARKS.md, 56 to 250 µs per created file,
//! against a few µs to reopen one). On Linux a stage is written into an old file of its size
//! under a temporary name, which then trades places with the stage's old file in one rename
//! (see `dump/carrier.rs`); elsewhere, or when no such file is at hand, the stage's old file is
//! renamed to its temporary name, overwritten there and renamed back (`dump/atomic.rs`). A file
//! with another hard link (a copy the user kept with `cp -l`) is never written over; it is left
//! alone and a new file takes its name.

mod atomic;
mod carrier;
pub mod lock;
mod queue;
mod read;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use self::atomic::write_atomically;
use self::queue::{npy_file_len, Writer};
pub use self::read::{read_manifest, Dump};

use crate::error::{BertError, Result};
use crate::manifest::{Inputs, Manifest, ManifestStage, FORMAT};
use crate::stage::{self, Stage};
use crate::threads;
use crate::trace::{Sink, TensorView};

/// The file that marks a directory as one we write dumps into.
pub const MARKER: &str = ".bert-trace-dump";
const MARKER_TEXT: &str = "bert-trace writes dumps here; files named <stage>.npy are replaced on every run\n";

/// A sink that writes each wanted stage to `dir/<stage>.npy`, then `dir/manifest.json`.
///
/// [`Sink::emit`] copies the stage (its view is only valid during the call) and queues it for
/// the pool's threads to write; [`Sink::finish`] waits for every file, then writes the
/// manifest. A failed write is reported by the next `emit` or by `finish`.
pub struct DumpWriter {
    dir: PathBuf,
    manifest: Manifest,
    filter: Box<dyn Fn(&Stage) -> bool>,
    writer: Option<Writer>,
    /// The previous run's stage files not yet written over: reused by the stages of this run
    /// that have the same name, and removed by [`Sink::finish`] if none does.
    stale: HashSet<String>,
    /// The previous run's stage files with their lengths, in the order its manifest lists them
    /// (the order they were emitted), for choosing donors (see `dump/carrier.rs`).
    previous_files: Vec<(String, u64)>,
    /// For each file length, how many carriers will be idle once the queued stages are written.
    carried: HashMap<u64, usize>,
    /// The directory's lock (see `dump/lock.rs`), released when the writer is dropped, after
    /// [`Drop::drop`] has completed or removed every file.
    _lock: Option<lock::DirLock>,
}

impl DumpWriter {
    /// Prepares `dir`: creates it, or clears our own previous dump from it. A directory that
    /// holds anything else is refused unless `force`, and even then nothing else is deleted.
    pub fn create(
        dir: &Path,
        producer: serde_json::Value,
        model: String,
        inputs: Inputs,
        force: bool,
    ) -> Result<DumpWriter> {
        let bad = |problem: String| BertError::Dump { path: dir.into(), problem };
        if dir.exists() && !dir.is_dir() {
            return Err(bad("exists and is not a directory".into()));
        }
        std::fs::create_dir_all(dir).map_err(|e| BertError::io(dir, e))?;
        // Before anything is read: what another run is writing is neither ours to judge nor to
        // clean up.
        let lock = lock::lock(dir)?;
        let manifest_path = dir.join("manifest.json");
        // A directory we wrote into before carries the marker, so that the stage files of a run
        // that was killed before its manifest are still recognised as ours and cleaned up.
        let marked = dir.join(MARKER).is_file();
        // Without the marker, only a manifest that bert-trace wrote makes the directory ours
        // (dumps from before the marker). A dump of `scripts/dump_reference.py` has the same
        // format and the same file names, but it is the user's reference, not ours to replace.
        let previous = if manifest_path.is_file() { read_manifest(&manifest_path).ok() } else { None };
        if let Some(theirs) = previous.as_ref().filter(|m| !marked && !written_by_us(m)) {
            let producer = theirs.producer.get("name").and_then(|name| name.as_str()).unwrap_or("another program");
            return Err(bad(format!(
                "holds a dump written by {producer}, not by bert-trace, which it never replaces (not even with --force): choose another --out"
            )));
        }
        let listed: Vec<&str> = previous.iter().flat_map(|m| m.stages.iter().map(|s| s.file.as_str())).collect();
        let is_ours = |name: &str| {
            name == MARKER
                || (name == "manifest.json" && (marked || previous.is_some()))
                || listed.contains(&name)
                || (marked && (is_stage_file(name) || is_our_temporary(name)))
        };
        let mut ours = Vec::new();
        let mut foreign = Vec::new();
        // Entries that are not ours but have a name this run may write: even `--force` must not
        // replace them (a symbolic link excepted: replacing it loses nothing, and it is never
        // written through).
        let mut in_the_way = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| BertError::io(dir, e))? {
            let entry = entry.map_err(|e| BertError::io(dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // The type as the directory listing gives it, without a system call per entry: a
            // symbolic link is not ours, even one named like a stage.
            let file_type = entry.file_type().ok();
            if is_ours(&name) && file_type.is_some_and(|t| t.is_file()) {
                ours.push(name);
            } else {
                if is_our_name(&name) && !file_type.is_some_and(|t| t.is_symlink()) {
                    in_the_way.push(name.clone());
                }
                foreign.push(name);
            }
        }
        if !foreign.is_empty() && !force {
            foreign.sort();
            return Err(bad(format!(
                "holds files that are not a bert-trace dump ({}); choose another --out or pass --force",
                preview(&foreign)
            )));
        }
        if !in_the_way.is_empty() {
            in_the_way.sort();
            return Err(bad(format!(
                "holds files that bert-trace did not write but would replace ({}); --force keeps other files, never these: choose another --out",
                preview(&in_the_way)
            )));
        }
        // The manifest goes first, so that the previous run's files, kept for reuse, are never
        // listed by a manifest while this run writes over them.
        remove_if_present(&manifest_path)?;
        let mut stale = HashSet::new();
        for name in ours.into_iter().filter(|n| n != MARKER && n != "manifest.json") {
            if name.ends_with(".npy") {
                stale.insert(name);
            } else {
                remove_if_present(&dir.join(name))?;
            }
        }
        let previous_files = previous
            .iter()
            .flat_map(|m| &m.stages)
            .filter(|s| stale.contains(&s.file))
            .filter_map(|s| Some((s.file.clone(), npy_file_len(&s.shape, &s.dtype)?)))
            .collect();
        if !marked {
            std::fs::write(dir.join(MARKER), MARKER_TEXT).map_err(|e| BertError::io(dir.join(MARKER), e))?;
        }
        Ok(DumpWriter {
            dir: dir.into(),
            manifest: Manifest {
                format: FORMAT.into(),
                producer,
                model,
                inputs,
                stages: Vec::new(),
                only_stages: None,
                stopped_at: None,
            },
            filter: Box::new(|_| true),
            writer: None,
            stale,
            previous_files,
            carried: HashMap::new(),
            _lock: lock,
        })
    }

    /// Writes only the stages for which `filter` is true.
    pub fn with_filter(mut self, filter: impl Fn(&Stage) -> bool + 'static) -> DumpWriter {
        self.filter = Box::new(filter);
        self
    }

    /// Records the patterns that limit which stages are written.
    pub fn set_only_stages(&mut self, patterns: Vec<String>) {
        self.manifest.only_stages = Some(patterns);
    }

    /// Records that the trace stopped at `stage`.
    pub fn set_stopped_at(&mut self, stage: Option<Stage>) {
        self.manifest.stopped_at = stage.map(|s| s.name());
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The stages written so far (or queued for writing, until [`Sink::finish`] returns).
    pub fn written(&self) -> &[ManifestStage] {
        &self.manifest.stages
    }

    /// The queue of stages to write, made at the first stage.
    fn writer(&mut self) -> &Writer {
        let dir = &self.dir;
        self.writer.get_or_insert_with(|| Writer::start(dir))
    }

    /// Whether this run's stage `file`, `len` bytes long, is to be written over the previous
    /// run's file of that name. When it is and no carrier of its size is planned, the previous
    /// run's files of the last stages of that size become carriers (see `dump/carrier.rs`). This
    /// plans what the writer will find: a stage written over its old file leaves a carrier of
    /// its size, and a stage written under a name now free (a donor's) uses one up.
    fn plan(&mut self, file: &str, len: u64) -> bool {
        let reuse = self.stale.remove(file);
        if !reuse {
            if let Some(count) = self.carried.get_mut(&len) {
                *count = count.saturating_sub(1);
            }
            return false;
        }
        if self.carried.get(&len).is_some_and(|&count| count > 0) {
            return true;
        }
        // The last stages of the same size give their files: the chains then run through every
        // stage of that size before them, and each ends when its donor takes its name back.
        let stale = &self.stale;
        let same_size: Vec<String> = self
            .previous_files
            .iter()
            .filter(|(name, size)| *size == len && stale.contains(name))
            .map(|(name, _)| name.clone())
            .collect();
        let wanted = donors_wanted(same_size.len(), threads::threads());
        for name in same_size.into_iter().rev().take(wanted) {
            // A donor that cannot be adopted stays stale: its stage reuses it, or `finish`
            // removes it.
            let path = self.dir.join(&name);
            if self.writer().adopt(&path) {
                self.stale.remove(&name);
                *self.carried.entry(len).or_default() += 1;
            }
        }
        true
    }

    /// Removes the previous run's files that this run did not write over.
    fn remove_stale(&mut self) -> Result<()> {
        for name in self.stale.drain() {
            remove_if_present(&self.dir.join(name))?;
        }
        Ok(())
    }
}

/// How many carriers the chain of a size gets: `stages` is the number of the previous run's
/// files of that size still to be written over, and `writers` the number of threads that write
/// stages side by side.
///
/// Each carrier costs two renames of its own (its donor's file to the carrier's name, and back),
/// and a stage that finds every carrier of its size in use costs one rename more than a carried
/// stage (it goes through a temporary name). In BERT one size serves a hundred stages or more
/// (every `[B,T,H]` stage, and Q, K and V split into heads), so two threads often write two of
/// them at once: in a 12-token rerun of the bench model with two threads, one carrier per size
/// left 37 of 178 stages to a temporary name, and one per thread left 8 or 9. A carrier is
/// given for every four stages, up to one per thread: a short chain keeps one, since a second
/// would cost more renames than it saves.
fn donors_wanted(stages: usize, writers: usize) -> usize {
    (stages / 4).clamp(1, writers.max(1))
}

impl Sink for DumpWriter {
    fn wants(&self, stage: &Stage) -> bool {
        (self.filter)(stage)
    }

    fn emit(&mut self, stage: Stage, tensor: TensorView<'_>) -> Result<()> {
        let entry = ManifestStage::new(&stage, tensor.shape().to_vec());
        let path = self.dir.join(&entry.file);
        let len = npy_file_len(&entry.shape, &entry.dtype).unwrap_or(u64::MAX);
        let reuse = self.plan(&entry.file, len);
        // The view belongs to the forward pass, which overwrites some buffers in place as soon
        // as this call returns: the writer copies it (in C order, as .npy files are) unless it
        // writes it at once.
        self.writer().write(path, reuse, tensor)?;
        self.manifest.stages.push(entry);
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        if let Some(writer) = self.writer.take() {
            writer.finish()?;
        }
        self.remove_stale()?;
        let path = self.dir.join("manifest.json");
        let text = serde_json::to_string_pretty(&self.manifest).expect("a manifest always serialises");
        write_atomically(&path, false, &[text.as_bytes()])
    }
}

impl Drop for DumpWriter {
    /// Without [`Sink::finish`] (the trace failed), the queued files are still completed, so
    /// that no write outlives the writer, and the previous run's other files are removed; the
    /// manifest is not written.
    fn drop(&mut self) {
        if let Some(writer) = self.writer.take() {
            let _ = writer.finish();
        }
        let _ = self.remove_stale();
    }
}

fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(BertError::io(path, e)),
        _ => Ok(()),
    }
}

fn preview(names: &[String]) -> String {
    let shown: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
    match names.len() {
        n if n > 3 => format!("{} and {} more", shown.join(", "), n - 3),
        _ => shown.join(", "),
    }
}

/// Whether bert-trace wrote this manifest (and not, say, `scripts/dump_reference.py`).
fn written_by_us(manifest: &Manifest) -> bool {
    manifest.producer.get("name").and_then(|name| name.as_str()) == Some("bert-trace")
}

/// Whether `name` is a stage's file, `<stage>.npy`.
fn is_stage_file(name: &str) -> bool {
    name.strip_suffix(".npy").and_then(stage::parse).is_some()
}

/// Whether `name` is one of the temporary names a run writes through: `.<file>.tmp` for a stage
/// file or the manifest (`dump/atomic.rs`), a carrier (`dump/carrier.rs`) or `--npz`'s archive.
fn is_our_temporary(name: &str) -> bool {
    let Some(inner) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")) else {
        return false;
    };
    let carrier = inner
        .strip_prefix("bert-trace-carrier-")
        .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()));
    carrier || inner == "manifest.json" || inner == "trace.npz" || is_stage_file(inner)
}

/// Whether a run may write a file named `name` into its directory.
fn is_our_name(name: &str) -> bool {
    name == "manifest.json" || is_stage_file(name) || is_our_temporary(name)
}
