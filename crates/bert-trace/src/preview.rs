//! A tensor printed the way PyTorch prints it with its default print options: `tensor([[...]])`,
//! 4 decimals, and for a tensor of more than 1000 elements only the first and last three
//! entries of each longer axis, with `...` between them; so a learner can hold it beside a
//! notebook.

use bert_core::trace::Tensor;
use ndarray::{ArrayViewD, Axis};

/// PyTorch's `edgeitems`.
const EDGE: usize = 3;

/// PyTorch's `threshold`: larger tensors are summarized.
const THRESHOLD: usize = 1000;

/// The whole preview, starting with `tensor(`.
pub fn preview(tensor: &Tensor) -> String {
    let (values, integer) = match tensor {
        Tensor::F32(_) => (tensor.to_f64(), false),
        Tensor::I64(_) => (tensor.to_f64(), true),
    };
    let summarize = values.len() > THRESHOLD;
    let shown = shown_values(values.view(), summarize);
    let scientific = !integer && use_scientific(&shown);
    let format = |v: f64| -> String {
        if !v.is_finite() {
            // PyTorch's spelling: nan, inf, -inf.
            if v.is_nan() {
                "nan".into()
            } else if v > 0.0 {
                "inf".into()
            } else {
                "-inf".into()
            }
        } else if integer {
            format!("{v:.0}")
        } else if scientific {
            scientific_like_torch(v)
        } else {
            format!("{v:.4}")
        }
    };
    let width = shown.iter().map(|&v| format(v).len()).max().unwrap_or(1);
    let body = block(values.view(), 7, summarize, &|v| format!("{:>width$}", format(v)));
    format!("tensor({body})")
}

/// `1.2345e-02`: PyTorch's exponent has a sign and at least two digits, Rust's has neither.
fn scientific_like_torch(v: f64) -> String {
    let text = format!("{v:.4e}");
    let (mantissa, exponent) = text.split_once('e').expect("{:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("an integer exponent");
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.abs())
}

/// The values that will be printed, so the number format and width fit them.
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

/// As PyTorch: scientific when the shown magnitudes span more than 1e3 or leave [1e-4, 1e8).
fn use_scientific(values: &[f64]) -> bool {
    let nonzero: Vec<f64> = values.iter().map(|v| v.abs()).filter(|&a| a > 0.0 && a.is_finite()).collect();
    let (Some(min), Some(max)) = (nonzero.iter().copied().reduce(f64::min), nonzero.iter().copied().reduce(f64::max))
    else {
        return false;
    };
    max / min > 1e3 || max >= 1e8 || min < 1e-4
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
fn block(values: ArrayViewD<'_, f64>, indent: usize, summarize: bool, format: &dyn Fn(f64) -> String) -> String {
    if values.ndim() == 0 {
        return format(values[[]]);
    }
    let n = values.len_of(Axis(0));
    if values.ndim() == 1 {
        let items: Vec<String> = indices(n, summarize)
            .into_iter()
            .map(|i| i.map_or_else(|| "...".to_string(), |i| format(values[[i]])))
            .collect();
        return format!("[{}]", items.join(", "));
    }
    let separator = format!(",{}{}", "\n".repeat(values.ndim() - 1), " ".repeat(indent + 1));
    let items: Vec<String> = indices(n, summarize)
        .into_iter()
        .map(|i| match i {
            Some(i) => block(values.index_axis(Axis(0), i), indent + 1, summarize, format),
            None => "...".to_string(),
        })
        .collect();
    format!("[{}]", items.join(&separator))
}
