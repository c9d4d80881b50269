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
    /// The header's columns read past (GLUE's ids, genres and parses).
    pub ignored: Vec<String>,
    pub sha256: String,
}

/// Where each field of a line is.
#[derive(Clone, Debug)]
struct Columns {
    label: usize,
    text: usize,
    pair: Option<usize>,
    /// The fields a line must have at least.
    width: usize,
    /// The header's other columns, by name: read past, and said so.
    ignored: Vec<String>,
}

/// The names a header may give the label, in the order they are looked for: GLUE's `label`,
/// MNLI's `gold_label` (beside its annotators' `label1` to `label5`), QQP's `is_duplicate` and
/// MRPC's `Quality`.
const LABELS: [&str; 4] = ["label", "gold_label", "is_duplicate", "quality"];

/// The text columns a header may name: one text, or a pair (sentence A, sentence B), as GLUE's
/// files name them. MNLI's `sentence1` and `sentence2` come before its parses'; QNLI pairs a
/// `question` with its `sentence`.
const PAIRS: [(&str, &str); 4] =
    [("sentence1", "sentence2"), ("question1", "question2"), ("#1 string", "#2 string"), ("question", "sentence")];
const SINGLES: [&str; 2] = ["sentence", "text"];

/// Whether a column's name says it holds a text (a sentence, a question, a string), which the
/// reader must place or refuse: a text left out in silence would train on half of each example.
fn names_a_text(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    ["sentence", "text", "question"].contains(&stem) || (name.starts_with('#') && name.ends_with(" string"))
}

impl Columns {
    /// The columns a header line names, if it is one: a label column ([`LABELS`]) and one text
    /// or a pair of them ([`PAIRS`], [`SINGLES`]), in any order and case; the other columns are
    /// read past. Ok(None): not a header; an error: a header whose texts cannot be placed (none
    /// the reader knows, a name given twice, or a text column beside the ones it reads).
    fn named(fields: &[&str]) -> std::result::Result<Option<Columns>, String> {
        let names: Vec<String> = fields.iter().map(|f| f.trim().to_ascii_lowercase()).collect();
        let at = |name: &str| names.iter().position(|f| f == name);
        let Some(label) = LABELS.iter().find_map(|name| at(name)) else { return Ok(None) };
        let found = || fields.iter().map(|f| f.trim()).collect::<Vec<_>>().join(", ");
        if let Some(twice) = names.iter().enumerate().find(|(i, n)| names[..*i].contains(n)).map(|(_, n)| n) {
            return Err(format!(
                "the header names {twice} twice, so which column is which cannot be told (found {})",
                found()
            ));
        }
        let pair = PAIRS.iter().find_map(|(a, b)| Some((at(a)?, at(b)?)));
        let (text, pair) = match pair {
            Some((a, b)) => (a, Some(b)),
            None => match SINGLES.iter().find_map(|name| at(name)) {
                Some(text) => (text, None),
                None => {
                    return Err(format!(
                        "a header naming the label, but no text column this reader knows: name it sentence (or text), \
                         or a pair sentence1 and sentence2, question1 and question2, question and sentence, or #1 String \
                         and #2 String (found {})",
                        found()
                    ))
                }
            },
        };
        let used = [Some(label), Some(text), pair];
        let unplaced: Vec<&str> = fields
            .iter()
            .enumerate()
            .filter(|(i, name)| !used.contains(&Some(*i)) && names_a_text(name.trim()))
            .map(|(_, name)| name.trim())
            .collect();
        if !unplaced.is_empty() {
            return Err(format!(
                "the header names text column(s) {} beside {}{}: which to read cannot be told, so none is left out in \
                 silence; drop or rename the column(s) (found {})",
                unplaced.join(", "),
                fields[text].trim(),
                pair.map(|b| format!(" and {}", fields[b].trim())).unwrap_or_default(),
                found()
            ));
        }
        let ignored = fields
            .iter()
            .enumerate()
            .filter(|(i, _)| !used.contains(&Some(*i)))
            .map(|(_, f)| f.trim().to_string())
            .collect();
        Ok(Some(Columns { label, text, pair, width: fields.len(), ignored }))
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
                let problem = match columns.as_ref().filter(|_| header) {
                    Some(c) => format!("no tab: the header names {} columns, separated by tabs", c.width),
                    None => "no tab: a line is label<TAB>text, or label<TAB>text_a<TAB>text_b".into(),
                };
                return Err(bad(number, problem));
            }
            let cols = match &columns {
                Some(cols) => cols.clone(),
                None => {
                    let cols = match fields.len() {
                        2 => Columns { label: 0, text: 1, pair: None, width: 2, ignored: Vec::new() },
                        3 => Columns { label: 0, text: 1, pair: Some(2), width: 3, ignored: Vec::new() },
                        n => {
                            return Err(bad(
                                number,
                                format!(
                                    "{} tabs: a line is label<TAB>text, or label<TAB>text_a<TAB>text_b (a header line \
                                     naming label and sentence gives other columns; CoLA's files have none: put \
                                     source<TAB>label<TAB>original<TAB>sentence first)",
                                    n - 1
                                ),
                            ))
                        }
                    };
                    columns.get_or_insert(cols).clone()
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
        let is_pairs = columns.as_ref().is_some_and(|c| c.pair.is_some());
        let ignored = columns.map(|c| c.ignored).unwrap_or_default();
        Ok(Labelled {
            ignored,
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
            maskable: None,
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
        assert!(error.contains("data.tsv: line 1: a header naming the label, but no text column"), "{error}");
    }

    /// GLUE's files as they come, each header and one line: the label and the one or two texts
    /// it must read, and the columns read past.
    #[test]
    fn glue_layouts_are_read_by_their_headers() {
        /// A layout's name, its file, and the text, sentence B and columns read past it must give.
        type Layout<'a> = (&'a str, &'a str, &'a str, Option<&'a str>, &'a [&'a str]);
        let cases: [Layout; 7] = [
            ("SST-2", "sentence\tlabel\nit 's a charming journey . \t1\n", "it 's a charming journey . ", None, &[]),
            (
                "MRPC",
                "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t702876\t702977\tAmrozi accused him .\tReferring to him .\n",
                "Amrozi accused him .",
                Some("Referring to him ."),
                &["#1 ID", "#2 ID"],
            ),
            (
                "QQP",
                "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n1\t2\t3\tHow do I?\tHow can I?\t1\n",
                "How do I?",
                Some("How can I?"),
                &["id", "qid1", "qid2"],
            ),
            (
                "MNLI",
                "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t\
                 sentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label\n0\t1\t1e\tgov\t( a )\t( b )\t(S a)\t(S b)\t\
                 Conceptually cream skimming.\tProduct and geography.\tneutral\tneutral\n",
                "Conceptually cream skimming.",
                Some("Product and geography."),
                &["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "label1"],
            ),
            (
                "QNLI",
                "index\tquestion\tsentence\tlabel\n0\tWhen?\tIn 1990.\tentailment\n",
                "When?",
                Some("In 1990."),
                &["index"],
            ),
            ("RTE", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tnot_entailment\n", "A.", Some("B."), &["index"]),
            ("WNLI", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\t1\n", "A.", Some("B."), &["index"]),
        ];
        for (name, file, text, pair, ignored) in cases {
            let got = parse(file).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got.texts, [text], "{name}");
            assert_eq!(got.pairs.as_ref().map(|p| p[0].as_str()), pair, "{name}");
            assert_eq!(got.ignored, ignored, "{name}");
        }
    }

    /// A header whose texts cannot all be placed is refused, naming them; CoLA's files, which
    /// have no header, are pointed to one.
    #[test]
    fn texts_that_cannot_be_placed_are_refused() {
        for (file, expected) in [
            ("label\tsentence\tsentence\npos\ta\tb\n", "names sentence twice"),
            ("label\ttext\tsentence\npos\ta\tb\n", "names text column(s) text beside sentence"),
            ("index\tsentence1\tsentence2\tsentence3\tlabel\n0\ta\tb\tc\t1\n", "sentence3"),
            ("gj04\t1\t\tOur friends won't buy this analysis.\n", "CoLA's files have none"),
        ] {
            let error = parse(file).unwrap_err().to_string();
            assert!(error.contains(expected), "{file:?}: {error}");
        }
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
