//! Reading a dump back, ours or `scripts/dump_reference.py`'s (same format): its manifest,
//! checked, and each stage's `.npy`, from its own file or from the `.npz` archive the manifest
//! names, checked against the manifest before anything is allocated for it.

use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};

use ndarray::{ArrayD, IxDyn};
use ndarray_npy::npy::header::{Header, Layout};
use ndarray_npy::WritableElement;

use crate::error::{BertError, Result};
use crate::load::files;
use crate::trace::manifest::{Manifest, ManifestStage, FORMAT};
use crate::trace::stage::DType;
use crate::trace::Tensor;

/// Reads and checks a `manifest.json`.
pub fn read_manifest(path: &Path) -> Result<Manifest> {
    let bad = |problem: String| BertError::Dump { path: path.into(), problem };
    if !path.exists() {
        return Err(bad("not found; is this a dump directory?".into()));
    }
    let bytes = files::read(path, files::MAX_TABLE)?;
    let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| bad(format!("not a valid manifest: {e}")))?;
    if manifest.format != FORMAT {
        return Err(bad(format!("format is `{}`, expected `{FORMAT}`", manifest.format)));
    }
    for stage in &manifest.stages {
        if !is_plain_file_name(&stage.file) {
            return Err(bad(format!(
                "stage `{}` names file `{}`, which is not a file in the dump directory",
                stage.name, stage.file
            )));
        }
        if DType::from_numpy_name(&stage.dtype).is_none() {
            return Err(bad(format!("stage `{}` has dtype `{}`, expected float32 or int64", stage.name, stage.dtype)));
        }
    }
    if let Some(archive) = &manifest.archive {
        if !is_plain_file_name(archive) {
            return Err(bad(format!("archive `{archive}` is not a file in the dump directory")));
        }
    }
    Ok(manifest)
}

/// A dump opened for reading: a directory, or the `.npz` archive of one.
pub struct Dump {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

impl Dump {
    /// Opens a dump directory, or an `.npz` archive that the `manifest.json` beside it names.
    pub fn open(path: &Path) -> Result<Dump> {
        if path.is_file() && path.extension().is_some_and(|e| e == "npz") {
            let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            let manifest = read_manifest(&dir.join("manifest.json"))?;
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            if manifest.archive != name {
                return Err(BertError::Dump {
                    path: path.into(),
                    problem: "the manifest.json beside it does not name this archive; give the dump directory".into(),
                });
            }
            return Ok(Dump { dir: dir.into(), manifest });
        }
        if !path.is_dir() {
            return Err(BertError::Dump { path: path.into(), problem: "not a directory".into() });
        }
        Ok(Dump { dir: path.into(), manifest: read_manifest(&path.join("manifest.json"))? })
    }

    pub fn entry(&self, name: &str) -> Option<&ManifestStage> {
        self.manifest.stages.iter().find(|s| s.name == name)
    }

    /// Where a stage's values are, for messages: its file, or `archive:member`.
    pub fn location(&self, entry: &ManifestStage) -> PathBuf {
        match &self.manifest.archive {
            Some(archive) => self.dir.join(format!("{archive}:{}", entry.file)),
            None => self.dir.join(&entry.file),
        }
    }

    /// Reads one stage's tensor, checking its dtype and shape against the manifest.
    pub fn read(&self, entry: &ManifestStage) -> Result<Tensor> {
        let location = self.location(entry);
        let bad = |problem: String| BertError::Dump { path: location.clone(), problem };
        match &self.manifest.archive {
            None => {
                let path = self.dir.join(&entry.file);
                let (file, len) =
                    files::open_regular(&path).map_err(|e| bad(format!("cannot open: {}", reason(&e))))?;
                read_npy(file, len, entry).map_err(bad)
            }
            Some(archive) => {
                let path = self.dir.join(archive);
                let (file, _) = files::open_regular(&path).map_err(|e| bad(format!("cannot open: {}", reason(&e))))?;
                let mut zip =
                    zip::ZipArchive::new(file).map_err(|e| bad(format!("not a readable .npz archive: {e}")))?;
                let member = zip.by_name(&entry.file).map_err(|e| bad(format!("not in the archive: {e}")))?;
                let len = member.size();
                read_npy(member, len, entry).map_err(bad)
            }
        }
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

/// Reads a `.npy` of `len` bytes, checking every claim it makes against the manifest's entry
/// before allocating: a damaged or foreign file is refused with what is wrong, never believed
/// (a header claiming a huge shape would otherwise allocate it).
fn read_npy(mut reader: impl Read, len: u64, entry: &ManifestStage) -> std::result::Result<Tensor, String> {
    let dtype = DType::from_numpy_name(&entry.dtype).expect("checked with the manifest");
    let not_ours = |detail: &str| {
        format!(
            "not a{} {} .npy as the manifest says: {detail}",
            if dtype == DType::I64 { "n" } else { "" },
            entry.dtype
        )
    };
    let cannot_read = |e: std::io::Error| format!("cannot read: {e}");
    // The magic string (6 bytes), the format version (2), the header's length: a u16 in format
    // 1, a u32 in formats 2 and 3.
    let mut prefix = vec![0u8; 10];
    reader.read_exact(&mut prefix).map_err(|_| not_ours("too short for a .npy header"))?;
    if &prefix[..6] != b"\x93NUMPY" {
        return Err(not_ours("it does not start with the .npy magic string"));
    }
    let header_len = match prefix[6] {
        1 => u64::from(u16::from_le_bytes([prefix[8], prefix[9]])),
        2 | 3 => {
            let mut rest = [0u8; 2];
            reader.read_exact(&mut rest).map_err(|_| not_ours("too short for a .npy header"))?;
            prefix.extend_from_slice(&rest);
            u64::from(u32::from_le_bytes([prefix[8], prefix[9], rest[0], rest[1]]))
        }
        version => return Err(not_ours(&format!("unknown .npy format version {version}"))),
    };
    let start = prefix.len() as u64 + header_len;
    if start > len {
        return Err(format!("the .npy header claims to be {start} bytes long; the file has {len}"));
    }
    let prefix_len = prefix.len();
    let mut header = prefix;
    reader.by_ref().take(header_len).read_to_end(&mut header).map_err(cannot_read)?;
    // ndarray-npy parses the dictionary with a backtracking grammar whose time multiplies with
    // each level of brackets: a 118-byte header nesting 25 of them took over 10 seconds (found
    // by the fuzzer). A header of plain values nests two levels, the dictionary and the shape.
    if bracket_depth(&header[prefix_len..]) > 2 {
        return Err(not_ours("its header nests brackets deeper than a .npy header of plain values does"));
    }
    let header = Header::from_reader(&mut Cursor::new(header)).map_err(|e| not_ours(&e.to_string()))?;
    let descriptor = match dtype {
        DType::F32 => f32::type_descriptor(),
        DType::F64 => f64::type_descriptor(),
        DType::I64 => i64::type_descriptor(),
    };
    if header.type_descriptor != descriptor {
        return Err(not_ours(&format!("its values are {}", header.type_descriptor)));
    }
    if header.layout != Layout::Standard {
        return Err(not_ours("it is in Fortran order"));
    }
    let claimed = header.shape.iter().try_fold(dtype.size() as u64, |bytes, &dim| bytes.checked_mul(dim as u64));
    if claimed.is_none_or(|bytes| bytes > len - start) {
        return Err(format!(
            "the .npy header claims shape {:?}, more than the {} bytes after the header hold",
            header.shape,
            len - start
        ));
    }
    if header.shape != entry.shape {
        return Err(format!("shape {:?} differs from {:?} in manifest.json", header.shape, entry.shape));
    }
    let mut values = Vec::new();
    let wanted = claimed.expect("checked above");
    reader.take(wanted).read_to_end(&mut values).map_err(cannot_read)?;
    if values.len() as u64 != wanted {
        return Err(format!("the .npy holds {} bytes of values; its shape needs {wanted}", values.len()));
    }
    let shape = IxDyn(&header.shape);
    Ok(match dtype {
        DType::F32 => {
            let values = values.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
            Tensor::F32(ArrayD::from_shape_vec(shape, values).expect("checked length"))
        }
        DType::F64 => {
            let values = values.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
            Tensor::F64(ArrayD::from_shape_vec(shape, values).expect("checked length"))
        }
        DType::I64 => {
            let values = values.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
            Tensor::I64(ArrayD::from_shape_vec(shape, values).expect("checked length"))
        }
    })
}

/// A manifest's file entry must name a file in the dump directory itself, never a path elsewhere.
fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['/', '\\']) && name != "." && name != ".."
}

/// How deeply `text` nests brackets of any kind, counting those inside quotes too.
fn bracket_depth(text: &[u8]) -> usize {
    let mut depth = 0usize;
    let mut deepest = 0;
    for byte in text {
        match byte {
            b'{' | b'[' | b'(' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' | b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}
