//! Reading one `.npy` file, whatever numpy wrote: every numeric dtype a learner's arrays have
//! (float16/32/64, bool, signed and unsigned integers), either byte order, C or Fortran order,
//! format versions 1 to 3. Every claim of the header is checked against the bytes that follow
//! before anything is allocated for it: a damaged or foreign file is refused with what is wrong,
//! never believed (a header claiming a huge shape would otherwise allocate it).

use std::io::{Cursor, Read};

use ndarray::{ArrayD, IxDyn, ShapeBuilder};
use ndarray_npy::npy::header::{Header, Layout};

use crate::pass::Tensor;

/// What a `.npy` file stores, as numpy names it: its dtype and its byte order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NpyType {
    pub kind: NpyKind,
    /// Bytes per element.
    pub size: usize,
    pub big_endian: bool,
}

/// The kind of element: numpy's `f`, `i`, `u` and `b`, and bfloat16, which numpy has no type
/// for but safetensors files hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NpyKind {
    Float,
    BFloat,
    Int,
    Unsigned,
    Bool,
}

impl NpyType {
    /// Parses a numpy type descriptor such as `<f4`, `>i8`, `|b1` or `<f2`.
    pub fn parse(descr: &str) -> Option<NpyType> {
        let bytes = descr.as_bytes();
        let (order, rest) = match bytes.first()? {
            b'<' | b'|' | b'=' => (false, &descr[1..]),
            b'>' => (true, &descr[1..]),
            _ => (false, descr),
        };
        let (kind, size) = rest.split_at_checked(1)?;
        let size: usize = size.parse().ok()?;
        let kind = match kind {
            "f" if matches!(size, 2 | 4 | 8) => NpyKind::Float,
            "i" if matches!(size, 1 | 2 | 4 | 8) => NpyKind::Int,
            "u" if matches!(size, 1 | 2 | 4 | 8) => NpyKind::Unsigned,
            "b" if size == 1 => NpyKind::Bool,
            _ => return None,
        };
        Some(NpyType { kind, size, big_endian: order && size > 1 })
    }

    /// numpy's name for the dtype: `float16`, `int32`, `bool`, ...
    pub fn name(&self) -> String {
        match self.kind {
            NpyKind::Float => format!("float{}", self.size * 8),
            NpyKind::BFloat => "bfloat16".into(),
            NpyKind::Int => format!("int{}", self.size * 8),
            NpyKind::Unsigned => format!("uint{}", self.size * 8),
            NpyKind::Bool => "bool".into(),
        }
    }

    /// Whether this is one of numpy's floating-point types.
    pub fn is_float(&self) -> bool {
        matches!(self.kind, NpyKind::Float | NpyKind::BFloat)
    }
}

/// A dtype name (`float32`, `int64`, `bool`, `bfloat16` ...) that this reader can turn into a
/// tensor, for checking a manifest before any file is opened.
pub fn is_readable_dtype(name: &str) -> bool {
    name == "bfloat16"
        || ["float16", "float32", "float64", "bool"].contains(&name)
        || ["int", "uint"]
            .iter()
            .any(|p| name.strip_prefix(p).is_some_and(|bits| ["8", "16", "32", "64"].contains(&bits)))
}

/// What a `.npy` header says: the type, the shape, whether the values are in Fortran order, and
/// how many bytes of values follow (checked against the file's length).
pub struct NpyHeader {
    pub npy_type: NpyType,
    pub shape: Vec<usize>,
    pub fortran: bool,
    pub data_len: u64,
}

/// Reads a `.npy` of `len` bytes from `reader`: the tensor (floats as f32, or as f64 when the
/// file holds float64; integers and bools as i64) and the type the file stores.
pub fn read(mut reader: impl Read, len: u64) -> Result<(Tensor, NpyType), String> {
    let header = read_header(&mut reader, len)?;
    // The values as stored, then decoded (a float16 one widens to 4 bytes a value): checked
    // against this machine's and this process's memory before either is allocated, since a
    // failed allocation aborts the process without a word.
    let elements: u64 = header.shape.iter().map(|&d| d as u64).product();
    let per_value = match header.npy_type.kind {
        NpyKind::Float | NpyKind::BFloat if header.npy_type.size <= 4 => 4,
        _ => 8,
    };
    // Fortran order is copied once more into C order.
    let decoded = elements.saturating_mul(per_value).saturating_mul(if header.fortran { 2 } else { 1 });
    // Both at once, and room for the allocator's own.
    let needed = header.data_len.saturating_add(decoded).saturating_add(64 << 20);
    crate::io::memory::check(needed, "to read its values").map_err(|e| e.to_string())?;
    // Reserved whole, so that reading never doubles the buffer on the way.
    let mut bytes = Vec::with_capacity(header.data_len.min(len) as usize);
    reader.take(header.data_len).read_to_end(&mut bytes).map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 != header.data_len {
        return Err(format!("the .npy holds {} bytes of values; its shape needs {}", bytes.len(), header.data_len));
    }
    Ok((decode(&bytes, header.npy_type, &header.shape, header.fortran), header.npy_type))
}

/// Reads and checks the header of a `.npy` of `len` bytes, leaving `reader` at its values.
pub fn read_header(mut reader: impl Read, len: u64) -> Result<NpyHeader, String> {
    let not_npy = |detail: &str| format!("not a .npy file: {detail}");
    let cannot_read = |e: std::io::Error| format!("cannot read: {e}");
    // The magic string (6 bytes), the format version (2), the header's length: a u16 in format
    // 1, a u32 in formats 2 and 3.
    let mut prefix = vec![0u8; 10];
    reader.read_exact(&mut prefix).map_err(|_| not_npy("too short for a .npy header"))?;
    if &prefix[..6] != b"\x93NUMPY" {
        return Err(not_npy("it does not start with the .npy magic string"));
    }
    let header_len = match prefix[6] {
        1 => u64::from(u16::from_le_bytes([prefix[8], prefix[9]])),
        2 | 3 => {
            let mut rest = [0u8; 2];
            reader.read_exact(&mut rest).map_err(|_| not_npy("too short for a .npy header"))?;
            prefix.extend_from_slice(&rest);
            u64::from(u32::from_le_bytes([prefix[8], prefix[9], rest[0], rest[1]]))
        }
        version => return Err(not_npy(&format!("unknown .npy format version {version}"))),
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
        return Err(not_npy("its header nests brackets deeper than a .npy header of plain values does"));
    }
    let header = Header::from_reader(&mut Cursor::new(header)).map_err(|e| not_npy(&e.to_string()))?;
    let descr = header.type_descriptor.to_string();
    let descr = descr.trim_matches(|c| c == '\'' || c == '"');
    let npy_type = NpyType::parse(descr)
        .ok_or_else(|| format!("holds values of numpy type `{descr}`; expected floats, integers or bools"))?;
    let claimed = header.shape.iter().try_fold(npy_type.size as u64, |bytes, &dim| bytes.checked_mul(dim as u64));
    if claimed.is_none_or(|bytes| bytes > len - start) {
        return Err(format!(
            "the .npy header claims shape {:?}, more than the {} bytes after the header hold",
            header.shape,
            len - start
        ));
    }
    Ok(NpyHeader {
        npy_type,
        fortran: header.layout == Layout::Fortran,
        shape: header.shape,
        data_len: claimed.expect("checked above"),
    })
}

/// The values of `bytes` (`npy_type`, in C or Fortran order) as a tensor in C order.
pub fn decode(bytes: &[u8], npy_type: NpyType, shape: &[usize], fortran: bool) -> Tensor {
    let NpyType { kind, size, big_endian } = npy_type;
    // The types numpy and bert-trace write, little-endian, read a whole word at a time: the
    // general path below copies each element into an 8-byte word first, and reading a large
    // stage (a [B,T,V] mlm.logits) took several times longer by it.
    match (kind, size, big_endian) {
        (NpyKind::Float, 4, false) => {
            let values = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            return Tensor::F32(arrange(values, shape, fortran));
        }
        (NpyKind::Float, 8, false) => {
            let values = bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
            return Tensor::F64(arrange(values, shape, fortran));
        }
        (NpyKind::Int, 8, false) => {
            let values = bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
            return Tensor::I64(arrange(values, shape, fortran));
        }
        _ => {}
    }
    let word = |chunk: &[u8]| -> [u8; 8] {
        let mut w = [0u8; 8];
        if big_endian {
            w[8 - size..].copy_from_slice(chunk);
            w.reverse();
        } else {
            w[..size].copy_from_slice(chunk);
        }
        w
    };
    let words = bytes.chunks_exact(size).map(word);
    match (kind, size) {
        (NpyKind::Float, 2) => Tensor::F32(arrange(
            words.map(|w| half::f16::from_le_bytes([w[0], w[1]]).to_f32()).collect(),
            shape,
            fortran,
        )),
        (NpyKind::Float, 4) => {
            Tensor::F32(arrange(words.map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect(), shape, fortran))
        }
        (NpyKind::BFloat, _) => Tensor::F32(arrange(
            words.map(|w| half::bf16::from_le_bytes([w[0], w[1]]).to_f32()).collect(),
            shape,
            fortran,
        )),
        (NpyKind::Float, _) => Tensor::F64(arrange(words.map(f64::from_le_bytes).collect(), shape, fortran)),
        (NpyKind::Int, _) => {
            // Sign-extend from the top bit of the stored width.
            let shift = 64 - 8 * size as u32;
            Tensor::I64(arrange(words.map(|w| (i64::from_le_bytes(w) << shift) >> shift).collect(), shape, fortran))
        }
        (NpyKind::Unsigned | NpyKind::Bool, _) => {
            Tensor::I64(arrange(words.map(|w| u64::from_le_bytes(w) as i64).collect(), shape, fortran))
        }
    }
}

/// `values` of an array of `shape`, read in C or Fortran order, as an array in C order.
fn arrange<A: Clone>(values: Vec<A>, shape: &[usize], fortran: bool) -> ArrayD<A> {
    let shape = IxDyn(shape);
    let checked = "the length was checked against the shape";
    match fortran {
        // Already in C order: the values become the array, with no copy.
        false => ArrayD::from_shape_vec(shape, values).expect(checked),
        true => ArrayD::from_shape_vec(shape.f(), values).expect(checked).as_standard_layout().into_owned(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.npy` file of format `version` with `descr`, `fortran_order` and `shape`, and `data`.
    fn npy(version: u8, descr: &str, fortran: bool, shape: &str, data: &[u8]) -> Vec<u8> {
        let dict = format!(
            "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
            if fortran { "True" } else { "False" }
        );
        let prefix_len = if version == 1 { 10 } else { 12 };
        let mut header = dict.into_bytes();
        while (prefix_len + header.len() + 1) % 64 != 0 {
            header.push(b' ');
        }
        header.push(b'\n');
        let mut out = b"\x93NUMPY".to_vec();
        out.extend_from_slice(&[version, 0]);
        if version == 1 {
            out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(&header);
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn every_numeric_dtype_byte_order_layout_and_version() {
        // The 2 × 3 matrix [[1, 2, 3], [4, -5, 6]] in each form: (descr, fortran, bytes of it).
        let c_order = [1.0f64, 2.0, 3.0, 4.0, -5.0, 6.0];
        let f_order = [1.0f64, 4.0, 2.0, -5.0, 3.0, 6.0];
        let encode = |descr: &str, values: &[f64]| -> Vec<u8> {
            let t = NpyType::parse(descr).unwrap();
            values
                .iter()
                .flat_map(|&v| {
                    let mut bytes = match (t.kind, t.size) {
                        (NpyKind::Float, 2) => half::f16::from_f64(v).to_le_bytes().to_vec(),
                        (NpyKind::Float, 4) => (v as f32).to_le_bytes().to_vec(),
                        (NpyKind::Float, _) => v.to_le_bytes().to_vec(),
                        (_, n) => (v as i64).to_le_bytes()[..n].to_vec(),
                    };
                    if t.big_endian {
                        bytes.reverse();
                    }
                    bytes
                })
                .collect()
        };
        for descr in ["<f2", ">f2", "<f4", ">f4", "<f8", ">f8", "<i4", ">i4", "<i8", ">i8", "|i1", "<i2"] {
            for (fortran, values) in [(false, c_order), (true, f_order)] {
                for version in [1, 2, 3] {
                    let bytes = npy(version, descr, fortran, "(2, 3)", &encode(descr, &values));
                    let (tensor, npy_type) = read(&bytes[..], bytes.len() as u64)
                        .unwrap_or_else(|e| panic!("{descr} fortran={fortran} v{version}: {e}"));
                    assert_eq!(tensor.shape(), &[2, 3], "{descr}");
                    let got: Vec<f64> = tensor.to_f64().iter().copied().collect();
                    assert_eq!(got, c_order, "{descr} fortran={fortran} v{version} ({})", npy_type.name());
                }
            }
        }
    }

    #[test]
    fn bools_unsigned_and_refusals() {
        let bytes = npy(1, "|b1", false, "(3,)", &[1, 0, 1]);
        assert_eq!(read(&bytes[..], bytes.len() as u64).unwrap().0, Tensor::I64(ndarray::arr1(&[1, 0, 1]).into_dyn()));
        let bytes = npy(1, "<u2", false, "(1,)", &[0xff, 0xff]);
        assert_eq!(read(&bytes[..], bytes.len() as u64).unwrap().0.to_i64().unwrap()[[0]], 65535);
        // (descr, shape, data, what the message must say)
        let cases: [(&str, &str, &[u8], &str); 3] = [
            ("<c8", "(1,)", &[0; 8], "numpy type `<c8`"),
            ("<f4", "(1000000,)", &[0; 8], "more than the 8 bytes"),
            ("<U3", "(1,)", &[0; 12], "numpy type `<U3`"),
        ];
        for (descr, shape, data, want) in cases {
            let bytes = npy(1, descr, false, shape, data);
            let err = read(&bytes[..], bytes.len() as u64).unwrap_err();
            assert!(err.contains(want), "{descr} {shape}: expected `{want}` in `{err}`");
        }
    }
}
