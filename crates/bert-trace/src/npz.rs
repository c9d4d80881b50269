//! `--npz`: every written stage in one `OUT/trace.npz` (`np.load("trace/trace.npz")["embeddings.sum"]`).

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use bert_core::dump::lock::DirLock;
use bert_core::stage::Stage;
use bert_core::trace::{Sink, TensorView};
use bert_core::BertError;
use ndarray_npy::NpzWriter as Npz;

use crate::trace_cmd::Selection;

/// Writes stages into a temporary `.npz`, renamed to `trace.npz` when the trace finishes, so a
/// killed run never leaves a partial archive under the real name.
pub struct NpzWriter {
    npz: Option<Npz<BufWriter<File>>>,
    temp: PathBuf,
    path: PathBuf,
    only: Selection,
    /// The output directory's lock, as a dump of `.npy` files holds it: two runs writing one
    /// `.trace.npz.tmp` would each truncate the other's archive.
    _lock: Option<DirLock>,
}

impl NpzWriter {
    pub fn create(dir: &Path, only: Selection) -> Result<NpzWriter> {
        std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))?;
        let lock = bert_core::dump::lock::lock(dir)?;
        let path = dir.join("trace.npz");
        let temp = dir.join(".trace.npz.tmp");
        let file = File::create(&temp).with_context(|| format!("{}: cannot write", temp.display()))?;
        Ok(NpzWriter { npz: Some(Npz::new(BufWriter::new(file))), temp, path, only, _lock: lock })
    }

    fn failed(&self, problem: impl std::fmt::Display) -> BertError {
        let _ = std::fs::remove_file(&self.temp);
        BertError::Dump { path: self.path.clone(), problem: format!("cannot write: {problem}") }
    }
}

impl Sink for NpzWriter {
    fn wants(&self, stage: &Stage) -> bool {
        self.only.keeps(stage)
    }

    fn emit(&mut self, stage: Stage, tensor: TensorView<'_>) -> bert_core::Result<()> {
        let npz = self.npz.as_mut().expect("not finished");
        let result = match tensor {
            TensorView::F32(a) => npz.add_array(stage.name(), &a.as_standard_layout()),
            TensorView::I64(a) => npz.add_array(stage.name(), &a.as_standard_layout()),
        };
        result.map_err(|e| self.failed(e))
    }

    fn finish(&mut self) -> bert_core::Result<()> {
        let npz = self.npz.take().expect("finished once");
        let writer = npz.finish().map_err(|e| self.failed(e))?;
        writer.into_inner().map_err(|e| self.failed(e.error()))?;
        std::fs::rename(&self.temp, &self.path).map_err(|e| self.failed(e))
    }
}
