//! What a command answers: a typed report, which the binary prints as text (or as JSON with
//! `--json`) and Python returns as a dict, and the notes that loading the model had to say,
//! which go before it.

use serde::Serialize;

/// A command's report: its fields are what `--json` prints and Python's dict holds; [`text`]
/// is what a terminal shows.
///
/// [`text`]: Report::text
pub trait Report: Serialize {
    /// The report as the command prints it without `--json`.
    fn text(&self) -> String;

    /// The report as `--json` prints it.
    fn json(&self) -> String {
        format!("{}\n", serde_json::to_string_pretty(self).expect("a report serialises"))
    }
}

/// A report with the notes that go before it (what loading the model had to say).
#[derive(Clone, Debug)]
pub struct Reported<R> {
    pub notes: Vec<String>,
    pub report: R,
}
