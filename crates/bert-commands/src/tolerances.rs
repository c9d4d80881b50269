//! `bert-trace tolerances`: each stage's honest float32 error, measured against the float64 truth
//! on texts (bert-core's `divergence/measured_tolerance.rs`), written as a tolerance file that
//! `diff --tolerances` holds each stage to. Each text is traced alone in float32 and float64, and
//! all of them as one padded batch; pairs of other float32 dumps and their truths (PyTorch's)
//! are measured too when given.

use std::io::Write;
use std::path::PathBuf;

use bert_core::divergence::measured_tolerance::{MeasuredStage, Measurement, ToleranceFile, FORMAT};
use bert_core::io::dump::Dump;
use bert_core::words::Opt;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::refuse;
use crate::render::text_table::{new_table, num};
use crate::report::{Report, Reported};
use crate::settings::PassSettings;
use crate::source;
use crate::trace::pass_in_memory;

pub const OUT: Opt = Opt("out");
pub const HEADROOM: Opt = Opt("headroom");
pub const REFERENCE: Opt = Opt("reference");
pub const TRUTH: Opt = Opt("truth");

/// The headroom when none is given: two honest float32 passes can differ by twice the
/// envelope, and a text not measured may reach a little beyond it.
pub const HEADROOM_DEFAULT: f64 = 4.0;

/// What to measure on and where the file goes.
#[derive(Clone, Debug, Default)]
pub struct TolerancesRequest {
    pub texts: Vec<String>,
    pub file: Option<PathBuf>,
    pub model: Option<PathBuf>,
    /// Other float32 dumps, each measured against the `truths` dump of the same place.
    pub references: Vec<PathBuf>,
    pub truths: Vec<PathBuf>,
    pub headroom: Option<f64>,
    /// The tolerance file to write; it must not exist.
    pub out: PathBuf,
    pub settings: PassSettings,
}

/// The file written, and what it holds.
#[derive(Clone, Debug, Serialize)]
pub struct TolerancesReport {
    pub out: PathBuf,
    pub file: ToleranceFile,
}

/// Measures and writes the tolerance file `request` asks for.
pub fn tolerances(request: &TolerancesRequest) -> Result<Reported<TolerancesReport>> {
    let headroom = request.headroom.unwrap_or(HEADROOM_DEFAULT);
    if !(headroom.is_finite() && headroom >= 1.0) {
        return Err(bert_core::BertError::OptionValue {
            option: HEADROOM,
            value: format!("{headroom:?}"),
            accepted: format!("a number, 1 or more (the measured envelope times it; {HEADROOM_DEFAULT} by default)"),
        }
        .into());
    }
    if request.references.len() != request.truths.len() {
        refuse!(
            "{REFERENCE} and {TRUTH} go in pairs, a float32 dump and the float64 dump of its input: {} and {} given",
            request.references.len(),
            request.truths.len()
        );
    }
    if std::fs::symlink_metadata(&request.out).is_ok() {
        return Err(Error::File {
            path: request.out.clone(),
            problem: format!("exists: a tolerance file is written new; remove it or choose another {OUT}"),
        });
    }
    let parent = request.out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if !parent.is_dir() {
        return Err(Error::File {
            path: request.out.clone(),
            problem: format!("its directory {} does not exist", parent.display()),
        });
    }
    let (_, kernels) = request.settings.apply()?;
    let texts = crate::trace::texts(&request.texts, request.file.as_deref())?;
    if texts.is_empty() {
        refuse!("give the texts to measure on (TEXT or {})", Opt("file"));
    }
    let pairs: Vec<(Dump, Dump)> = request
        .references
        .iter()
        .zip(&request.truths)
        .map(|(reference, truth)| Ok((Dump::open(reference)?, Dump::open(truth)?)))
        .collect::<bert_core::Result<_>>()?;
    let mut single = source::load_as::<f32>(request.model.as_deref())?;
    single.model.kernels = kernels;
    let mut double = source::load_as::<f64>(request.model.as_deref())?;
    double.model.kernels = kernels;
    let mut measurement = Measurement::default();
    for (reference, truth) in &pairs {
        // A dump of another model (or of these weights held otherwise, int8's) has other errors.
        for dump in [reference, truth] {
            bert_core::divergence::isolate::check_model(&single.model, dump)?;
        }
        measurement.add(reference, truth)?;
    }
    let mut groups: Vec<Vec<String>> = texts.iter().map(|text| vec![text.clone()]).collect();
    if texts.len() > 1 {
        groups.push(texts.clone());
    }
    for group in &groups {
        measurement.add(&pass_in_memory(&single.model, group)?, &pass_in_memory(&double.model, group)?)?;
    }
    let file = ToleranceFile {
        format: FORMAT.into(),
        model: single.name.clone(),
        headroom,
        texts,
        references: request.references.iter().map(|p| p.display().to_string()).collect(),
        stages: measurement.tolerances(headroom),
    };
    write_new(&request.out, &file)?;
    let mut notes = single.notes;
    notes.extend(double.notes);
    notes.dedup();
    Ok(Reported { notes, report: TolerancesReport { out: request.out.clone(), file } })
}

/// Writes `file` to `path`, which must not exist, whole or not at all: a temporary file beside
/// it, renamed into place without replacing anything that appeared there meanwhile.
fn write_new(path: &std::path::Path, file: &ToleranceFile) -> Result<()> {
    let cannot = |problem: String| Error::File { path: path.into(), problem };
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let mut temporary =
        tempfile::NamedTempFile::new_in(parent).map_err(|e| cannot(format!("cannot write beside it: {e}")))?;
    let text = serde_json::to_string_pretty(file).expect("a tolerance file serialises");
    temporary
        .write_all(format!("{text}\n").as_bytes())
        .and_then(|()| temporary.as_file().sync_all())
        .map_err(|e| cannot(format!("cannot write: {e}")))?;
    temporary.persist_noclobber(path).map_err(|e| cannot(format!("cannot write: {}", e.error)))?;
    Ok(())
}

impl Report for TolerancesReport {
    fn text(&self) -> String {
        let mut table =
            new_table(&["stage", "atol", "rtol", "max|f32 − f64|", "max rel", "elements"], &[1, 2, 3, 4, 5]);
        for MeasuredStage { name, atol, rtol, max_abs, max_rel, elements } in &self.file.stages {
            table.add_row(vec![
                name.clone(),
                num(*atol),
                num(*rtol),
                num(*max_abs),
                num(*max_rel),
                elements.to_string(),
            ]);
        }
        format!(
            "each stage's float32 error against float64, on {} texts of {} (each alone, and as one padded batch){}; \
             the tolerance is the envelope atol + rtol·|x| of every error, times {}:\n{table}\nwrote {}\n",
            self.file.texts.len(),
            self.file.model,
            match self.file.references.len() {
                0 => String::new(),
                n => format!(" and {n} other dump(s) against their truths"),
            },
            self.file.headroom,
            self.out.display()
        )
    }
}
