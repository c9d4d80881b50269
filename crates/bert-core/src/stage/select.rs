//! Choosing stages by name: whether a name lies inside a group of stages (`layer0.attention`),
//! and the valid names nearest a misspelt one, for messages.

use super::Stage;

/// Whether `name` equals `selector` or lies inside it on a dot boundary
/// (`layer0.attention` holds `layer0.attention.query`; `layer1` does not hold `layer10.ffn.output`).
pub fn in_group(name: &str, selector: &str) -> bool {
    name == selector
        || (name.len() > selector.len() && name.starts_with(selector) && name.as_bytes()[selector.len()] == b'.')
}

/// The valid names (stages and the groups above them) that are closest to `wanted`, best first.
pub fn suggestions(wanted: &str, stages: &[Stage]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for stage in stages {
        let name = stage.name();
        let mut prefix = String::new();
        for (idx, piece) in name.split('.').enumerate() {
            if idx > 0 {
                prefix.push('.');
            }
            prefix.push_str(piece);
            if !names.contains(&prefix) {
                names.push(prefix.clone());
            }
        }
    }
    let mut scored: Vec<(f64, String)> =
        names.into_iter().map(|n| (strsim::jaro_winkler(wanted, &n), n)).filter(|(score, _)| *score > 0.75).collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.into_iter().take(3).map(|(_, n)| n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::{plan, Objectives, OutputHeads};

    #[test]
    fn groups_stop_on_dot_boundaries() {
        let cases = [
            ("layer0.attention.query", "layer0.attention", true),
            ("layer0.attention.query", "layer0", true),
            ("layer10.ffn.output", "layer1", false),
            ("embeddings.sum", "embeddings.sum", true),
            ("embeddings.sum", "embeddings.su", false),
        ];
        for (name, selector, want) in cases {
            assert_eq!(in_group(name, selector), want, "in_group({name}, {selector})");
        }
    }

    #[test]
    fn suggestions_find_near_misses() {
        let stages = plan(2, OutputHeads::default(), Objectives::default());
        let got = suggestions("layer0.atention", &stages);
        assert_eq!(got.first().map(String::as_str), Some("layer0.attention"), "{got:?}");
    }
}
