//! Tables and numbers as the CLI prints them.

use std::io::IsTerminal;

use comfy_table::presets::UTF8_BORDERS_ONLY;
use comfy_table::{CellAlignment, ContentArrangement, Table};

/// A table with `header`, the columns from `right_aligned` on aligned right (numbers). On a
/// terminal it fits the terminal's width, wrapping long cells; piped, every row is one line, as
/// wide as it needs.
pub fn new_table(header: &[&str], right_aligned: &[usize]) -> Table {
    let mut table = Table::new();
    let arrangement =
        if std::io::stdout().is_terminal() { ContentArrangement::Dynamic } else { ContentArrangement::Disabled };
    table.load_style(UTF8_BORDERS_ONLY).set_content_arrangement(arrangement).set_header(header.to_vec());
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

/// A shape as `[1, 13, 32]`.
pub fn shape(dims: &[usize]) -> String {
    let parts: Vec<String> = dims.iter().map(usize::to_string).collect();
    format!("[{}]", parts.join(", "))
}
