//! One picture as SVG, drawn as the page draws it (the constants are `assets/COLORS.md`'s): a
//! heatmap of a `[T,T]`, `[T,H]` or `[T,I]` matrix, or the head view's lines between the tokens.
//!
//! Text stays text. The cells of a heatmap are one embedded PNG, one pixel per cell, scaled up
//! without smoothing: a 512 × 3072 matrix as 1.5 million rectangles would be a 100 MB file.

use std::fmt::Write;

use base64::Engine;
use ndarray::ArrayView2;

use super::colors::{self, colour, hex, Rgb};
use super::data::is_masked;

/// One label of a row or column: the token, and how it is coloured.
#[derive(Clone, Debug)]
pub struct Label {
    pub text: String,
    pub colour: Rgb,
}

/// A picture: the SVG text and its size in pixels.
pub struct Picture {
    pub svg: String,
    pub width: u32,
    pub height: u32,
}

/// How the values of a heatmap map to colours.
#[derive(Clone, Copy, Debug)]
pub enum Scale {
    /// Probabilities, [0, 1], quantised to 8 bits as the page stores them.
    Probability,
    /// Signed data, centred at 0, from -m to m.
    Diverging { m: f64 },
    /// Non-negative data, from min to max.
    Sequential { min: f64, max: f64 },
}

impl Scale {
    /// The scale the page uses for `values`.
    pub fn of(values: ArrayView2<'_, f32>, probability: bool) -> Scale {
        if probability {
            return Scale::Probability;
        }
        let finite = values.iter().filter(|&&v| v.is_finite() && !is_masked(v)).map(|&v| v as f64);
        let (min, max) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
        let (min, max) = if min.is_finite() { (min, max) } else { (0.0, 0.0) };
        if min < 0.0 {
            let m = min.abs().max(max.abs());
            Scale::Diverging { m: if m > 0.0 { m } else { 1.0 } }
        } else {
            Scale::Sequential { min, max }
        }
    }

    pub fn colour(self, v: f32) -> Rgb {
        if v.is_nan() {
            return colors::NAN;
        }
        if is_masked(v) {
            return colors::MASKED;
        }
        let v = v as f64;
        match self {
            Scale::Probability => colour(colors::SEQUENTIAL, (v.clamp(0.0, 1.0) * 255.0).round() / 255.0),
            Scale::Diverging { m } => colour(colors::DIVERGING, step_1024(0.5 + 0.5 * v / m)),
            Scale::Sequential { min, max } => {
                let span = if max - min > 0.0 { max - min } else { 1.0 };
                colour(colors::SEQUENTIAL, step_1024((v - min) / span))
            }
        }
    }

    /// The colour at the bar's `t` (0 at the low end).
    pub fn bar(self, t: f64) -> Rgb {
        match self {
            Scale::Diverging { .. } => colour(colors::DIVERGING, t),
            _ => colour(colors::SEQUENTIAL, t),
        }
    }

    /// The values at the bar's high end, low end, and middle (signed data only).
    fn ends(self) -> (f64, f64, Option<f64>) {
        match self {
            Scale::Probability => (1.0, 0.0, None),
            Scale::Diverging { m } => (m, -m, Some(0.0)),
            Scale::Sequential { min, max } => (max, min, None),
        }
    }
}

/// `t` on the page's 1024-step colour table.
fn step_1024(t: f64) -> f64 {
    (t.clamp(0.0, 1.0) * 1023.0).round() / 1023.0
}

/// A number with 4 significant digits, as the page prints the colour bar.
fn significant(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = (3 - v.abs().log10().floor() as i32).max(0) as usize;
    if v.abs() >= 1e5 || v.abs() < 1e-3 {
        format!("{v:.3e}")
    } else {
        format!("{v:.digits$}")
    }
}

/// A token label as the page cuts it: 14 characters at most, else 13 and `…`.
fn cut(text: &str) -> String {
    if text.chars().count() > 14 {
        text.chars().take(13).chain(['…']).collect()
    } else {
        text.to_string()
    }
}

/// `text` as SVG character data: control characters spelled out (XML cannot hold them), then
/// the markup characters escaped.
fn escape(text: &str) -> String {
    bert_core::io::tokenizer::visible(text)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A PNG of `width` × `height` pixels, as a data URI.
fn png_uri(width: u32, height: u32, rgb: &[u8]) -> String {
    let mut bytes = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut bytes, width, height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().expect("writing to memory");
        writer.write_image_data(rgb).expect("writing to memory");
    }
    format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

fn open(width: u32, height: u32) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" \
         font-family=\"sans-serif\">\n<!-- bert-trace view -->\n<rect width=\"{width}\" height=\"{height}\" fill=\"#ffffff\"/>\n"
    )
}

/// A heatmap of `values` `[rows,cols]`: rows are tokens, columns tokens too (`col_labels`) or
/// features (None).
pub fn heatmap(
    values: ArrayView2<'_, f32>,
    row_labels: &[Label],
    col_labels: Option<&[Label]>,
    scale: Scale,
) -> Picture {
    let (rows, cols) = values.dim();
    let mut cw = (1024 / cols.max(1)).clamp(1, 24);
    let mut ch = (1024 / rows.max(1)).clamp(1, 24);
    if col_labels.is_some() {
        cw = cw.min(ch);
        ch = cw;
    }
    let (left, top) = (110usize, if col_labels.is_some() { 80usize } else { 22 });
    let (w, h) = (cols * cw, rows * ch);
    let bar_h = h.max(120);
    let width = (left + w + 16 + 14 + 90) as u32;
    let height = (top + bar_h + 16 + 8) as u32;
    let mut svg = open(width, height);
    let mut cells = Vec::with_capacity(rows * cols * 3);
    for v in values.iter() {
        cells.extend(scale.colour(*v));
    }
    let _ = writeln!(
        svg,
        "<image x=\"{left}\" y=\"{top}\" width=\"{w}\" height=\"{h}\" preserveAspectRatio=\"none\" \
         image-rendering=\"optimizeSpeed\" style=\"image-rendering:pixelated\" href=\"{}\"/>",
        png_uri(cols as u32, rows as u32, &cells)
    );
    let _ = writeln!(
        svg,
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"{}\"/>",
        left as f64 - 0.5,
        top as f64 - 0.5,
        w + 1,
        h + 1,
        hex(colors::FRAME)
    );
    let stride = |cell: usize| if cell >= 10 { 1 } else { 12usize.div_ceil(cell) };
    for (r, label) in row_labels.iter().enumerate().step_by(stride(ch)) {
        let _ = writeln!(
            svg,
            "<text x=\"106\" y=\"{}\" dy=\"0.35em\" font-size=\"11\" text-anchor=\"end\" fill=\"{}\">{}</text>",
            top as f64 + (r * ch) as f64 + ch as f64 / 2.0,
            hex(label.colour),
            escape(&cut(&label.text))
        );
    }
    match col_labels {
        Some(labels) => {
            for (c, label) in labels.iter().enumerate().step_by(stride(cw)) {
                let x = left as f64 + (c * cw) as f64 + cw as f64 / 2.0;
                let _ = writeln!(
                    svg,
                    "<text transform=\"translate({x},{}) rotate(-90)\" dy=\"0.35em\" font-size=\"11\" fill=\"{}\">{}</text>",
                    top - 4,
                    hex(label.colour),
                    escape(&cut(&label.text))
                );
            }
        }
        None => {
            let steps = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000];
            let step = steps.into_iter().find(|s| s * cw >= 40).unwrap_or(10000);
            for c in (0..cols).step_by(step) {
                let x = left as f64 + (c * cw) as f64 + cw as f64 / 2.0;
                let _ = writeln!(
                    svg,
                    "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{top}\" stroke=\"#888888\"/>\n\
                     <text x=\"{x}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\" fill=\"{}\">{c}</text>",
                    top - 4,
                    top - 5,
                    hex(colors::TEXT)
                );
            }
        }
    }
    // The colour bar, its high end on top.
    let bar_x = left + w + 16;
    let bar: Vec<u8> = (0..bar_h).flat_map(|y| scale.bar(1.0 - (y as f64 + 0.5) / bar_h as f64)).collect();
    let _ = writeln!(
        svg,
        "<image x=\"{bar_x}\" y=\"{top}\" width=\"14\" height=\"{bar_h}\" preserveAspectRatio=\"none\" \
         image-rendering=\"optimizeSpeed\" style=\"image-rendering:pixelated\" href=\"{}\"/>\n\
         <rect x=\"{}\" y=\"{}\" width=\"15\" height=\"{}\" fill=\"none\" stroke=\"{}\"/>",
        png_uri(1, bar_h as u32, &bar),
        bar_x as f64 - 0.5,
        top as f64 - 0.5,
        bar_h + 1,
        hex(colors::FRAME)
    );
    let (high, low, middle) = scale.ends();
    let marks =
        [(Some(high), top as f64), (Some(low), (top + bar_h) as f64), (middle, top as f64 + bar_h as f64 / 2.0)];
    for (value, y) in marks.into_iter().filter_map(|(v, y)| v.map(|v| (v, y))) {
        let _ = writeln!(
            svg,
            "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#888888\"/>\n\
             <text x=\"{}\" y=\"{y}\" dy=\"0.35em\" font-size=\"11\" fill=\"{}\">{}</text>",
            bar_x + 14,
            bar_x + 17,
            bar_x + 18,
            hex(colors::TEXT),
            significant(value)
        );
    }
    if values.iter().any(|&v| is_masked(v)) {
        let y = top + bar_h + 4;
        let _ = writeln!(
            svg,
            "<rect x=\"{bar_x}\" y=\"{y}\" width=\"14\" height=\"10\" fill=\"{}\"/>\n\
             <text x=\"{}\" y=\"{}\" dy=\"0.35em\" font-size=\"11\" fill=\"{}\">masked</text>",
            hex(colors::MASKED),
            bar_x + 18,
            y + 5,
            hex(colors::TEXT)
        );
    }
    svg.push_str("</svg>\n");
    Picture { svg, width, height }
}

/// The head view: the tokens in two columns and, for each head in `heads` (its index and its
/// `[T,T]` probabilities), a line from each query to each key it attends to, as strong as the
/// probability. `labels` are the tokens; `segments` their sentence (0 or 1) or None for padding.
pub fn head_view(heads: &[(usize, ArrayView2<'_, f32>)], labels: &[Label], segments: &[Option<usize>]) -> Picture {
    let n = labels.len();
    let big = n <= 64;
    let (row, font, stroke) = if big { (22.0, 13, 2.0) } else { (16.0, 11, 1.5) };
    let threshold = match n {
        0..=64 => 1u8,
        65..=128 => 6,
        129..=256 => 13,
        _ => 26,
    };
    let (width, height) = (440u32, (16.0 + n as f64 * row) as u32);
    let mut svg = open(width, height);
    let centre = |r: usize| 8.0 + r as f64 * row + row / 2.0;
    for (r, label) in labels.iter().enumerate() {
        let bar = segments[r].map_or(colors::PADDING_TEXT, |s| colors::SEGMENTS[s.min(1)]);
        for x in [0, 437] {
            let _ = writeln!(
                svg,
                "<rect x=\"{x}\" y=\"{}\" width=\"3\" height=\"{}\" fill=\"{}\"/>",
                8.0 + r as f64 * row + 1.0,
                row - 2.0,
                hex(bar)
            );
        }
        for (x, anchor) in [(114, "end"), (326, "start")] {
            let _ = writeln!(
                svg,
                "<text x=\"{x}\" y=\"{}\" dy=\"0.35em\" font-size=\"{font}\" text-anchor=\"{anchor}\" fill=\"{}\">{}</text>",
                centre(r),
                hex(label.colour),
                escape(&cut(&label.text))
            );
        }
    }
    let k = heads.len().max(1) as f64;
    for (head, probs) in heads {
        let colour = hex(colors::HEADS[head % colors::HEADS.len()]);
        let mut lines: Vec<(u8, usize, usize)> = probs
            .indexed_iter()
            .map(|((a, b), &p)| ((p.clamp(0.0, 1.0) * 255.0).round() as u8, a, b))
            .filter(|&(code, a, b)| code >= threshold && a < n && b < n)
            .collect();
        lines.sort();
        for (code, a, b) in lines {
            let opacity = (code as f64 / 255.0 / k.sqrt()).min(1.0);
            let _ = writeln!(
                svg,
                "<line x1=\"120\" y1=\"{}\" x2=\"320\" y2=\"{}\" stroke=\"{colour}\" stroke-width=\"{stroke}\" \
                 stroke-opacity=\"{opacity:.4}\"/>",
                centre(a),
                centre(b)
            );
        }
    }
    svg.push_str("</svg>\n");
    Picture { svg, width, height }
}

/// Each row's tokens as boxes coloured by their value on a diverging scale, left to right,
/// wrapping at 1000 pixels, with the row's label above it and the value under each token.
pub fn tokens(rows: &[(String, Vec<(String, f64)>)], scale: Scale) -> Picture {
    const WIDTH: usize = 1000;
    let (line, char_w, pad) = (40usize, 7usize, 8usize);
    let mut body = String::new();
    let mut y = 8usize;
    for (label, tokens) in rows {
        let _ = writeln!(
            body,
            "<text x=\"8\" y=\"{}\" font-size=\"12\" fill=\"{}\">{}</text>",
            y + 12,
            hex(colors::TEXT),
            escape(label)
        );
        y += 20;
        let mut x = 8usize;
        for (token, value) in tokens {
            let text = cut(token);
            // Wide enough for the token and for its value under it.
            let w = (text.chars().count() * char_w + pad).max(52);
            if x + w > WIDTH - 8 && x > 8 {
                x = 8;
                y += line;
            }
            let fill = scale.colour(*value as f32);
            // Dark cells take white text.
            let luminance = 0.299 * fill[0] as f64 + 0.587 * fill[1] as f64 + 0.114 * fill[2] as f64;
            let ink = if luminance < 128.0 { "#ffffff".to_string() } else { hex(colors::TEXT) };
            let _ = writeln!(
                body,
                "<rect x=\"{x}\" y=\"{y}\" width=\"{w}\" height=\"20\" fill=\"{}\" stroke=\"{}\"/>\n\
                 <text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\" fill=\"{}\">{}</text>\n\
                 <text x=\"{}\" y=\"{}\" font-size=\"9\" text-anchor=\"middle\" fill=\"{}\">{}</text>",
                hex(fill),
                hex(colors::FRAME),
                x + w / 2,
                y + 14,
                ink,
                escape(&text),
                x + w / 2,
                y + 31,
                hex(colors::TEXT),
                significant(*value)
            );
            x += w + 4;
        }
        y += line + 8;
    }
    let (width, height) = (WIDTH as u32, y as u32);
    let mut svg = open(width, height);
    svg += &body;
    svg += "</svg>\n";
    Picture { svg, width, height }
}

/// Several pictures one above the other, each under its title.
pub fn stack(parts: &[(String, Picture)]) -> Picture {
    let titles = parts.iter().map(|(title, _)| title.chars().count() as u32 * 7 + 16);
    let width = parts.iter().map(|(_, p)| p.width).chain(titles).max().unwrap_or(0);
    let mut body = String::new();
    let mut y = 0u32;
    for (title, picture) in parts {
        let _ = writeln!(
            body,
            "<text x=\"8\" y=\"{}\" font-size=\"13\" fill=\"{}\">{}</text>",
            y + 18,
            hex(colors::TEXT),
            escape(title)
        );
        y += 26;
        // The part's own <svg> element, placed at its offset: its coordinates stay its own.
        let inner = picture.svg.replacen("<svg ", &format!("<svg x=\"0\" y=\"{y}\" "), 1);
        body += &inner;
        y += picture.height;
    }
    let mut svg = open(width, y);
    svg += &body;
    svg += "</svg>\n";
    Picture { svg, width, height: y }
}

/// A line through `points` (x, y), with its axes: x from 0 to the largest x, y over the range
/// of the values; each point marked and labelled with its y.
pub fn curve(points: &[(f64, f64)], x_label: &str, y_label: &str) -> Picture {
    let (width, height) = (520u32, 300u32);
    let (left, right, top, bottom) = (70.0, 20.0, 20.0, 50.0);
    let (w, h) = (width as f64 - left - right, height as f64 - top - bottom);
    let x_max = points.iter().map(|p| p.0).fold(0.0f64, f64::max).max(f64::MIN_POSITIVE);
    let (y_min, y_max) =
        points.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
    let span = if y_max > y_min { y_max - y_min } else { 1.0 };
    let at = |(x, y): (f64, f64)| (left + x / x_max * w, top + (1.0 - (y - y_min) / span) * h);
    let mut svg = open(width, height);
    let ink = hex(colors::TEXT);
    let frame = hex(colors::FRAME);
    let _ =
        writeln!(svg, "<rect x=\"{left}\" y=\"{top}\" width=\"{w}\" height=\"{h}\" fill=\"none\" stroke=\"{frame}\"/>");
    let line: Vec<String> = points.iter().map(|&p| at(p)).map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let _ = writeln!(
        svg,
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>",
        line.join(" "),
        hex(colour(colors::SEQUENTIAL, 0.8))
    );
    for &(x, y) in points {
        let (px, py) = at((x, y));
        let _ = writeln!(
            svg,
            "<circle cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"3\" fill=\"{ink}\"/>\n<text x=\"{px:.1}\" y=\"{}\" font-size=\"9\" text-anchor=\"middle\" fill=\"{ink}\">{}</text>\n<text x=\"{px:.1}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\" fill=\"{ink}\">{:.0}%</text>",
            py - 7.0,
            significant(y),
            top + h + 14.0,
            x * 100.0
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\" fill=\"{ink}\">{}</text>\n<text transform=\"translate(16,{}) rotate(-90)\" font-size=\"11\" text-anchor=\"middle\" fill=\"{ink}\">{}</text>",
        left + w / 2.0,
        height as f64 - 12.0,
        escape(x_label),
        top + h / 2.0,
        escape(y_label)
    );
    svg += "</svg>\n";
    Picture { svg, width, height }
}
