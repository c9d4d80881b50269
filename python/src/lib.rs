//! `bert_trace` for Python: the command's trace, diff, page and training from a notebook, with
//! every stage as a numpy array. Nothing here computes BERT or compares anything: each function
//! builds the library's request from its keyword arguments (the command's options, by the same
//! names and defaults, real keywords that `help()` shows) and calls the same code the command
//! runs (`bert_core` and `bert_commands`); this crate moves the results into Python objects.
//!
//! | Python | here | command |
//! | --- | --- | --- |
//! | `bert_trace.trace`, `Model.trace` | `trace_request.rs` | `bert-trace TEXT ...` |
//! | `Trace` (`save`, `predictions`, `stage_table`, `view`) | `result.rs` | the dump, the tables, `view` |
//! | `bert_trace.load` | `result.rs` | reading a dump (`diff`, `view`) |
//! | `bert_trace.diff`, `DiffReport`, `Page` | `diff_dumps.rs`, `report.rs` | `bert-trace diff`, `bert-trace view` |
//! | `trace(..., hooks={stage: fn})` | `hooks.rs` | `--ablate`, `--patch` (the same seam) |
//! | `bert_trace.train` | `pretraining.rs` | `bert-trace train` |
//! | `bert_trace.finetune` | `finetuning.rs` | `bert-trace finetune` |
//! | `bert_trace.heads` | `head_scores.rs` | `bert-trace heads` |
//! | `bert_trace.attribute` | `attribution.rs` | `bert-trace attribute` |
//! | `bert_trace.explain`, `Trace.explain`, `Explanation` | `explained.rs` | `bert-trace explain` |
//! | `bert_trace.stages`, `bert_trace.inspect` | `lib.rs` | `bert-trace stages`, `bert-trace inspect` |
//! | `bert_trace.lens`, `bert_trace.ablate` | `lib.rs` | `bert-trace lens`, `bert-trace ablate` |
//! | `bert_trace.compare`, `bert_trace.rollout`, `bert_trace.view` | `lib.rs` | `bert-trace compare`, `bert-trace rollout`, `bert-trace view` |
//! | `bert_trace.Error` and its subclasses | `errors.rs` | the one-line message and exit 2 |

mod args;
mod attribution;
mod diff_dumps;
mod errors;
mod explained;
mod finetuning;
mod head_scores;
mod hooks;
mod model;
mod pretraining;
mod report;
mod result;
mod serving;
mod trace_request;

use std::path::PathBuf;

use bert_commands::settings::PassSettings;
use bert_commands::source::process_env;
use bert_core::divergence::ToleranceOverride;
use bert_core::training::options::Warmup;
use bert_core::training::TrainSettings;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{guarded, raise, OrRaise};
use crate::model::Model;
use crate::result::Trace;

/// Traces `text` (a string, or a list of strings for a padded batch) through `model` (a
/// directory, a Hugging Face id, a loaded `Model`, or None for the built-in english-small) and
/// returns every stage as a numpy array. Every other keyword is the command's option of that
/// name, with its default (`bert-trace --help` says what each does; a repeatable option takes
/// a list). `out=DIR` also writes the command's dump, and `reference=DIR` diffs it.
/// `hooks={stage: fn}` calls `fn` with the stage as a numpy array as the pass computes it; what
/// `fn` returns is what the model uses from there on. The GIL is released during the pass;
/// Ctrl-C stops it between stages.
#[pyfunction]
#[pyo3(signature = (
    text, model = None, *, hooks = None, file = None, pair = None, stop_at = None, only = None, out = None,
    mask_prob = None, seed = None, mlm_target = None, nsp_label = None, label = None, kernels = None, precision = "f32",
    weights = None, no_dump = false, npz = false, force = false, truncate = false, color = "auto", head = None, top_k = 5,
    threads = None, reference = None, ablate = None, ablate_with = "zero", patch = None, lens = false,
    backward = false, atol = None, rtol = None,
))]
#[allow(clippy::too_many_arguments)]
fn trace<'py>(
    py: Python<'py>,
    text: &Bound<'py, PyAny>,
    model: Option<&Bound<'py, PyAny>>,
    hooks: Option<&Bound<'py, PyDict>>,
    file: Option<Bound<'py, PyAny>>,
    pair: Option<Bound<'py, PyAny>>,
    stop_at: Option<String>,
    only: Option<Bound<'py, PyAny>>,
    out: Option<Bound<'py, PyAny>>,
    mask_prob: Option<f64>,
    seed: Option<u64>,
    mlm_target: Option<Bound<'py, PyAny>>,
    nsp_label: Option<Bound<'py, PyAny>>,
    label: Option<Bound<'py, PyAny>>,
    kernels: Option<String>,
    precision: &str,
    weights: Option<String>,
    no_dump: bool,
    npz: bool,
    force: bool,
    truncate: bool,
    color: &str,
    head: Option<usize>,
    top_k: usize,
    threads: Option<usize>,
    reference: Option<Bound<'py, PyAny>>,
    ablate: Option<Bound<'py, PyAny>>,
    ablate_with: &str,
    patch: Option<Bound<'py, PyAny>>,
    lens: bool,
    backward: bool,
    atol: Option<f64>,
    rtol: Option<f64>,
) -> PyResult<Trace> {
    // The terminal's colour has no place in a notebook: accepted, as the command's option, and
    // checked.
    if !["auto", "always", "never"].contains(&color) {
        return Err(args::bad_choice(py, bert_core::words::Opt("color"), color, "\"auto\", \"always\" or \"never\""));
    }
    let keywords = trace_request::TraceKeywords {
        file,
        pair,
        stop_at,
        only,
        out,
        mask_prob,
        seed,
        mlm_target,
        nsp_label,
        label,
        kernels,
        precision: precision.into(),
        weights,
        no_dump,
        npz,
        force,
        truncate,
        head,
        top_k,
        threads,
        reference,
        ablate,
        ablate_with: ablate_with.into(),
        patch,
        lens,
        backward,
        atol,
        rtol,
    };
    guarded(py, || trace_request::trace(py, text, model, hooks, keywords))
}

/// Reads a dump directory (or .npz): bert-trace's, `scripts/dump_reference.py`'s, or your own
/// numpy program's. `model` (a `Model`, a directory or a hub id) names the predicted tokens.
#[pyfunction]
#[pyo3(signature = (dir, model = None))]
fn load(py: Python<'_>, dir: &Bound<'_, PyAny>, model: Option<&Bound<'_, PyAny>>) -> PyResult<Trace> {
    guarded(py, || {
        let dir = PathBuf::from(args::path_text(py, dir)?);
        let model = match model.filter(|m| !m.is_none()) {
            Some(m) if m.is_instance_of::<Model>() => Some(m.cast::<Model>()?.clone().unbind()),
            Some(m) => Some(Py::new(py, Model::load(py, Some(PathBuf::from(args::path_text(py, m)?)))?)?),
            None => None,
        };
        Trace::load(py, dir, model)
    })
}

/// Compares `reference` and `trace` (each a `Trace` or a dump directory) stage by stage, as
/// `bert-trace diff` does, and returns its report. `isolate=True` recomputes each stage from
/// each side's own inputs with the model both were made with (whose error is it): `model=`, or
/// the model of a `Trace` given as a side; without one it is refused, as the command refuses
/// `--isolate` without `--model`. `truth` is a float64 dump of the same input (which side is
/// closer to the exact result). `tolerances` is a file `bert_trace.tolerances()` wrote, whose
/// stages' tolerances replace the fixed table's.
#[pyfunction]
#[pyo3(signature = (reference, trace, *, atol = None, rtol = None, isolate = false, truth = None, model = None, tolerances = None))]
#[allow(clippy::too_many_arguments)]
fn diff(
    py: Python<'_>,
    reference: &Bound<'_, PyAny>,
    trace: &Bound<'_, PyAny>,
    atol: Option<f64>,
    rtol: Option<f64>,
    isolate: bool,
    truth: Option<&Bound<'_, PyAny>>,
    model: Option<&Bound<'_, PyAny>>,
    tolerances: Option<&Bound<'_, PyAny>>,
) -> PyResult<report::DiffReport> {
    for (name, value) in [("atol", atol), ("rtol", rtol)] {
        if value.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
            return Err(raise(
                py,
                "InputError",
                format!("{name}={}: expected a finite number, 0 or more", value.unwrap_or_default()),
            ));
        }
    }
    let tolerances = args::path(py, tolerances)?;
    diff_dumps::diff(py, reference, trace, ToleranceOverride { atol, rtol }, isolate, truth, model, tolerances)
}

/// The traces of two models on the same input, side by side, as `bert-trace compare --json`
/// reports them (`a` and `b` each a `Trace` or a dump): per stage the cosine similarity and the
/// relative difference, per attention head the Jensen-Shannon divergence of where it looks.
/// `top` is the command's `--top`, which only its text uses.
// The default is the command's (`ablate::TOP_DEFAULT`), written as a number so that `help()`
// shows it; a test holds it to `bert-trace compare --help`.
#[pyfunction]
#[pyo3(signature = (a, b, *, top = 10))]
fn compare(py: Python<'_>, a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>, top: usize) -> PyResult<Py<PyAny>> {
    guarded(py, || {
        let (a, b) = (diff_dumps::open(py, a)?, diff_dumps::open(py, b)?);
        let reported = py.detach(|| bert_commands::compare::compare_dumps(&a, &b, top)).or_raise(py)?;
        let dict = serde_json::to_value(&reported.report).expect("the report serialises");
        Ok(report::python_of(py, &dict)?.unbind())
    })
}

/// Does padding change a real token's numbers? As `bert-trace padding --json` reports it: each
/// of `text` (a list of texts of different lengths) traced alone and all of them as one padded
/// batch with `model`, in float64 and float32, every stage's real positions compared; or
/// `batched=` (a `Trace` or a dump of a padded batch) against `alone=` (one `Trace` or dump a
/// row, in its order). `first_leak` names the first stage the padding reaches, `passed` is
/// whether none.
#[pyfunction]
#[pyo3(signature = (text = None, model = None, *, file = None, batched = None, alone = None, threads = None, kernels = None))]
#[allow(clippy::too_many_arguments)]
fn padding<'py>(
    py: Python<'py>,
    text: Option<&Bound<'py, PyAny>>,
    model: Option<&Bound<'py, PyAny>>,
    file: Option<&Bound<'py, PyAny>>,
    batched: Option<&Bound<'py, PyAny>>,
    alone: Option<&Bound<'py, PyAny>>,
    threads: Option<usize>,
    kernels: Option<String>,
) -> PyResult<Py<PyAny>> {
    guarded(py, || {
        let reported = match batched {
            Some(batched) => {
                if text.is_some() || file.is_some() || model.is_some() {
                    return Err(raise(
                        py,
                        "InputError",
                        "batched= sets dumps against each other: it takes no text, no file= and no model=".into(),
                    ));
                }
                let batched = diff_dumps::open(py, batched)?;
                // One Trace or dump, or a list of them.
                let one = |side: &Bound<'py, PyAny>| {
                    side.is_instance_of::<crate::result::Trace>() || side.is_instance_of::<pyo3::types::PyString>()
                };
                let alone: Vec<_> = match alone {
                    Some(side) if one(side) => vec![diff_dumps::open(py, side)?],
                    Some(alone) => {
                        alone.try_iter()?.map(|side| diff_dumps::open(py, &side?)).collect::<PyResult<_>>()?
                    }
                    None => Vec::new(),
                };
                py.detach(|| bert_commands::padding::padding_of_dumps(&batched, &alone)).or_raise(py)?
            }
            None => {
                if alone.is_some() {
                    return Err(raise(py, "InputError", "alone= goes with batched=, the batch its texts make".into()));
                }
                let texts = text.map(trace_request::texts_of).transpose()?.unwrap_or_default();
                let request = bert_commands::padding::PaddingRequest {
                    texts,
                    file: args::path(py, file)?,
                    model: args::path(py, model)?,
                    batched: None,
                    alone: Vec::new(),
                    settings: args::settings(py, threads, kernels.as_deref())?,
                };
                py.detach(|| bert_commands::padding::padding(&request)).or_raise(py)?
            }
        };
        errors::notes(py, &reported.notes);
        let dict = serde_json::to_value(&reported.report).expect("the report serialises");
        Ok(report::python_of(py, &dict)?.unbind())
    })
}

/// Measures each stage's honest float32 error against float64 on `text` (texts, each traced
/// alone and all as one padded batch) with `model`, and on `reference=` dumps against their
/// `truth=` dumps (lists, in pairs), and writes the tolerance file `out` (which must not exist)
/// that `diff(..., tolerances=out)` holds each stage to, as `bert-trace tolerances` does.
/// Returns the file's contents as a dict (`stages`: each stage's `atol`, `rtol`, `max_abs`,
/// `max_rel`, `elements`).
#[pyfunction]
#[pyo3(signature = (
    text = None, model = None, *, file = None, out, headroom = None, reference = None, truth = None, threads = None,
    kernels = None,
))]
#[allow(clippy::too_many_arguments)]
fn tolerances<'py>(
    py: Python<'py>,
    text: Option<&Bound<'py, PyAny>>,
    model: Option<&Bound<'py, PyAny>>,
    file: Option<&Bound<'py, PyAny>>,
    out: &Bound<'py, PyAny>,
    headroom: Option<f64>,
    reference: Option<&Bound<'py, PyAny>>,
    truth: Option<&Bound<'py, PyAny>>,
    threads: Option<usize>,
    kernels: Option<String>,
) -> PyResult<Py<PyAny>> {
    guarded(py, || {
        let texts = text.map(trace_request::texts_of).transpose()?.unwrap_or_default();
        let paths = |list: Option<&Bound<'py, PyAny>>| -> PyResult<Vec<PathBuf>> {
            match list {
                Some(list) if list.is_instance_of::<pyo3::types::PyString>() => {
                    Ok(vec![PathBuf::from(args::path_text(py, list)?)])
                }
                Some(list) => list.try_iter()?.map(|p| Ok(PathBuf::from(args::path_text(py, &p?)?))).collect(),
                None => Ok(Vec::new()),
            }
        };
        let request = bert_commands::tolerances::TolerancesRequest {
            texts,
            file: args::path(py, file)?,
            model: args::path(py, model)?,
            references: paths(reference)?,
            truths: paths(truth)?,
            headroom,
            out: PathBuf::from(args::path_text(py, out)?),
            settings: args::settings(py, threads, kernels.as_deref())?,
        };
        let reported = py.detach(|| bert_commands::tolerances::tolerances(&request)).or_raise(py)?;
        errors::notes(py, &reported.notes);
        let dict = serde_json::to_value(&reported.report.file).expect("the file serialises");
        Ok(report::python_of(py, &dict)?.unbind())
    })
}

/// Attention rollout and, with `flow=True`, attention flow, as `bert-trace rollout --json`
/// reports them: of a fresh pass of `text` with `model`, or of `dump=` (a `Trace` or a dump,
/// whose tokens `model` names). Per layer, what each position of its output reads from the input
/// tokens through every layer below it, on the real tokens only, and the tokens the `[MASK]`
/// (else `[CLS]`) reads most after each layer. `heads=` is how a layer's heads are fused
/// ("mean", "max" or "min"), `residual=` the residual connection's weight; `words=True` reads
/// by WordPiece's words and jieba's Chinese words, `words="当 你 在"` by the words given.
// The defaults are the command's (`RESIDUAL_DEFAULT`, `rollout::TOP_DEFAULT`), written as numbers
// so that `help()` shows them; a test holds them to `bert-trace rollout --help`.
#[pyfunction]
#[pyo3(signature = (
    text = None, model = None, *, dump = None, seq = 0, residual = 0.5, heads = "mean", flow = false, top = 5,
    words = None, threads = None, kernels = None,
))]
#[allow(clippy::too_many_arguments)]
fn rollout(
    py: Python<'_>,
    text: Option<String>,
    model: Option<&Bound<'_, PyAny>>,
    dump: Option<&Bound<'_, PyAny>>,
    seq: usize,
    residual: f64,
    heads: &str,
    flow: bool,
    top: usize,
    words: Option<&Bound<'_, PyAny>>,
    threads: Option<usize>,
    kernels: Option<String>,
) -> PyResult<Py<PyAny>> {
    use bert_core::experiments::attention_flow::{HeadFusion, RolloutOptions, HEADS};
    guarded(py, || {
        let heads = args::choice::<HeadFusion>(py, HEADS, heads)?;
        let dump = dump.filter(|d| !d.is_none());
        if text.is_some() == dump.is_some() {
            return Err(raise(py, "InputError", "rollout reads a text or a dump=: give one".into()));
        }
        let input = experiment_request(py, text.unwrap_or_default(), model, threads, kernels.as_deref())?;
        let options = RolloutOptions { seq, residual, heads, flow };
        let words = args::words(py, words)?;
        let request = bert_commands::rollout::RolloutRequest { dump: None, input, options, top, words };
        let reported = match dump {
            None => py.detach(|| bert_commands::rollout::rollout(&request)),
            Some(side) => {
                let name = match side.cast::<Trace>() {
                    Ok(_) => "the trace".to_string(),
                    Err(_) => args::path_text(py, side)?,
                };
                let dump = diff_dumps::open(py, side)?;
                py.detach(|| bert_commands::rollout::rollout_of(&dump, &name, &request))
            }
        }
        .or_raise(py)?;
        crate::errors::notes(py, &reported.notes);
        // A dict that a notebook shows as the grids `bert-trace view` draws of it.
        report::report_of(py, &reported.report)
    })
}

/// Draws a dump or a command's JSON report as `bert-trace view` does (every keyword is the
/// command's option of that name): the page (`out=`, by default `view.html`), or one stage as
/// an SVG or PNG picture (`stage=` with `svg=` or `png=`), written only where bert-trace may
/// write. Returns what the command prints: what was written, and where. (`Trace.view()` draws a
/// trace in memory for a notebook instead.)
#[pyfunction]
#[pyo3(signature = (
    dump, *, out = None, stage = None, head = None, seq = 0, lines = false, svg = None, png = None,
    heatmap = None, words = None, model = None,
))]
#[allow(clippy::too_many_arguments)]
fn view(
    py: Python<'_>,
    dump: &Bound<'_, PyAny>,
    out: Option<&Bound<'_, PyAny>>,
    stage: Option<String>,
    head: Option<usize>,
    seq: usize,
    lines: bool,
    svg: Option<&Bound<'_, PyAny>>,
    png: Option<&Bound<'_, PyAny>>,
    heatmap: Option<&Bound<'_, PyAny>>,
    words: Option<&Bound<'_, PyAny>>,
    model: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    guarded(py, || {
        let request = bert_commands::view::ViewRequest {
            dump: PathBuf::from(args::path_text(py, dump)?),
            out: args::path(py, out)?,
            stage,
            head,
            seq,
            lines,
            svg: args::path(py, svg)?,
            png: args::path(py, png)?,
            heatmaps: args::strings(heatmap)?,
            model: args::path(py, model)?,
            words: args::words(py, words)?,
        };
        let report = py.detach(|| bert_commands::view::view(&request)).or_raise(py)?;
        crate::errors::notes(py, &report.notes);
        Ok(bert_core::words::in_dialect(&report.text, bert_core::words::Dialect::Keywords))
    })
}

/// Serves a dump's page from this machine, as `bert-trace view DUMP --serve` does, with the
/// dump's model behind it (`model=`, by default the one its manifest names): a click on any
/// cell explains it, and the pass can be stepped through and changed. Returns a `Server` at
/// once: its `url` opens the page, `stop()` (or the end of a `with` block) ends it. `host=` is
/// 127.0.0.1 unless given; `port=0` takes a free one; `heatmap=` is `view`'s.
#[pyfunction]
#[pyo3(signature = (dump, *, model = None, host = "127.0.0.1", port = 0, heatmap = None))]
fn serve(
    py: Python<'_>,
    dump: &Bound<'_, PyAny>,
    model: Option<&Bound<'_, PyAny>>,
    host: &str,
    port: u16,
    heatmap: Option<&Bound<'_, PyAny>>,
) -> PyResult<serving::Server> {
    let request = serving::request(args::path(py, model)?, host, port, heatmap)?;
    serving::serve_path(py, PathBuf::from(args::path_text(py, dump)?), request)
}

/// Why one element of a dump's stage is what it is (`bert-trace explain`): `index` is a tuple
/// of ints as numpy reads them (negative ones from the end), with a slice on one axis (then a
/// list of explanations; a bool is refused); `model`
/// is the dump's model, by default the one its manifest names (never the built-in one).
#[pyfunction]
#[pyo3(signature = (dump, stage, index, *, model = None))]
fn explain(
    py: Python<'_>,
    dump: &Bound<'_, PyAny>,
    stage: &str,
    index: &Bound<'_, PyAny>,
    model: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    explained::explain_dump(py, dump, stage, index, model)
}

/// The extension's own memory: a large block that a trace frees (a stage's array, the pass's
/// own) is kept for the next allocation of its size, and handed back to the system once unused
/// for 2 seconds. Traces in a row then reuse it instead of fresh pages that the kernel zeroes
/// on first touch (BENCHMARKS.md), without changing how the interpreter's other libraries
/// allocate; a notebook idle between traces holds nothing extra.
#[global_allocator]
static MEMORY: bert_core::ops::Recycling = bert_core::ops::Recycling::new();

/// Keeps the memory that anything in the process frees for later, instead of handing it back
/// to the system, as the `bert-trace` command does from its start: with glibc's malloc, no
/// later allocation on the main thread's heap gets a mapping of its own, and the heap is never
/// trimmed. bert_trace's own arrays are kept for the next trace without it (for 2 seconds); this
/// is the same for numpy's and torch's allocations too, for good.
///
/// The setting is the whole process's (numpy's and torch's allocations too), applies to
/// allocations made after the call, so call it once, early, and cannot be undone: the
/// interpreter then holds its largest footprint until it exits. A thread other than the main one
/// allocates from its own arena, where glibc still maps an allocation larger than 64 MiB. The
/// same settings can be given before Python starts: `MALLOC_MMAP_MAX_=0
/// MALLOC_TRIM_THRESHOLD_=-1`. Returns True when glibc's malloc took the settings, False where
/// nothing changed (another C library); a preloaded allocator such as jemalloc ignores them.
#[pyfunction]
fn keep_freed_memory() -> bool {
    bert_core::ops::keep_freed_memory()
}

/// Every layer's guess at the text's one `[MASK]` (or at `pos`), read through the MLM head, as
/// `bert-trace lens --json` reports it (every keyword is the command's option of that name): a
/// dict with the `position` and a row per layer (`stage`, the `top` guesses as (id, probability),
/// and with `target=` its probability and rank).
// The defaults are the command's (`lens::TOP_K_DEFAULT`, `ablate::TOP_DEFAULT`), written as
// numbers so that `help()` shows them; a test holds them to `bert-trace --help`.
#[pyfunction]
#[pyo3(signature = (
    text, model = None, *, target = None, pos = None, top_k = 3, json = false,
    threads = None, kernels = None,
))]
#[allow(clippy::too_many_arguments)]
fn lens(
    py: Python<'_>,
    text: String,
    model: Option<&Bound<'_, PyAny>>,
    target: Option<String>,
    pos: Option<usize>,
    top_k: usize,
    json: bool,
    threads: Option<usize>,
    kernels: Option<String>,
) -> PyResult<Py<PyAny>> {
    // The report is always the command's JSON, as a dict: accepted, as the command's option.
    let _ = json;
    guarded(py, || {
        let input = experiment_request(py, text, model, threads, kernels.as_deref())?;
        let request = bert_commands::lens::LensRequest { input, target, pos, top_k };
        let reported = py.detach(|| bert_commands::lens::lens(&request)).or_raise(py)?;
        crate::errors::notes(py, &reported.notes);
        // A dict: the lens has no picture of its own to draw in a notebook.
        let dict = serde_json::to_value(&reported.report).expect("the report serialises");
        Ok(report::python_of(py, &dict)?.unbind())
    })
}

/// Each attention head ablated alone, as `bert-trace ablate --json` reports it (every keyword is
/// the command's option of that name; the command's `--with` is `ablate_with=`, as in `trace`,
/// since `with` is Python's): a dict with log p(`target`) at the `[MASK]`, the `grid` of each
/// head's change in it (`[layers][heads]`), and the `heads` ranked, the most harmful first.
#[pyfunction]
#[pyo3(signature = (
    text, model = None, *, target, ablate_with = "zero", top = 10, json = false,
    threads = None, kernels = None,
))]
#[allow(clippy::too_many_arguments)]
fn ablate(
    py: Python<'_>,
    text: String,
    model: Option<&Bound<'_, PyAny>>,
    target: String,
    ablate_with: &str,
    top: usize,
    json: bool,
    threads: Option<usize>,
    kernels: Option<String>,
) -> PyResult<Py<PyAny>> {
    let _ = json;
    guarded(py, || {
        let input = experiment_request(py, text, model, threads, kernels.as_deref())?;
        let with = args::choice(py, bert_commands::trace::ABLATE_WITH, ablate_with)?;
        let request = bert_commands::ablate::AblateRequest { input, target, with, top };
        let reported = py.detach(|| bert_commands::ablate::ablate(&request)).or_raise(py)?;
        crate::errors::notes(py, &reported.notes);
        report::report_of(py, &reported.report)
    })
}

/// What `lens` and `ablate` read: the text with its one `[MASK]`, the model, the passes' settings.
fn experiment_request(
    py: Python<'_>,
    text: String,
    model: Option<&Bound<'_, PyAny>>,
    threads: Option<usize>,
    kernels: Option<&str>,
) -> PyResult<bert_commands::experiment::ExperimentRequest> {
    Ok(bert_commands::experiment::ExperimentRequest {
        text,
        model: args::path(py, model)?,
        settings: args::settings(py, threads, kernels)?,
    })
}

/// Every stage of `model` (a directory, a Hugging Face id, or None for the built-in
/// english-small), in execution order, as `bert-trace stages` lists them: a dict per stage with
/// its `name`, its `shape` in the stage table's letters, its `sizes` for this model (B and T stay
/// letters), its Hugging Face equivalent (`hf`) and its `formula`.
#[pyfunction]
#[pyo3(signature = (model = None))]
fn stages(py: Python<'_>, model: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
    guarded(py, || {
        let model = args::path(py, model)?;
        let reported = py.detach(|| bert_commands::stages::stages(model.as_deref(), false)).or_raise(py)?;
        crate::errors::notes(py, &reported.notes);
        let rows = serde_json::to_value(&reported.report.stages).expect("the stages serialise");
        Ok(report::python_of(py, &rows)?.unbind())
    })
}

/// What `bert-trace inspect` shows of `model` (a directory, a Hugging Face id, or None for the
/// built-in english-small), or of a `config.json` alone (`config=`): a dict of its `config`,
/// which `heads` it has, and how many `parameters` each part holds.
#[pyfunction]
#[pyo3(signature = (model = None, *, config = None))]
fn inspect(py: Python<'_>, model: Option<&Bound<'_, PyAny>>, config: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
    use bert_commands::inspect::Inspected;
    guarded(py, || {
        let (model, config) = (args::path(py, model)?, args::path(py, config)?);
        let what = match (&config, &model) {
            (Some(_), Some(_)) => {
                return Err(raise(py, "InputError", "model= and config= inspect one thing each: give one".into()))
            }
            (Some(path), None) => Inspected::Config(path),
            (None, model) => Inspected::Model(model.as_deref()),
        };
        let reported = py.detach(|| bert_commands::inspect::inspect(what)).or_raise(py)?;
        crate::errors::notes(py, &reported.notes);
        let dict = serde_json::to_value(&reported.report).expect("the report serialises");
        Ok(report::python_of(py, &dict)?.unbind())
    })
}

/// Measures a model on held-out text as `bert-trace evaluate` does (every keyword is the
/// command's option of that name, with its default): for a model with the MLM head, the MLM
/// loss, perplexity and top-1 and top-5 accuracy at a fixed, seeded 15% of the text's tokens,
/// each shown as `[MASK]`, beside the best guess that ignores the text (`constant_guess`); for a
/// classifier, its loss, accuracy and confusion table on labelled examples. Returns the report
/// as a dict (`model`, `file`, `file_sha256`, `seed`, `max_len`, `evaluation`).
#[pyfunction]
#[pyo3(signature = (file, model = None, *, documents = false, max_len = None, batch_size = None, seed = None, each_token = false, threads = None, kernels = None))]
#[allow(clippy::too_many_arguments)]
fn evaluate<'py>(
    py: Python<'py>,
    file: &Bound<'py, PyAny>,
    model: Option<&Bound<'py, PyAny>>,
    documents: bool,
    max_len: Option<usize>,
    batch_size: Option<usize>,
    seed: Option<u64>,
    each_token: bool,
    threads: Option<usize>,
    kernels: Option<String>,
) -> PyResult<Py<PyAny>> {
    guarded(py, || {
        let request = bert_commands::evaluate::EvaluateRequest {
            model: args::path(py, model)?,
            file: PathBuf::from(args::path_text(py, file)?),
            documents,
            max_len,
            batch_size,
            seed,
            each_token,
            pass: args::settings(py, threads, kernels.as_deref())?,
        };
        let report = py.detach(|| bert_commands::evaluate::evaluate(&request)).or_raise(py)?;
        errors::notes(py, &report.notes);
        let json = serde_json::to_string(&report).expect("a report serialises");
        Ok(py.import("json")?.call_method1("loads", (json,))?.unbind())
    })
}

/// Pretrains BERT on `file` as `bert-trace train` does (every keyword is the command's option of
/// that name, with its default; `dump_step` takes a step, a range "A-B", or a list of them) and
/// returns the report of every step (`step`, `loss`, `mlm_loss`, `nsp_loss`, `lr`). The run's
/// lines are printed as the command prints them; `on_step(report)` is called after each step,
/// `on_eval(evaluation)` after each evaluation of the held-out text (`eval_file=` or
/// `eval_split=`: its `loss`, `perplexity` and `accuracy`).
/// The GIL is released while a step runs; Ctrl-C stops the run after the step it is in (a
/// checkpoint already saved stays).
#[pyfunction]
#[pyo3(signature = (
    file = None, model = None, *, on_step = None, on_eval = None, eval_file = None, eval_split = None,
    eval_every = None, steps = None, lr = None, warmup_steps = None, batch_size = None, max_len = None,
    mask_prob = None, nsp_negatives = None, seed = None, betas = None, eps = None, weight_decay = None,
    max_grad_norm = None, no_decay = None, dropout = None, from_config = false, documents = false, nsp = false,
    save = None, save_every = None, resume = None, dump_step = None, log_every = 1, threads = None, kernels = None,
))]
#[allow(clippy::too_many_arguments)]
fn train<'py>(
    py: Python<'py>,
    file: Option<&Bound<'py, PyAny>>,
    model: Option<&Bound<'py, PyAny>>,
    on_step: Option<&Bound<'py, PyAny>>,
    on_eval: Option<&Bound<'py, PyAny>>,
    eval_file: Option<Bound<'py, PyAny>>,
    eval_split: Option<f64>,
    eval_every: Option<usize>,
    steps: Option<usize>,
    lr: Option<f64>,
    warmup_steps: Option<f64>,
    batch_size: Option<usize>,
    max_len: Option<usize>,
    mask_prob: Option<f64>,
    nsp_negatives: Option<f64>,
    seed: Option<u64>,
    betas: Option<(f64, f64)>,
    eps: Option<f64>,
    weight_decay: Option<f64>,
    max_grad_norm: Option<f64>,
    no_decay: Option<Bound<'py, PyAny>>,
    dropout: Option<f64>,
    from_config: bool,
    documents: bool,
    nsp: bool,
    save: Option<Bound<'py, PyAny>>,
    save_every: Option<usize>,
    resume: Option<Bound<'py, PyAny>>,
    dump_step: Option<Bound<'py, PyAny>>,
    log_every: usize,
    threads: Option<usize>,
    kernels: Option<String>,
) -> PyResult<Py<PyAny>> {
    let no_decay = no_decay.as_ref().filter(|v| !v.is_none()).map(|v| args::strings(Some(v))).transpose()?;
    let settings = TrainSettings {
        steps,
        lr,
        warmup_steps: warmup_steps.map(Warmup::from_number).transpose().or_raise(py)?,
        batch_size,
        max_len,
        mask_prob,
        nsp_negatives,
        seed,
        betas,
        eps,
        weight_decay,
        max_grad_norm,
        no_decay,
        eval_split,
        dropout,
        documents: documents.then_some(true),
        nsp: nsp.then_some(true),
    };
    let keywords = pretraining::TrainKeywords {
        settings,
        from_config,
        eval_file,
        eval_every,
        save,
        save_every,
        resume,
        dump_step,
        log_every,
        threads,
        kernels,
    };
    guarded(py, || pretraining::train(py, file, model, on_step, on_eval, keywords))
}

/// Fine-tunes a classifier on the labelled examples of `file` as `bert-trace finetune` does
/// (every keyword is the command's option of that name, with its default) and returns the
/// run's reports: `{"steps": [...], "evaluations": [...], "classes": [...]}`, each evaluation
/// with its `loss`, `accuracy` and `confusion` table (`confusion[true][predicted]`).
/// `on_step(report)` is called after each step, `on_eval(evaluation)` after each evaluation.
/// The GIL is released while a step runs; Ctrl-C stops the run after the step it is in.
#[pyfunction]
#[pyo3(signature = (
    file = None, model = None, *, on_step = None, on_eval = None, eval_file = None, eval_split = None,
    eval_every = None, epochs = None, steps = None, lr = None, warmup_steps = None, batch_size = None,
    max_len = None, seed = None, betas = None, eps = None, weight_decay = None, max_grad_norm = None,
    no_decay = None, dropout = None, from_config = false, save = None, save_every = None, resume = None, dump_step = None,
    log_every = 1, threads = None, kernels = None,
))]
#[allow(clippy::too_many_arguments)]
fn finetune<'py>(
    py: Python<'py>,
    file: Option<&Bound<'py, PyAny>>,
    model: Option<&Bound<'py, PyAny>>,
    on_step: Option<&Bound<'py, PyAny>>,
    on_eval: Option<&Bound<'py, PyAny>>,
    eval_file: Option<Bound<'py, PyAny>>,
    eval_split: Option<f64>,
    eval_every: Option<usize>,
    epochs: Option<usize>,
    steps: Option<usize>,
    lr: Option<f64>,
    warmup_steps: Option<f64>,
    batch_size: Option<usize>,
    max_len: Option<usize>,
    seed: Option<u64>,
    betas: Option<(f64, f64)>,
    eps: Option<f64>,
    weight_decay: Option<f64>,
    max_grad_norm: Option<f64>,
    no_decay: Option<Bound<'py, PyAny>>,
    dropout: Option<f64>,
    from_config: bool,
    save: Option<Bound<'py, PyAny>>,
    save_every: Option<usize>,
    resume: Option<Bound<'py, PyAny>>,
    dump_step: Option<Bound<'py, PyAny>>,
    log_every: usize,
    threads: Option<usize>,
    kernels: Option<String>,
) -> PyResult<Py<PyAny>> {
    let no_decay = no_decay.as_ref().filter(|v| !v.is_none()).map(|v| args::strings(Some(v))).transpose()?;
    let settings = TrainSettings {
        steps,
        lr,
        warmup_steps: warmup_steps.map(Warmup::from_number).transpose().or_raise(py)?,
        batch_size,
        max_len,
        seed,
        betas,
        eps,
        weight_decay,
        max_grad_norm,
        no_decay,
        eval_split,
        dropout,
        ..TrainSettings::default()
    };
    let keywords = finetuning::FinetuneKeywords {
        from_config,
        settings,
        eval_file,
        eval_every,
        epochs,
        save,
        save_every,
        resume,
        dump_step,
        log_every,
        threads,
        kernels,
    };
    guarded(py, || finetuning::finetune(py, file, model, on_step, on_eval, keywords))
}

/// Which heads matter, as `bert-trace heads --json` reports it (every keyword is the command's
/// option of that name): `{"importance": {"raw", "normalized", "order", "curve"}, "statistics":
/// {"cls", "sep", "punctuation", "self", "previous", "next", "entropy"}}`, each grid a list of
/// layers of heads. Neither `importance=` nor `statistics=`: both.
#[pyfunction]
#[pyo3(signature = (
    text = None, model = None, *, file = None, pair = None, mlm_target = None, nsp_label = None, label = None,
    importance = false, statistics = false, batch_size = None, json = false, threads = None, kernels = None,
))]
#[pyo3(name = "heads")]
#[allow(clippy::too_many_arguments)]
fn heads_of<'py>(
    py: Python<'py>,
    text: Option<&Bound<'py, PyAny>>,
    model: Option<&Bound<'py, PyAny>>,
    file: Option<Bound<'py, PyAny>>,
    pair: Option<Bound<'py, PyAny>>,
    mlm_target: Option<Bound<'py, PyAny>>,
    nsp_label: Option<Bound<'py, PyAny>>,
    label: Option<Bound<'py, PyAny>>,
    importance: bool,
    statistics: bool,
    batch_size: Option<usize>,
    json: bool,
    threads: Option<usize>,
    kernels: Option<String>,
) -> PyResult<Py<PyAny>> {
    // The report is always the command's JSON, as a dict: accepted, as the command's option.
    let _ = json;
    let keywords = head_scores::HeadsKeywords {
        file,
        pair,
        mlm_target,
        nsp_label,
        label,
        importance,
        statistics,
        batch_size,
        threads,
        kernels,
    };
    let none = py.None().into_bound(py);
    guarded(py, || head_scores::heads(py, text.unwrap_or(&none), model, keywords))
}

/// Which input tokens a prediction rests on, as `bert-trace attribute --json` reports it (every
/// keyword is the command's option of that name): `{"method", "of", "examples": [{"text",
/// "target", "score", "tokens": [{"position", "token", "attribution"}], "completeness"}]}`, a
/// dict that draws the tokens coloured in a notebook; `words=True` (or the words of one text,
/// separated by spaces) adds each example's `words`, the attributions summed over each word.
#[pyfunction]
#[pyo3(signature = (
    text = None, model = None, *, file = None, pair = None, method = None, target = None,
    label = None, nsp_label = None, of = None, occlude_with = None, baseline = None,
    ig_steps = None, ig_rule = None, json = false, words = None, threads = None, kernels = None,
))]
#[allow(clippy::too_many_arguments)]
fn attribute<'py>(
    py: Python<'py>,
    text: Option<&Bound<'py, PyAny>>,
    model: Option<&Bound<'py, PyAny>>,
    file: Option<Bound<'py, PyAny>>,
    pair: Option<Bound<'py, PyAny>>,
    method: Option<String>,
    target: Option<Bound<'py, PyAny>>,
    label: Option<Bound<'py, PyAny>>,
    nsp_label: Option<Bound<'py, PyAny>>,
    of: Option<String>,
    occlude_with: Option<String>,
    baseline: Option<String>,
    ig_steps: Option<usize>,
    ig_rule: Option<String>,
    json: bool,
    words: Option<Bound<'py, PyAny>>,
    threads: Option<usize>,
    kernels: Option<String>,
) -> PyResult<Py<PyAny>> {
    // The report is always the command's JSON, as a dict: accepted, as the command's option.
    let _ = json;
    let keywords = attribution::AttributeKeywords {
        file,
        pair,
        method,
        target,
        label,
        nsp_label,
        of,
        occlude_with,
        baseline,
        ig_steps,
        ig_rule,
        words,
        threads,
        kernels,
    };
    let none = py.None().into_bound(py);
    guarded(py, || attribution::attribute(py, text.unwrap_or(&none), model, keywords))
}

/// For the tests: a panic inside the extension, which must surface as `bert_trace.Error`. Only
/// the test command's build has it (the `test-hooks` feature), not a wheel.
#[cfg(feature = "test-hooks")]
#[pyfunction]
fn _panic_for_tests(py: Python<'_>) -> PyResult<()> {
    guarded(py, || panic!("a panic the tests asked for"))
}

/// For the tests: the bytes and blocks the extension's memory keeps now.
#[cfg(feature = "test-hooks")]
#[pyfunction]
fn _memory_held() -> (usize, usize) {
    MEMORY.held()
}

/// For the tests: how long a kept block may go unused before it is handed back.
#[cfg(feature = "test-hooks")]
#[pyfunction]
fn _set_memory_idle(seconds: f64) {
    MEMORY.set_idle(std::time::Duration::from_secs_f64(seconds.max(0.0)));
}

#[pymodule]
fn _bert_trace(m: &Bound<'_, PyModule>) -> PyResult<()> {
    MEMORY.start_releasing();
    // matrixmultiply reads its thread count once, from the environment, at its first product:
    // set here, at import, from BERT_TRACE_THREADS when the user set it (a later `threads=` sizes
    // bert-trace's own pool only).
    if let Ok(settings) = PassSettings::from_env(PassSettings::default(), &process_env) {
        if let (Some(value), None) = (settings.matmul_threads(), std::env::var_os(bert_core::ops::MATMUL_ENV_VAR)) {
            std::env::set_var(bert_core::ops::MATMUL_ENV_VAR, value);
        }
    }
    m.add_function(wrap_pyfunction!(trace, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(diff, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add_function(wrap_pyfunction!(rollout, m)?)?;
    m.add_function(wrap_pyfunction!(padding, m)?)?;
    m.add_function(wrap_pyfunction!(tolerances, m)?)?;
    m.add_function(wrap_pyfunction!(view, m)?)?;
    m.add_function(wrap_pyfunction!(explain, m)?)?;
    m.add_function(wrap_pyfunction!(serve, m)?)?;
    m.add_function(wrap_pyfunction!(stages, m)?)?;
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(lens, m)?)?;
    m.add_function(wrap_pyfunction!(ablate, m)?)?;
    m.add_function(wrap_pyfunction!(keep_freed_memory, m)?)?;
    m.add_function(wrap_pyfunction!(evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(train, m)?)?;
    m.add_function(wrap_pyfunction!(finetune, m)?)?;
    m.add_function(wrap_pyfunction!(heads_of, m)?)?;
    m.add_function(wrap_pyfunction!(attribute, m)?)?;
    m.add_function(wrap_pyfunction!(head_scores::_picture, m)?)?;
    #[cfg(feature = "test-hooks")]
    m.add_function(wrap_pyfunction!(_panic_for_tests, m)?)?;
    #[cfg(feature = "test-hooks")]
    m.add_function(wrap_pyfunction!(_memory_held, m)?)?;
    #[cfg(feature = "test-hooks")]
    m.add_function(wrap_pyfunction!(_set_memory_idle, m)?)?;
    m.add_class::<Model>()?;
    m.add_class::<serving::Server>()?;
    m.add_class::<Trace>()?;
    m.add_class::<report::DiffReport>()?;
    m.add_class::<report::Page>()?;
    m.add_class::<explained::Explanation>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
