//! `diff REFERENCE TRACE`: every stage compared, in execution order, and where the divergence
//! starts; with `isolate`, each stage's own error on each side and the culprit; with `truth`,
//! which side is closer to a float64 dump of the same input. The measures are
//! `bert_core::divergence`'s; this makes the report, as text and as JSON (one schema:
//! [`DiffJson`]).

use bert_core::divergence::measured_tolerance::ToleranceFile;
use bert_core::precision::Simulation;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::PathBuf;

use bert_core::divergence::isolate::{own_errors, Isolation, Own, Side};
use bert_core::divergence::truth::{against_truth, TruthStage};
use bert_core::divergence::{diff_dumps_with, FirstFailure, Report, StageReport, Status, ToleranceOverride};
use bert_core::io::dump::manifest::InterventionRecord;
use bert_core::io::dump::Dump;
use bert_core::stage::DType;
use bert_core::BertModel;
use serde::Serialize;

use crate::error::Result;

pub const ISOLATE: bert_core::words::Opt = bert_core::words::Opt("isolate");
use crate::render::text_table::{new_table, num, shape};
use crate::source;

/// Which dumps to compare, and how.
#[derive(Clone, Debug, Default)]
pub struct DiffRequest {
    pub reference: PathBuf,
    pub trace: PathBuf,
    pub tolerance: ToleranceOverride,
    /// Recompute every stage of each side from that side's own inputs, with `model`.
    pub isolate: bool,
    /// A float64 dump of the same input to measure both sides against.
    pub truth: Option<PathBuf>,
    /// The model both dumps were made with, which `isolate` needs.
    pub model: Option<PathBuf>,
    /// A tolerance file (`bert-trace tolerances`) whose stages' tolerances replace the fixed
    /// table's.
    pub tolerances: Option<PathBuf>,
}

/// A diff's report: as the command prints it (`text`), as `--json` gives it (`json`), and
/// whether every stage both dumps have passed.
#[derive(Clone, Debug)]
pub struct DiffReport {
    pub passed: bool,
    pub text: String,
    pub json: DiffJson,
}

/// Compares the two dumps `request` names.
pub fn diff(request: &DiffRequest) -> Result<DiffReport> {
    check_isolate(request.isolate, request.model.is_some())?;
    let reference = Dump::open(&request.reference)?;
    let trace = Dump::open(&request.trace)?;
    let truth = request.truth.as_deref().map(Dump::open).transpose()?;
    let measured = request.tolerances.as_deref().map(ToleranceFile::read).transpose()?;
    let isolate = match (request.isolate, request.model.as_deref()) {
        (true, Some(dir)) => Some(IsolateWith::Dir(dir)),
        _ => None,
    };
    let tolerances = Tolerances { overrides: request.tolerance, measured: measured.as_ref() };
    diff_report(&reference, &trace, tolerances, isolate, truth.as_ref())
}

/// The tolerances a diff holds each stage to: a file's measured ones where it has the stage,
/// else the fixed table's; `overrides` (`atol`, `rtol`) over either.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tolerances<'a> {
    pub overrides: ToleranceOverride,
    pub measured: Option<&'a ToleranceFile>,
}

impl From<ToleranceOverride> for Tolerances<'_> {
    fn from(overrides: ToleranceOverride) -> Self {
        Tolerances { overrides, measured: None }
    }
}

/// Refuses `isolate` without the model both dumps were made with: recomputing a stage with
/// another model blames the wrong one. The command line and Python alike.
pub fn check_isolate(isolate: bool, model_given: bool) -> Result<()> {
    if isolate && !model_given {
        return Err(crate::Error::Request(format!(
            "{} recomputes each stage with the model both dumps were made with: give it with {}",
            ISOLATE.on(),
            source::MODEL
        )));
    }
    Ok(())
}

/// The model `isolate` recomputes each stage with: a directory, loaded in each precision a dump
/// needs, or a model already loaded (a notebook's), with its f64 copy when one is needed.
pub enum IsolateWith<'a> {
    Dir(&'a std::path::Path),
    /// The models already loaded: in f32, in f64 (for an f64 dump), and in f64 with each
    /// simulation's weights (for a dump of a pass in a narrower format).
    Loaded {
        single: &'a BertModel<f32>,
        double: Option<&'a BertModel<f64>>,
        simulated: Vec<(Simulation, &'a BertModel<f64>)>,
    },
}

/// Compares two dumps already open: every stage, then with `isolate` each side's own errors,
/// and with `truth` each side against a float64 dump. The command and Python both end here.
pub fn diff_report(
    reference: &Dump,
    trace: &Dump,
    tolerance: Tolerances<'_>,
    isolate: Option<IsolateWith<'_>>,
    truth: Option<&Dump>,
) -> Result<DiffReport> {
    let isolation = isolate.map(|with| isolation(with, reference, trace)).transpose()?;
    let truth = truth.map(|truth| against_truth(reference, trace, truth)).transpose()?;
    report_both_ways(reference, trace, tolerance, isolation.as_ref(), truth.as_deref())
}

/// Each dump's stages recomputed with the model in the dump's precision (each precision loaded
/// once): an f64 trace is then held to f64 rounding.
fn isolation(with: IsolateWith<'_>, reference: &Dump, trace: &Dump) -> Result<Isolation> {
    let (mut single, mut double) = (None, None);
    let mut simulated: Vec<(Simulation, BertModel<f64>)> = Vec::new();
    Isolation::of(reference, trace, |dump| match (&with, dump.float_dtype()) {
        // A pass in a narrower format: its stages against the exact result of the same weights.
        _ if !dump.simulation().is_none() => {
            let simulation = dump.simulation();
            if let IsolateWith::Loaded { simulated: loaded, .. } = &with {
                return match loaded.iter().find(|(s, _)| *s == simulation) {
                    Some((_, model)) => Ok(own_errors(*model, dump)?),
                    None => Err(crate::error::Error::Request(format!(
                        "{} is a pass {}: isolating it needs the model with those weights, which was not loaded",
                        dump.dir.display(),
                        simulation.describe()
                    ))),
                };
            }
            let IsolateWith::Dir(dir) = &with else { unreachable!("Loaded returned above") };
            if !simulated.iter().any(|(s, _)| *s == simulation) {
                let mut model = source::load_as::<f64>(Some(dir))?.model;
                simulation.apply_to_weights(&mut model);
                simulated.push((simulation, model));
            }
            let model = &simulated.iter().find(|(s, _)| *s == simulation).expect("just made").1;
            Ok(own_errors(model, dump)?)
        }
        (IsolateWith::Loaded { double: Some(model), .. }, DType::F64) => Ok(own_errors(*model, dump)?),
        (IsolateWith::Loaded { single: model, .. }, _) => Ok(own_errors(*model, dump)?),
        (IsolateWith::Dir(dir), DType::F64) => {
            let model = match &mut double {
                Some(model) => model,
                None => double.insert(source::load_as::<f64>(Some(dir))?.model),
            };
            Ok(own_errors(model, dump)?)
        }
        (IsolateWith::Dir(dir), _) => {
            let model = match &mut single {
                Some(model) => model,
                None => single.insert(source::load(Some(dir))?.model),
            };
            Ok(own_errors(model, dump)?)
        }
    })
}

/// Appends one line to the report being written.
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {{
        let _ = writeln!($out, $($arg)*);
    }};
}

/// The JSON of a diff: the library's report, each stage with its own errors and its distance
/// from the truth when those were asked for, the culprit, the truth's summary, and what each
/// side's pass changed. Written as JSON through `serde_json::Value`, whose keys are sorted.
#[derive(Clone, Debug, Serialize)]
pub struct DiffJson {
    pub stages: Vec<StageJson>,
    pub first_failure: Option<FirstFailure>,
    pub notes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub culprit: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub culprit_side: Option<Option<&'static str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truth_summary: Option<TruthSummary>,
    pub interventions: BTreeMap<&'static str, Vec<InterventionRecord>>,
}

/// One stage of [`DiffJson`].
#[derive(Clone, Debug, Serialize)]
pub struct StageJson {
    #[serde(flatten)]
    pub report: StageReport,
    /// Each side's own error (null where not isolated), with `isolate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own_max_abs: Option<BTreeMap<&'static str, Option<f64>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own: Option<BTreeMap<&'static str, Option<Own>>>,
    /// Both sides' distance from the truth, with `truth`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truth: Option<TruthJson>,
}

/// One stage against the truth.
#[derive(Clone, Debug, Serialize)]
pub struct TruthJson {
    pub reference_max_abs: Option<f64>,
    pub trace_max_abs: Option<f64>,
    pub closer: Option<&'static str>,
    pub non_finite: bool,
}

/// How many stages each side is closer to the truth in, and where they differ most.
#[derive(Clone, Debug, Serialize)]
pub struct TruthSummary {
    pub reference_closer: usize,
    pub trace_closer: usize,
    pub as_close: usize,
    pub non_finite: usize,
    pub largest_gap: Option<Gap>,
    /// With `isolate`, on each side the stage whose own error is the largest share of the
    /// spread of the truth's values: the stage whose own rounding matters most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub largest_own_share: Option<BTreeMap<&'static str, Option<OwnShare>>>,
}

/// A stage's own error against the spread of its values.
#[derive(Clone, Debug, Serialize)]
pub struct OwnShare {
    pub stage: String,
    pub own_max_abs: f64,
    /// The standard deviation of the truth's values of the stage.
    pub spread: f64,
    /// own_max_abs / spread.
    pub share: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Gap {
    pub stage: String,
    pub gap: f64,
}

impl DiffJson {
    /// The JSON text `--json` prints.
    pub fn to_pretty(&self) -> String {
        let value = serde_json::to_value(self).expect("a report serialises");
        serde_json::to_string_pretty(&value).expect("JSON always prints")
    }

    /// As a JSON value (keys sorted).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a report serialises")
    }
}

/// The report of two dumps compared, written both ways (text and JSON), with what isolation and
/// the truth found.
fn report_both_ways(
    reference: &Dump,
    trace: &Dump,
    tolerance: Tolerances<'_>,
    isolation: Option<&Isolation>,
    truth: Option<&[TruthStage]>,
) -> Result<DiffReport> {
    let mut report = diff_dumps_with(reference, trace, tolerance.overrides, tolerance.measured)?;
    if let Some(file) = tolerance.measured {
        let measured = report.stages.iter().filter(|s| file.tolerance(&s.name).is_some()).count();
        report.notes.insert(
            0,
            format!(
                "tolerances: measured for {measured} of these stages (on {} texts of {}, headroom {}); the fixed \
                 table's for the rest",
                file.texts.len(),
                file.model,
                file.headroom
            ),
        );
    }
    let stages = report
        .stages
        .iter()
        .map(|stage| {
            let own = |side| isolation.and_then(|i| i.own(&stage.name, side));
            let sides = [("reference", Side::Reference), ("trace", Side::Trace)];
            StageJson {
                report: stage.clone(),
                own_max_abs: isolation
                    .map(|_| sides.iter().map(|&(name, side)| (name, own(side).and_then(Own::max_abs))).collect()),
                own: isolation.map(|_| sides.iter().map(|&(name, side)| (name, own(side).cloned())).collect()),
                truth: truth.and_then(|truth| truth.iter().find(|t| t.name == stage.name)).map(|t| TruthJson {
                    reference_max_abs: t.reference_max_abs,
                    trace_max_abs: t.trace_max_abs,
                    closer: t.closer(),
                    non_finite: t.non_finite(),
                }),
            }
        })
        .collect();
    let json = DiffJson {
        stages,
        first_failure: report.first_failure.clone(),
        notes: report.notes.clone(),
        culprit: isolation.map(|i| i.culprit.as_ref().map(|(name, _)| name.clone())),
        culprit_side: isolation.map(|i| i.culprit.as_ref().map(|(_, side)| side_name(*side))),
        truth_summary: truth.map(|truth| {
            let count = |side| truth.iter().filter(|t| t.closer() == Some(side)).count();
            TruthSummary {
                reference_closer: count("reference"),
                trace_closer: count("trace"),
                as_close: count("same"),
                non_finite: truth.iter().filter(|t| t.non_finite()).count(),
                largest_gap: largest_gap(truth).map(|(stage, gap)| Gap { stage: stage.into(), gap }),
                largest_own_share: isolation.map(|isolation| {
                    let sides = [("reference", Side::Reference), ("trace", Side::Trace)];
                    sides.iter().map(|&(name, side)| (name, largest_own_share(truth, isolation, side))).collect()
                }),
            }
        }),
        interventions: BTreeMap::from([
            ("reference", reference.manifest.interventions.clone()),
            ("trace", trace.manifest.interventions.clone()),
        ]),
    };
    let mut text = String::new();
    print_report(&mut text, reference, trace, &report, isolation);
    if let Some(truth) = truth {
        print_truth(&mut text, truth);
        if let Some(isolation) = isolation {
            print_own_shares(&mut text, truth, isolation);
        }
    }
    Ok(DiffReport { passed: report.passed(), text, json })
}

/// The stage where the two sides' distances from the truth differ most.
fn largest_gap(truth: &[TruthStage]) -> Option<(&str, f64)> {
    truth
        .iter()
        .filter_map(|t| Some((t.name.as_str(), (t.reference_max_abs? - t.trace_max_abs?).abs())))
        .filter(|(_, gap)| gap.is_finite())
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// The stage of `side` whose own error is the largest share of the spread of the truth's values
/// (a stage whose values are all one constant has no spread, and is left out); None when every
/// share is below 1e-9, float64's own rounding (a float64 side, the truth itself), where there
/// is nothing to name.
fn largest_own_share(truth: &[TruthStage], isolation: &Isolation, side: Side) -> Option<OwnShare> {
    truth
        .iter()
        .filter(|t| t.spread > 0.0 && t.spread.is_finite())
        .filter_map(|t| {
            let own = isolation.own(&t.name, side)?.max_abs()?;
            let share = own / t.spread;
            share.is_finite().then(|| OwnShare { stage: t.name.clone(), own_max_abs: own, spread: t.spread, share })
        })
        .max_by(|a, b| a.share.total_cmp(&b.share))
        .filter(|largest| largest.share >= 1e-9)
}

/// Where each side's own rounding matters most.
fn print_own_shares(out: &mut String, truth: &[TruthStage], isolation: &Isolation) {
    for (name, side) in [("reference", Side::Reference), ("trace", Side::Trace)] {
        if let Some(share) = largest_own_share(truth, isolation, side) {
            say!(
                out,
                "the {name}'s own error against the spread of the truth's values is largest in {}: {} = {:.2}% of \
                 its standard deviation {}",
                share.stage,
                num(share.own_max_abs),
                100.0 * share.share,
                num(share.spread)
            );
        }
    }
}

/// Each stage's distance from the truth on both sides, and who is closer.
fn print_truth(out: &mut String, truth: &[TruthStage]) {
    let mut table = new_table(&["stage", "|ref − truth|", "|trace − truth|", "closer"], &[1, 2]);
    let cell = |v: Option<f64>| match v {
        Some(d) if !d.is_finite() => "non-finite".to_string(),
        v => v.map_or("-".to_string(), num),
    };
    for t in truth {
        let closer = if t.non_finite() { "non-finite" } else { t.closer().unwrap_or("-") };
        table.add_row(vec![t.name.clone(), cell(t.reference_max_abs), cell(t.trace_max_abs), closer.into()]);
    }
    say!(out, "\nagainst the truth (float64), max |side − truth| over the real tokens:\n{table}");
    let count = |side| truth.iter().filter(|t| t.closer() == Some(side)).count();
    let gap = largest_gap(truth)
        .map(|(name, gap)| format!("; the largest gap between them: {} in {name}", num(gap)))
        .unwrap_or_default();
    let non_finite = truth.iter().filter(|t| t.non_finite()).count();
    let non_finite = match non_finite {
        0 => String::new(),
        n => format!("; NaN or inf in {n} stage(s), which are neither"),
    };
    say!(
        out,
        "closer to the truth: the trace in {} stages, the reference in {}, as close in {}{non_finite}{gap}",
        count("trace"),
        count("reference"),
        count("same")
    );
}

/// The share of its tolerance a stage used, as a percentage; beyond a million percent the
/// number says nothing more than that the stage is far out.
fn used(share: f64) -> String {
    match share {
        s if !s.is_finite() => "-".into(),
        s if s > 1e4 => ">1e6%".into(),
        s => format!("{:.1}%", s * 100.0),
    }
}

fn side_name(side: Side) -> &'static str {
    match side {
        Side::Reference => "reference",
        Side::Trace => "trace",
    }
}

/// A stage's own error in a cell: its max|Δ| (`FAIL` beside it when over its tolerance), `-`
/// for a stage that side lacks or that nothing computes, `not isolated` when its inputs are
/// absent.
fn own_cell(own: Option<&Own>) -> String {
    match own {
        None => "-".into(),
        Some(Own::Isolated { max_abs, passed: true }) => num(*max_abs),
        Some(Own::Isolated { max_abs, passed: false }) => format!("{} FAIL", num(*max_abs)),
        Some(Own::NotIsolated { .. }) => "not isolated".into(),
    }
}

/// What each side changed in its pass, when either did, and a warning when they differ: the
/// stages after an intervention then differ by design.
fn print_interventions(out: &mut String, reference: &Dump, trace: &Dump) {
    let sides = [("reference", reference), ("trace", trace)];
    for (side, dump) in sides {
        let records: Vec<String> = dump.manifest.interventions.iter().map(ToString::to_string).collect();
        if !records.is_empty() {
            say!(out, "intervened: {side}: {}", records.join("; "));
        }
    }
    if reference.manifest.interventions != trace.manifest.interventions {
        say!(out, "note: the two dumps were made with different interventions: stages after them differ by design");
    }
}

/// Whether only one of the two dumps has `stage`.
fn one_sided(stage: &StageReport) -> bool {
    matches!(stage.status, Status::OnlyInReference | Status::OnlyInTrace)
}

/// The names of the stages of `status`, in the report's order, shortened: the shortest prefix
/// (at a `.`) under which the report has two stages or more, all of `status`, written once as
/// `prefix.*` (`layer0.*`, `grad.param.bert.encoder.*`).
fn grouped(report: &Report, status: &Status) -> Vec<String> {
    let whole_under = |prefix: &str| {
        let under: Vec<&StageReport> = report.stages.iter().filter(|s| s.name.starts_with(prefix)).collect();
        under.len() > 1 && under.iter().all(|s| s.status == *status)
    };
    let mut names: Vec<String> = Vec::new();
    for stage in report.stages.iter().filter(|s| s.status == *status) {
        let mut prefixes = stage.name.match_indices('.').map(|(at, _)| &stage.name[..=at]);
        let whole = prefixes.find(|prefix| whole_under(prefix)).map(|prefix| format!("{prefix}*"));
        let name = whole.unwrap_or_else(|| stage.name.clone());
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// `words` joined by ", " in lines of at most about 100 characters, each after the first
/// indented by two spaces.
fn wrapped(words: &[String]) -> String {
    let mut lines = vec![String::new()];
    for (idx, word) in words.iter().enumerate() {
        let piece = if idx + 1 < words.len() { format!("{word},") } else { word.clone() };
        let line = lines.last_mut().expect("one line");
        if !line.trim().is_empty() && line.len() + 1 + piece.len() > 100 {
            lines.push(format!("  {piece}"));
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(&piece);
        }
    }
    lines.join("\n")
}

fn print_report(out: &mut String, reference: &Dump, trace: &Dump, report: &Report, isolation: Option<&Isolation>) {
    say!(
        out,
        "reference: {} ({})\ntrace:     {} ({})",
        reference.dir.display(),
        producer(reference),
        trace.dir.display(),
        producer(trace)
    );
    for (side, dump) in [("reference", reference), ("trace", trace)] {
        for note in &dump.notes {
            say!(out, "note: {side}: {note}");
        }
    }
    for note in &report.notes {
        say!(out, "note: {note}");
    }
    print_interventions(out, reference, trace);
    let mut header = vec!["stage", "shape", "max|Δ|", "mean|Δ|", "max rel", "cosine", "atol / rtol", "used", "result"];
    if isolation.is_some() {
        header.extend(["own error (ref)", "own error (trace)"]);
    }
    let mut table = new_table(&header, &[2, 3, 4, 5, 7]);
    // The stages one dump lacks are listed after the table, by name, not as rows of dashes.
    for stage in report.stages.iter().filter(|s| !one_sided(s)) {
        let mut cells = row(stage);
        if let Some(isolation) = isolation {
            cells.push(own_cell(isolation.own(&stage.name, Side::Reference)));
            cells.push(own_cell(isolation.own(&stage.name, Side::Trace)));
        }
        table.add_row(cells);
    }
    say!(out, "{table}");
    for (status, side) in [(Status::OnlyInReference, "reference"), (Status::OnlyInTrace, "trace")] {
        let names = grouped(report, &status);
        if !names.is_empty() {
            let count = report.stages.iter().filter(|s| s.status == status).count();
            say!(out, "only in the {side} (not judged), {count} stages:\n  {}", wrapped(&names));
        }
    }
    let padded: Vec<&StageReport> = report.stages.iter().filter(|s| s.padded_rows.is_some()).collect();
    if !padded.is_empty() {
        let worst = padded
            .iter()
            .filter_map(|s| s.padded_rows.as_ref().map(|p| (s.name.as_str(), p.max_abs)))
            .max_by(|a, b| a.1.is_nan().cmp(&b.1.is_nan()).then(a.1.total_cmp(&b.1)))
            .expect("not empty");
        let non_finite: usize = padded.iter().filter_map(|s| s.padded_rows.as_ref()).map(|p| p.non_finite).sum();
        say!(
            out,
            "padded query rows, reported apart and their finite differences not judged (no real token reads \
             them): {} stages, largest max|Δ| {} in {}{}",
            padded.len(),
            num(worst.1),
            worst.0,
            if non_finite > 0 { format!("; {non_finite} NaN/Inf there fail their stages") } else { String::new() }
        );
    }
    let masked: Vec<&StageReport> =
        report.stages.iter().filter(|s| s.stats.as_ref().is_some_and(|st| st.masked > 0)).collect();
    if let Some(first) = masked.first().and_then(|s| s.stats.as_ref()) {
        let count: usize = masked.iter().filter_map(|s| s.stats.as_ref()).map(|st| st.masked).sum();
        let constant = |v: Option<f64>| v.map_or("-".to_string(), num);
        say!(
            out,
            "masked scores (padding keys): {count} in {} stages, compared by their effect (probability 0), not by \
             the constant; the reference masks with about {}, the trace with about {}",
            masked.len(),
            constant(first.masked_reference),
            constant(first.masked_trace)
        );
    }
    for stage in report.stages.iter().filter(|s| s.widened.is_some()).take(1) {
        let count = report.stages.iter().filter(|s| s.widened.is_some()).count();
        say!(out, "tolerance: {} ({count} stages)", stage.widened.as_deref().unwrap_or_default());
    }
    let common = report.common().count();
    let passed = report.common().filter(|s| s.status == Status::Pass).count();
    let only_reference = report.stages.iter().filter(|s| s.status == Status::OnlyInReference).count();
    let only_trace = report.stages.iter().filter(|s| s.status == Status::OnlyInTrace).count();
    let mut one_sided = Vec::new();
    if only_reference > 0 {
        one_sided.push(format!("{only_reference} only in the reference"));
    }
    if only_trace > 0 {
        one_sided.push(format!("{only_trace} only in the trace"));
    }
    let one_sided =
        if one_sided.is_empty() { String::new() } else { format!("; {} (not judged)", one_sided.join(", ")) };
    say!(out, "{passed} of {common} stages in common pass{one_sided}");
    if let Some(isolation) = isolation {
        print_isolation(out, isolation, report);
    }
    if let Some(first) = &report.first_failure {
        let stage = report.stages.iter().find(|s| s.name == first.name).expect("listed");
        say!(out, "first failing stage: {}", first.name);
        match (&stage.status, stage.stats.as_ref().and_then(|s| s.worst.as_ref())) {
            (Status::Fail, Some(worst)) => say!(
                out,
                "  worst element at {:?}: reference {}, trace {} (|Δ| {})",
                worst.index,
                num(worst.reference),
                num(worst.ours),
                num((worst.ours - worst.reference).abs())
            ),
            (status, _) => say!(out, "  {}", describe(status, stage)),
        }
        match &first.previous {
            Some((name, max_abs)) if *max_abs > 0.0 => say!(
                out,
                "  the stage before it, {name}, already differed (max|Δ| {}) but within tolerance",
                num(*max_abs)
            ),
            Some((name, _)) => say!(out, "  the stage before it, {name}, was identical: the divergence starts here"),
            None => say!(out, "  it is the first stage compared"),
        }
    }
}

/// What isolation found: the culprit, or that every stage's own error is within tolerance.
fn print_isolation(out: &mut String, isolation: &Isolation, report: &Report) {
    let passed = report.passed();
    let reshaped: Vec<&StageReport> = report.stages.iter().filter(|s| s.status == Status::ShapeMismatch).collect();
    let not_isolated: Vec<&str> = [&isolation.reference, &isolation.trace]
        .iter()
        .flat_map(|list| list.iter())
        .filter(|(_, own)| matches!(own, Own::NotIsolated { .. }))
        .map(|(name, _)| name.as_str())
        .collect();
    if !not_isolated.is_empty() {
        say!(
            out,
            "not isolated (their inputs are absent from the dump, or of another shape): {} stage(s), e.g. {}",
            not_isolated.len(),
            not_isolated[0]
        );
    }
    match &isolation.culprit {
        Some((name, side)) => {
            let own = isolation.own(name, *side).and_then(Own::max_abs).unwrap_or(f64::NAN);
            say!(
                out,
                "culprit: {name}, on the {} side: recomputed from that side's own inputs it differs by {} (its own \
                 error), over its tolerance; the stages after it may only inherit it",
                side_name(*side),
                num(own)
            );
        }
        None if passed => say!(out, "no culprit: every stage's own error is within its tolerance on both sides"),
        // Rounding cannot change a shape: a stage of another shape on each side is another
        // computation, and blaming compounding errors for it would be a wrong answer.
        None if !reshaped.is_empty() => say!(
            out,
            "no culprit among the stages isolated, but {} stage(s) have another shape on each side ({}: reference {}, \
             trace {}), which no rounding explains: are both dumps of the same model and input?",
            reshaped.len(),
            reshaped[0].name,
            reshaped[0].reference_shape.as_deref().map_or("-".into(), shape),
            reshaped[0].trace_shape.as_deref().map_or("-".into(), shape)
        ),
        None if !not_isolated.is_empty() => say!(
            out,
            "no culprit among the stages isolated; {} stage(s) could not be isolated (above), and the divergence may \
             start at one of them",
            not_isolated.len()
        ),
        None => {
            say!(out,
            "no culprit: every stage's own error is within its tolerance on both sides, yet a stage differs: small \
             errors, each within tolerance, that compound from stage to stage (an eps, an order of summation)"
        )
        }
    }
}

fn producer(dump: &Dump) -> String {
    dump.manifest.producer["name"].as_str().unwrap_or("unknown producer").to_string()
}

fn describe(status: &Status, stage: &StageReport) -> String {
    let shape_of = |s: &Option<Vec<usize>>| s.as_deref().map_or("-".to_string(), shape);
    match status {
        Status::ShapeMismatch => format!(
            "shapes differ: reference {}, trace {}",
            shape_of(&stage.reference_shape),
            shape_of(&stage.trace_shape)
        ),
        Status::OnlyInReference => "present in the reference only".into(),
        Status::OnlyInTrace => "present in the trace only".into(),
        Status::Fail => "non-finite values (NaN or Inf), which never pass, in padded rows or elsewhere".into(),
        Status::Pass => "passes".into(),
    }
}

fn row(stage: &StageReport) -> Vec<String> {
    let result = match &stage.status {
        Status::Pass => "ok".to_string(),
        Status::Fail => {
            let padded = stage.padded_rows.as_ref().map_or(0, |p| p.non_finite);
            match stage.stats.as_ref().map_or(0, |s| s.non_finite) + padded {
                0 => "FAIL".into(),
                n => format!("FAIL ({n} NaN/Inf)"),
            }
        }
        Status::ShapeMismatch => "FAIL (shape)".into(),
        Status::OnlyInReference => "only in reference".into(),
        Status::OnlyInTrace => "only in trace".into(),
    };
    // Each side's dtype, when they differ (a float64 reference against a float32 trace).
    let result = match (&stage.reference_dtype, &stage.trace_dtype) {
        (Some(r), Some(t)) if r != t => format!("{result} ({r} / {t})"),
        _ => result,
    };
    let shape_text = stage.reference_shape.as_deref().or(stage.trace_shape.as_deref()).map_or("-".to_string(), shape);
    let tolerance = format!("{} / {}", num(stage.tolerance.atol), num(stage.tolerance.rtol));
    match &stage.stats {
        Some(s) => vec![
            stage.name.clone(),
            shape_text,
            num(s.max_abs),
            num(s.mean_abs),
            num(s.max_rel),
            format!("{:.6}", s.cosine),
            tolerance,
            used(s.tolerance_used),
            result,
        ],
        None => vec![
            stage.name.clone(),
            shape_text,
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            tolerance,
            "-".into(),
            result,
        ],
    }
}
