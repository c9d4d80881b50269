//! Two checkpoints side by side: how far each stage of one model's trace is from another's on
//! the same input (a base model and its fine-tuned version, say), and which attention heads
//! changed where they look. Nothing here passes or fails: it measures.
//!
//! Per stage, over the real tokens (padding left out): the cosine similarity of the two tensors,
//! flattened, and their relative difference ‖A − B‖ / ‖A‖. Per attention head, the
//! Jensen–Shannon divergence between the two probability maps: for each real query row, over
//! its real keys, JS(p, q) = ½ KL(p ‖ m) + ½ KL(q ‖ m) with m = (p + q) / 2 and the natural log
//! (so 0 for the same distribution and at most ln 2), averaged over the real query rows of every
//! sequence.

use ndarray::{ArrayD, Axis, Ix4};
use serde::Serialize;

use crate::error::{BertError, Result};
use crate::io::dump::Dump;
use crate::stage::{self, Dim, StageKind};

/// The format name of the JSON report, which `bert-trace view` recognises.
pub const FORMAT: &str = "bert-trace-compare/1";

/// How one stage differs between the two models. A stage with a NaN or an infinity on either
/// side (over the real tokens) has no measure: its numbers are NaN (`null` in JSON) and
/// `non_finite` says so.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageComparison {
    pub name: String,
    pub shape: Vec<usize>,
    /// The cosine similarity of the two tensors over the real tokens, flattened.
    pub cosine: f64,
    /// ‖A − B‖ / ‖A‖ over the real tokens (0 when both are zero).
    pub relative_difference: f64,
    pub non_finite: bool,
}

/// A stage both dumps have that could not be compared, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Skipped {
    pub name: String,
    pub shape_a: Vec<usize>,
    pub shape_b: Vec<usize>,
    pub reason: String,
}

/// How one attention head's probabilities differ.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HeadComparison {
    pub layer: usize,
    pub head: usize,
    /// The Jensen–Shannon divergence, averaged over the real query rows (natural log); NaN
    /// (`null`) when a probability is not finite.
    pub js_divergence: f64,
    pub non_finite: bool,
}

/// The whole comparison.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub format: String,
    pub a: String,
    pub b: String,
    pub model_a: String,
    pub model_b: String,
    /// Every float stage both dumps have with the same shape, in execution order.
    pub stages: Vec<StageComparison>,
    /// The stages both have that were not compared (another shape, or a dtype that is not
    /// float on one side).
    pub skipped: Vec<Skipped>,
    /// Every head of every layer both dumps have probabilities for, the most changed first;
    /// heads with a value that is not finite last, unranked.
    pub heads: Vec<HeadComparison>,
    /// Layers × heads, the divergence of each head (for the grid).
    pub grid: Vec<Vec<f64>>,
}

/// Compares the traces of two models on the same input: every stage both dumps have with the
/// same name and shape. A stage of the same name in another shape is named in `skipped`, never
/// dropped unseen; and a comparison that reaches no hidden state (`embeddings.layernorm` or a
/// layer's output) is refused, since it would say nothing about the models.
pub fn compare(a: &Dump, b: &Dump) -> Result<Comparison> {
    let mask = crate::io::dump::same_input(a, b)?;
    let mut stages = Vec::new();
    let mut skipped = Vec::new();
    let mut grid: Vec<Vec<f64>> = Vec::new();
    for entry in &a.manifest.stages {
        let Some(other) = b.entry(&entry.name) else { continue };
        let stage = stage::parse(&entry.name);
        if stage.is_some_and(|s| s.info().part == stage::Part::Input) {
            continue;
        }
        let (x, y) = (a.read(entry)?, b.read(other)?);
        crate::divergence::check_f64_copies(&entry.name, &[&x, &y])?;
        let skip = |reason: &str| Skipped {
            name: entry.name.clone(),
            shape_a: x.shape().to_vec(),
            shape_b: y.shape().to_vec(),
            reason: reason.into(),
        };
        if !x.is_float() || !y.is_float() {
            skipped.push(skip("not floats on both sides"));
            continue;
        }
        if x.shape() != y.shape() {
            skipped.push(skip("the shapes differ"));
            continue;
        }
        let (x, y) = (x.to_f64(), y.to_f64());
        let real = real_positions(&entry.name, x.shape(), &mask);
        let finite = all_finite(&x, &y, real.as_ref());
        stages.push(StageComparison {
            name: entry.name.clone(),
            shape: x.shape().to_vec(),
            cosine: if finite { cosine(&x, &y, real.as_ref()) } else { f64::NAN },
            relative_difference: if finite { relative_difference(&x, &y, real.as_ref()) } else { f64::NAN },
            non_finite: !finite,
        });
        // The attention probabilities themselves: a gradient of them parses to the same kind.
        let probabilities = stage.filter(|s| s.is_value_of(StageKind::AttnProbs));
        if let Some(layer) = probabilities.and_then(|s| s.layer) {
            let per_head = js_per_head(&x, &y, &mask)
                .ok_or_else(|| bad(a, format!("{} is {:?}, not [B,nh,T,T] for input.ids", entry.name, x.shape())))?;
            if grid.len() <= layer {
                grid.resize(layer + 1, Vec::new());
            }
            grid[layer] = per_head;
        }
    }
    let hidden = |s: &StageComparison| {
        stage::parse(&s.name)
            .is_some_and(|s| s.is_value_of(StageKind::EmbLayerNorm) || s.is_value_of(StageKind::FfnLayerNorm))
    };
    if !stages.iter().any(hidden) {
        let why = match skipped
            .iter()
            .find(|s| stage::parse(&s.name).is_some_and(|s| s.is_value_of(StageKind::EmbLayerNorm)))
        {
            Some(s) => format!(
                "its hidden states are not comparable with {}'s ({} is {:?} there, {:?} here: models of other sizes)",
                a.dir.display(),
                s.name,
                s.shape_a,
                s.shape_b
            ),
            None => format!(
                "has no hidden state (embeddings.layernorm, layerL.ffn.layernorm) in common with {}",
                a.dir.display()
            ),
        };
        return Err(bad(b, format!("{why}: nothing to compare the models by")));
    }
    let mut heads: Vec<HeadComparison> = grid
        .iter()
        .enumerate()
        .flat_map(|(layer, row)| {
            row.iter().enumerate().map(move |(head, &js)| HeadComparison {
                layer,
                head,
                js_divergence: js,
                non_finite: !js.is_finite(),
            })
        })
        .collect();
    // The most changed first; a head with no measure is never ranked among them.
    heads.sort_by(|p, q| p.non_finite.cmp(&q.non_finite).then(q.js_divergence.total_cmp(&p.js_divergence)));
    Ok(Comparison {
        format: FORMAT.into(),
        a: a.dir.display().to_string(),
        b: b.dir.display().to_string(),
        model_a: a.manifest.model.clone(),
        model_b: b.manifest.model.clone(),
        stages,
        skipped,
        heads,
        grid,
    })
}

/// Whether every value of both sides is finite, over the real tokens.
fn all_finite(x: &ArrayD<f64>, y: &ArrayD<f64>, real: Option<&ArrayD<bool>>) -> bool {
    x.indexed_iter()
        .zip(y.iter())
        .all(|((index, p), q)| real.is_some_and(|r| !r[&index]) || (p.is_finite() && q.is_finite()))
}

fn bad(dump: &Dump, problem: String) -> BertError {
    BertError::Dump { path: dump.dir.clone(), problem }
}

/// For a stage with a token axis right after the batch axis, the elements of real tokens (a
/// mask of the stage's shape); None to count every element.
fn real_positions(name: &str, shape: &[usize], mask: &ndarray::Array2<i64>) -> Option<ArrayD<bool>> {
    let stage = stage::parse(name)?;
    let axis = stage.info().shape.iter().position(|&d| d == Dim::T)?;
    if axis == 0 || shape.first() != Some(&mask.nrows()) || shape.get(axis) != Some(&mask.ncols()) {
        return None;
    }
    Some(ArrayD::from_shape_fn(shape, |index| mask[[index[0], index[axis]]] != 0))
}

fn cosine(x: &ArrayD<f64>, y: &ArrayD<f64>, real: Option<&ArrayD<bool>>) -> f64 {
    let (mut dot, mut xx, mut yy) = (0.0, 0.0, 0.0);
    for ((index, &p), &q) in x.indexed_iter().zip(y.iter()) {
        if real.is_some_and(|r| !r[&index]) {
            continue;
        }
        dot += p * q;
        xx += p * p;
        yy += q * q;
    }
    match (xx == 0.0, yy == 0.0) {
        (true, true) => 1.0,
        (true, false) | (false, true) => 0.0,
        (false, false) => dot / (xx.sqrt() * yy.sqrt()),
    }
}

fn relative_difference(x: &ArrayD<f64>, y: &ArrayD<f64>, real: Option<&ArrayD<bool>>) -> f64 {
    let (mut diff, mut norm) = (0.0, 0.0);
    for ((index, &p), &q) in x.indexed_iter().zip(y.iter()) {
        if real.is_some_and(|r| !r[&index]) {
            continue;
        }
        diff += (p - q) * (p - q);
        norm += p * p;
    }
    match (diff == 0.0, norm == 0.0) {
        (true, _) => 0.0,
        (false, true) => f64::INFINITY,
        (false, false) => (diff / norm).sqrt(),
    }
}

/// Per head of `[B,nh,T,T]` probabilities: the Jensen–Shannon divergence of each real query
/// row over its real keys, averaged over the real query rows of every sequence. None when the
/// shape does not fit the mask.
fn js_per_head(x: &ArrayD<f64>, y: &ArrayD<f64>, mask: &ndarray::Array2<i64>) -> Option<Vec<f64>> {
    let (x, y) = (x.view().into_dimensionality::<Ix4>().ok()?, y.view().into_dimensionality::<Ix4>().ok()?);
    let (b, nh, t, t2) = x.dim();
    if (b, t) != mask.dim() || t2 != t {
        return None;
    }
    let mut per_head = Vec::with_capacity(nh);
    for head in 0..nh {
        let (mut sum, mut rows) = (0.0, 0usize);
        for seq in 0..b {
            let real: Vec<usize> = (0..t).filter(|&k| mask[[seq, k]] != 0).collect();
            for &query in &real {
                let p = x.index_axis(Axis(0), seq).index_axis(Axis(0), head).index_axis(Axis(0), query).to_owned();
                let q = y.index_axis(Axis(0), seq).index_axis(Axis(0), head).index_axis(Axis(0), query).to_owned();
                let (p, q): (Vec<f64>, Vec<f64>) = real.iter().map(|&k| (p[k], q[k])).unzip();
                sum += js_divergence(&p, &q);
                rows += 1;
            }
        }
        per_head.push(if rows == 0 { 0.0 } else { sum / rows as f64 });
    }
    Some(per_head)
}

/// JS(p, q) = ½ KL(p ‖ m) + ½ KL(q ‖ m), m = (p + q) / 2, in nats; each distribution is
/// renormalised over the keys given, and 0 · log 0 counts as 0.
pub fn js_divergence(p: &[f64], q: &[f64]) -> f64 {
    // A value that is not finite has no divergence: NaN, never a number that ranks.
    if !p.iter().chain(q).all(|v| v.is_finite()) {
        return f64::NAN;
    }
    let (sp, sq): (f64, f64) = (p.iter().sum(), q.iter().sum());
    if sp <= 0.0 || sq <= 0.0 {
        return 0.0;
    }
    let kl = |a: f64, m: f64| if a > 0.0 { a * (a / m).ln() } else { 0.0 };
    let mut js = 0.0;
    for (&a, &b) in p.iter().zip(q) {
        let (a, b) = (a / sp, b / sq);
        let m = (a + b) / 2.0;
        js += 0.5 * kl(a, m) + 0.5 * kl(b, m);
    }
    js.max(0.0)
}

#[cfg(test)]
mod tests {
    use super::js_divergence;

    #[test]
    fn js_is_zero_for_the_same_distribution_and_ln2_for_disjoint_ones() {
        // (p, q, expected)
        let cases: [(&[f64], &[f64], f64); 3] = [
            (&[0.2, 0.3, 0.5], &[0.2, 0.3, 0.5], 0.0),
            (&[1.0, 0.0], &[0.0, 1.0], std::f64::consts::LN_2),
            // m = (0.75, 0.25): ½ (0.5 ln(0.5/0.75) + 0.5 ln(0.5/0.25)) + ½ (1 · ln(1/0.75)).
            (
                &[0.5, 0.5],
                &[1.0, 0.0],
                0.5 * (0.5 * (0.5f64 / 0.75).ln() + 0.5 * 2f64.ln()) + 0.5 * (1.0f64 / 0.75).ln(),
            ),
        ];
        for (p, q, want) in cases {
            let got = js_divergence(p, q);
            assert!((got - want).abs() < 1e-12, "JS({p:?}, {q:?}): expected {want}, got {got}");
        }
    }
}
