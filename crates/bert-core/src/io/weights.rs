//! Weights from a safetensors file: memory-mapped, looked up by Hugging Face's names, checked
//! against config.json, converted to f32 only when they are not f32 already.
//!
//! Real checkpoints spell names differently. We accept, for a name such as
//! `bert.encoder.layer.0.output.LayerNorm.weight`:
//! - the name as given, or without its `bert.` prefix (a bare `BertModel`),
//! - LayerNorm `gamma` / `beta` instead of `weight` / `bias` (the original TF conversion).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ndarray::{ArrayView1, ArrayView2};
use safetensors::{Dtype, SafeTensors};

use crate::error::{BertError, Result};
use crate::ops::Float;

/// The bytes of a checkpoint: a memory map, bytes built into the binary, or bytes read into memory.
pub enum Storage {
    Mapped(memmap2::Mmap),
    Static(&'static [u8]),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Storage {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Storage::Mapped(map) => map,
            Storage::Static(bytes) => bytes,
            Storage::Owned(bytes) => bytes,
        }
    }
}

impl Storage {
    /// Maps `path` read-only.
    pub fn map(path: &Path) -> Result<Storage> {
        let (file, _) = super::files::open_regular(path)?;
        // SAFETY: the map is read-only; a checkpoint changed on disk while we run is outside what
        // any loader of mapped weights (safetensors in Python included) can guard against.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| BertError::io(path, e))?;
        Ok(Storage::Mapped(map))
    }
}

/// One parameter tensor as `F` (f32, or f64 for an f64 pass): a window into the mapped file when
/// it is stored as F and aligned there, otherwise converted once into memory.
#[derive(Clone)]
pub struct Param<F: Float = f32> {
    data: ParamData<F>,
    shape: Vec<usize>,
}

#[derive(Clone)]
enum ParamData<F> {
    Mapped { storage: Arc<Storage>, start: usize, len: usize },
    Owned(Arc<Vec<F>>),
}

impl<F: Float> Param<F> {
    /// A parameter from values in memory (used by tests and tools that build weights).
    pub fn from_vec(values: Vec<F>, shape: Vec<usize>) -> Param<F> {
        assert_eq!(values.len(), shape.iter().product::<usize>());
        Param { data: ParamData::Owned(Arc::new(values)), shape }
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The values in row-major order.
    pub fn as_slice(&self) -> &[F] {
        match &self.data {
            ParamData::Mapped { storage, start, len } => bytemuck::cast_slice(&storage[*start..*start + *len]),
            ParamData::Owned(values) => values,
        }
    }

    /// The values, to change in place (an optimizer's step): a parameter still read from the
    /// mapped file, or shared with another handle, is copied into memory first, once.
    pub fn values_mut(&mut self) -> &mut [F] {
        if let ParamData::Mapped { .. } = self.data {
            self.data = ParamData::Owned(Arc::new(self.as_slice().to_vec()));
        }
        match &mut self.data {
            ParamData::Owned(values) => Arc::make_mut(values).as_mut_slice(),
            ParamData::Mapped { .. } => unreachable!("copied into memory above"),
        }
    }

    /// Whether the values are read straight from the mapped file (no copy was made).
    pub fn is_mapped(&self) -> bool {
        matches!(self.data, ParamData::Mapped { .. })
    }

    /// A bias or LayerNorm vector, `[n]`.
    pub fn view1(&self) -> ArrayView1<'_, F> {
        ArrayView1::from(self.as_slice())
    }

    /// A weight matrix as stored by PyTorch, [out, in].
    pub fn view2(&self) -> ArrayView2<'_, F> {
        ArrayView2::from_shape((self.shape[0], self.shape[1]), self.as_slice())
            .expect("shape was checked when the parameter was loaded")
    }
}

struct Entry {
    dtype: Dtype,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// The tensors of one safetensors file, by name.
pub struct WeightStore {
    path: PathBuf,
    storage: Arc<Storage>,
    entries: HashMap<String, Entry>,
}

impl WeightStore {
    /// Reads the header of `storage` (the bytes of the file at `path`).
    pub fn new(path: &Path, storage: Storage) -> Result<WeightStore> {
        let bad = |problem: String| BertError::Safetensors { path: path.into(), problem };
        if storage.len() < 8 {
            return Err(bad(format!(
                "the file is {} bytes long, too short for the 8-byte header length",
                storage.len()
            )));
        }
        let header_len = u64::from_le_bytes(storage[..8].try_into().expect("8 bytes"));
        if header_len > storage.len() as u64 - 8 {
            return Err(bad(format!(
                "the header claims {header_len} bytes but the file has only {} after the length",
                storage.len() - 8
            )));
        }
        let base = storage.as_ptr() as usize;
        let mut entries = HashMap::new();
        {
            let tensors = SafeTensors::deserialize(&storage).map_err(|e| bad(e.to_string()))?;
            for (name, view) in tensors.tensors() {
                let start = view.data().as_ptr() as usize - base;
                entries.insert(
                    name,
                    Entry { dtype: view.dtype(), shape: view.shape().to_vec(), start, end: start + view.data().len() },
                );
            }
        }
        Ok(WeightStore { path: path.into(), storage: Arc::new(storage), entries })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every tensor name in the file, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.entries.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// The name under which this file stores the tensor HF calls `name`, if any.
    pub fn resolve(&self, name: &str) -> Option<String> {
        aliases(name).into_iter().find(|alias| self.entries.contains_key(alias))
    }

    pub fn contains(&self, name: &str) -> bool {
        self.resolve(name).is_some()
    }

    /// The shape stored for the tensor HF calls `name`.
    pub fn shape_of(&self, name: &str) -> Option<&[usize]> {
        let stored = self.resolve(name)?;
        Some(&self.entries[&stored].shape)
    }

    /// How many bytes the f32 copies of the tensors that cannot be read in place (f16, bf16,
    /// unaligned f32) take: what loading every tensor of the file allocates.
    pub fn converted_bytes(&self) -> u64 {
        self.entries
            .values()
            .filter(|e| match e.dtype {
                Dtype::F16 | Dtype::BF16 => true,
                Dtype::F32 => !(cfg!(target_endian = "little") && e.start % 4 == 0),
                _ => false,
            })
            .map(|e| e.shape.iter().map(|&d| d as u64).product::<u64>().saturating_mul(4))
            .fold(0u64, u64::saturating_add)
    }

    /// Loads the tensor HF calls `name` as `F`, checking that its shape is `expected`.
    pub fn get<F: Float>(&self, name: &str, expected: &[usize]) -> Result<Param<F>> {
        let stored = self.resolve(name).ok_or_else(|| BertError::MissingTensor {
            path: self.path.clone(),
            name: name.to_string(),
            tried: aliases(name).join(", "),
        })?;
        let entry = &self.entries[&stored];
        if entry.shape != expected {
            return Err(BertError::TensorShape {
                path: self.path.clone(),
                name: stored,
                expected: expected.to_vec(),
                found: entry.shape.clone(),
            });
        }
        let bytes = &self.storage[entry.start..entry.end];
        // Stored as F itself (f32 for an f32 pass), little-endian and aligned: read in place.
        let in_place = entry.dtype == Dtype::F32
            && std::mem::size_of::<F>() == 4
            && cfg!(target_endian = "little")
            && bytemuck::try_cast_slice::<u8, F>(bytes).is_ok();
        let owned = |values: Vec<F>| ParamData::Owned(Arc::new(values));
        let widen = |v: f32| F::from_f32(v).expect("every f32 is an F");
        let data = match entry.dtype {
            Dtype::F32 if in_place => {
                ParamData::Mapped { storage: Arc::clone(&self.storage), start: entry.start, len: bytes.len() }
            }
            Dtype::F32 => owned(
                bytes.chunks_exact(4).map(|c| widen(f32::from_le_bytes(c.try_into().expect("4 bytes")))).collect(),
            ),
            Dtype::F16 => {
                owned(bytes.chunks_exact(2).map(|c| widen(half::f16::from_le_bytes([c[0], c[1]]).to_f32())).collect())
            }
            Dtype::BF16 => {
                owned(bytes.chunks_exact(2).map(|c| widen(half::bf16::from_le_bytes([c[0], c[1]]).to_f32())).collect())
            }
            other => {
                return Err(BertError::TensorDtype {
                    path: self.path.clone(),
                    name: stored,
                    found: format!("{other:?}"),
                })
            }
        };
        Ok(Param { data, shape: entry.shape.clone() })
    }
}

/// The two names of the MLM decoder's bias: one Parameter in HF, saved under either.
const MLM_BIAS: [&str; 2] = ["cls.predictions.bias", "cls.predictions.decoder.bias"];

/// The names a checkpoint may use for the tensor HF calls `name`, most likely first.
fn aliases(name: &str) -> Vec<String> {
    if MLM_BIAS.contains(&name) {
        let mut both = vec![name.to_string()];
        let other = MLM_BIAS.iter().filter(|n| **n != name);
        both.extend(other.map(|n| n.to_string()));
        return both;
    }
    let mut bases = vec![name.to_string()];
    if let Some(bare) = name.strip_prefix("bert.") {
        bases.push(bare.to_string());
    }
    let mut all = bases.clone();
    for base in &bases {
        if let Some(stem) = base.strip_suffix("LayerNorm.weight") {
            all.push(format!("{stem}LayerNorm.gamma"));
        }
        if let Some(stem) = base.strip_suffix("LayerNorm.bias") {
            all.push(format!("{stem}LayerNorm.beta"));
        }
    }
    all
}

/// A safetensors file of f32 tensors, as transformers writes them (`format: pt`).
pub(crate) fn safetensors_bytes(tensors: &[(String, Vec<usize>, &[f32])], dir: &Path) -> Result<Vec<u8>> {
    let views = tensors
        .iter()
        .map(|(name, shape, values)| {
            let view = safetensors::tensor::TensorView::new(
                safetensors::Dtype::F32,
                shape.clone(),
                bytemuck::cast_slice(values),
            )
            .expect("a parameter's bytes fill its shape");
            (name.clone(), view)
        })
        .collect::<Vec<_>>();
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::tensor::serialize(views, Some(metadata))
        .map_err(|e| BertError::Checkpoint { path: dir.into(), problem: format!("cannot serialise the weights: {e}") })
}

#[cfg(test)]
mod tests {
    use super::aliases;

    #[test]
    fn aliases_cover_prefix_and_gamma_beta() {
        let got = aliases("bert.embeddings.LayerNorm.weight");
        let want = [
            "bert.embeddings.LayerNorm.weight",
            "embeddings.LayerNorm.weight",
            "bert.embeddings.LayerNorm.gamma",
            "embeddings.LayerNorm.gamma",
        ];
        assert_eq!(got, want);
    }
}
