//! `STAGE[INDEX]`: the element (or the row) `explain` is asked for. Indices are integers from 0,
//! one per axis of the stage; `:` on one axis stands for every index along it.

use crate::error::{BertError, Result};

/// One axis of a target's index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    At(usize),
    /// `:`, the whole axis.
    All,
}

/// A stage and an index into it, as the caller wrote them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub stage: String,
    pub index: Vec<Axis>,
    /// The text as given, for messages.
    pub text: String,
}

impl Target {
    /// Reads `layer0.attention.probs[0,0,3,5]` or `layer0.attention.probs[0,0,3,:]`; a scalar
    /// stage takes `[]` or no brackets.
    pub fn parse(text: &str) -> Result<Target> {
        let bad = |problem: &str| BertError::Explain { target: text.to_string(), problem: problem.to_string() };
        let trimmed = text.trim();
        let (stage, index) = match trimmed.split_once('[') {
            None => (trimmed, ""),
            Some((stage, rest)) => {
                let inner = rest.strip_suffix(']').ok_or_else(|| bad("expected STAGE[i,j,...], ending in `]`"))?;
                (stage, inner)
            }
        };
        if stage.is_empty() {
            return Err(bad("expected STAGE[i,j,...]: no stage name"));
        }
        let mut axes = Vec::new();
        if !index.trim().is_empty() {
            for part in index.split(',') {
                let part = part.trim();
                axes.push(match part {
                    ":" => Axis::All,
                    _ if part.starts_with('-') => {
                        return Err(bad("an index is counted from 0; negative indices are not taken"))
                    }
                    _ => Axis::At(part.parse().map_err(|_| {
                        bad(&format!("`{part}` is not an index: give integers from 0, or `:` for a whole axis"))
                    })?),
                });
            }
        }
        if axes.iter().filter(|a| **a == Axis::All).count() > 1 {
            return Err(bad("`:` may stand for one axis only"));
        }
        Ok(Target { stage: stage.to_string(), index: axes, text: text.to_string() })
    }

    /// Every index the target names in a stage of `shape`, in order; why not, when it does not fit.
    pub fn indices(&self, shape: &[usize]) -> std::result::Result<Vec<Vec<usize>>, String> {
        if self.index.len() != shape.len() {
            return Err(format!(
                "{} is {shape:?}: expected {} indices, found {}",
                self.stage,
                shape.len(),
                self.index.len()
            ));
        }
        for (axis, (at, &size)) in self.index.iter().zip(shape).enumerate() {
            if let Axis::At(i) = at {
                if *i >= size {
                    return Err(format!("index {i} is out of range for axis {axis} of {}, of size {size}", self.stage));
                }
            }
        }
        let mut indices = vec![Vec::new()];
        for (at, &size) in self.index.iter().zip(shape) {
            let choices: Vec<usize> = match at {
                Axis::At(i) => vec![*i],
                Axis::All => (0..size).collect(),
            };
            indices = indices
                .into_iter()
                .flat_map(|prefix| {
                    choices.iter().map(move |&c| prefix.iter().copied().chain(std::iter::once(c)).collect())
                })
                .collect();
        }
        Ok(indices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_read_and_expand() {
        let t = Target::parse("layer0.attention.probs[0,0,3,:]").unwrap();
        assert_eq!(t.stage, "layer0.attention.probs");
        assert_eq!(t.indices(&[1, 2, 4, 3]).unwrap(), vec![vec![0, 0, 3, 0], vec![0, 0, 3, 1], vec![0, 0, 3, 2]]);
        assert_eq!(Target::parse("loss").unwrap().indices(&[]).unwrap(), vec![Vec::<usize>::new()]);
        assert!(Target::parse("x[0,-1]").is_err());
        assert!(Target::parse("x[:,:]").is_err());
        assert!(Target::parse("x[0").is_err());
        assert!(Target::parse("x[a]").is_err());
        let t = Target::parse("x[0,5]").unwrap();
        assert!(t.indices(&[1, 5]).unwrap_err().contains("out of range"));
        assert!(t.indices(&[1, 5, 2]).unwrap_err().contains("expected 3 indices"));
    }
}
