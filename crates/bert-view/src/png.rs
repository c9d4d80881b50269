//! A picture's SVG rendered to PNG by resvg, with the font bert-trace ships (WenQuanYi Micro
//! Hei, `assets/fonts/`, Apache-2.0): it has Latin and CJK glyphs, so Chinese tokens render, and
//! since no system font is consulted the same SVG gives the same PNG bytes on every machine.

#[cfg(feature = "png")]
use resvg::{tiny_skia, usvg};

use crate::error::{Error, Result};

/// WenQuanYi Micro Hei 0.2.0-beta (Debian's fonts-wqy-microhei), Apache-2.0.
#[cfg(feature = "png")]
const FONT: &[u8] = include_bytes!("../assets/fonts/wqy-microhei.ttc");
#[cfg(feature = "png")]
const FAMILY: &str = "WenQuanYi Micro Hei";

/// A build without the `png` feature draws no PNG: it says so.
#[cfg(not(feature = "png"))]
pub fn of_svg(_: &str) -> Result<Vec<u8>> {
    Err(Error::Request(format!(
        "this bert-trace was built without PNG rendering (the `png` feature); draw an SVG with {} instead",
        super::SVG
    )))
}

/// The PNG of `svg`, with a tEXt chunk saying who wrote it.
#[cfg(feature = "png")]
pub fn of_svg(svg: &str) -> Result<Vec<u8>> {
    let unreadable = |problem: &str| Error::Request(problem.to_string());
    let mut options = usvg::Options { font_family: FAMILY.into(), ..usvg::Options::default() };
    let fonts = options.fontdb_mut();
    fonts.load_font_data(FONT.to_vec());
    fonts.set_sans_serif_family(FAMILY);
    let tree = usvg::Tree::from_str(svg, &options).map_err(|_| unreadable("the picture's SVG does not parse"))?;
    let size = tree.size().to_int_size();
    let mut pixmap =
        tiny_skia::Pixmap::new(size.width(), size.height()).ok_or_else(|| unreadable("the picture is too large"))?;
    resvg::render(&tree, tiny_skia::Transform::default(), &mut pixmap.as_mut());
    let rgba: Vec<u8> = pixmap
        .pixels()
        .iter()
        .flat_map(|p| {
            let c = p.demultiply();
            [c.red(), c.green(), c.blue(), c.alpha()]
        })
        .collect();
    let mut bytes = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut bytes, size.width(), size.height());
        encoder.set_color(png::ColorType::Rgba);
        encoder.set_depth(png::BitDepth::Eight);
        let encoded = |e: png::EncodingError| Error::Request(format!("cannot encode the PNG: {e}"));
        encoder.add_text_chunk("Software".into(), super::GENERATOR.into()).map_err(encoded)?;
        let mut writer = encoder.write_header().map_err(encoded)?;
        writer.write_image_data(&rgba).map_err(encoded)?;
    }
    Ok(bytes)
}

#[cfg(all(test, feature = "png"))]
mod tests {
    use super::*;

    /// The pixels of `text` drawn at 40 px, as (r, g, b) of every pixel that is not white.
    fn ink(text: &str) -> Vec<[u8; 3]> {
        let svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"200\" height=\"60\"><rect width=\"200\" height=\"60\" \
             fill=\"#fff\"/><text x=\"10\" y=\"45\" font-size=\"40\" font-family=\"sans-serif\">{text}</text></svg>"
        );
        let decoder = png::Decoder::new(std::io::Cursor::new(of_svg(&svg).unwrap()));
        let mut reader = decoder.read_info().unwrap();
        let mut pixels = vec![0; reader.output_buffer_size()];
        reader.next_frame(&mut pixels).unwrap();
        pixels.chunks_exact(4).map(|p| [p[0], p[1], p[2]]).filter(|p| *p != [255, 255, 255]).collect()
    }

    #[test]
    fn the_shipped_font_draws_chinese_and_latin_glyphs() {
        let (chinese, latin, other_chinese) = (ink("北京"), ink("Rome"), ink("中国"));
        assert!(chinese.len() > 200 && latin.len() > 200, "ink: 北京 {}, Rome {}", chinese.len(), latin.len());
        // Different characters, different ink: not the same missing-glyph box twice.
        assert_ne!(chinese, other_chinese);
    }
}
