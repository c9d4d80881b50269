//! The Simplified form of a Traditional character, as OpenCC's `t2s` converts the character
//! alone: the table `simplified.tsv`, which `scripts/simplified_table.py` writes with opencc
//! 1.4.2, the converter `golden/chinese-small`'s text was made with. A model of Simplified
//! characters reads a Traditional one as `[UNK]`; the note that says so names the form the model
//! would know.

use std::collections::HashMap;
use std::sync::OnceLock;

/// One line per character: the Traditional form, a tab, the Simplified form.
const TABLE: &str = include_str!("simplified.tsv");

fn table() -> &'static HashMap<char, char> {
    static MAP: OnceLock<HashMap<char, char>> = OnceLock::new();
    MAP.get_or_init(|| {
        TABLE
            .lines()
            .filter_map(|line| {
                let mut chars = line.chars();
                match (chars.next(), chars.next(), chars.next(), chars.next()) {
                    (Some(traditional), Some('\t'), Some(simplified), None) => Some((traditional, simplified)),
                    _ => None,
                }
            })
            .collect()
    })
}

/// `word` with each Traditional character the table has replaced by its Simplified form, or
/// `None` when the word has none.
pub fn simplified(word: &str) -> Option<String> {
    let table = table();
    let converted: String = word.chars().map(|c| table.get(&c).copied().unwrap_or(c)).collect();
    (converted != word).then_some(converted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_of_the_table_is_read_and_converts_its_character() {
        assert_eq!(table().len(), TABLE.lines().count(), "a line the reader skipped");
        for line in TABLE.lines() {
            let (traditional, simplified_form) = line.split_once('\t').unwrap();
            assert_eq!(simplified(traditional).as_deref(), Some(simplified_form), "{line}");
        }
        assert_eq!(simplified("舉頭望明月").as_deref(), Some("举头望明月"));
        assert_eq!(simplified("床前明月光"), None);
    }
}
