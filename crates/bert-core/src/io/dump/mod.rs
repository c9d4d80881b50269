//! Dump directories: writing `OUT/<stage>.npy` (or one `OUT/trace.npz`) and `OUT/manifest.json`
//! as a [`Sink`]; reading them back, ours or `scripts/dump_reference.py`'s, is `read.rs`.
//!
//! The rules, which the tests hold it to:
//!
//! - **Whole or visibly incomplete.** Every file is written under a temporary name and renamed
//!   into place (on a rerun, the previous run's file of that name is what is written, see
//!   `writer.rs`), and the manifest comes last: a run killed at any moment leaves no manifest that
//!   lists a file that is not whole. The previous run's manifest goes when this run writes its
//!   first stage, so a run that fails before that leaves the previous dump as it was.
//! - **Nothing of the user's.** A file is ours only if it has a name bert-trace writes *and* it
//!   sits in a directory that carries our marker file; only such files are ever replaced or
//!   removed. A directory holding anything else is refused unless `--force`, and even then a
//!   file of the user's with a name we would write (another program's `manifest.json`, a stage
//!   file, a symbolic link) is refused.
//! - **One run at a time** per directory (`lock.rs`).
//! - **Reproducible.** The files hold the values and nothing else that varies: two runs write
//!   the same bytes.

mod lock;
pub mod manifest;
pub mod npy;
mod npz;
mod plain;
mod read;
mod writer;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

pub use self::lock::{lock, DirLock};
pub use self::plain::DumpKind;
pub use self::read::{read_manifest, same_input, Dump};
pub(crate) use self::writer::write_whole;
use self::writer::Writer;

use crate::error::{BertError, Result};
use crate::io::dump::manifest::{Inputs, InterventionRecord, Manifest, ManifestStage};
use crate::pass::{Sink, TensorView};
use crate::stage::{self, Stage};
use crate::words::Opt;

/// The file that marks a directory as one bert-trace writes dumps into.
pub const MARKER: &str = ".bert-trace-dump";
const MARKER_TEXT: &str = "bert-trace writes dumps here; the files it writes are replaced on every run\n";

/// The name of the archive `--npz` writes.
pub const ARCHIVE: &str = "trace.npz";

/// How a dump is written.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Write into a directory that holds other files too (they are kept).
    pub force: bool,
    /// One `trace.npz` archive instead of one `.npy` file per stage.
    pub npz: bool,
    /// The caller's option that chose the directory, and whether the caller offers `force`:
    /// what a refusal advises.
    pub named_by: Opt,
    pub can_force: bool,
}

impl Default for Options {
    /// A trace's dump: `out`, which `force` may share with other files.
    fn default() -> Options {
        Options { force: false, npz: false, named_by: Opt("out"), can_force: true }
    }
}

impl Options {
    /// A dump into a directory `option` chose, with no `force` to offer (a training step's).
    pub fn named_by(option: Opt) -> Options {
        Options { force: false, npz: false, named_by: option, can_force: false }
    }

    /// What a refused directory's message advises.
    fn advice(&self) -> String {
        match self.can_force {
            true => format!("choose another {} or pass {}", self.named_by, Opt("force").on()),
            false => format!("choose another {}", self.named_by),
        }
    }
}

/// Refuses `dir` as a dump's directory unless it is free or ours to write into (see the module
/// documentation), without writing anything: the check a run makes before it starts, for every
/// directory it will write a dump into.
pub fn check_dir(dir: &Path, options: Options) -> Result<()> {
    survey(dir, options).map(drop)
}

/// What `dir` holds that is ours to replace (None when it does not exist), or the refusal.
fn survey(dir: &Path, options: Options) -> Result<Option<BTreeSet<String>>> {
    let bad = |problem: String| BertError::Dump { path: dir.into(), problem };
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(BertError::io(dir, e)),
        Ok(metadata) if !metadata.is_dir() => return Err(bad("exists and is not a directory".into())),
        Ok(_) => {}
    }
    let marked = std::fs::symlink_metadata(dir.join(MARKER)).is_ok_and(|m| m.is_file());
    let (mut ours, mut foreign, mut in_the_way) = (BTreeSet::new(), Vec::new(), Vec::new());
    for entry in std::fs::read_dir(dir).map_err(|e| BertError::io(dir, e))? {
        let entry = entry.map_err(|e| BertError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // The type as the listing gives it: a symbolic link is never ours.
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        match (marked && regular && is_our_name(&name), is_our_name(&name)) {
            (true, _) => drop(ours.insert(name)),
            (false, true) => in_the_way.push(name),
            (false, false) => foreign.push(name),
        }
    }
    if !in_the_way.is_empty() {
        return Err(bad(refusal(dir, &in_the_way, &options)));
    }
    if !foreign.is_empty() && !options.force {
        foreign.sort();
        return Err(bad(format!(
            "holds files that are not a bert-trace dump ({}); {}",
            preview(&foreign),
            options.advice()
        )));
    }
    Ok(Some(ours))
}

/// A sink that writes each wanted stage of a trace, then the manifest.
pub struct DumpWriter {
    dir: PathBuf,
    manifest: Manifest,
    filter: Box<dyn Fn(&Stage) -> bool>,
    output: Output,
    /// The previous run's files, ours to replace: those this run does not write again are
    /// removed by [`Sink::finish`].
    previous: BTreeSet<String>,
    /// Whether the previous run's manifest has been removed yet.
    invalidated: bool,
    /// A simulated pass's simulation, and where its hook notes the first value not finite.
    simulation: Option<(crate::precision::Simulation, crate::precision::FirstNonFiniteCell)>,
    _lock: Option<DirLock>,
}

enum Output {
    Files(Option<Writer>),
    Archive(Box<npz::Archive>),
}

impl DumpWriter {
    /// Prepares `dir` for a dump: creates it, or checks that what it holds is ours to replace
    /// (see the module documentation). Call it only once every input has been checked: from
    /// here on the directory is touched.
    pub fn create(
        dir: &Path,
        producer: serde_json::Value,
        model: String,
        inputs: Inputs,
        options: Options,
    ) -> Result<DumpWriter> {
        survey(dir, options)?;
        std::fs::create_dir_all(dir).map_err(|e| BertError::io(dir, e))?;
        // Before anything is read: what another run is writing is neither ours to judge nor to
        // clean up.
        let lock = lock::lock(dir)?;
        let mut ours = survey(dir, options)?.unwrap_or_default();
        let marked = std::fs::symlink_metadata(dir.join(MARKER)).is_ok_and(|m| m.is_file());
        // Leftovers of a killed run go now; the previous run's files stay until this run has
        // replaced them or finishes.
        for name in ours.iter().filter(|n| is_temporary(n)) {
            remove_if_present(&dir.join(name))?;
        }
        ours.retain(|n| !is_temporary(n) && n != MARKER);
        if !marked {
            write_whole(&dir.join(MARKER), false, &[MARKER_TEXT.as_bytes()])?;
        }
        let output =
            if options.npz { Output::Archive(Box::new(npz::Archive::create(dir)?)) } else { Output::Files(None) };
        let manifest =
            Manifest { archive: options.npz.then(|| ARCHIVE.to_string()), ..Manifest::new(producer, model, inputs) };
        Ok(DumpWriter {
            dir: dir.into(),
            manifest,
            filter: Box::new(|_| true),
            output,
            previous: ours,
            invalidated: false,
            simulation: None,
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

    /// Records which checkpoint made the dump: its fingerprint and the digest of every tensor
    /// ([`crate::BertModel::fingerprint`], [`crate::BertModel::tensor_digests`]).
    pub fn set_model<F: crate::ops::Float>(&mut self, model: &crate::BertModel<F>) {
        self.set_model_identity(model.fingerprint(), model.tensor_digests());
    }

    /// [`DumpWriter::set_model`] from what another dump's manifest recorded.
    pub fn set_model_identity(&mut self, fingerprint: String, tensors: std::collections::BTreeMap<String, String>) {
        self.manifest.model_fingerprint = Some(fingerprint);
        self.manifest.model_tensors = tensors;
    }

    /// Records what the pass changed, in the order applied.
    pub fn set_interventions(&mut self, records: Vec<InterventionRecord>) {
        self.manifest.interventions = records;
    }

    /// Records that the pass is simulated as `simulation` says; the first value that was not
    /// finite is read from `first_non_finite` when the dump is finished.
    pub fn set_simulation(
        &mut self,
        simulation: crate::precision::Simulation,
        first_non_finite: crate::precision::FirstNonFiniteCell,
    ) {
        self.simulation = Some((simulation, first_non_finite));
    }

    /// Records that the dump holds the logit lens.
    pub fn set_lens(&mut self, lens: bool) {
        self.manifest.lens = lens;
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

    /// Removes the previous run's manifest, once: from then on the directory is visibly a dump
    /// in the making.
    fn invalidate(&mut self) -> Result<()> {
        if !self.invalidated {
            self.invalidated = true;
            if self.previous.remove("manifest.json") {
                remove_if_present(&self.dir.join("manifest.json"))?;
            }
        }
        Ok(())
    }
}

impl Sink for DumpWriter {
    fn wants(&self, stage: &Stage) -> bool {
        (self.filter)(stage)
    }

    fn unreached(&mut self, parameters: &[String]) -> Result<()> {
        self.manifest.no_gradient = parameters.to_vec();
        Ok(())
    }

    fn emit(&mut self, stage: Stage, tensor: TensorView<'_>) -> Result<()> {
        self.invalidate()?;
        let entry = ManifestStage::of(&stage, &tensor);
        match &mut self.output {
            Output::Files(writer) => {
                let reuse = self.previous.remove(&entry.file);
                writer.get_or_insert_with(Writer::start).write(self.dir.join(&entry.file), reuse, tensor)?
            }
            Output::Archive(archive) => archive.add(&entry.file, &tensor)?,
        }
        self.manifest.stages.push(entry);
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        self.invalidate()?;
        match &mut self.output {
            Output::Files(writer) => writer.take().map_or(Ok(()), Writer::finish)?,
            Output::Archive(archive) => {
                archive.finish()?;
                self.previous.remove(ARCHIVE);
            }
        }
        for name in std::mem::take(&mut self.previous) {
            remove_if_present(&self.dir.join(name))?;
        }
        if let Some((simulation, first)) = &self.simulation {
            let first_non_finite = first.lock().expect("not poisoned").clone();
            self.manifest.simulated =
                Some(crate::precision::SimulationRecord { simulation: *simulation, first_non_finite });
        }
        let text = serde_json::to_string_pretty(&self.manifest).expect("a manifest always serialises");
        write_whole(&self.dir.join("manifest.json"), false, &[text.as_bytes(), b"\n"])
    }
}

/// Why a directory holding `names` (files of the user's with names bert-trace writes) is refused.
fn refusal(dir: &Path, names: &[String], options: &Options) -> String {
    let never = if options.can_force { format!(" (not even with {})", Opt("force").on()) } else { String::new() };
    let another = format!("choose another {}", options.named_by);
    let manifest = names.iter().any(|n| n == "manifest.json").then(|| read_manifest(&dir.join("manifest.json")).ok());
    match manifest.flatten() {
        Some(m) if m.producer.get("name").and_then(|n| n.as_str()) == Some("bert-trace") => {
            format!(
                "holds a bert-trace dump without the marker file .bert-trace-dump (a copy, or an older version's), \
                 which bert-trace never replaces{never}: delete it or {another}"
            )
        }
        Some(m) => format!(
            "holds a dump written by {}, not by bert-trace, which it never replaces{never}: {another}",
            m.producer.get("name").and_then(|n| n.as_str()).unwrap_or("another program")
        ),
        None => {
            let mut names = names.to_vec();
            names.sort();
            let keeps = match options.can_force {
                true => format!("{} keeps other files, never these: ", Opt("force").on()),
                false => String::new(),
            };
            format!(
                "holds files that bert-trace did not write but would replace ({}); {keeps}{another}",
                preview(&names)
            )
        }
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

/// Whether bert-trace may write a file named `name` into its directory: the marker, the
/// manifest, the archive, a stage's `.npy`, or the temporary name of any of these.
pub fn is_our_name(name: &str) -> bool {
    is_final_name(name) || is_temporary(name)
}

fn is_final_name(name: &str) -> bool {
    name == MARKER
        || name == "manifest.json"
        || name == ARCHIVE
        || name.strip_suffix(".npy").and_then(stage::parse).is_some()
}

fn is_temporary(name: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|n| n.strip_suffix(".tmp"))
        .is_some_and(|inner| is_final_name(inner) && inner != MARKER)
}
