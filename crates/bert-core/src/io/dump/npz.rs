//! `--npz`: every stage of a dump in one `trace.npz` archive beside the manifest, as numpy's
//! `np.savez` writes it (one `<stage>.npy` member per stage, stored uncompressed), so that
//! `np.load("trace/trace.npz")["embeddings.sum"]` reads a stage.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ndarray_npy::NpzWriter;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime};

use super::writer::temporary;
use super::ARCHIVE;
use crate::error::{BertError, Result};
use crate::pass::TensorView;

/// The archive being written, under its temporary name until [`Archive::finish`].
pub(super) struct Archive {
    npz: Option<NpzWriter<BufWriter<ArchiveFile>>>,
    temp: PathBuf,
    path: PathBuf,
    failed: Arc<AtomicBool>,
}

/// The archive's file. Once a write to it has failed (a full disk), it takes every later byte
/// without writing it, keeping track of where the writes would have gone: zip's writer finishes
/// its archive when it is dropped and prints its own raw error (`ZipWriter drop failed:
/// Io(...)`) if that fails, while the run has already said what went wrong in one line, and
/// the temporary file is removed anyway.
struct ArchiveFile {
    file: File,
    failed: Arc<AtomicBool>,
    /// Where the next byte goes, and the end of what was written, real or not.
    position: u64,
    end: u64,
}

impl ArchiveFile {
    fn dead(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    fn check<T>(&self, result: std::io::Result<T>) -> std::io::Result<T> {
        if result.is_err() {
            self.failed.store(true, Ordering::Relaxed);
        }
        result
    }

    fn advance(&mut self, to: u64) {
        self.position = to;
        self.end = self.end.max(to);
    }
}

impl Write for ArchiveFile {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let written = if self.dead() { bytes.len() } else { self.file.write(bytes).map_err(|e| self.check_err(e))? };
        self.advance(self.position + written as u64);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.dead() {
            return Ok(());
        }
        let result = self.file.flush();
        self.check(result)
    }
}

impl Seek for ArchiveFile {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let target = if self.dead() {
            match to {
                SeekFrom::Start(n) => n,
                SeekFrom::Current(d) => self.position.saturating_add_signed(d),
                SeekFrom::End(d) => self.end.saturating_add_signed(d),
            }
        } else {
            self.file.seek(to).map_err(|e| self.check_err(e))?
        };
        self.advance(target);
        Ok(target)
    }
}

impl ArchiveFile {
    fn check_err(&self, error: std::io::Error) -> std::io::Error {
        self.failed.store(true, Ordering::Relaxed);
        error
    }
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
        let failed = Arc::new(AtomicBool::new(false));
        let file = ArchiveFile { file, failed: Arc::clone(&failed), position: 0, end: 0 };
        let npz = NpzWriter::new_with_options(BufWriter::new(file), options);
        Ok(Archive { npz: Some(npz), temp, path, failed })
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
        self.failed.store(true, Ordering::Relaxed);
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
