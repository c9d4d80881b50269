//! The shapes the page and the pictures read, checked before anything is indexed: a dump that
//! disagrees with itself (probabilities over 5 keys for 9 tokens, logits for fewer positions
//! than the input) is one line naming the stage and both shapes, never a panic.
//!
//! The batch size B and the token count T come from `input.ids` `[B,T]`; every other stage is
//! checked against them.

use std::path::Path;

use crate::error::refuse;
use crate::error::Result;
use bert_core::io::dump::Dump;
use bert_core::stage::{Stage, StageKind};

/// The size one dimension of a stage must have.
#[derive(Clone, Copy, Debug)]
pub enum Expected {
    /// Exactly this size, named (`B`, `T`, `nh`) in messages, or shown as a number when the
    /// name is empty.
    Is(&'static str, usize),
    /// Any size of at least 1, named (`H`, `V`) in messages.
    Any(&'static str),
}

/// The batch and token counts of a dump, from `input.ids`: what every other stage is checked
/// against.
#[derive(Clone, Copy, Debug)]
pub struct InputShape {
    pub b: usize,
    pub t: usize,
}

impl InputShape {
    /// B and T of `dump`; a dump of 0 sequences or 0 tokens has nothing to draw.
    pub fn of(dump: &Dump) -> Result<InputShape> {
        let dir = dump.dir.display();
        let Some(entry) = dump.entry(&Stage::new(StageKind::InputIds).name()) else {
            refuse!("{dir}: the dump has no input.ids, which every dump has");
        };
        let &[b, t] = entry.shape.as_slice() else {
            refuse!("{dir}: stage `input.ids` is {:?}, expected [B, T]", entry.shape);
        };
        if b == 0 {
            refuse!("{dir}: the dump has 0 sequences (input.ids is {:?}); there is nothing to draw", entry.shape);
        }
        if t == 0 {
            refuse!("{dir}: the dump has 0 tokens (input.ids is {:?}); there is nothing to draw", entry.shape);
        }
        Ok(InputShape { b, t })
    }

    /// `[B,T]`, the shape of every input stage.
    pub fn input(&self) -> [Expected; 2] {
        [Expected::Is("B", self.b), Expected::Is("T", self.t)]
    }

    /// `[B,nh,T,T]`, attention scores and probabilities; `heads` when it is known.
    pub fn attention(&self, heads: Option<usize>) -> [Expected; 4] {
        let nh = heads.map_or(Expected::Any("nh"), |n| Expected::Is("nh", n));
        [Expected::Is("B", self.b), nh, Expected::Is("T", self.t), Expected::Is("T", self.t)]
    }

    /// `[B,T,X]`, hidden states and the like; `width` when it is known.
    pub fn per_token(&self, width: Option<usize>) -> [Expected; 3] {
        let x = width.map_or(Expected::Any("X"), |n| Expected::Is("X", n));
        [Expected::Is("B", self.b), Expected::Is("T", self.t), x]
    }

    /// `[B,X]`, one row per sequence (NSP and classifier logits).
    pub fn per_sequence(&self, width: Expected) -> [Expected; 2] {
        [Expected::Is("B", self.b), width]
    }
}

/// Fails unless `shape`, stage `name`'s in the dump `dir`, matches `expected`: one line with
/// both shapes.
pub fn expect(dir: &Path, name: &str, shape: &[usize], expected: &[Expected]) -> Result<()> {
    let fits = shape.len() == expected.len()
        && shape.iter().zip(expected).all(|(&n, dim)| match *dim {
            Expected::Is(_, size) => n == size,
            Expected::Any(_) => n >= 1,
        });
    if !fits {
        let wanted: Vec<String> = expected
            .iter()
            .map(|dim| match *dim {
                Expected::Is("", size) => size.to_string(),
                Expected::Is(name, size) => format!("{name}={size}"),
                Expected::Any(name) => format!("{name}≥1"),
            })
            .collect();
        refuse!(
            "{}: stage `{name}` is {shape:?}, expected [{}] (B and T from input.ids); the dump disagrees with itself",
            dir.display(),
            wanted.join(", ")
        );
    }
    Ok(())
}

/// [`expect`] for stage `name` as the manifest lists it; Ok when the dump has no such stage.
pub fn expect_stage(dump: &Dump, name: &str, expected: &[Expected]) -> Result<()> {
    match dump.entry(name) {
        Some(entry) => expect(&dump.dir, name, &entry.shape, expected),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_fits_when_every_dimension_does() {
        let dir = Path::new("d");
        let dims = InputShape { b: 1, t: 9 };
        let cases: [(&[usize], &[Expected], bool); 6] = [
            (&[1, 4, 9, 9], &dims.attention(None), true),
            (&[1, 4, 9, 5], &dims.attention(None), false),
            (&[1, 0, 9, 9], &dims.attention(None), false),
            (&[1, 4, 9, 9], &dims.attention(Some(2)), false),
            (&[1, 9, 32], &dims.per_token(None), true),
            (&[1, 9], &dims.per_token(None), false),
        ];
        for (shape, expected, fits) in cases {
            let got = expect(dir, "s", shape, expected);
            assert_eq!(got.is_ok(), fits, "{shape:?} against {expected:?}: {got:?}");
        }
        let message = expect(dir, "s", &[1, 4, 9, 5], &dims.attention(None)).unwrap_err().to_string();
        assert_eq!(
            message,
            "d: stage `s` is [1, 4, 9, 5], expected [B=1, nh≥1, T=9, T=9] (B and T from input.ids); the dump \
             disagrees with itself"
        );
    }
}
