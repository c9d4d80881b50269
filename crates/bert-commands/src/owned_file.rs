//! The one rule for the files `bert-trace view` writes (the page, `--svg`, `--png`): a file may
//! be replaced only if bert-trace wrote it and nobody changed it since.
//!
//! Every such file carries a marker that a user's text cannot hold by accident, because it
//! carries the SHA-256 of every other byte of the file:
//!
//! - HTML and SVG end with the line
//!   `<!-- bert-trace-owned v2 sha256:HASH -->` (a comment after the root element is valid XML
//!   and HTML);
//! - PNG has a tEXt chunk, keyword `bert-trace-owned` and the text `v2 sha256:HASH`, just
//!   before IEND.
//!
//! HASH is the SHA-256 of the file without the marker, so the same picture is the same bytes,
//! marker included, on every run: a figure regenerated into a repository shows no change. Files
//! of the first version, whose marker also held 128 random bits (`v1 NONCE sha256:HASH`), are
//! recognised as ours too. A file
//! at the path is replaced only if it is a regular file (not a symbolic link) whose marker
//! verifies. A file of ours that someone edited has become theirs: its hash no longer matches,
//! so it is refused like any other. There is no option to override this. Writes are whole or
//! nothing: the bytes go to a temporary file this run creates (`tempfile`), which is then
//! renamed.

use std::io::{Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The start of the HTML and SVG marker, and the PNG marker's keyword.
const TAG: &str = "bert-trace-owned";
const VERSION: &str = "v2";
/// The first version's marker, with a random nonce before the hash: still ours.
const VERSION_1: &str = "v1";

/// Larger files than this at the output path are not read: bert-trace never writes one.
const MAX_OWNED: u64 = 1 << 30;

/// How the marker is carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// HTML or SVG: a comment on the last line.
    Text,
    /// PNG: a tEXt chunk before IEND.
    Png,
}

/// Writes `bytes` with their marker to `path`, unless something is there that bert-trace did
/// not write, or that was changed since. `what` names the file in messages ("page").
pub fn write(path: &Path, bytes: &[u8], format: Format, what: &str) -> Result<()> {
    refuse_unless_ours(path, format, what)?;
    let marked = mark(bytes, format)?;
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)
        .map_err(|e| Error::File { path: parent.into(), problem: format!("cannot create: {e}") })?;
    let cannot = |e: std::io::Error| Error::File { path: path.into(), problem: format!("cannot write: {e}") };
    // A new temporary file of this run's own beside the path (tempfile creates it exclusively,
    // so nothing there, the user's or another run's, is touched); renamed into place once whole,
    // and removed if anything fails before.
    let mut file =
        tempfile::Builder::new().prefix(".bert-trace-").suffix(".tmp").tempfile_in(parent).map_err(cannot)?;
    file.write_all(&marked).and_then(|()| file.as_file().sync_all()).map_err(cannot)?;
    file.persist(path).map_err(|e| cannot(e.error))?;
    Ok(())
}

/// Fails unless `path` is free, or a regular file whose marker verifies.
fn refuse_unless_ours(path: &Path, format: Format, what: &str) -> Result<()> {
    let Ok(metadata) = std::fs::symlink_metadata(path) else { return Ok(()) };
    let refuse = |problem: String| Error::File {
        path: path.into(),
        problem: format!("{problem}; it is never written over: choose another path"),
    };
    let theirs = format!("is not a {what} bert-trace wrote, or was edited since");
    if metadata.file_type().is_symlink() {
        return Err(refuse(format!("is a symbolic link, not a {what} bert-trace wrote")));
    }
    if !metadata.is_file() || metadata.len() > MAX_OWNED {
        return Err(refuse(format!("is not a {what} bert-trace wrote")));
    }
    let mut bytes = Vec::new();
    let read = std::fs::File::open(path).and_then(|f| f.take(MAX_OWNED).read_to_end(&mut bytes));
    if read.is_err() || unmarked(&bytes, format).is_none() {
        return Err(refuse(theirs));
    }
    Ok(())
}

/// `bytes` with the marker added.
fn mark(bytes: &[u8], format: Format) -> Result<Vec<u8>> {
    match format {
        Format::Text => {
            let mut out = bytes.to_vec();
            if !out.ends_with(b"\n") {
                out.push(b'\n');
            }
            let hash = sha256_hex(&out);
            out.extend_from_slice(format!("<!-- {TAG} {VERSION} sha256:{hash} -->\n").as_bytes());
            Ok(out)
        }
        Format::Png => {
            let unparsed = |problem: &str| Error::Request(format!("the PNG bert-trace drew {problem}"));
            let chunks = png_chunks(bytes).ok_or_else(|| unparsed("does not parse"))?;
            let iend = chunks.last().filter(|c| &c.kind == b"IEND").ok_or_else(|| unparsed("has no IEND"))?;
            let hash = sha256_hex(bytes);
            let mut data = format!("{TAG}\0").into_bytes();
            data.extend_from_slice(format!("{VERSION} sha256:{hash}").as_bytes());
            let mut out = bytes[..iend.start].to_vec();
            out.extend_from_slice(&png_chunk(b"tEXt", &data));
            out.extend_from_slice(&bytes[iend.start..]);
            Ok(out)
        }
    }
}

/// The bytes of `file` without its marker, if the marker is there and verifies.
pub fn unmarked(file: &[u8], format: Format) -> Option<Vec<u8>> {
    let (rest, text) = match format {
        Format::Text => {
            let body = file.strip_suffix(b" -->\n")?;
            let opening = format!("<!-- {TAG} ");
            let start = body.windows(opening.len()).rposition(|w| w == opening.as_bytes())?;
            let text = std::str::from_utf8(&body[start + opening.len()..]).ok()?;
            (file[..start].to_vec(), text.to_string())
        }
        Format::Png => {
            let chunks = png_chunks(file)?;
            let [.., marker, iend] = chunks.as_slice() else { return None };
            let keyword = format!("{TAG}\0");
            let data = &file[marker.start + 8..marker.end - 4];
            if &iend.kind != b"IEND" || &marker.kind != b"tEXt" || !data.starts_with(keyword.as_bytes()) {
                return None;
            }
            let text = std::str::from_utf8(&data[keyword.len()..]).ok()?;
            ([&file[..marker.start], &file[marker.end..]].concat(), text.to_string())
        }
    };
    let words: Vec<&str> = text.split(' ').collect();
    let hash = match words.as_slice() {
        [version, hash] if *version == VERSION => hash,
        [version, nonce, hash] if *version == VERSION_1 => {
            (nonce.len() == 32 && nonce.bytes().all(|b| b.is_ascii_hexdigit())).then_some(hash)?
        }
        _ => return None,
    };
    (hash.strip_prefix("sha256:")? == sha256_hex(&rest)).then_some(rest)
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// One chunk of a PNG: its type and where it is, from its length field to its CRC.
struct Chunk {
    kind: [u8; 4],
    start: usize,
    end: usize,
}

/// The chunks of a PNG (8-byte signature, then `[u32 BE length][type][data][u32 CRC]` each), or
/// None if the bytes are not one, or there is anything after IEND.
fn png_chunks(bytes: &[u8]) -> Option<Vec<Chunk>> {
    let mut at = bytes.strip_prefix(b"\x89PNG\r\n\x1a\n")?.as_ptr() as usize - bytes.as_ptr() as usize;
    let mut chunks = Vec::new();
    while at < bytes.len() {
        let length = u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize;
        let kind: [u8; 4] = bytes.get(at + 4..at + 8)?.try_into().ok()?;
        let end = at.checked_add(12)?.checked_add(length)?;
        if end > bytes.len() {
            return None;
        }
        chunks.push(Chunk { kind, start: at, end });
        at = end;
        if &kind == b"IEND" {
            break;
        }
    }
    (at == bytes.len() && chunks.last().is_some_and(|c| &c.kind == b"IEND")).then_some(chunks)
}

/// A PNG chunk of `kind` with `data`, its CRC over the type and data.
fn png_chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut crc = flate2::Crc::new();
    crc.update(kind);
    crc.update(data);
    let mut chunk = (data.len() as u32).to_be_bytes().to_vec();
    chunk.extend_from_slice(kind);
    chunk.extend_from_slice(data);
    chunk.extend_from_slice(&crc.sum().to_be_bytes());
    chunk
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_png() -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut encoder = png::Encoder::new(&mut bytes, 2, 1);
        encoder.set_color(png::ColorType::Rgb);
        encoder.write_header().unwrap().write_image_data(&[1, 2, 3, 4, 5, 6]).unwrap();
        bytes
    }

    #[test]
    fn a_marked_file_verifies_and_any_change_to_it_does_not() {
        let svg = b"<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n".to_vec();
        for (format, content) in [(Format::Text, svg), (Format::Png, tiny_png())] {
            let marked = mark(&content, format).unwrap();
            assert_eq!(unmarked(&marked, format).as_deref(), Some(&content[..]), "{format:?}");
            assert_eq!(mark(&content, format).unwrap(), marked, "{format:?}: the same bytes each time");
            // One byte changed anywhere, or the marker alone, or the content alone: not ours.
            for at in [0, content.len() / 2, marked.len() - 20] {
                let mut edited = marked.clone();
                edited[at] ^= 1;
                assert!(unmarked(&edited, format).is_none(), "{format:?}: byte {at} changed");
            }
            assert!(unmarked(&content, format).is_none(), "{format:?}: no marker");
        }
    }

    #[test]
    fn a_file_with_the_first_versions_marker_is_still_ours() {
        let svg = b"<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n".to_vec();
        let hash = sha256_hex(&svg);
        let nonce = "0123456789abcdef0123456789abcdef";
        let mut v1 = svg.clone();
        v1.extend_from_slice(format!("<!-- {TAG} v1 {nonce} sha256:{hash} -->\n").as_bytes());
        assert_eq!(unmarked(&v1, Format::Text).as_deref(), Some(&svg[..]));
        let mut short_nonce = svg.clone();
        short_nonce.extend_from_slice(format!("<!-- {TAG} v1 0123 sha256:{hash} -->\n").as_bytes());
        assert!(unmarked(&short_nonce, Format::Text).is_none());
    }

    #[test]
    fn the_png_marker_is_a_valid_chunk_that_decoders_read_past() {
        let marked = mark(&tiny_png(), Format::Png).unwrap();
        let mut reader = png::Decoder::new(std::io::Cursor::new(&marked)).read_info().unwrap();
        let mut pixels = vec![0; reader.output_buffer_size()];
        reader.next_frame(&mut pixels).unwrap();
        assert_eq!(&pixels[..6], &[1, 2, 3, 4, 5, 6]);
        let chunks = png_chunks(&marked).unwrap();
        let kinds: Vec<&[u8]> = chunks.iter().rev().take(2).map(|c| &c.kind[..]).collect();
        assert_eq!(kinds, [&b"IEND"[..], &b"tEXt"[..]]);
    }
}
