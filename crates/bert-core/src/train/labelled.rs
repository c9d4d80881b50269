//! A labelled data set for fine-tuning a classifier: a tab-separated file, one example per line,
//! as GLUE's files are.
//!
//! Without a header a line is `label<TAB>text`, or `label<TAB>text_a<TAB>text_b` for sentence
//! pairs. A first line that names the columns (`label`, and `sentence`, or `sentence1` and
//! `sentence2`) gives them in any order, other columns ignored. There is no quoting: a field is
//! everything between two tabs. Blank lines are skipped.
//!
//! Labels are class ids (integers) or names, never both. The classes are numbered by the
//! checkpoint's classifier when it has one with named labels (its `id2label`), else in the sorted
//! order of the names; class ids are their own numbers.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::corpus::{read_text, sha256_hex, Classes, Corpus};
use crate::error::{BertError, Result};

/// The examples of a labelled file, their labels as written.
#[derive(Clone, Debug)]
pub struct Labelled {
    pub path: PathBuf,
    pub texts: Vec<String>,
    pub pairs: Option<Vec<String>>,
    /// Each example's label, as the file writes it.
    pub labels: Vec<String>,
    /// The line of the file each example is on, counted from 1.
    pub lines: Vec<usize>,
    /// Whether the labels are class ids (integers) rather than names.
    pub numeric: bool,
    pub sha256: String,
}

/// Where each field of a line is.
#[derive(Clone, Copy, Debug)]
struct Columns {
    label: usize,
    text: usize,
    pair: Option<usize>,
    /// The fields a line must have at least.
    width: usize,
}

impl Columns {
    /// The columns a header line names, if it is one: `label`, and `sentence` (or `text`) or
    /// `sentence1` (with `sentence2` for pairs), in any case. Ok(None): not a header; an error: a
    /// line that names `label` but no text column the reader knows.
    fn named(fields: &[&str]) -> std::result::Result<Option<Columns>, String> {
        let at = |name: &str| fields.iter().position(|f| f.trim().eq_ignore_ascii_case(name));
        let Some(label) = at("label") else { return Ok(None) };
        let (text, pair) = match (at("sentence").or(at("text")), at("sentence1"), at("sentence2")) {
            (Some(text), None, None) => (text, None),
            (None, Some(text), pair) => (text, pair),
            _ => {
                return Err(format!(
                    "a header naming label, but its text column is not one this reader knows: name it sentence \
                     (or text), or sentence1 and sentence2 for pairs (found {})",
                    fields.iter().map(|f| f.trim()).collect::<Vec<_>>().join(", ")
                ))
            }
        };
        Ok(Some(Columns { label, text, pair, width: fields.len() }))
    }
}

fn is_class_id(label: &str) -> bool {
    !label.is_empty() && label.bytes().all(|b| b.is_ascii_digit())
}

impl Labelled {
    /// Reads the file at `path`.
    pub fn read(path: &Path) -> Result<Labelled> {
        Labelled::parse(&read_text(path)?, path)
    }

    /// Reads `text` (the contents of the file at `path`).
    pub fn parse(text: &str, path: &Path) -> Result<Labelled> {
        let bad = |line: usize, problem: String| BertError::Corpus { path: path.into(), line, problem };
        let sha256 = sha256_hex(text);
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut rows = text.lines().enumerate().map(|(i, line)| (i + 1, line)).filter(|(_, l)| !l.trim().is_empty());
        let mut columns: Option<Columns> = None;
        let mut first = None;
        if let Some((number, line)) = rows.next() {
            let fields: Vec<&str> = line.split('\t').collect();
            match Columns::named(&fields).map_err(|problem| bad(number, problem))? {
                Some(named) => columns = Some(named),
                None => first = Some((number, line)),
            }
        }
        let header = columns.is_some();
        let (mut texts, mut pairs, mut labels, mut lines) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut kind: Option<(usize, bool)> = None;
        for (number, line) in first.into_iter().chain(rows) {
            let fields: Vec<&str> = line.split('\t').collect();
            if fields.len() == 1 {
                let problem = match columns.filter(|_| header) {
                    Some(c) => format!("no tab: the header names {} columns, separated by tabs", c.width),
                    None => "no tab: a line is label<TAB>text, or label<TAB>text_a<TAB>text_b".into(),
                };
                return Err(bad(number, problem));
            }
            let cols = match columns {
                Some(cols) => cols,
                None => {
                    let cols = match fields.len() {
                        2 => Columns { label: 0, text: 1, pair: None, width: 2 },
                        3 => Columns { label: 0, text: 1, pair: Some(2), width: 3 },
                        n => {
                            return Err(bad(
                                number,
                                format!(
                                    "{} tabs: a line is label<TAB>text, or label<TAB>text_a<TAB>text_b (a header line \
                                     naming label and sentence gives other columns)",
                                    n - 1
                                ),
                            ))
                        }
                    };
                    *columns.get_or_insert(cols)
                }
            };
            if fields.len() != cols.width {
                return Err(bad(
                    number,
                    format!(
                        "{} fields, but the file's lines have {} (fields are separated by tabs)",
                        fields.len(),
                        cols.width
                    ),
                ));
            }
            let label = fields[cols.label].trim();
            if label.is_empty() {
                return Err(bad(number, "the label is empty".into()));
            }
            let numeric = is_class_id(label);
            match kind {
                None => kind = Some((number, numeric)),
                Some((at, was)) if was != numeric => {
                    let (this, that) = if numeric { ("a class id", "a name") } else { ("a name", "a class id") };
                    return Err(bad(
                        number,
                        format!(
                            "label {label:?} is {this}, but line {at}'s is {that}: the labels are class ids or \
                             names, not both"
                        ),
                    ));
                }
                _ => {}
            }
            let sentence = fields[cols.text];
            if sentence.trim().is_empty() {
                return Err(bad(number, "the text is empty".into()));
            }
            if let Some(pair) = cols.pair {
                if fields[pair].trim().is_empty() {
                    return Err(bad(number, "sentence B (the second text) is empty".into()));
                }
                pairs.push(fields[pair].to_string());
            }
            texts.push(sentence.to_string());
            labels.push(label.to_string());
            lines.push(number);
        }
        if texts.is_empty() {
            return Err(bad(0, "no example (the file is empty, blank, or a header alone)".into()));
        }
        let is_pairs = columns.is_some_and(|c| c.pair.is_some());
        Ok(Labelled {
            path: path.into(),
            texts,
            pairs: is_pairs.then_some(pairs),
            labels,
            lines,
            numeric: kind.is_some_and(|(_, numeric)| numeric),
            sha256,
        })
    }

    /// The class names a classifier trained on this file has: `existing` (the checkpoint's
    /// classifier's labels) when it has one, else the sorted names, or for class ids `0` to the
    /// largest. Refuses a file with one label only, and one whose labels the existing classifier
    /// does not have.
    pub fn classes(&self, existing: Option<&[String]>) -> Result<Vec<String>> {
        let bad = |line: usize, problem: String| BertError::Corpus { path: self.path.clone(), line, problem };
        // Class ids are told apart as numbers: "01" and "1" are one class.
        let distinct: BTreeSet<String> = match self.numeric {
            true => self.labels.iter().map(|l| l.parse::<usize>().map_or(l.clone(), |id| id.to_string())).collect(),
            false => self.labels.iter().cloned().collect(),
        };
        if distinct.len() < 2 {
            return Err(bad(
                0,
                format!(
                    "every example has the label {:?}: a classifier needs two labels or more",
                    distinct.first().cloned().unwrap_or_default()
                ),
            ));
        }
        // A classifier whose labels are transformers' placeholders (LABEL_0, ...) has no names of
        // its own: the file's name them, when there are as many.
        let placeholders = |names: &[String]| names.iter().enumerate().all(|(i, n)| *n == format!("LABEL_{i}"));
        if self.numeric {
            let ids: Vec<usize> = self.labels.iter().map(|l| l.parse::<usize>().unwrap_or(usize::MAX)).collect();
            let largest = ids.iter().copied().max().unwrap_or(0);
            return match existing {
                Some(names) => match ids.iter().position(|&id| id >= names.len()) {
                    Some(at) => Err(bad(
                        self.lines[at],
                        format!(
                            "class id {} is not one of the checkpoint's classifier's {} classes (0 to {})",
                            self.labels[at],
                            names.len(),
                            names.len().saturating_sub(1)
                        ),
                    )),
                    None => Ok(names.to_vec()),
                },
                None if largest > 10_000 => Err(bad(
                    self.lines[ids.iter().position(|&id| id == largest).unwrap_or(0)],
                    format!("class id {largest}: more than 10,000 classes; is this column the label?"),
                )),
                None => Ok((0..=largest).map(|id| id.to_string()).collect()),
            };
        }
        let sorted: Vec<String> = distinct.iter().map(|s| s.to_string()).collect();
        match existing {
            Some(names) if !placeholders(names) => {
                if let Some(at) = self.labels.iter().position(|l| !names.contains(l)) {
                    return Err(bad(
                        self.lines[at],
                        format!(
                            "label {:?} is not one of the checkpoint's classifier's labels ({})",
                            self.labels[at],
                            names.join(", ")
                        ),
                    ));
                }
                Ok(names.to_vec())
            }
            Some(names) if names.len() != sorted.len() => Err(bad(
                0,
                format!(
                    "{} labels ({}), but the checkpoint's classifier has {} classes",
                    sorted.len(),
                    sorted.join(", "),
                    names.len()
                ),
            )),
            _ => Ok(sorted),
        }
    }

    /// The examples as a corpus whose classes are `names`: each label must be one of them (or,
    /// for class ids, an index into them).
    pub fn into_corpus(self, names: &[String]) -> Result<Corpus> {
        let mut of_example = Vec::with_capacity(self.labels.len());
        for (label, &line) in self.labels.iter().zip(&self.lines) {
            let class = match self.numeric {
                true => label.parse::<usize>().ok().filter(|&id| id < names.len()),
                false => names.iter().position(|n| n == label),
            };
            let Some(class) = class else {
                return Err(BertError::Corpus {
                    path: self.path.clone(),
                    line,
                    problem: format!("label {label:?} is not one the classifier has ({})", names.join(", ")),
                });
            };
            of_example.push(class);
        }
        Ok(Corpus {
            path: self.path,
            texts: self.texts,
            pairs: self.pairs,
            lines: self.lines,
            sha256: self.sha256,
            classes: Some(Classes { names: names.to_vec(), of_example }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Labelled> {
        Labelled::parse(text, Path::new("data.tsv"))
    }

    /// A file, and the texts, labels and sentence Bs it must give.
    type Case<'a> = (&'a str, &'a [&'a str], &'a [&'a str], Option<&'a [&'a str]>);

    #[test]
    fn headers_name_their_columns_in_any_order_and_case() {
        let cases: [Case; 5] = [
            ("pos\tgood\nneg\tbad\n", &["good", "bad"], &["pos", "neg"], None),
            ("sentence\tlabel\ngood\tpos\nbad\tneg\n", &["good", "bad"], &["pos", "neg"], None),
            ("\u{feff}Label\tText\r\npos\tgood\r\nneg\tbad\r\n", &["good", "bad"], &["pos", "neg"], None),
            (
                "index\tsentence1\tsentence2\tlabel\n0\ta\tb\t1\n1\tc\td\t0\n",
                &["a", "c"],
                &["1", "0"],
                Some(&["b", "d"]),
            ),
            ("1\ta\tb\n0\tc\td\n", &["a", "c"], &["1", "0"], Some(&["b", "d"])),
        ];
        for (file, texts, labels, pairs) in cases {
            let got = parse(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
            assert_eq!(got.texts, texts, "{file:?}");
            assert_eq!(got.labels, labels, "{file:?}");
            assert_eq!(
                got.pairs.as_deref(),
                pairs.map(|p| p.iter().map(|s| s.to_string()).collect::<Vec<_>>()).as_deref(),
                "{file:?}"
            );
        }
    }

    #[test]
    fn a_line_that_names_label_but_no_known_text_column_is_refused() {
        let error = parse("label\treview\npos\tgood\n").unwrap_err().to_string();
        assert!(error.contains("data.tsv: line 1: a header naming label"), "{error}");
    }

    #[test]
    fn class_ids_are_told_apart_as_numbers() {
        let one = parse("1\tgood\n01\tfine\n").unwrap();
        let error = one.classes(None).unwrap_err().to_string();
        assert!(error.contains("a classifier needs two labels or more"), "{error}");
        let two = parse("1\tgood\n0\tbad\n").unwrap();
        assert_eq!(two.classes(None).unwrap(), ["0", "1"]);
    }
}
