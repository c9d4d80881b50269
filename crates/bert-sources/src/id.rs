//! A Hugging Face model id as `--model` takes it: `bert-base-uncased`, `google-bert/bert-base-chinese`,
//! or either with `@revision` (a branch, a tag or a commit hash).

use std::fmt;

/// The org that the hub moved the original, org-less BERT checkpoints into.
const LEGACY_BERT_ORG: &str = "google-bert";

/// `org/name@revision`; the revision is `main` when not given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubId {
    pub repo: String,
    pub revision: String,
}

impl HubId {
    /// Parses `spec` if it has the shape of a model id, with huggingface_hub's rules for repo
    /// names: one optional `org/`, then letters, digits, `-`, `_` and `.`, not starting or
    /// ending with `-` or `.`, no `--` or `..`, at most 96 characters. `None` for anything else
    /// (an absolute or relative path such as `./model`, `/tmp/model` or `a/b/c`).
    pub fn parse(spec: &str) -> Option<HubId> {
        let (repo, revision) = match spec.split_once('@') {
            Some((repo, revision)) => (repo, revision),
            None => (spec, "main"),
        };
        let revision_ok = !revision.is_empty()
            && !revision.chars().any(|c| c.is_whitespace() || c.is_control())
            && !revision.split('/').any(|part| part.is_empty() || part == "." || part == "..");
        let parts: Vec<&str> = repo.split('/').collect();
        let repo_ok = repo.len() <= 96 && (1..=2).contains(&parts.len()) && parts.iter().all(|p| name_ok(p));
        (repo_ok && revision_ok).then(|| HubId { repo: repo.to_string(), revision: revision.to_string() })
    }

    /// The repo ids under which the hub cache may hold this model, the id as given first.
    /// The original BERT checkpoints (`bert-base-uncased`) now live under `google-bert/`; the hub
    /// redirects the old id, and huggingface_hub names the cache folder after the id as it was
    /// asked for, so a model may be cached under either spelling.
    pub fn cache_aliases(&self) -> Vec<String> {
        let mut ids = vec![self.repo.clone()];
        match self.repo.split_once('/') {
            None if self.repo.starts_with("bert-") => ids.push(format!("{LEGACY_BERT_ORG}/{}", self.repo)),
            Some((org, name)) if org == LEGACY_BERT_ORG => ids.push(name.to_string()),
            _ => {}
        }
        ids
    }
}

/// 40 lowercase hex digits, as the hub's commit hashes.
pub fn is_commit_hash(text: &str) -> bool {
    text.len() == 40 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && !name.starts_with(['-', '.'])
        && !name.ends_with(['-', '.'])
        && !name.contains("--")
        && !name.contains("..")
}

impl fmt::Display for HubId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.revision == "main" {
            f.write_str(&self.repo)
        } else {
            write!(f, "{}@{}", self.repo, self.revision)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_paths_are_told_apart() {
        // (--model value, the repo and revision if it is an id)
        let cases: &[(&str, Option<(&str, &str)>)] = &[
            ("bert-base-uncased", Some(("bert-base-uncased", "main"))),
            ("google-bert/bert-base-chinese", Some(("google-bert/bert-base-chinese", "main"))),
            ("org/name@v1.0", Some(("org/name", "v1.0"))),
            ("org/name@refs/pr/3", Some(("org/name", "refs/pr/3"))),
            ("sentence-transformers/all-MiniLM-L6-v2", Some(("sentence-transformers/all-MiniLM-L6-v2", "main"))),
            ("./model", None),
            ("/tmp/model", None),
            ("a/b/c", None),
            ("../golden/tiny", None),
            ("org/name@", None),
            ("org/name@../x", None),
            ("-bad", None),
            ("bad--name", None),
            ("org/", None),
            ("", None),
            ("has space", None),
        ];
        for (spec, want) in cases {
            let got = HubId::parse(spec);
            let got = got.as_ref().map(|id| (id.repo.as_str(), id.revision.as_str()));
            assert_eq!(got, *want, "parse({spec:?})");
        }
    }

    #[test]
    fn legacy_bert_ids_have_both_cache_spellings() {
        let cases: &[(&str, &[&str])] = &[
            ("bert-base-uncased", &["bert-base-uncased", "google-bert/bert-base-uncased"]),
            ("google-bert/bert-base-chinese", &["google-bert/bert-base-chinese", "bert-base-chinese"]),
            ("org/name", &["org/name"]),
            ("gpt2", &["gpt2"]),
        ];
        for (spec, want) in cases {
            let got = HubId::parse(spec).unwrap().cache_aliases();
            assert_eq!(got, *want, "cache_aliases({spec})");
        }
    }
}
