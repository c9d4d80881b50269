//! A tensor printed the way PyTorch prints it with its default print options (precision 4,
//! threshold 1000, edgeitems 3, linewidth 80), so a learner can hold it beside a notebook:
//! `tensor([[...]])`, a tensor of more than 1000 elements summarised to the first and last three
//! entries of each axis, rows wrapped at 80 columns, one number format for the whole tensor
//! (fixed, integer-valued or scientific) chosen from its values as PyTorch's `_Formatter` does.

use bert_core::pass::Tensor;
use ndarray::{ArrayViewD, Axis};

const PRECISION: usize = 4;
const THRESHOLD: usize = 1000;
const EDGE: usize = 3;
const LINEWIDTH: usize = 80;

/// The whole preview, starting with `tensor(`.
pub fn preview(tensor: &Tensor) -> String {
    let integer = matches!(tensor, Tensor::I64(_));
    let values = tensor.to_f64();
    let summarize = values.len() > THRESHOLD;
    let formatter = Formatter::new(&shown_values(values.view(), summarize), integer);
    format!("tensor({})", block(values.view(), 7, summarize, &formatter))
}

/// PyTorch's `_Formatter`: one format and one width for every number of the tensor.
struct Formatter {
    integer: bool,
    /// Floats whose finite non-zero values are all whole numbers print as `1.`.
    int_mode: bool,
    sci_mode: bool,
    width: usize,
}

impl Formatter {
    fn new(values: &[f64], integer: bool) -> Formatter {
        let mut f = Formatter { integer, int_mode: true, sci_mode: false, width: 1 };
        if integer {
            f.width = values.iter().map(|v| format!("{v:.0}").len()).max().unwrap_or(1);
            return f;
        }
        let nonzero: Vec<f64> = values.iter().copied().filter(|v| v.is_finite() && *v != 0.0).collect();
        if nonzero.is_empty() {
            return f;
        }
        let min = nonzero.iter().map(|v| v.abs()).fold(f64::INFINITY, f64::min);
        let max = nonzero.iter().map(|v| v.abs()).fold(0.0, f64::max);
        f.int_mode = nonzero.iter().all(|v| v.ceil() == *v);
        f.sci_mode = max / min > 1000.0 || max > 1.0e8 || (!f.int_mode && min < 1.0e-4);
        f.width = nonzero
            .iter()
            .map(|&v| match (f.sci_mode, f.int_mode) {
                (true, _) => scientific(v).len(),
                (false, true) => format!("{v:.0}").len() + 1,
                (false, false) => format!("{v:.PRECISION$}").len(),
            })
            .max()
            .unwrap_or(1);
        f
    }

    fn format(&self, v: f64) -> String {
        let text = if !v.is_finite() {
            if v.is_nan() {
                "nan".into()
            } else if v > 0.0 {
                "inf".into()
            } else {
                "-inf".into()
            }
        } else if self.integer {
            format!("{v:.0}")
        } else if self.sci_mode {
            scientific(v)
        } else if self.int_mode {
            format!("{v:.0}.")
        } else {
            format!("{v:.PRECISION$}")
        };
        format!("{text:>width$}", width = self.width)
    }
}

/// `1.2345e-02`: Python's exponent has a sign and at least two digits, Rust's has neither.
fn scientific(v: f64) -> String {
    let text = format!("{v:.PRECISION$e}");
    let (mantissa, exponent) = text.split_once('e').expect("{:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("an integer exponent");
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.abs())
}

/// The values that will be printed, from which the format is chosen.
fn shown_values(values: ArrayViewD<'_, f64>, summarize: bool) -> Vec<f64> {
    if values.ndim() == 0 {
        return vec![values[[]]];
    }
    indices(values.len_of(Axis(0)), summarize)
        .into_iter()
        .flatten()
        .flat_map(|i| shown_values(values.index_axis(Axis(0), i), summarize))
        .collect()
}

/// The indices shown along an axis of length `n`; `None` marks the `...`.
fn indices(n: usize, summarize: bool) -> Vec<Option<usize>> {
    if summarize && n > 2 * EDGE {
        (0..EDGE).map(Some).chain([None]).chain((n - EDGE..n).map(Some)).collect()
    } else {
        (0..n).map(Some).collect()
    }
}

/// One bracketed block; `indent` is the column of its opening bracket.
fn block(values: ArrayViewD<'_, f64>, indent: usize, summarize: bool, formatter: &Formatter) -> String {
    if values.ndim() == 0 {
        return formatter.format(values[[]]);
    }
    let n = values.len_of(Axis(0));
    if values.ndim() == 1 {
        // PyTorch's `_vector_str`: the summary's gap is the element " ...", and the elements
        // wrap so that each line fits the line width.
        let items: Vec<String> = indices(n, summarize)
            .into_iter()
            .map(|i| i.map_or_else(|| " ...".to_string(), |i| formatter.format(values[[i]])))
            .collect();
        let per_line = ((LINEWIDTH.saturating_sub(indent)) / (formatter.width + 2)).max(1);
        let lines: Vec<String> = items.chunks(per_line).map(|line| line.join(", ")).collect();
        return format!("[{}]", lines.join(&format!(",\n{}", " ".repeat(indent + 1))));
    }
    let separator = format!(",{}{}", "\n".repeat(values.ndim() - 1), " ".repeat(indent + 1));
    let items: Vec<String> = indices(n, summarize)
        .into_iter()
        .map(|i| match i {
            Some(i) => block(values.index_axis(Axis(0), i), indent + 1, summarize, formatter),
            None => "...".to_string(),
        })
        .collect();
    format!("[{}]", items.join(&separator))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{ArrayD, IxDyn};

    fn f32_tensor(shape: &[usize], values: Vec<f32>) -> Tensor {
        Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), values).unwrap())
    }

    /// What PyTorch 2.15 prints for these tensors (`print(torch.tensor(...))`), written down by
    /// hand from its output: the fixed and integer-valued formats, NaN and infinities, a
    /// scalar, and a row wrapped at 80 columns.
    #[test]
    fn prints_as_pytorch_does() {
        let cases: Vec<(Tensor, &str)> = vec![
            (f32_tensor(&[1, 3], vec![1.0, 0.0, 1.0]), "tensor([[1., 0., 1.]])"),
            (f32_tensor(&[3], vec![f32::NAN, 1.0, f32::NEG_INFINITY]), "tensor([nan, 1., -inf])"),
            (f32_tensor(&[], vec![4.1234]), "tensor(4.1234)"),
            (f32_tensor(&[2, 2], vec![0.0; 4]), "tensor([[0., 0.],\n        [0., 0.]])"),
            (f32_tensor(&[2], vec![1e-5, 1.0]), "tensor([1.0000e-05, 1.0000e+00])"),
            (
                Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[1, 3]), vec![101, 7, 102]).unwrap()),
                "tensor([[101,   7, 102]])",
            ),
            (
                f32_tensor(&[1, 1, 8], vec![1.6459, -1.3602, 0.3446, 0.5199, -2.6133, -1.6965, -0.2282, 0.2800]),
                "tensor([[[ 1.6459, -1.3602,  0.3446,  0.5199, -2.6133, -1.6965, -0.2282,\n           0.2800]]])",
            ),
        ];
        for (tensor, want) in cases {
            assert_eq!(preview(&tensor), want);
        }
    }

    #[test]
    fn more_than_a_thousand_elements_are_summarised() {
        let values: Vec<f32> = (0..1001).map(|i| i as f32 / 1000.0 + 0.5).collect();
        let got = preview(&f32_tensor(&[1001], values));
        assert_eq!(got, "tensor([0.5000, 0.5010, 0.5020,  ..., 1.4980, 1.4990, 1.5000])");
    }
}
