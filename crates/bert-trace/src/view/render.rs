//! A picture's SVG rendered to PNG by resvg, with the font bert-trace ships (WenQuanYi Micro
//! Hei, `assets/fonts/`, Apache-2.0): it has Latin and CJK glyphs, so Chinese tokens render, and
//! since no system font is consulted the same SVG gives the same PNG bytes on every machine.

use anyhow::{Context, Result};
use resvg::{tiny_skia, usvg};

/// WenQuanYi Micro Hei 0.2.0-beta (Debian's fonts-wqy-microhei), Apache-2.0.
const FONT: &[u8] = include_bytes!("../../assets/fonts/wqy-microhei.ttc");
const FAMILY: &str = "WenQuanYi Micro Hei";

/// The PNG of `svg`, with a tEXt chunk saying who wrote it.
pub fn png(svg: &str) -> Result<Vec<u8>> {
    let mut options = usvg::Options { font_family: FAMILY.into(), ..usvg::Options::default() };
    let fonts = options.fontdb_mut();
    fonts.load_font_data(FONT.to_vec());
    fonts.set_sans_serif_family(FAMILY);
    let tree = usvg::Tree::from_str(svg, &options).context("the picture's SVG does not parse")?;
    let size = tree.size().to_int_size();
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height()).context("the picture is too large")?;
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
        encoder.add_text_chunk("Software".into(), super::GENERATOR.into())?;
        let mut writer = encoder.write_header()?;
        writer.write_image_data(&rgba)?;
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pixels of `text` drawn at 40 px, as (r, g, b) of every pixel that is not white.
    fn ink(text: &str) -> Vec<[u8; 3]> {
        let svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"200\" height=\"60\"><rect width=\"200\" height=\"60\" \
             fill=\"#fff\"/><text x=\"10\" y=\"45\" font-size=\"40\" font-family=\"sans-serif\">{text}</text></svg>"
        );
        let decoder = png::Decoder::new(std::io::Cursor::new(png(&svg).unwrap()));
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
