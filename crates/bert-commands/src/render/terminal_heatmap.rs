//! The terminal's picture of an attention stage: after `--stop-at layerN.attention.scores` or
//! `.probs`, one head of the first sequence drawn as coloured cells, a row per query token and
//! a column per key token, in the colours of `bert-trace view`. It is printed only where colour
//! is wanted (the caller decides: `--color always`, or a terminal without `NO_COLOR`), so that
//! piped output, which tests and scripts read, never changes.

use bert_core::pass::Tensor;
use ndarray::{ArrayView2, Ix4};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use crate::render::text_table::visible;
use bert_view::picture::Scale;

/// At most this many tokens are drawn, two columns each, so that a row fits a terminal.
const MAX_TOKENS: usize = 48;

/// The most terminal columns a row's token label takes.
const MAX_LABEL: usize = 12;

/// The heatmap of head 0 of sequence 0 of a `[B,nh,T,T]` stage, with the token of each row;
/// None for a tensor of another rank.
pub fn heatmap(tensor: &Tensor, probability: bool, tokens: &[String]) -> Option<String> {
    let values = tensor.to_f32()?.into_dimensionality::<Ix4>().ok()?;
    let (_, heads, t, _) = values.dim();
    let head = values.slice(ndarray::s![0, 0, .., ..]);
    let scale = Scale::of(head, probability);
    let shown = t.min(MAX_TOKENS);
    let truecolor = std::env::var("COLORTERM").is_ok_and(|c| c == "truecolor" || c == "24bit");
    let tokens: Vec<String> = tokens.iter().take(shown).map(|t| visible(t)).collect();
    let label_width = tokens.iter().map(|s| s.width()).max().unwrap_or(0).min(MAX_LABEL);

    let mut out = format!("sequence 0, head 0 of {heads}: a row per query token, a column per key token");
    if shown < t {
        out += &format!(" (the first {shown} of {t}; `bert-trace view` draws them all)");
    }
    out.push('\n');
    out += &rows(head, shown, &scale, &tokens, label_width, truecolor);
    out += &legend(&scale, truecolor);
    Some(out)
}

/// One line per query: its position and token, then a cell per key.
fn rows(
    head: ArrayView2<'_, f32>,
    shown: usize,
    scale: &Scale,
    tokens: &[String],
    width: usize,
    truecolor: bool,
) -> String {
    let mut out = String::new();
    for query in 0..shown {
        let token = fit(tokens.get(query).map_or("", |s| s.as_str()), width);
        out += &format!("{query:>3} {token} ");
        for key in 0..shown {
            out += &cell(scale.colour(head[[query, key]]), truecolor);
        }
        out += "\x1b[0m\n";
    }
    out
}

/// `text` cut to at most `width` terminal columns and padded to exactly `width`, by display
/// width: a Chinese character or an emoji takes two columns, so counting characters would
/// misalign the rows.
fn fit(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > width {
            break;
        }
        out.push(c);
        used += w;
    }
    out + &" ".repeat(width - used)
}

/// The colour bar from the scale's low end to its high end, with the values at both ends.
fn legend(scale: &Scale, truecolor: bool) -> String {
    let (low, high, masked) = match *scale {
        Scale::Probability => ("0".to_string(), "1".to_string(), false),
        Scale::Diverging { m } => (format!("{:.4}", -m), format!("{m:.4}"), true),
        Scale::Sequential { min, max } => (format!("{min:.4}"), format!("{max:.4}"), false),
    };
    let bar: String = (0..16).map(|i| cell(scale.bar(i as f64 / 15.0), truecolor)).collect();
    let mut out = format!("    {low} {bar}\x1b[0m {high}");
    if masked {
        out += &format!("   masked (padding key) {}\x1b[0m", cell(bert_view::colors::MASKED, truecolor));
    }
    out + "\n"
}

/// Two spaces on the colour: 24-bit where the terminal says it has it, else the nearest of
/// the 256-colour palette's 6×6×6 cube.
fn cell(rgb: [u8; 3], truecolor: bool) -> String {
    if truecolor {
        format!("\x1b[48;2;{};{};{}m  ", rgb[0], rgb[1], rgb[2])
    } else {
        let level = |c: u8| ((c as u16 * 5 + 127) / 255) as u8;
        let index = 16 + 36 * level(rgb[0]) + 6 * level(rgb[1]) + level(rgb[2]);
        format!("\x1b[48;5;{index}m  ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{ArrayD, IxDyn};

    #[test]
    fn a_head_of_probabilities_is_one_coloured_row_per_query() {
        // [1,2,3,3]: head 0 puts everything on key 0; the picture is of head 0 only.
        let mut values = ArrayD::<f32>::zeros(IxDyn(&[1, 2, 3, 3]));
        for q in 0..3 {
            values[[0, 0, q, 0]] = 1.0;
            values[[0, 1, q, 2]] = 1.0;
        }
        let tokens: Vec<String> = ["[CLS]", "rome", "[SEP]"].map(String::from).to_vec();
        let out = heatmap(&Tensor::F32(values), true, &tokens).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 5, "title, 3 rows, legend:\n{out}");
        assert!(lines[2].starts_with("  1 rome  "), "{:?}", lines[2]);
        // Probability 1 is the darkest blue of the scale, 0 the lightest, in every row.
        let (dark, light) = (cell([0x08, 0x30, 0x6b], false), cell([0xf7, 0xfb, 0xff], false));
        for row in &lines[1..4] {
            assert_eq!(row.matches(&dark).count(), 1, "{row:?}");
            assert_eq!(row.matches(&light).count(), 2, "{row:?}");
        }
        assert!(lines[4].contains(" 0 ") && lines[4].ends_with(" 1"), "{:?}", lines[4]);
    }

    #[test]
    fn rows_line_up_whatever_the_tokens_width_and_control_characters_are_spelled_out() {
        let values = ArrayD::<f32>::from_elem(IxDyn(&[1, 1, 6, 6]), 0.5);
        let tokens: Vec<String> =
            ["[CLS]", "北京", "😀", "a\u{7}b", "\u{1b}[2J", "東京都千代田区丸の内"].map(String::from).to_vec();
        let out = heatmap(&Tensor::F32(values), true, &tokens).unwrap();
        let rows: Vec<&str> = out.lines().skip(1).take(6).collect();
        // Where the first cell starts, in terminal columns.
        let starts: Vec<usize> = rows.iter().map(|r| r.split('\x1b').next().unwrap().width()).collect();
        assert!(starts.iter().all(|&s| s == starts[0]), "cells start at columns {starts:?}:\n{out}");
        assert!(rows[3].contains("a\\u{7}b") && rows[4].contains("\\u{1b}[2J"), "{rows:?}");
        assert!(!out.contains('\u{7}') && !out.contains("\u{1b}[2J"), "a control character reached the terminal");
        assert_eq!(fit("東京都千代田区丸の内", 12), "東京都千代田");
        assert_eq!(fit("北京", 5), "北京 ");
    }

    #[test]
    fn masked_scores_get_their_own_colour_and_other_ranks_no_picture() {
        let values = ArrayD::from_shape_vec(IxDyn(&[1, 1, 2, 2]), vec![0.5, f32::MIN, -0.5, f32::MIN]).unwrap();
        let out = heatmap(&Tensor::F32(values), false, &[]).unwrap();
        let grey = cell(bert_view::colors::MASKED, false);
        assert_eq!(out.matches(&grey).count(), 3, "two masked cells and the legend's:\n{out}");
        assert!(heatmap(&Tensor::F32(ArrayD::zeros(IxDyn(&[1, 3, 4]))), false, &[]).is_none());
    }
}
