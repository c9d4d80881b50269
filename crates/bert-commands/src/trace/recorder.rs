//! The trace's sink: it records min / mean / std / max of every stage (the stage table a trace
//! prints) on its way to the sink that writes, and keeps a copy of the one stage the CLI
//! previews (and, for `explain`, of every stage).

use bert_core::pass::summary::Summary;
use bert_core::pass::{Sink, Tensor, TensorView};
use bert_core::stage::Stage;

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
    /// Every stage, in order, when asked for ([`Recorder::keeping_all`]): what `explain` reads.
    pub all: Option<Vec<(Stage, Tensor)>>,
}

impl<'a> Recorder<'a> {
    /// Records into `rows`, passes stages on to `inner`, and keeps a copy of `keep`.
    pub fn new(inner: &'a mut dyn Sink, keep: Option<Stage>) -> Recorder<'a> {
        Recorder { inner, keep, rows: Vec::new(), kept: None, all: None }
    }

    /// The same recorder, also keeping a copy of every stage.
    pub fn keeping_all(self) -> Recorder<'a> {
        Recorder { all: Some(Vec::new()), ..self }
    }
}

impl Sink for Recorder<'_> {
    fn emit(&mut self, stage: Stage, tensor: TensorView<'_>) -> bert_core::Result<()> {
        // The order of the values does not change the summary, so a transposed view (Q, K and V
        // are emitted heads-first) is read in the order of memory, without a copy.
        let Summary { min, mean, std, max } = match &tensor {
            TensorView::F32(a) => match a.as_slice_memory_order() {
                Some(values) => Summary::of_f32(values),
                None => Summary::of_f32(&a.iter().copied().collect::<Vec<f32>>()),
            },
            TensorView::F64(a) => Summary::of_f64(&a.iter().copied().collect::<Vec<f64>>()),
            TensorView::I64(a) => Summary::of_i64(&a.iter().copied().collect::<Vec<i64>>()),
        };
        self.rows.push(StageStats { stage, shape: tensor.shape().to_vec(), min, mean, std, max });
        if self.keep == Some(stage) {
            self.kept = Some(tensor.to_owned());
        }
        if let Some(all) = &mut self.all {
            all.push((stage, tensor.to_owned()));
        }
        if self.inner.wants(&stage) {
            self.inner.emit(stage, tensor)?;
        }
        Ok(())
    }

    fn unreached(&mut self, parameters: &[String]) -> bert_core::Result<()> {
        self.inner.unreached(parameters)
    }

    fn finish(&mut self) -> bert_core::Result<()> {
        self.inner.finish()
    }
}
