//! The simulated lower precisions (`bert_core::precision`) against PyTorch's own passes in them,
//! the goldens `scripts/dump_reference.py` made of one padded batch of two with the course's
//! English model (`golden/english-small/precision/`): `model.to(torch.bfloat16)` and
//! `model.to(torch.float16)` (eager attention, on a CPU), the int8 weight rule in NumPy, and the
//! float64 truth.
//!
//! - Op by op: every stage recomputed by bert-trace's simulated operation from PyTorch's own
//!   values of its inputs, against PyTorch's value, in units in the last place of the format.
//! - Pass by pass: bert-trace's whole simulated pass and PyTorch's, each against the truth: their
//!   errors are of the same size on every stage (the two passes part after a first difference of
//!   one unit, so their values are not compared one to one).
//! - The weights: bert-trace's rounding and int8 rule give PyTorch's and NumPy's weights bit for
//!   bit (every tensor's digest), and the int8 pass equals the NumPy rule's within float32's
//!   tolerances.

use std::path::{Path, PathBuf};

use bert_core::divergence::{compare_tensors, default_tolerance, Status, Tolerance};
use bert_core::io::dump::Dump;
use bert_core::model::Pass;
use bert_core::pass::{Memory, Tensor};
use bert_core::precision::{with_format, Format, Rounding, Simulation, WeightFormat};
use bert_core::recompute::recompute_from;
use bert_core::stage::{self, DType, Part};
use bert_core::BertModel;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn golden(case: &str) -> Dump {
    Dump::open(&root().join("golden/english-small/precision").join(case)).expect("the precision goldens are committed")
}

/// english-small with the weights `simulation` holds.
fn model(simulation: Simulation) -> BertModel {
    let mut model = BertModel::load(&root().join("golden/english-small")).expect("english-small loads");
    simulation.apply_to_weights(&mut model);
    model
}

/// The float stages a pass computes (not its inputs), in the dump's order.
fn computed(dump: &Dump) -> Vec<(String, stage::Stage)> {
    dump.manifest
        .stages
        .iter()
        .filter_map(|entry| Some((entry.name.clone(), stage::parse(&entry.name)?)))
        .filter(|(_, stage)| stage.info().part != Part::Input && stage.info().dtype == DType::F32)
        .collect()
}

fn values(tensor: &Tensor) -> Vec<f64> {
    tensor.to_f64().iter().copied().collect()
}

/// How far `ours` is from `theirs`, element by element, in units: the format's spacing at
/// `theirs`, or float32's absolute tolerance for the stage (`floor`) where that is larger. A
/// difference of the float32 operations themselves is the float32 goldens' to bound (golden.rs),
/// not the simulation's: GELU's tail, where PyTorch's 0.5·x·(1 + erf(x/√2)) cancels and
/// bert-trace's does not (gelu(-5.3125) is -2.87e-7; PyTorch's float32 gives -3.17e-7), and a
/// product near 0 summed in another order. The share of elements 0, at most 1 and at most 2
/// units off, and the most.
struct Ulps {
    exact: f64,
    within_one: f64,
    within_two: f64,
    most: f64,
}

fn ulps(format: Format, floor: f64, ours: &[f64], theirs: &[f64]) -> Ulps {
    let distances: Vec<f64> = ours
        .iter()
        .zip(theirs)
        .map(|(&a, &b)| match (a == b, format.ulp(b)) {
            (true, _) => 0.0,
            (false, Some(ulp)) => (a - b).abs() / ulp.max(floor),
            (false, None) => f64::INFINITY,
        })
        .collect();
    let share = |limit: f64| distances.iter().filter(|&&d| d <= limit).count() as f64 / distances.len() as f64;
    Ulps {
        exact: share(0.0),
        within_one: share(1.0),
        within_two: share(2.0),
        most: distances.iter().copied().fold(0.0, f64::max),
    }
}

/// Every stage of PyTorch's pass in `format`, recomputed by the simulated operation from
/// PyTorch's values of its inputs: at least 99.99% of the elements of every stage are within one
/// unit ([`ulps`]) and all within two. Most are PyTorch's exactly (99.77% in bfloat16, 99.53% in
/// float16, measured on a Zen 4); the rest are a product's float32 sum accumulated in another
/// order than oneDNN's, which lands an element near a rounding boundary on the other side.
#[test]
fn each_simulated_operation_gives_pytorchs_value_to_a_unit_in_the_last_place() {
    let mut failures = Vec::new();
    for (case, format) in [("bfloat16", Format::Bfloat16), ("float16", Format::Float16)] {
        let dump = golden(case);
        let model = model(Simulation { format: Some(format), weights: None });
        let n_layers = model.config.num_hidden_layers;
        println!("{case}: stage, share exact / within 1 / within 2 units, most units");
        let (mut elements, mut exact) = (0usize, 0f64);
        for (name, stage) in computed(&dump) {
            let recomputed = with_format(Some(format), || recompute_from(&model, &dump, stage, n_layers))
                .expect("the dump reads")
                .unwrap_or_else(|reason| panic!("{case}: {name} is not recomputed: {reason}"));
            // The stage's own rounding, which a pass's hook does as it hands the stage on.
            let ours: Vec<f64> = values(&recomputed).iter().map(|&v| f64::from(format.round(v as f32))).collect();
            let theirs = values(&dump.read(dump.entry(&name).unwrap()).unwrap());
            let u = ulps(format, default_tolerance(stage.kind).atol, &ours, &theirs);
            println!("  {name:28} {:.4} / {:.4} / {:.5}  {}", u.exact, u.within_one, u.within_two, u.most);
            elements += theirs.len();
            exact += u.exact * theirs.len() as f64;
            if u.within_one < 0.9999 || u.within_two < 1.0 {
                failures.push(format!(
                    "{case} {name}: expected ≥ 99.99% within 1 unit and all within 2, got {:.4}% and {:.4}% \
                     (most {} units)",
                    100.0 * u.within_one,
                    100.0 * u.within_two,
                    u.most
                ));
            }
        }
        println!("{case}: {:.2}% of {elements} elements exactly PyTorch's", 100.0 * exact / elements as f64);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// bert-trace's whole simulated pass and PyTorch's, each against the float64 truth over the
/// real tokens: on every stage the larger error is at most 3 times the smaller (or both are
/// within one unit of the format at 1, where a ratio means nothing). The largest ratio measured
/// was 1.6 (bfloat16, layer3.ffn.residual).
#[test]
fn a_simulated_pass_errs_against_the_truth_as_much_as_pytorchs() {
    let truth = golden("truth");
    let mask = truth.attention_mask().unwrap();
    let mut failures = Vec::new();
    for (case, format) in [("bfloat16", Format::Bfloat16), ("float16", Format::Float16)] {
        let theirs = golden(case);
        let model = model(Simulation { format: Some(format), weights: None });
        let batch = model.encode(&theirs.manifest.inputs.texts, None, false).unwrap();
        let mut ours = Memory::default();
        let mut rounding = Rounding::new(format);
        with_format(Some(format), || {
            model.trace_with(&batch, &mut ours, Pass { hook: Some(&mut rounding), ..Pass::default() })
        })
        .unwrap();
        assert_eq!(rounding.first_non_finite(), None, "{case}: every value stays finite");
        println!("{case}: stage, max |bert-trace − truth|, max |PyTorch − truth|");
        let floor = 2.0 * format.unit_roundoff();
        for (name, _) in computed(&theirs) {
            let exact = truth.read(truth.entry(&name).unwrap()).unwrap();
            let distance = |side: &Tensor| {
                let report = compare_tensors(&name, &exact, side, Tolerance::EXACT, mask.as_ref());
                report.stats.expect("the same shape").max_abs
            };
            let ours = distance(ours.get(&name).unwrap_or_else(|| panic!("{case}: bert-trace has no {name}")));
            let pytorch = distance(&theirs.read(theirs.entry(&name).unwrap()).unwrap());
            let ratio = ours.max(pytorch) / ours.min(pytorch).max(f64::MIN_POSITIVE);
            println!("  {name:28} {ours:.3e}  {pytorch:.3e}");
            if ratio > 3.0 && ours.max(pytorch) > floor {
                failures.push(format!(
                    "{case} {name}: expected errors of the same size, got bert-trace {ours:.3e}, PyTorch {pytorch:.3e}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The weights of each simulation are the weights PyTorch and NumPy made, every tensor's digest
/// equal; the int8 pass is the NumPy rule's within float32's own tolerances.
#[test]
fn the_simulated_weights_are_pytorchs_and_the_int8_pass_is_the_numpy_rules() {
    let cases = [
        ("bfloat16", Simulation { format: Some(Format::Bfloat16), weights: None }),
        ("float16", Simulation { format: Some(Format::Float16), weights: None }),
        ("int8", Simulation { format: None, weights: Some(WeightFormat::Int8) }),
    ];
    let mut failures = Vec::new();
    for (case, simulation) in cases {
        let dump = golden(case);
        assert_eq!(dump.simulation(), simulation, "{case}: the dump's producer records what it held");
        let ours = model(simulation).tensor_digests();
        assert!(dump.manifest.model_tensors.len() >= 70, "{case}: the dump records every tensor's digest");
        for (name, theirs) in &dump.manifest.model_tensors {
            match ours.get(name) {
                Some(digest) if digest == theirs => {}
                other => failures.push(format!("{case}: {name}: expected digest {theirs}, got {other:?}")),
            }
        }
    }
    let dump = golden("int8");
    let model = model(cases[2].1);
    let batch = model.encode(&dump.manifest.inputs.texts, None, false).unwrap();
    let mut ours = Memory::default();
    model.trace(&batch, &mut ours, None).unwrap();
    let mask = dump.attention_mask().unwrap();
    for (name, stage) in computed(&dump) {
        let theirs = dump.read(dump.entry(&name).unwrap()).unwrap();
        let report =
            compare_tensors(&name, &theirs, ours.get(&name).unwrap(), default_tolerance(stage.kind), mask.as_ref());
        if report.status != Status::Pass {
            failures.push(format!(
                "int8 {name}: expected within {:?}, got {:?}",
                default_tolerance(stage.kind),
                report.stats
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A model whose weights are 300 times the tiny model's overflows float16: the pass goes on,
/// the first value that is not finite is noted (the stage, its index, that it overflowed, the
/// value before rounding), every stage before it is finite, and a dump records the same note.
#[test]
fn an_overflow_is_noted_where_it_first_happens_and_recorded_in_the_dump() {
    use bert_core::io::dump::{DumpWriter, Options};
    use bert_core::pass::Sink;
    use bert_core::precision::NonFiniteWhy;

    let (_dir, mut model) = crate::support::Checkpoint::tiny().map_values(|v| v * 300.0).load();
    let simulation = Simulation { format: Some(Format::Float16), weights: None };
    simulation.apply_to_weights(&mut model);
    let batch = model.encode(&["When in Rome, do as the [MASK] do.".to_string()], None, false).unwrap();
    let out = tempfile::tempdir().unwrap();
    let inputs = bert_core::io::dump::manifest::Inputs::default();
    let mut writer =
        DumpWriter::create(&out.path().join("dump"), serde_json::json!({}), "tiny".into(), inputs, Options::default())
            .unwrap();
    let mut rounding = Rounding::new(Format::Float16);
    writer.set_simulation(simulation, rounding.first_non_finite_cell());
    let mut memory = Memory::default();
    {
        let mut both = Both(&mut memory, &mut writer);
        with_format(Some(Format::Float16), || {
            model.trace_with(&batch, &mut both, Pass { hook: Some(&mut rounding), ..Pass::default() })
        })
        .unwrap();
    }
    writer.finish().unwrap();
    let first = rounding.first_non_finite().expect("a value overflows float16");
    assert_eq!(first.why, NonFiniteWhy::Overflow, "{first}");
    let before: f64 = first.before.parse().unwrap();
    // 65520 is the smallest magnitude that rounds to infinity (65504 and half a unit, a tie
    // that goes to the even neighbour).
    assert!(before.abs() >= 65520.0, "{first}: expected at least 65520, what float16 rounds to infinity");
    let at = memory.stages.iter().position(|(stage, _)| stage.name() == first.stage).expect("the stage is kept");
    let (_, tensor) = &memory.stages[at];
    let value = tensor.to_f64()[ndarray::IxDyn(&first.index)];
    assert!(value.is_infinite(), "{first}: the stage holds {value} there");
    for (stage, tensor) in &memory.stages[..at] {
        assert!(tensor.to_f64().iter().all(|v| v.is_finite()), "{stage} is before {first} and not finite");
    }
    let dump = Dump::open(&out.path().join("dump")).unwrap();
    let record = dump.manifest.simulated.clone().expect("the manifest records the simulation");
    assert_eq!(record.first_non_finite, Some(first));
    assert_eq!(dump.simulation(), simulation);
}

/// A sink that hands each stage to two.
struct Both<'a>(&'a mut Memory, &'a mut bert_core::DumpWriter);

impl bert_core::pass::Sink for Both<'_> {
    fn emit(&mut self, stage: bert_core::Stage, tensor: bert_core::TensorView<'_>) -> bert_core::Result<()> {
        self.0.emit(stage, tensor.clone())?;
        self.1.emit(stage, tensor)
    }
}
