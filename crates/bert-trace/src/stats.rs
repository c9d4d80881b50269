//! A sink that records min / mean / std / max of every stage on its way to another sink, and
//! keeps a copy of the one stage the CLI previews.

use bert_core::stage::Stage;
use bert_core::trace::{Sink, Tensor, TensorView};

/// What the stage table shows for one stage: numpy's `a.min(), a.mean(), a.std(), a.max()`.
pub struct StageStats {
    pub stage: Stage,
    pub shape: Vec<usize>,
    pub min: f64,
    pub mean: f64,
    pub std: f64,
    pub max: f64,
}

/// Wraps the sink that writes (if any): every stage is measured, the wanted ones passed on.
pub struct Recorder<'a> {
    inner: &'a mut dyn Sink,
    keep: Option<Stage>,
    pub rows: Vec<StageStats>,
    pub kept: Option<Tensor>,
}

impl<'a> Recorder<'a> {
    /// Records into `rows`, passes stages on to `inner`, and keeps a copy of `keep`.
    pub fn new(inner: &'a mut dyn Sink, keep: Option<Stage>) -> Recorder<'a> {
        Recorder {
            inner,
            keep,
            rows: Vec::new(),
            kept: None,
        }
    }
}

impl Sink for Recorder<'_> {
    fn emit(&mut self, stage: Stage, tensor: TensorView<'_>) -> bert_core::Result<()> {
        let (min, mean, std, max) = match &tensor {
            TensorView::F32(a) => moments(a.iter().map(|&v| v as f64)),
            TensorView::I64(a) => moments(a.iter().map(|&v| v as f64)),
        };
        self.rows.push(StageStats {
            stage,
            shape: tensor.shape().to_vec(),
            min,
            mean,
            std,
            max,
        });
        if self.keep == Some(stage) {
            self.kept = Some(tensor.to_owned());
        }
        if self.inner.wants(&stage) {
            self.inner.emit(stage, tensor)?;
        }
        Ok(())
    }

    fn finish(&mut self) -> bert_core::Result<()> {
        self.inner.finish()
    }
}

/// (min, mean, population std, max), with Welford's update so that the variance of values far
/// from zero keeps its digits in one pass.
fn moments(values: impl Iterator<Item = f64>) -> (f64, f64, f64, f64) {
    let (mut n, mut mean, mut m2) = (0usize, 0.0f64, 0.0f64);
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values {
        n += 1;
        let delta = v - mean;
        mean += delta / n as f64;
        m2 += delta * (v - mean);
        min = min.min(v);
        max = max.max(v);
    }
    (min, mean, (m2 / n.max(1) as f64).sqrt(), max)
}
