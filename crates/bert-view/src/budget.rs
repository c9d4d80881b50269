//! How large a picture bert-trace draws: a stage too wide for one picture is refused in one line
//! that says how large it is and how to narrow it, before anything is built for it (a
//! `[B,T,I]` stage of a few hundred thousand columns once aborted on allocation, or became a
//! PNG of 295 MB).

use super::{HEAD, SEQ, STAGE, SVG};
use crate::error::refuse;
use crate::error::Result;

/// The most cells (one per value drawn, or per line of the head view) a picture has: 4 Mi, more
/// than a 512-token model's feed-forward activations (512 × 3072) hold.
pub const MAX_CELLS: usize = 4 << 20;

/// The most pixels a PNG has: 40 megapixels, about 160 MB as RGBA while it is rendered.
pub const MAX_PIXELS: u64 = 40_000_000;

/// How to make a picture smaller, for `stage`.
fn narrower(stage: &str, attention: bool) -> String {
    if attention {
        format!(
            "a [T,T] map of T tokens has T² cells: trace a shorter text, or, where several heads of {stage} are \
             drawn, draw one with {}",
            HEAD.with("N")
        )
    } else {
        format!("choose a smaller stage with {STAGE} (one sequence is drawn; {} chooses it)", SEQ.with("N"))
    }
}

/// Fails if a picture of `stage` would have more than [`MAX_CELLS`] cells: `count` of them, as
/// `layout` (e.g. `13 × 400000`).
pub fn check_cells(stage: &str, count: usize, layout: &str, attention: bool) -> Result<()> {
    if count > MAX_CELLS {
        refuse!(
            "{stage}: its picture would have {count} cells ({layout}), more than the {MAX_CELLS} bert-trace draws; {}",
            narrower(stage, attention)
        );
    }
    Ok(())
}

/// Fails if the PNG of `stage` would have more than [`MAX_PIXELS`] pixels.
pub fn check_pixels(stage: &str, width: u32, height: u32, attention: bool) -> Result<()> {
    let pixels = u64::from(width) * u64::from(height);
    if pixels > MAX_PIXELS {
        refuse!(
            "{stage}: its PNG would be {width} × {height} px ({:.1} megapixels), more than the {} bert-trace \
             renders; write {} instead, or {}",
            pixels as f64 / 1e6,
            MAX_PIXELS / 1_000_000,
            SVG.on(),
            narrower(stage, attention)
        );
    }
    Ok(())
}
