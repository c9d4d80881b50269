//! `--npz`: every stage of a dump in one `trace.npz` archive beside the manifest, as numpy's
//! `np.savez` writes it (one `<stage>.npy` member per stage, stored uncompressed), so that
//! `np.load("trace/trace.npz")["embeddings.sum"]` reads a stage.

use std::fs::{File, OpenOptions};
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use ndarray_npy::NpzWriter;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime};

use super::writer::temporary;
use super::ARCHIVE;
use crate::error::{BertError, Result};
use crate::trace::TensorView;

/// The archive being written, under its temporary name until [`Archive::finish`].
pub(super) struct Archive {
    npz: Option<NpzWriter<BufWriter<File>>>,
    temp: PathBuf,
    path: PathBuf,
}

impl Archive {
    pub fn create(dir: &Path) -> Result<Archive> {
        let path = dir.join(ARCHIVE);
        let temp = temporary(&path);
        let _ = std::fs::remove_file(&temp);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(|e| BertError::Dump { path: path.clone(), problem: format!("cannot write: {e}") })?;
        // A fixed date on every member, so that two runs write the same bytes.
        let options = SimpleFileOptions::default()
            .compression_method(CompressionMethod::Stored)
            .last_modified_time(DateTime::default());
        let npz = NpzWriter::new_with_options(BufWriter::new(file), options);
        Ok(Archive { npz: Some(npz), temp, path })
    }

    /// Adds one stage as the member `file` (`<stage>.npy`).
    pub fn add(&mut self, file: &str, tensor: &TensorView<'_>) -> Result<()> {
        let npz = self.npz.as_mut().expect("not finished");
        let name = file.strip_suffix(".npy").unwrap_or(file);
        let result = match tensor {
            TensorView::F32(a) => npz.add_array(name, &a.as_standard_layout()),
            TensorView::F64(a) => npz.add_array(name, &a.as_standard_layout()),
            TensorView::I64(a) => npz.add_array(name, &a.as_standard_layout()),
        };
        result.map_err(|e| self.failed(e))
    }

    /// Completes the archive and renames it into place.
    pub fn finish(&mut self) -> Result<()> {
        let npz = self.npz.take().expect("finished once");
        let writer = npz.finish().map_err(|e| self.failed(e))?;
        drop(writer.into_inner().map_err(|e| self.failed(e.error()))?);
        std::fs::rename(&self.temp, &self.path).map_err(|e| self.failed(e))
    }

    fn failed(&self, problem: impl std::fmt::Display) -> BertError {
        let _ = std::fs::remove_file(&self.temp);
        BertError::Dump { path: self.path.clone(), problem: format!("cannot write: {problem}") }
    }
}

impl Drop for Archive {
    /// An archive never finished (the trace failed) leaves no temporary file behind.
    fn drop(&mut self) {
        if self.npz.take().is_some() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}
