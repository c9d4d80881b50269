//! `STAGE[INDEX]`: the element (or the row) `explain` is asked for. Indices are read as numpy
//! reads them: integers from 0, a negative one counted from the end (`-1`, the last), and on one
//! axis a slice `a:b` (`:` for the whole axis, either end left out or negative as in numpy).

use crate::error::{BertError, Result};

/// One axis of a target's index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// One index; a negative one counts from the end.
    At(i64),
    /// `a:b`, the indices from a up to b (b left out), each end optional and counted as numpy
    /// counts it.
    Slice { start: Option<i64>, stop: Option<i64> },
}

impl Axis {
    /// `:`, the whole axis.
    pub const ALL: Axis = Axis::Slice { start: None, stop: None };

    pub fn is_slice(&self) -> bool {
        matches!(self, Axis::Slice { .. })
    }

    /// The indices this axis takes in an axis of `size`, or why none.
    fn resolve(self, size: usize, axis: usize, stage: &str) -> std::result::Result<Vec<usize>, String> {
        let n = size as i64;
        match self {
            Axis::At(i) => {
                let at = if i < 0 { i + n } else { i };
                if !(0..n).contains(&at) {
                    return Err(format!("index {i} is out of range for axis {axis} of {stage}, of size {size}"));
                }
                Ok(vec![at as usize])
            }
            Axis::Slice { start, stop } => {
                // numpy's rule: a negative end counts from the end, and each end is clamped.
                let clamp = |end: i64| (if end < 0 { end + n } else { end }).clamp(0, n);
                let (from, to) = (start.map_or(0, clamp), stop.map_or(n, clamp));
                if from >= to {
                    return Err(format!("{} selects nothing of axis {axis} of {stage}, of size {size}", self));
                }
                Ok((from as usize..to as usize).collect())
            }
        }
    }
}

impl std::fmt::Display for Axis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let end = |e: &Option<i64>| e.map(|e| e.to_string()).unwrap_or_default();
        match self {
            Axis::At(i) => write!(f, "{i}"),
            Axis::Slice { start, stop } => write!(f, "{}:{}", end(start), end(stop)),
        }
    }
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
    /// Reads `layer0.attention.probs[0,0,3,5]`, `layer0.attention.probs[0,0,-1,:]` or
    /// `layer0.attention.probs[0,0,3,2:5]`; a scalar stage takes `[]` or no brackets. Spaces
    /// around the stage name and the indices are left out.
    pub fn parse(text: &str) -> Result<Target> {
        let bad = |problem: &str| BertError::Explain { target: text.to_string(), problem: problem.to_string() };
        let trimmed = text.trim();
        let (stage, index) = match trimmed.split_once('[') {
            None => (trimmed, ""),
            Some((stage, rest)) => {
                let inner = rest.strip_suffix(']').ok_or_else(|| bad("expected STAGE[i,j,...], ending in `]`"))?;
                (stage.trim(), inner)
            }
        };
        if stage.is_empty() {
            return Err(bad("expected STAGE[i,j,...]: no stage name"));
        }
        let number = |part: &str| -> Result<i64> {
            part.trim().parse::<i64>().map_err(|_| {
                bad(&format!(
                    "`{}` is not an index: give integers (negative ones count from the end), or a slice such as \
                     `:` or `2:5` on one axis",
                    part.trim()
                ))
            })
        };
        let mut axes = Vec::new();
        if !index.trim().is_empty() {
            for part in index.split(',') {
                let part = part.trim();
                axes.push(match part.split_once(':') {
                    Some((start, stop)) => {
                        if stop.contains(':') {
                            return Err(bad(&format!("`{part}`: a slice with a step is not taken; give `a:b`")));
                        }
                        let end = |e: &str| if e.trim().is_empty() { Ok(None) } else { number(e).map(Some) };
                        Axis::Slice { start: end(start)?, stop: end(stop)? }
                    }
                    None => Axis::At(number(part)?),
                });
            }
        }
        if axes.iter().filter(|a| a.is_slice()).count() > 1 {
            return Err(bad("a slice may stand on one axis only"));
        }
        Ok(Target { stage: stage.to_string(), index: axes, text: text.to_string() })
    }

    /// Whether the target names a row of elements (a slice on one axis) rather than one.
    pub fn is_row(&self) -> bool {
        self.index.iter().any(Axis::is_slice)
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
        let mut choices = Vec::new();
        for (axis, (at, &size)) in self.index.iter().zip(shape).enumerate() {
            choices.push(at.resolve(size, axis, &self.stage)?);
        }
        let mut indices = vec![Vec::new()];
        for choices in &choices {
            indices = indices
                .into_iter()
                .flat_map(|prefix: Vec<usize>| {
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
        assert!(Target::parse("x[:,:]").is_err());
        assert!(Target::parse("x[::2]").is_err());
        assert!(Target::parse("x[0").is_err());
        assert!(Target::parse("x[a]").is_err());
        let t = Target::parse("x[0,5]").unwrap();
        assert!(t.indices(&[1, 5]).unwrap_err().contains("out of range"));
        assert!(t.indices(&[1, 5, 2]).unwrap_err().contains("expected 3 indices"));
    }

    /// Negative indices and slices as numpy reads them, checked against numpy's own answers
    /// for an axis of 5: `a[-1]` is 4, `a[1:-1]` 1..4, `a[-7:2]` 0..2, `a[3:]` 3..5.
    #[test]
    fn indices_are_read_as_numpy_reads_them() {
        let cases: [(&str, Vec<usize>); 6] = [
            ("x[0,-1]", vec![4]),
            ("x[0,-5]", vec![0]),
            ("x[0,1:-1]", vec![1, 2, 3]),
            ("x[0,-7:2]", vec![0, 1]),
            ("x[0,3:]", vec![3, 4]),
            ("x[0,:]", vec![0, 1, 2, 3, 4]),
        ];
        for (text, expected) in cases {
            let got: Vec<usize> = Target::parse(text).unwrap().indices(&[1, 5]).unwrap().iter().map(|i| i[1]).collect();
            assert_eq!(got, expected, "{text}");
        }
        for (text, problem) in
            [("x[0,-6]", "out of range"), ("x[0,4:2]", "selects nothing"), ("x[0,9:]", "selects nothing")]
        {
            let error = Target::parse(text).unwrap().indices(&[1, 5]).unwrap_err();
            assert!(error.contains(problem), "{text}: {error}");
        }
        assert_eq!(Target::parse(" layer0.attention.probs [0, 0]").unwrap().stage, "layer0.attention.probs");
    }
}
