//! Reading a dump back, whoever wrote it:
//!
//! - a bert-trace dump (ours or `scripts/dump_reference.py`'s): `manifest.json` and a `.npy` per
//!   stage, or the `.npz` archive the manifest names;
//! - a learner's arrays, with no manifest (`plain.rs`): a directory of `.npy` files named by
//!   stage (`layer0.attention.probs.npy`, or nested, `layer0/attention/probs.npy`), an `.npz`
//!   from `np.savez` or `np.savez_compressed`, or a `.safetensors` file of named tensors.
//!
//! Every path and symbolic link must stay inside the dump; each stage is named once; every file
//! is checked against what the manifest (or its own header) claims before its values are read.

use std::collections::HashMap;

use ndarray::{Array2, ArrayD, Ix2};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::npy::{self, NpyType};
use super::plain::{self, DumpKind, Parts, Source};
use crate::error::{BertError, Result};
use crate::io::dump::manifest::{Manifest, ManifestStage, FORMAT_MAJOR, FORMAT_PREFIX};
use crate::io::files;
use crate::pass::Tensor;
use crate::stage::DType;

/// Reads and checks a `manifest.json`.
pub fn read_manifest(path: &Path) -> Result<Manifest> {
    let bad = |problem: String| BertError::Dump { path: path.into(), problem };
    if !path.exists() {
        return Err(BertError::NotFound { path: path.into(), problem: "not found; is this a dump directory?".into() });
    }
    let bytes = files::read(path, files::MAX_TABLE)?;
    let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| bad(format!("not a valid manifest: {e}")))?;
    check_format(&manifest.format).map_err(bad)?;
    let mut seen = std::collections::HashSet::new();
    for stage in &manifest.stages {
        if !is_plain_file_name(&stage.file) {
            return Err(bad(format!(
                "stage `{}` names file `{}`, which is not a file in the dump directory",
                stage.name, stage.file
            )));
        }
        if !npy::is_readable_dtype(&stage.dtype) {
            return Err(bad(format!(
                "stage `{}` has dtype `{}`, expected a numpy float, integer or bool type",
                stage.name, stage.dtype
            )));
        }
        if !seen.insert(stage.name.as_str()) {
            return Err(bad(format!("lists stage `{}` twice; a dump holds each stage once", stage.name)));
        }
    }
    if let Some(archive) = &manifest.archive {
        if !is_plain_file_name(archive) {
            return Err(bad(format!("archive `{archive}` is not a file in the dump directory")));
        }
    }
    Ok(manifest)
}

/// Accepts the formats this version reads: `bert-trace-dump/N` up to [`FORMAT_MAJOR`].
fn check_format(format: &str) -> std::result::Result<(), String> {
    let major = format.strip_prefix(FORMAT_PREFIX).and_then(|v| v.split('.').next()?.parse::<u32>().ok());
    match major {
        Some(n) if (1..=FORMAT_MAJOR).contains(&n) => Ok(()),
        Some(n) if n > FORMAT_MAJOR => Err(format!(
            "format is `{format}`, written by a newer bert-trace; this one reads up to {FORMAT_PREFIX}{FORMAT_MAJOR}: \
             update bert-trace"
        )),
        _ => Err(format!("format is `{format}`, expected `{FORMAT_PREFIX}{FORMAT_MAJOR}`")),
    }
}

/// A dump opened for reading.
pub struct Dump {
    /// The directory, archive or file given, for messages.
    pub dir: PathBuf,
    /// The manifest: read from `manifest.json`, or made from the files of a dump without one
    /// (its stages in execution order, its producer the kind of dump).
    pub manifest: Manifest,
    pub kind: DumpKind,
    /// What was done to read a learner's arrays (a batch axis added, say), once per kind.
    pub notes: Vec<String>,
    source: Source,
    /// Stage name -> index in `manifest.stages`.
    index: HashMap<String, usize>,
    /// The stages whose files lack the batch axis the stage table gives them: read with it.
    batch_added: std::collections::HashSet<String>,
    /// The files more than one stage names, each read once and kept: a manifest that lists one
    /// small file for many stages is read in time linear in its stages, not in its files' reads.
    repeated: std::collections::HashSet<String>,
    read_once: std::sync::Mutex<HashMap<String, (Tensor, NpyType)>>,
}

impl Dump {
    /// Opens a dump: a directory (with or without `manifest.json`), an `.npz` archive (ours, with
    /// the manifest beside it, or any other), or a `.safetensors` file.
    pub fn open(path: &Path) -> Result<Dump> {
        let bad = |problem: &str| BertError::Dump { path: path.into(), problem: problem.into() };
        let metadata = std::fs::metadata(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => BertError::NotFound { path: path.into(), problem: "not found".into() },
            _ => BertError::io(path, e),
        })?;
        let extension = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        if metadata.is_file() {
            return match extension.as_deref() {
                Some("npz") => match ours_beside(path)? {
                    Some(manifest) => Dump::new(path, manifest, DumpKind::Manifest, Source::Archive(path.into())),
                    None => Dump::from_parts(path, plain::archive(path)?),
                },
                Some("safetensors") => Dump::from_parts(path, plain::safetensors(path)?),
                _ => Err(bad(
                    "is a file, not a dump: give a dump directory, a directory of .npy files, an .npz archive or a \
                     .safetensors file",
                )),
            };
        }
        if !metadata.is_dir() {
            return Err(bad("not a directory, an .npz archive or a .safetensors file"));
        }
        let manifest_path = path.join("manifest.json");
        if std::fs::symlink_metadata(&manifest_path).is_err() {
            return Dump::from_parts(path, plain::directory(path)?);
        }
        let manifest = read_manifest(&manifest_path)?;
        let source = match &manifest.archive {
            Some(archive) => Source::Archive(path.join(archive)),
            None => Source::Files(path.into()),
        };
        Dump::new(path, manifest, DumpKind::Manifest, source)
    }

    /// The float type of the dump's stages: float64 when any stage is (a `--precision f64`
    /// trace, or a truth dump), else float32.
    pub fn float_dtype(&self) -> DType {
        let f64 = self.manifest.stages.iter().any(|stage| DType::from_numpy_name(&stage.dtype) == Some(DType::F64));
        if f64 {
            DType::F64
        } else {
            DType::F32
        }
    }

    /// What the pass that made the dump held in a narrower format: a bert-trace dump's
    /// `simulated` record, or the `dtype` (`bfloat16`, `float16`) and `weights` (`int8`) a
    /// `scripts/dump_reference.py` dump's producer records for PyTorch's own pass in them.
    pub fn simulation(&self) -> crate::precision::Simulation {
        use crate::precision::{Format, Simulation, WeightFormat};
        if let Some(record) = &self.manifest.simulated {
            return record.simulation;
        }
        let producer = |key: &str| self.manifest.producer.get(key).and_then(|v| v.as_str());
        Simulation {
            format: match producer("dtype") {
                Some("bfloat16") => Some(Format::Bfloat16),
                Some("float16") => Some(Format::Float16),
                _ => None,
            },
            weights: (producer("weights") == Some("int8")).then_some(WeightFormat::Int8),
        }
    }

    /// The stages of a pass kept in memory, as a dump of `model` (what its manifest names it)
    /// with `inputs` and what changed it (`interventions`): for `explain` on a pass nothing was
    /// written for.
    pub fn of_pass(
        name: &str,
        model: String,
        fingerprint: String,
        inputs: crate::io::dump::manifest::Inputs,
        interventions: Vec<crate::io::dump::manifest::InterventionRecord>,
        stages: Vec<(crate::stage::Stage, Tensor)>,
    ) -> Result<Dump> {
        let entries = stages.iter().map(|(stage, tensor)| ManifestStage::of(stage, &tensor.view())).collect();
        let producer = serde_json::json!({"name": "bert-trace", "version": env!("CARGO_PKG_VERSION")});
        let manifest = Manifest {
            stages: entries,
            model_fingerprint: Some(fingerprint),
            interventions,
            ..Manifest::new(producer, model, inputs)
        };
        Dump::in_memory(name, manifest, stages.into_iter().map(|(_, tensor)| tensor).collect())
    }

    /// The dump of `manifest`'s stages, in their files in `dir` (or the archive the manifest
    /// names there): for tools that check a manifest they made or read on their own.
    pub fn with_manifest(dir: &Path, manifest: Manifest) -> Result<Dump> {
        let source = match &manifest.archive {
            Some(archive) => Source::Archive(dir.join(archive)),
            None => Source::Files(dir.into()),
        };
        Dump::new(dir, manifest, DumpKind::Manifest, source)
    }

    /// A dump of `manifest`'s stages at `source`; refuses a file that leads outside `path`.
    fn new(path: &Path, manifest: Manifest, kind: DumpKind, source: Source) -> Result<Dump> {
        match &source {
            Source::Files(dir) => {
                let mut checked = std::collections::HashSet::new();
                for stage in &manifest.stages {
                    if checked.insert(stage.file.as_str()) {
                        plain::check_inside(dir, &dir.join(&stage.file))?;
                    }
                }
            }
            Source::Archive(archive) if kind == DumpKind::Manifest => {
                let dir = archive.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
                plain::check_inside(dir, archive)?;
            }
            _ => {}
        }
        let index = manifest.stages.iter().enumerate().map(|(i, s)| (s.name.clone(), i)).collect();
        let mut seen = std::collections::HashSet::new();
        let repeated =
            manifest.stages.iter().filter(|s| !seen.insert(s.file.as_str())).map(|s| s.file.clone()).collect();
        Ok(Dump {
            dir: path.into(),
            manifest,
            kind,
            notes: Vec::new(),
            source,
            index,
            batch_added: Default::default(),
            repeated,
            read_once: Default::default(),
        })
    }

    /// A trace held in memory as a dump: `tensors[i]` is the values of `manifest.stages[i]`, of
    /// the shape and dtype the entry gives (checked). `name` stands for a directory in messages.
    pub fn in_memory(name: &str, manifest: Manifest, tensors: Vec<Tensor>) -> Result<Dump> {
        let bad = |problem: String| BertError::Dump { path: name.into(), problem };
        if tensors.len() != manifest.stages.len() {
            return Err(bad(format!("{} stages but {} tensors", manifest.stages.len(), tensors.len())));
        }
        for (entry, tensor) in manifest.stages.iter().zip(&tensors) {
            if tensor.shape() != entry.shape.as_slice() || tensor.dtype().numpy_name() != entry.dtype {
                return Err(bad(format!(
                    "{} is {} {:?} in memory, the manifest says {} {:?}",
                    entry.name,
                    tensor.dtype().numpy_name(),
                    tensor.shape(),
                    entry.dtype,
                    entry.shape
                )));
            }
        }
        Dump::new(Path::new(name), manifest, DumpKind::Memory, Source::Memory(Arc::new(tensors)))
    }

    /// The dump of a learner's arrays, found by `plain.rs`.
    fn from_parts(path: &Path, parts: Parts) -> Result<Dump> {
        let mut dump = Dump::new(path, parts.manifest, parts.kind, parts.source)?;
        dump.batch_added = parts.batch_added;
        dump.notes = parts.notes;
        Ok(dump)
    }

    /// The entry of stage `name`, if the dump has it.
    pub fn entry(&self, name: &str) -> Option<&ManifestStage> {
        self.index.get(name).map(|&i| &self.manifest.stages[i])
    }

    /// The dump's `input.attention_mask` as 0 and 1, whatever dtype it was saved in, if it has
    /// one: what the comparisons read to tell real tokens from padding.
    pub fn attention_mask(&self) -> Result<Option<ndarray::ArrayD<i64>>> {
        let Some(entry) = self.entry("input.attention_mask") else { return Ok(None) };
        Ok(Some(self.read(entry)?.to_f64().mapv(|m| i64::from(m != 0.0))))
    }

    /// Where a stage's values are, for messages: its file, or `archive:member`.
    pub fn location(&self, entry: &ManifestStage) -> PathBuf {
        match &self.source {
            Source::Files(dir) => dir.join(&entry.file),
            Source::Archive(archive) => PathBuf::from(format!("{}:{}", archive.display(), entry.file)),
            Source::Safetensors(..) | Source::Memory(_) => {
                PathBuf::from(format!("{}:{}", self.dir.display(), entry.file))
            }
        }
    }

    /// Reads one stage's tensor, checking its dtype and shape against the entry.
    pub fn read(&self, entry: &ManifestStage) -> Result<Tensor> {
        let location = self.location(entry);
        let bad = |problem: String| BertError::Dump { path: location.clone(), problem };
        let batch_added = self.batch_added.contains(&entry.name);
        let stored_shape = if batch_added { &entry.shape[1..] } else { &entry.shape[..] };
        let (tensor, stored) = match &self.source {
            Source::Files(dir) => {
                let cached = self.read_once.lock().expect("not poisoned").get(&entry.file).cloned();
                match cached {
                    Some(read) => read,
                    None => {
                        let path = dir.join(&entry.file);
                        let (file, len) =
                            files::open_regular(&path).map_err(|e| bad(format!("cannot open: {}", reason(&e))))?;
                        let read = npy::read(file, len).map_err(&bad)?;
                        if self.repeated.contains(&entry.file) {
                            self.read_once.lock().expect("not poisoned").insert(entry.file.clone(), read.clone());
                        }
                        read
                    }
                }
            }
            Source::Archive(path) => {
                let (file, _) = files::open_regular(path).map_err(|e| bad(format!("cannot open: {}", reason(&e))))?;
                let mut zip =
                    zip::ZipArchive::new(file).map_err(|e| bad(format!("not a readable .npz archive: {e}")))?;
                let index =
                    zip.index_for_name(&entry.file).ok_or_else(|| bad("no such member in the archive".into()))?;
                let method =
                    zip.by_index_raw(index).map_err(|e| bad(format!("cannot read the member: {e}")))?.compression();
                plain::readable(method).map_err(&bad)?;
                let member = zip.by_index(index).map_err(|e| bad(format!("cannot read the member: {e}")))?;
                let len = member.size();
                npy::read(member, len).map_err(&bad)?
            }
            Source::Safetensors(storage, index) => {
                plain::safetensors_tensor(storage, index, &entry.file).map_err(&bad)?
            }
            Source::Memory(tensors) => {
                let at = self.index.get(&entry.name).copied().ok_or_else(|| bad("not a stage of this trace".into()))?;
                return Ok(tensors[at].clone());
            }
        };
        if !same_dtype(&stored, &entry.dtype) {
            return Err(bad(format!("holds {}, but the manifest says {}", stored.name(), entry.dtype)));
        }
        if tensor.shape() != stored_shape {
            return Err(bad(format!("shape {:?} differs from {:?} in the manifest", tensor.shape(), stored_shape)));
        }
        Ok(if batch_added { add_batch_axis(tensor) } else { tensor })
    }
}

/// The bert-trace manifest beside the archive `path`, if there is one and it names the archive.
fn ours_beside(path: &Path) -> Result<Option<Manifest>> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let manifest_path = dir.join("manifest.json");
    if std::fs::symlink_metadata(&manifest_path).is_err() {
        return Ok(None);
    }
    let manifest = read_manifest(&manifest_path)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    Ok((manifest.archive.is_some() && manifest.archive == name).then_some(manifest))
}

/// Whether a file storing `stored` is what the manifest's dtype `name` says; `bfloat16` is read
/// from safetensors only, where it is named so.
fn same_dtype(stored: &NpyType, name: &str) -> bool {
    stored.name() == name || (name == "bfloat16" && stored.name() == "bfloat16")
}

fn add_batch_axis(tensor: Tensor) -> Tensor {
    match tensor {
        Tensor::F32(a) => Tensor::F32(a.insert_axis(ndarray::Axis(0))),
        Tensor::F64(a) => Tensor::F64(a.insert_axis(ndarray::Axis(0))),
        Tensor::I64(a) => Tensor::I64(a.insert_axis(ndarray::Axis(0))),
    }
}

/// An error's message without the path it names (the caller names the stage's location).
fn reason(error: &BertError) -> String {
    match error {
        BertError::Io { error, .. } => error.to_string(),
        BertError::File { problem, .. } => problem.clone(),
        other => other.to_string(),
    }
}

/// A manifest's file entry must name a file in the dump directory itself, never a path elsewhere.
fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['/', '\\']) && name != "." && name != ".."
}

/// The `[B,T]` attention mask of the input both dumps were made from, after checking that their
/// token ids are the same (a comparison of two different inputs would measure the inputs): what
/// `compare` and `diff --isolate` check first.
pub fn same_input(a: &Dump, b: &Dump) -> Result<Array2<i64>> {
    let ids = |dump: &Dump| -> Result<Array2<i64>> {
        let entry = dump
            .entry("input.ids")
            .ok_or_else(|| refused(dump, "has no input.ids, so it cannot be checked to be of the same input".into()))?;
        let ids = dump.read(entry)?.to_f64().mapv(|v| v as i64);
        let ids = ids
            .into_dimensionality::<Ix2>()
            .map_err(|_| refused(dump, format!("input.ids is {:?}, not [B,T]", entry.shape)))?;
        if ids.is_empty() {
            return Err(refused(dump, format!("input.ids is {:?}: a dump of 0 tokens", entry.shape)));
        }
        Ok(ids)
    };
    let (x, y) = (ids(a)?, ids(b)?);
    if x.dim() != y.dim() {
        return Err(refused(
            b,
            format!(
                "is of another input: its input.ids are {:?}, {}'s {:?}; compare traces of the same text",
                y.shape(),
                a.dir.display(),
                x.shape()
            ),
        ));
    }
    if let Some(((seq, pos), (p, q))) =
        x.indexed_iter().zip(y.iter()).map(|((i, p), q)| (i, (p, q))).find(|(_, (p, q))| p != q)
    {
        return Err(refused(
            b,
            format!(
                "is of another input: token {pos} of sequence {seq} is id {q}, {} has id {p}; compare traces of the \
                 same text",
                a.dir.display()
            ),
        ));
    }
    let mask = a.attention_mask()?.unwrap_or_else(|| ArrayD::ones(x.shape()));
    mask.into_dimensionality().map_err(|_| refused(a, "input.attention_mask is not [B,T] like input.ids".into()))
}

fn refused(dump: &Dump, problem: String) -> BertError {
    BertError::Dump { path: dump.dir.clone(), problem }
}
