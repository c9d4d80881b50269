//! Dumps without a manifest: a learner's arrays, as numpy, PyTorch or safetensors write them.
//!
//! The stages are the files: `layer0.attention.probs.npy` (or nested,
//! `layer0/attention/probs.npy`) in a directory, `layer0.attention.probs.npy` members of an
//! `.npz` archive, or tensors named `layer0.attention.probs` in a `.safetensors` file. Each
//! file's header gives its dtype and shape; nothing else is assumed. Arrays that lack the batch
//! axis the stage table gives a stage (a learner's `[T,H]` for `[B,T,H]`) are read as a batch of
//! one, which the dump notes once.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use safetensors::{Dtype, SafeTensors};

use super::npy::{self, NpyKind, NpyType};
use crate::error::{BertError, Result};
use crate::io::dump::manifest::{Inputs, Manifest, ManifestStage};
use crate::io::files;
use crate::io::weights::Storage;
use crate::pass::Tensor;
use crate::stage::{self, Dim, StageKind};

/// How deep the folders of a directory of `.npy` files are searched
/// (`layer0/attention/probs.npy` is three).
const MAX_DEPTH: usize = 8;
/// How many entries a directory tree may have: far more than any BERT has stages.
const MAX_ENTRIES: usize = 1_000_000;
/// The most bytes a `.safetensors` header may have.
const MAX_SAFETENSORS_HEADER: u64 = 100 << 20;

/// What kind of dump was opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpKind {
    /// A manifest and its `.npy` files (or `.npz` archive): bert-trace's format.
    Manifest,
    /// A directory of `.npy` files named by stage, without a manifest.
    NpyDirectory,
    /// An `.npz` archive without a manifest.
    Npz,
    /// A `.safetensors` file of named tensors.
    Safetensors,
    /// A trace held in memory.
    Memory,
}

impl DumpKind {
    pub fn describe(self) -> &'static str {
        match self {
            DumpKind::Manifest => "bert-trace dump",
            DumpKind::NpyDirectory => "directory of .npy files",
            DumpKind::Npz => ".npz archive",
            DumpKind::Safetensors => ".safetensors file",
            DumpKind::Memory => "trace in memory",
        }
    }
}

/// Where a dump's values are.
pub(crate) enum Source {
    /// Each entry's `file` is a path relative to this directory.
    Files(PathBuf),
    /// Each entry's `file` is a member of this `.npz` archive.
    Archive(PathBuf),
    /// Each entry's `file` is a tensor of this safetensors file, whose header was read once:
    /// each tensor's type, shape and byte range.
    Safetensors(Arc<Storage>, Arc<TensorIndex>),
    /// The values are in memory, one tensor per entry, in the manifest's order (a trace that
    /// was never written, compared or drawn as it is).
    Memory(Arc<Vec<crate::pass::Tensor>>),
}

/// Each tensor of a safetensors file by name: its type, its shape and its bytes' range.
pub(crate) type TensorIndex = HashMap<String, (NpyType, Vec<usize>, std::ops::Range<usize>)>;

/// A dump without a manifest, as found: the manifest made from its files, where they are, the
/// stages read with a batch axis added, and what the reader should be told about that.
pub(crate) struct Parts {
    pub manifest: Manifest,
    pub kind: DumpKind,
    pub source: Source,
    pub batch_added: HashSet<String>,
    pub notes: Vec<String>,
}

/// One array found in a dump without a manifest.
struct Found {
    name: String,
    /// The path relative to the directory, the archive's member, or the tensor's name.
    file: String,
    npy_type: NpyType,
    shape: Vec<usize>,
}

/// A directory of `.npy` files, flat or nested.
pub(super) fn directory(dir: &Path) -> Result<Parts> {
    let root = dir.canonicalize().map_err(|e| BertError::io(dir, e))?;
    let mut found = Vec::new();
    let mut seen = 0usize;
    walk(dir, &root, &mut Vec::new(), &mut found, &mut seen)?;
    if found.is_empty() {
        return Err(BertError::Dump {
            path: dir.into(),
            problem: "holds neither a manifest.json nor any .npy file: not a dump (an .npz archive or a .safetensors \
                      file is given as the file itself)"
                .into(),
        });
    }
    finish(dir, found, DumpKind::NpyDirectory, Source::Files(dir.into()))
}

/// Adds the `.npy` files under `dir/<parts>` to `found`.
fn walk(dir: &Path, root: &Path, parts: &mut Vec<String>, found: &mut Vec<Found>, seen: &mut usize) -> Result<()> {
    let here: PathBuf = parts.iter().fold(dir.to_path_buf(), |p, part| p.join(part));
    let mut entries: Vec<_> = std::fs::read_dir(&here)
        .map_err(|e| BertError::io(&here, e))?
        .map(|e| e.map_err(|e| BertError::io(&here, e)))
        .collect::<Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        *seen += 1;
        if *seen > MAX_ENTRIES {
            return Err(BertError::Dump {
                path: dir.into(),
                problem: format!("holds more than {MAX_ENTRIES} files and folders, far more than a dump has"),
            });
        }
        let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
        // Hidden files and folders (`.git`, `.ipynb_checkpoints`) are not a learner's stages.
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        let file_type = entry.file_type().map_err(|e| BertError::io(&path, e))?;
        // A folder is entered only when it is a real one, so that no link can make the walk go
        // round in circles, and not deeper than stages nest; a symbolic link is followed only as
        // a stage file, and only inside the dump.
        if file_type.is_dir() {
            if parts.len() + 1 < MAX_DEPTH {
                parts.push(name);
                walk(dir, root, parts, found, seen)?;
                parts.pop();
            }
            continue;
        }
        if file_type.is_symlink() && name.ends_with(".npy") {
            check_inside(root, &path)?;
        }
        let Some(stem) = name.strip_suffix(".npy") else { continue };
        let mut pieces = parts.clone();
        pieces.push(stem.to_string());
        let relative = parts.iter().chain(std::iter::once(&name)).cloned().collect::<Vec<_>>().join("/");
        let (file, len) = files::open_regular(&path)?;
        let header = npy::read_header(file, len).map_err(|problem| BertError::Dump { path: path.clone(), problem })?;
        found.push(Found { name: pieces.join("."), file: relative, npy_type: header.npy_type, shape: header.shape });
    }
    Ok(())
}

/// An `.npz` archive without a manifest: `np.savez` (stored) or `np.savez_compressed` (deflate);
/// LZMA members too.
pub(super) fn archive(path: &Path) -> Result<Parts> {
    let bad = |problem: String| BertError::Dump { path: path.into(), problem };
    let (file, _) = files::open_regular(path)?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(format!("not a readable .npz archive: {e}")))?;
    let mut found = Vec::new();
    for index in 0..zip.len() {
        // The method is read from the raw member: zip refuses to open one it cannot inflate.
        let raw = zip.by_index_raw(index).map_err(|e| bad(format!("cannot read member {index}: {e}")))?;
        let (member_name, method) = (raw.name().to_string(), raw.compression());
        drop(raw);
        let Some(stem) = member_name.strip_suffix(".npy") else { continue };
        readable(method).map_err(|problem| bad(format!("member {member_name}: {problem}")))?;
        let member = zip.by_index(index).map_err(|e| bad(format!("cannot read member {member_name}: {e}")))?;
        let len = member.size();
        let header =
            npy::read_header(member, len).map_err(|problem| bad(format!("member {member_name}: {problem}")))?;
        found.push(Found {
            name: stem.replace('/', "."),
            file: member_name.clone(),
            npy_type: header.npy_type,
            shape: header.shape,
        });
    }
    if found.is_empty() {
        return Err(bad("holds no .npy member: not an archive of arrays".into()));
    }
    finish(path, found, DumpKind::Npz, Source::Archive(path.into()))
}

/// A `.safetensors` file of tensors named by stage.
pub(super) fn safetensors(path: &Path) -> Result<Parts> {
    let storage = Arc::new(Storage::map(path)?);
    let bad = |problem: String| BertError::Safetensors { path: path.into(), problem };
    if storage.len() < 8 {
        return Err(bad(format!("the file is {} bytes long, too short for the 8-byte header length", storage.len())));
    }
    let header_len = u64::from_le_bytes(storage[..8].try_into().expect("8 bytes"));
    if header_len > MAX_SAFETENSORS_HEADER || header_len > storage.len() as u64 - 8 {
        return Err(bad(format!("the header claims {header_len} bytes, more than the file or any header holds")));
    }
    let mut found = Vec::new();
    let mut index = HashMap::new();
    {
        let tensors = SafeTensors::deserialize(&storage).map_err(|e| bad(e.to_string()))?;
        let base = storage.as_ptr() as usize;
        for (name, view) in tensors.tensors() {
            let npy_type = safetensors_type(view.dtype()).ok_or_else(|| {
                bad(format!("tensor `{name}` has dtype {:?}; expected floats, integers or bools", view.dtype()))
            })?;
            let start = view.data().as_ptr() as usize - base;
            index.insert(name.clone(), (npy_type, view.shape().to_vec(), start..start + view.data().len()));
            found.push(Found { file: name.clone(), name, npy_type, shape: view.shape().to_vec() });
        }
    }
    if found.is_empty() {
        return Err(bad("holds no tensor".into()));
    }
    finish(path, found, DumpKind::Safetensors, Source::Safetensors(storage, Arc::new(index)))
}

/// The values of tensor `name` of a safetensors file, from its header read at open (reading
/// the header again for every stage made a diff of many stages quadratic), and their type.
pub(super) fn safetensors_tensor(
    storage: &Storage,
    index: &TensorIndex,
    name: &str,
) -> std::result::Result<(Tensor, NpyType), String> {
    let (npy_type, shape, range) = index.get(name).ok_or_else(|| format!("no tensor `{name}`"))?;
    Ok((npy::decode(&storage[range.clone()], *npy_type, shape, false), *npy_type))
}

/// The numpy type of a safetensors dtype (little-endian, as safetensors stores every value).
fn safetensors_type(dtype: Dtype) -> Option<NpyType> {
    let (kind, size) = match dtype {
        Dtype::F16 => (NpyKind::Float, 2),
        Dtype::BF16 => (NpyKind::BFloat, 2),
        Dtype::F32 => (NpyKind::Float, 4),
        Dtype::F64 => (NpyKind::Float, 8),
        Dtype::I8 => (NpyKind::Int, 1),
        Dtype::I16 => (NpyKind::Int, 2),
        Dtype::I32 => (NpyKind::Int, 4),
        Dtype::I64 => (NpyKind::Int, 8),
        Dtype::U8 => (NpyKind::Unsigned, 1),
        Dtype::U16 => (NpyKind::Unsigned, 2),
        Dtype::U32 => (NpyKind::Unsigned, 4),
        Dtype::U64 => (NpyKind::Unsigned, 8),
        Dtype::BOOL => (NpyKind::Bool, 1),
        _ => return None,
    };
    Some(NpyType { kind, size, big_endian: false })
}

/// Refuses `path` if it (or the symbolic link it is) leads outside the directory `root`.
pub(super) fn check_inside(root: &Path, path: &Path) -> Result<()> {
    let Ok(metadata) = std::fs::symlink_metadata(path) else { return Ok(()) };
    if !metadata.file_type().is_symlink() {
        return Ok(());
    }
    let root = root.canonicalize().map_err(|e| BertError::io(root, e))?;
    match path.canonicalize() {
        Ok(target) if target.starts_with(&root) => Ok(()),
        Ok(target) => Err(BertError::Dump {
            path: path.into(),
            problem: format!(
                "is a symbolic link to {}, outside the dump; a dump's files must be inside it",
                target.display()
            ),
        }),
        Err(_) => Err(BertError::Dump {
            path: path.into(),
            problem: "is a symbolic link that leads nowhere (or in circles)".into(),
        }),
    }
}

/// The dump of `found`: each stage once, in execution order, with a batch axis of one added to
/// arrays that lack it.
fn finish(path: &Path, mut found: Vec<Found>, kind: DumpKind, source: Source) -> Result<Parts> {
    let mut files_of: HashMap<&str, &str> = HashMap::new();
    for f in &found {
        if let Some(other) = files_of.insert(&f.name, &f.file) {
            return Err(BertError::Dump {
                path: path.into(),
                problem: format!("two files give stage `{}`: {other} and {}; keep one", f.name, f.file),
            });
        }
    }
    found.sort_by_key(|f| (stage::execution_key(&f.name), f.name.clone()));
    let sizes = Sizes::of(&found);
    let mut batch_added = HashSet::new();
    let mut stages = Vec::with_capacity(found.len());
    for f in found {
        let known = stage::parse(&f.name);
        let mut shape = f.shape;
        if known.is_some_and(|s| lacks_batch_axis(s.kind, &shape, &sizes)) {
            shape.insert(0, 1);
            batch_added.insert(f.name.clone());
        }
        stages.push(ManifestStage {
            hf: known.map(|s| s.hf()).unwrap_or_default(),
            formula: known.map(|s| s.formula().to_string()).unwrap_or_default(),
            name: f.name,
            shape,
            dtype: f.npy_type.name(),
            file: f.file,
        });
    }
    let mut notes = Vec::new();
    if !batch_added.is_empty() {
        let mut names: Vec<&String> = batch_added.iter().collect();
        names.sort_by_key(|n| stage::execution_key(n));
        notes.push(format!("{} array(s) lack the batch axis (e.g. {}); read as a batch of one", names.len(), names[0]));
    }
    let producer = serde_json::json!({ "name": kind.describe() });
    let manifest = Manifest { stages, ..Manifest::new(producer, String::new(), Inputs::default()) };
    Ok(Parts { manifest, kind, source, batch_added, notes })
}

/// The token count and hidden size a dump's own arrays show, where they show them.
struct Sizes {
    tokens: Option<usize>,
    hidden: Option<usize>,
}

impl Sizes {
    fn of(found: &[Found]) -> Sizes {
        let last = |name: &str| found.iter().find(|f| f.name == name).and_then(|f| f.shape.last().copied());
        let hidden = ["embeddings.sum", "embeddings.layernorm", "embeddings.word"].into_iter().find_map(last);
        Sizes { tokens: last("input.ids"), hidden }
    }
}

/// Whether an array of `shape` for a stage of `kind` is the table's shape without its leading
/// batch axis. Q, K and V of rank 3 are either `[nh,T,hs]` without the batch axis or `[B,T,H]`
/// before the head split; they are the latter when their last axis is the hidden size, and
/// left to the comparison as they are.
fn lacks_batch_axis(kind: StageKind, shape: &[usize], sizes: &Sizes) -> bool {
    let table = kind.info().shape;
    if table.first() != Some(&Dim::B) || shape.len() + 1 != table.len() {
        return false;
    }
    let qkv = matches!(kind, StageKind::AttnQuery | StageKind::AttnKey | StageKind::AttnValue);
    if qkv && (sizes.hidden.is_none() || shape.last() == sizes.hidden.as_ref()) {
        return false;
    }
    // Where the table has T right after B, the array's first axis must be the token count.
    match (table.get(1), sizes.tokens) {
        (Some(Dim::T), Some(tokens)) => shape.first() == Some(&tokens),
        _ => true,
    }
}

/// Refuses a member of an archive compressed in a way bert-trace does not read, naming the
/// method: what numpy writes (stored, deflate) and LZMA are read.
pub(super) fn readable(method: zip::CompressionMethod) -> std::result::Result<(), String> {
    use zip::CompressionMethod as Method;
    if matches!(method, Method::Stored | Method::Deflated | Method::Lzma) {
        return Ok(());
    }
    #[allow(deprecated)]
    let number = method.to_u16();
    // The names PKWARE's APPNOTE gives the methods an archive may hold.
    let name = match number {
        1 => "shrink",
        6 => "implode",
        9 => "deflate64",
        12 => "bzip2",
        93 => "zstd",
        95 => "xz",
        96 => "JPEG",
        98 => "PPMd",
        99 => "AES encryption",
        _ => "an unknown method",
    };
    Err(format!(
        "compressed with {name} (ZIP method {number}), which bert-trace does not read: it reads members stored or \
         compressed with deflate (np.savez, np.savez_compressed) or LZMA"
    ))
}
