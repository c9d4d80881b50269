//! Tables, numbers and tokens as the CLI prints them.

use std::io::IsTerminal;

use comfy_table::presets::UTF8_BORDERS_ONLY;
use comfy_table::{CellAlignment, ContentArrangement, Table};

/// The width of a terminal that does not report one.
const DEFAULT_COLUMNS: u16 = 80;

/// A table with `header`, the columns from `right_aligned` on aligned right (numbers). On a
/// terminal it fits the terminal's width, wrapping long cells; piped, every row is one line, as
/// wide as it needs.
pub fn new_table(header: &[&str], right_aligned: &[usize]) -> Table {
    let mut table = Table::new();
    let terminal = std::io::stdout().is_terminal();
    let arrangement = if terminal { ContentArrangement::Dynamic } else { ContentArrangement::Disabled };
    table.load_style(UTF8_BORDERS_ONLY).set_content_arrangement(arrangement).set_header(header.to_vec());
    // Some terminals (a container's pseudo-terminal) report 0 columns, which would squeeze
    // every column to one character.
    if terminal && table.width().is_none_or(|w| w == 0) {
        table.set_width(fallback_width(std::env::var("COLUMNS").ok().as_deref()));
    }
    for &col in right_aligned {
        if let Some(column) = table.column_mut(col) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
}

/// A value with 4 significant decimals, in scientific notation when it is very large or small.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if v == 0.0 {
        "0".into()
    } else if !v.is_finite() || !(1e-4..1e5).contains(&a) {
        format!("{v:.3e}")
    } else {
        format!("{v:.4}")
    }
}

/// The width to use when the terminal reports none: `COLUMNS` if it is a positive number, else
/// 80.
fn fallback_width(columns: Option<&str>) -> u16 {
    columns.and_then(|c| c.trim().parse::<u16>().ok()).filter(|&w| w > 0).unwrap_or(DEFAULT_COLUMNS)
}

/// A token as every picture and table shows it: the library's one rule (`bert_core`).
pub use bert_core::io::tokenizer::visible;

/// A shape as `[1, 13, 32]`.
pub fn shape(dims: &[usize]) -> String {
    let parts: Vec<String> = dims.iter().map(usize::to_string).collect();
    format!("[{}]", parts.join(", "))
}

/// `text` with the five characters HTML gives meaning to written as entities.
pub fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// An HTML table of `rows` under `header`, every cell escaped: what a notebook shows for a
/// trace or a diff report (the Python package's `_repr_html_`).
pub fn html_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let cells = |tag: &str, row: &mut dyn Iterator<Item = &str>| -> String {
        row.map(|cell| format!("<{tag}>{}</{tag}>", html_escape(cell))).collect()
    };
    let mut html = format!("<table>\n<thead><tr>{}</tr></thead>\n<tbody>\n", cells("th", &mut header.iter().copied()));
    for row in rows {
        html.push_str(&format!("<tr>{}</tr>\n", cells("td", &mut row.iter().map(String::as_str))));
    }
    html.push_str("</tbody>\n</table>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_spelled_out_and_the_rest_is_kept() {
        let cases = [
            ("rome", "rome"),
            ("北京😀", "北京😀"),
            ("a\u{7}b", "a\\u{7}b"),
            ("\u{1b}[31m", "\\u{1b}[31m"),
            ("\u{7f}\u{85}\u{9f}", "\\u{7f}\\u{85}\\u{9f}"),
            ("\t\n\u{0}", "\\u{9}\\u{a}\\u{0}"),
            ("\u{fffe}", "\\u{fffe}"),
            // Bidirectional controls reorder what follows them; a Hebrew letter is kept.
            ("a\u{202e}cba", "a\\u{202e}cba"),
            ("\u{2067}x\u{2069}", "\\u{2067}x\\u{2069}"),
            ("\u{5d0}", "\u{5d0}"),
        ];
        for (text, expected) in cases {
            assert_eq!(visible(text), expected, "{text:?}");
        }
    }

    #[test]
    fn a_terminal_without_a_width_gets_columns_or_80() {
        let cases = [(None, 80), (Some("120"), 120), (Some("0"), 80), (Some("wide"), 80), (Some(" 100 "), 100)];
        for (columns, expected) in cases {
            assert_eq!(fallback_width(columns), expected, "COLUMNS={columns:?}");
        }
    }
}
