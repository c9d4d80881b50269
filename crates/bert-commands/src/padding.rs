//! `bert-trace padding`: does padding change a real token's numbers? Each text traced alone and
//! all of them as one padded batch, in float64 and in float32, every stage's real positions set
//! against each other (bert-core's `divergence/padded_rows.rs`): in float64 they must agree to
//! rounding, else the masking is wrong and the first such stage is named; in float32 the
//! differences are set against the float32 floor (how far float32 is from float64 on the texts
//! alone). Or, with `batched` and `alone`, a user's own dumps: a batch against its texts' own.

use std::path::PathBuf;

use bert_core::divergence::padded_rows::{padding_rows, PaddingRows, PaddingStage};
use bert_core::divergence::{compare_tensors, stage_tolerance, Tolerance};
use bert_core::io::dump::Dump;
use bert_core::ops::Float;
use bert_core::stage::DType;
use bert_core::words::Opt;
use bert_core::BertModel;
use serde::Serialize;

use crate::error::Result;
use crate::refuse;
use crate::render::text_table::{new_table, num};
use crate::report::{Report, Reported};
use crate::settings::PassSettings;
use crate::source;

pub const BATCHED: Opt = Opt("batched");
pub const ALONE: Opt = Opt("alone");

/// How close float64's rounding leaves two computations of the same numbers: far above its
/// rounding (about 1e-16 relative per operation), far below any real difference.
pub const FLOAT64: Tolerance = Tolerance { atol: 1e-10, rtol: 1e-10 };

/// What to check: texts to trace (alone and as a batch), or a batch's dump and its texts' own.
#[derive(Clone, Debug, Default)]
pub struct PaddingRequest {
    pub texts: Vec<String>,
    pub file: Option<PathBuf>,
    pub model: Option<PathBuf>,
    /// A padded batch's dump, set against `alone` (one dump a row) instead of tracing.
    pub batched: Option<PathBuf>,
    pub alone: Vec<PathBuf>,
    pub settings: PassSettings,
}

/// The answer: each stage's real positions, batch against alone.
#[derive(Clone, Debug, Serialize)]
pub struct PaddingReport {
    /// Each text's tokens.
    pub lengths: Vec<usize>,
    pub stages: Vec<PaddingStageJson>,
    /// The first stage whose real positions the padding changed, and in which precision.
    pub first_leak: Option<Leak>,
    pub passed: bool,
    /// Stages not compared, and why.
    pub not_compared: Vec<(String, String)>,
}

/// One stage of the report: in float64 and float32 when the texts were traced, in the dumps'
/// own precision when dumps were given (then `float64` or `float32` alone is set).
#[derive(Clone, Debug, Serialize)]
pub struct PaddingStageJson {
    pub name: String,
    pub float64: Option<Side>,
    pub float32: Option<Side>,
    /// max |float32 − float64| of the texts alone: how far float32 is from the exact result.
    pub float32_floor: Option<f64>,
}

/// One precision's batch against its texts alone, at one stage.
#[derive(Clone, Debug, Serialize)]
pub struct Side {
    pub max_abs: Option<f64>,
    pub sequence: usize,
    pub passed: bool,
    /// The first padding key a real query could see, `[b, head, query, key]`.
    pub unmasked: Option<Vec<usize>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Leak {
    pub stage: String,
    pub precision: &'static str,
    pub why: String,
}

impl Side {
    fn of(stage: &PaddingStage) -> Side {
        Side {
            max_abs: stage.report.stats.as_ref().map(|s| s.max_abs),
            sequence: stage.sequence,
            passed: stage.passed(),
            unmasked: stage.unmasked.clone(),
        }
    }
}

/// Runs the check `request` asks for.
pub fn padding(request: &PaddingRequest) -> Result<Reported<PaddingReport>> {
    match &request.batched {
        Some(batched) => {
            if !request.texts.is_empty() || request.file.is_some() || request.model.is_some() {
                refuse!("{BATCHED} sets dumps against each other: it takes no texts, no file and no model");
            }
            if request.alone.is_empty() {
                refuse!("{BATCHED} needs {ALONE}: the dump of each row's text alone, in the batch's order");
            }
            let batched = Dump::open(batched)?;
            let alone: Vec<Dump> =
                request.alone.iter().map(|path| Dump::open(path)).collect::<bert_core::Result<_>>()?;
            padding_of_dumps(&batched, &alone)
        }
        None => {
            if !request.alone.is_empty() {
                refuse!("{ALONE} goes with {BATCHED}, the dump of the batch its texts make");
            }
            traced(request)
        }
    }
}

/// A batch's dump against its texts' own, already open (Python's traces in memory among them),
/// each stage within its tolerance in the dumps' precision.
pub fn padding_of_dumps(batched: &Dump, alone: &[Dump]) -> Result<Reported<PaddingReport>> {
    if alone.is_empty() {
        refuse!("{BATCHED} needs {ALONE}: the dump of each row's text alone, in the batch's order");
    }
    let (precision, simulation) = (batched.float_dtype(), batched.simulation());
    if let Some(other) = alone.iter().find(|d| d.float_dtype() != precision || d.simulation() != simulation) {
        return Err(crate::Error::File {
            path: other.dir.clone(),
            problem: format!(
                "is not in {}'s precision: a batch and its texts alone are compared in one precision",
                batched.dir.display()
            ),
        });
    }
    // A pass held in a narrower format is held to that format's precision, as `diff` holds it.
    let widened = simulation.format.map_or(0.0, |format| 2.0 * format.unit_roundoff());
    let rows = padding_rows(batched, alone, |stage| match precision {
        DType::F64 => FLOAT64,
        _ => {
            let fixed = stage_tolerance(stage);
            Tolerance { atol: fixed.atol.max(widened), rtol: fixed.rtol.max(widened) }
        }
    })?;
    let report = match precision {
        DType::F64 => report(Some(rows), None, None),
        _ => report(None, Some(rows), None),
    };
    Ok(Reported { notes: Vec::new(), report })
}

/// Traces the texts alone and as a batch, in float64 and float32.
fn traced(request: &PaddingRequest) -> Result<Reported<PaddingReport>> {
    let (_, kernels) = request.settings.apply()?;
    let texts = crate::trace::texts(&request.texts, request.file.as_deref())?;
    if texts.len() < 2 {
        refuse!("padding needs two texts or more, of different lengths: one text alone is never padded");
    }
    let mut double = source::load_as::<f64>(request.model.as_deref())?;
    double.model.kernels = kernels;
    let mut single = source::load_as::<f32>(request.model.as_deref())?;
    single.model.kernels = kernels;
    let batch = single.model.encode(&texts, None, false)?;
    if batch.attention_mask.iter().all(|&m| m == 1) {
        refuse!(
            "the {} texts are all {} tokens: no row of their batch is padded; give texts of different lengths",
            texts.len(),
            batch.dims().1
        );
    }
    let (batched64, alone64) = passes(&double.model, &texts)?;
    let (batched32, alone32) = passes(&single.model, &texts)?;
    let rows64 = padding_rows(&batched64, &alone64, |_| FLOAT64)?;
    let rows32 = padding_rows(&batched32, &alone32, stage_tolerance)?;
    // How far float32 is from float64 on the texts alone: what a float32 batch's difference is
    // set against.
    let floors = rows32
        .stages
        .iter()
        .map(|stage| {
            let mut floor = 0f64;
            for (exact, rounded) in alone64.iter().zip(&alone32) {
                let read = |dump: &Dump| dump.read(dump.entry(&stage.name).expect("compared"));
                let report = compare_tensors(&stage.name, &read(exact)?, &read(rounded)?, Tolerance::EXACT, None);
                let distance = report.stats.map_or(f64::NAN, |s| s.max_abs);
                floor = if distance.is_nan() || floor.is_nan() { f64::NAN } else { floor.max(distance) };
            }
            Ok((stage.name.clone(), floor))
        })
        .collect::<bert_core::Result<Vec<_>>>()?;
    let mut notes = double.notes;
    notes.extend(single.notes);
    notes.dedup();
    Ok(Reported { notes, report: report(Some(rows64), Some(rows32), Some(floors)) })
}

/// The pass of the batch of `texts`, and of each text alone, kept in memory.
fn passes<F: Float>(model: &BertModel<F>, texts: &[String]) -> Result<(Dump, Vec<Dump>)> {
    let run = |texts: &[String]| crate::trace::pass_in_memory(model, texts);
    let batched = run(texts)?;
    let alone = texts.iter().map(|text| run(std::slice::from_ref(text))).collect::<Result<Vec<_>>>()?;
    Ok((batched, alone))
}

fn report(
    rows64: Option<PaddingRows>,
    rows32: Option<PaddingRows>,
    floors: Option<Vec<(String, f64)>>,
) -> PaddingReport {
    let any = rows64.as_ref().or(rows32.as_ref()).expect("one precision was compared");
    let lengths = any.lengths.clone();
    let not_compared = any.not_compared.clone();
    let names: Vec<String> = any.stages.iter().map(|s| s.name.clone()).collect();
    let side = |rows: &Option<PaddingRows>, name: &str| {
        rows.as_ref().and_then(|rows| rows.stages.iter().find(|s| s.name == name)).map(Side::of)
    };
    let stages: Vec<PaddingStageJson> = names
        .iter()
        .map(|name| PaddingStageJson {
            name: name.clone(),
            float64: side(&rows64, name),
            float32: side(&rows32, name),
            float32_floor: floors.as_ref().and_then(|f| f.iter().find(|(n, _)| n == name)).map(|(_, v)| *v),
        })
        .collect();
    let leak = |rows: &Option<PaddingRows>, precision: &'static str| {
        let stage = rows.as_ref()?.first_leak()?;
        let why = match &stage.unmasked {
            Some(at) => format!("a padding key is seen by a real query at {at:?} [b, head, query, key]"),
            None => format!(
                "sequence {}'s real positions differ from its text alone by up to {}",
                stage.sequence,
                stage.report.stats.as_ref().map_or("-".into(), |s| num(s.max_abs))
            ),
        };
        Some(Leak { stage: stage.name.clone(), precision, why })
    };
    // The float64 verdict first: there the rows must agree to rounding.
    let first_leak = leak(&rows64, "float64").or_else(|| leak(&rows32, "float32"));
    PaddingReport { lengths, stages, passed: first_leak.is_none(), first_leak, not_compared }
}

impl Report for PaddingReport {
    fn text(&self) -> String {
        let traced = self.stages.iter().any(|s| s.float64.is_some() && s.float32.is_some());
        let cell = |side: &Option<Side>| match side {
            Some(Side { unmasked: Some(_), .. }) => "padding seen".to_string(),
            Some(side) => side.max_abs.map_or("-".to_string(), num),
            None => "-".to_string(),
        };
        let verdict = |stage: &PaddingStageJson| {
            let failed = [&stage.float64, &stage.float32].iter().any(|s| s.as_ref().is_some_and(|s| !s.passed));
            if failed { "LEAK" } else { "ok" }.to_string()
        };
        let mut out = format!(
            "{} texts, of {} tokens; every stage's real positions, the batch against each text alone:\n",
            self.lengths.len(),
            self.lengths.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
        );
        let table = match traced {
            true => {
                let mut table =
                    new_table(&["stage", "float64 max|Δ|", "float32 max|Δ|", "float32 floor", "result"], &[1, 2, 3]);
                for stage in &self.stages {
                    let floor = stage.float32_floor.map_or("-".to_string(), num);
                    table.add_row(vec![
                        stage.name.clone(),
                        cell(&stage.float64),
                        cell(&stage.float32),
                        floor,
                        verdict(stage),
                    ]);
                }
                table
            }
            false => {
                let mut table = new_table(&["stage", "max|Δ|", "result"], &[1]);
                for stage in &self.stages {
                    let side = if stage.float64.is_some() { &stage.float64 } else { &stage.float32 };
                    table.add_row(vec![stage.name.clone(), cell(side), verdict(stage)]);
                }
                table
            }
        };
        out += &format!("{table}\n");
        match &self.first_leak {
            Some(leak) => out += &format!("padding leaks first at {} ({}): {}\n", leak.stage, leak.precision, leak.why),
            None if traced => {
                let most64 = self.stages.iter().filter_map(|s| s.float64.as_ref()?.max_abs).fold(0f64, f64::max);
                let agree = match most64 {
                    0.0 => "exactly".to_string(),
                    most => format!("to {}, float64's rounding", num(most)),
                };
                out += &format!(
                    "padding changes no real token's numbers: in float64 the rows agree {agree}; in float32 every \
                     stage is within its tolerance, beside the float32 floor\n"
                );
            }
            None => out += "padding changes no real token's numbers beyond each stage's tolerance\n",
        }
        out
    }
}
