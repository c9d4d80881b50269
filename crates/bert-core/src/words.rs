//! How the library's messages name the caller's options: in the caller's own words.
//!
//! The same request reaches the library from the command line (`--max-len 0`) and from Python
//! (`max_len=0`), so a message cannot spell an option itself. It names the option by the name
//! of its field in the library's requests, between single guillemets, and the caller renders
//! the message in its dialect at the one place where it shows it (the binary's `main`, the
//! Python package's exceptions):
//!
//! | written | [`Dialect::Flags`] | [`Dialect::Keywords`] |
//! | --- | --- | --- |
//! | `‹max_len›` | `--max-len` | `max_len=` |
//! | `‹max_len=0›` | `--max-len 0` | `max_len=0` |
//! | `‹truncate!›` (a switch turned on) | `--truncate` | `truncate=True` |
//! | `‹@stages›` (a command that says more) | `` `bert-trace stages` `` | `` `bert_trace.stages()` `` |
//!
//! Unrendered, a message still reads well (`‹lr=-1›: ...`), which is how a Rust caller of the
//! library sees it.

use std::fmt;

/// How a caller spells its options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// The command line: `--max-len 0`.
    Flags,
    /// Python's keyword arguments: `max_len=0`.
    Keywords,
}

/// An option of a request, by its field name (`max_len`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Opt(pub &'static str);

impl Opt {
    /// The option with the value it was given, for a message: `‹max_len=0›`.
    pub fn with(self, value: impl fmt::Display) -> String {
        format!("‹{}={value}›", self.0)
    }

    /// The switch turned on, for advice: `‹truncate!›`.
    pub fn on(self) -> String {
        format!("‹{}!›", self.0)
    }

    /// The option as the caller spells it.
    pub fn spelled(self, dialect: Dialect) -> String {
        in_dialect(&self.to_string(), dialect)
    }
}

impl fmt::Display for Opt {
    /// `‹max_len›`, which [`in_dialect`] turns into the caller's spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "‹{}›", self.0)
    }
}

/// A value of an option that takes one of a few words (`--method occlusion`,
/// `method="occlusion"`): its words are written once, by [`choice!`](crate::choice), and the
/// command line's parser, Python's keywords and both callers' messages read them from here.
pub trait Choice: Copy + PartialEq + Send + Sync + 'static {
    /// Every value, in the order a message lists them.
    const ALL: &'static [Self];

    /// The word that selects this value.
    fn name(self) -> &'static str;

    /// The value `word` selects, if any.
    fn parse(word: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|value| value.name() == word)
    }

    /// The words, as a message lists them: `"zero" or "mean"`.
    fn accepted() -> String {
        let words: Vec<String> = Self::ALL.iter().map(|value| format!("{:?}", value.name())).collect();
        match words.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

/// Implements [`Choice`] for an enum from its variants and their words, each written once; the
/// `match` it makes is exhaustive, so a variant without a word does not compile.
#[macro_export]
macro_rules! choice {
    ($ty:ty { $($variant:ident => $word:literal),+ $(,)? }) => {
        impl $crate::words::Choice for $ty {
            const ALL: &'static [Self] = &[$(Self::$variant),+];

            fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $word),+
                }
            }
        }
    };
}

/// `text` with every option it names spelled in `dialect`.
pub fn in_dialect(text: &str, dialect: Dialect) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('‹') {
        out.push_str(&rest[..start]);
        let after = &rest[start + '‹'.len_utf8()..];
        let Some(end) = after.find('›').filter(|&end| is_option(&after[..end]) || is_command(&after[..end])) else {
            out.push('‹');
            rest = after;
            continue;
        };
        match after[..end].strip_prefix('@') {
            // A command the caller runs: `bert-trace stages`, or Python's `bert_trace.stages()`.
            Some(command) => out.push_str(&match dialect {
                Dialect::Flags => format!("`bert-trace {command}`"),
                Dialect::Keywords => format!("`bert_trace.{command}()`"),
            }),
            None => out.push_str(&spell(&after[..end], dialect)),
        }
        rest = &after[end + '›'.len_utf8()..];
    }
    out.push_str(rest);
    out
}

/// Whether `inner` names a command, `@stages`: a word a caller runs to learn more.
fn is_command(inner: &str) -> bool {
    inner.strip_prefix('@').is_some_and(|name| !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase()))
}

/// Whether `inner` (what stands between the guillemets) names an option: a lowercase field
/// name, then nothing, `!`, or `=` and a value.
fn is_option(inner: &str) -> bool {
    let name = inner.split(['=', '!']).next().unwrap_or_default();
    !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && (inner.len() == name.len() || inner[name.len()..].starts_with('=') || &inner[name.len()..] == "!")
}

fn spell(inner: &str, dialect: Dialect) -> String {
    let (name, rest) = inner.split_at(inner.find(['=', '!']).unwrap_or(inner.len()));
    let flag = || format!("--{}", name.replace('_', "-"));
    match (dialect, rest.strip_prefix('=')) {
        (Dialect::Flags, Some(value)) => format!("{} {value}", flag()),
        (Dialect::Keywords, Some(value)) => format!("{name}={value}"),
        (Dialect::Flags, None) => flag(),
        (Dialect::Keywords, None) if rest == "!" => format!("{name}=True"),
        (Dialect::Keywords, None) => format!("{name}="),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dialect_spells_options_its_own_way() {
        let max_len = Opt("max_len");
        let text =
            format!("{}: give {} or {} (see ‹@stages›)", max_len.with(0), Opt("mask_prob"), Opt("truncate").on());
        // (dialect, expected)
        let cases = [
            (Dialect::Flags, "--max-len 0: give --mask-prob or --truncate (see `bert-trace stages`)"),
            (Dialect::Keywords, "max_len=0: give mask_prob= or truncate=True (see `bert_trace.stages()`)"),
        ];
        for (dialect, want) in cases {
            assert_eq!(in_dialect(&text, dialect), want, "{dialect:?}");
        }
    }

    #[test]
    fn text_that_only_looks_like_an_option_is_kept() {
        for text in ["‹Not An Option›", "a ‹ alone", "‹lr", "‹›", "‹lr?›", "‹@›", "‹@Stages›"] {
            assert_eq!(in_dialect(text, Dialect::Flags), text);
        }
    }
}
