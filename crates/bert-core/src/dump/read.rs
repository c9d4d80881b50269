//! Reading a dump directory back: its manifest, checked, and each stage's `.npy`, checked against
//! the manifest before anything is allocated for it. Used for our own dumps and for
//! `scripts/dump_reference.py`'s, which have the same format.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use ndarray::ArrayD;
use ndarray_npy::ReadNpyExt;

use crate::error::{BertError, Result};
use crate::manifest::{Manifest, ManifestStage, FORMAT};
use crate::trace::Tensor;

/// Reads and checks a `manifest.json`.
pub fn read_manifest(path: &Path) -> Result<Manifest> {
    let bad = |problem: String| BertError::Dump { path: path.into(), problem };
    let bytes = std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => bad("not found; is this a dump directory?".into()),
        _ => BertError::io(path, e),
    })?;
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
        if stage.dtype != "float32" && stage.dtype != "int64" {
            return Err(bad(format!("stage `{}` has dtype `{}`, expected float32 or int64", stage.name, stage.dtype)));
        }
    }
    Ok(manifest)
}

/// ndarray-npy allocates what a `.npy` header claims before reading what follows it: the header
/// dictionary (up to 4 GiB in formats 2 and 3) and then the whole array. A damaged file that
/// claims more than it holds is refused here, before either allocation (found by `fuzz/`'s
/// `dump` target). Anything else wrong with the file is left for ndarray-npy to report; the
/// file is rewound for it.
fn check_npy_claims(file: &mut File, element_size: u64) -> std::result::Result<(), String> {
    use std::io::{Read, Seek};
    let cannot_read = |e: std::io::Error| format!("cannot read: {e}");
    let file_len = file.metadata().map_err(cannot_read)?.len();
    // The magic string (6 bytes), the format version (2), the header's length: a u16 in format
    // 1, a u32 in formats 2 and 3.
    let mut prefix = Vec::with_capacity(12);
    (&mut *file).take(12).read_to_end(&mut prefix).map_err(cannot_read)?;
    let header_len = match (prefix.get(..6), prefix.get(6), prefix.get(8..)) {
        (Some(b"\x93NUMPY"), Some(1), Some(len)) if len.len() >= 2 => {
            10 + u64::from(u16::from_le_bytes([len[0], len[1]]))
        }
        (Some(b"\x93NUMPY"), Some(2 | 3), Some(len)) if len.len() == 4 => {
            12 + u64::from(u32::from_le_bytes(len.try_into().expect("4 bytes")))
        }
        _ => return file.rewind().map_err(cannot_read),
    };
    if header_len > file_len {
        return Err(format!("the .npy header claims to be {header_len} bytes long; the file has {file_len}"));
    }
    file.rewind().map_err(cannot_read)?;
    let header = ndarray_npy::npy::header::Header::from_reader(&mut BufReader::new(&mut *file));
    file.rewind().map_err(cannot_read)?;
    let Ok(header) = header else {
        return Ok(());
    };
    let available = file_len - header_len;
    let claimed = header.shape.iter().try_fold(element_size, |bytes, &dim| bytes.checked_mul(dim as u64));
    match claimed {
        Some(bytes) if bytes <= available => Ok(()),
        _ => Err(format!(
            "the .npy header claims shape {:?}, more than the {available} bytes after the header hold",
            header.shape
        )),
    }
}

/// A dump directory opened for reading.
pub struct Dump {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

impl Dump {
    pub fn open(dir: &Path) -> Result<Dump> {
        if !dir.is_dir() {
            return Err(BertError::Dump { path: dir.into(), problem: "not a directory".into() });
        }
        Ok(Dump { dir: dir.into(), manifest: read_manifest(&dir.join("manifest.json"))? })
    }

    pub fn entry(&self, name: &str) -> Option<&ManifestStage> {
        self.manifest.stages.iter().find(|s| s.name == name)
    }

    /// Reads one stage's tensor, checking its dtype and shape against the manifest.
    pub fn read(&self, entry: &ManifestStage) -> Result<Tensor> {
        let path = self.dir.join(&entry.file);
        let bad = |problem: String| BertError::Dump { path: path.clone(), problem };
        let mut file = File::open(&path).map_err(|e| bad(format!("cannot open: {e}")))?;
        let element_size = if entry.dtype == "int64" { 8 } else { 4 };
        check_npy_claims(&mut file, element_size).map_err(bad)?;
        let reader = BufReader::new(file);
        let tensor = match entry.dtype.as_str() {
            "int64" => Tensor::I64(
                ArrayD::<i64>::read_npy(reader)
                    .map_err(|e| bad(format!("not an int64 .npy as the manifest says: {e}")))?,
            ),
            _ => Tensor::F32(
                ArrayD::<f32>::read_npy(reader)
                    .map_err(|e| bad(format!("not a float32 .npy as the manifest says: {e}")))?,
            ),
        };
        if tensor.shape() != entry.shape.as_slice() {
            return Err(bad(format!("shape {:?} differs from {:?} in manifest.json", tensor.shape(), entry.shape)));
        }
        Ok(tensor)
    }
}

/// A manifest's file entry must name a file in the dump directory itself, never a path elsewhere.
fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['/', '\\']) && name != "." && name != ".."
}
