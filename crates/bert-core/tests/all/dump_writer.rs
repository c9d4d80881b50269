//! `DumpWriter` on its own, held to the rules of `src/io/dump/mod.rs`: whole or visibly incomplete,
//! nothing of the user's ever replaced or removed (a property test over random directories),
//! one run at a time, and the same files whether a dump is `.npy` files or one `.npz`.

#![cfg(unix)]

use std::path::Path;

use bert_core::io::dump::manifest::Inputs;
use bert_core::io::dump::{Dump, DumpWriter, Options};
use bert_core::pass::{Sink, Tensor, TensorView};
use bert_core::stage::{Stage, StageKind};
use ndarray::{ArrayD, Dimension, IxDyn};
use ndarray_npy::{ReadNpyExt, WriteNpyExt};
use proptest::prelude::*;

fn inputs() -> Inputs {
    Inputs { texts: vec!["test".into()], ..Inputs::default() }
}

fn create(dir: &Path, options: Options) -> bert_core::Result<DumpWriter> {
    DumpWriter::create(dir, serde_json::json!({"name": "bert-trace"}), "test".into(), inputs(), options)
}

fn writer(dir: &Path) -> DumpWriter {
    create(dir, Options::default()).expect("dump directory")
}

/// A tensor of `shape` whose values all differ and depend on `seed`.
fn tensor(shape: &[usize], seed: f32) -> ArrayD<f32> {
    ArrayD::from_shape_fn(IxDyn(shape), |index| {
        seed + index.as_array_view().iter().fold(0.0, |acc, &i| acc * 7.0 + i as f32)
    })
}

fn emit(sink: &mut DumpWriter, stage: Stage, values: &ArrayD<f32>) {
    sink.emit(stage, TensorView::F32(values.view())).expect("emit");
}

/// One whole run into `dir`: the stages in order, then the manifest.
fn write_dump(dir: &Path, options: Options, stages: &[(Stage, ArrayD<f32>)]) {
    let mut sink = create(dir, options).expect("dump directory");
    for (stage, values) in stages {
        emit(&mut sink, *stage, values);
    }
    sink.finish().expect("finish");
}

/// Reads `stage` from the dump at `path` (a directory or its archive) and checks it equals
/// `want`, naming the stage if not.
fn check(path: &Path, stage: Stage, want: &ArrayD<f32>) {
    let dump = Dump::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let entry = dump.entry(&stage.name()).unwrap_or_else(|| panic!("{stage}: not in the manifest"));
    match dump.read(entry).unwrap_or_else(|e| panic!("{stage}: {e}")) {
        Tensor::F32(got) => assert!(got == *want, "{stage}: expected {want:?}, got {got:?}"),
        other => panic!("{stage}: expected float32, got {other:?}"),
    }
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("readable")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

const SCORES: Stage = Stage { layer: Some(0), kind: StageKind::AttnScores, of: bert_core::stage::Of::Value };
const PROBS: Stage = Stage { layer: Some(0), kind: StageKind::AttnProbs, of: bert_core::stage::Of::Value };
const OUTPUT: Stage = Stage { layer: Some(0), kind: StageKind::AttnOutput, of: bert_core::stage::Of::Value };

/// Stages as a forward pass emits them: per layer, two stages of one size and one of another,
/// with values that depend on `seed`.
fn layered_stages(layers: usize, t: usize, seed: f32) -> Vec<(Stage, ArrayD<f32>)> {
    let mut stages = Vec::new();
    for layer in 0..layers {
        let seed = seed + layer as f32 * 100.0;
        stages.push((Stage::layer(layer, StageKind::AttnScores), tensor(&[1, 2, t, t], seed)));
        stages.push((Stage::layer(layer, StageKind::AttnProbs), tensor(&[1, 2, t, t], seed + 1.0)));
        stages.push((Stage::layer(layer, StageKind::AttnOutput), tensor(&[1, t, 8], seed + 2.0)));
    }
    stages
}

/// Checks that `dir` is a finished dump of exactly `stages`: each stage holds its values, and
/// the directory holds the marker, the stage files (or the archive) and the manifest, nothing
/// else. `when` names the moment in the test's message.
fn check_whole_dump(dir: &Path, npz: bool, stages: &[(Stage, ArrayD<f32>)], when: &str) {
    for (stage, values) in stages {
        check(dir, *stage, values);
    }
    let mut expected: Vec<String> =
        if npz { vec!["trace.npz".into()] } else { stages.iter().map(|(stage, _)| stage.file_name()).collect() };
    expected.extend([".bert-trace-dump".to_string(), "manifest.json".into()]);
    expected.sort();
    assert_eq!(listing(dir), expected, "{when}");
}

#[test]
fn a_rerun_replaces_its_own_files_and_removes_those_it_did_not_write() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    write_dump(&dir, Options::default(), &layered_stages(4, 6, 1.0));

    // Stopped after two layers, as with --stop-at, then a longer input with other sizes.
    let stopped = layered_stages(2, 6, 50.0);
    write_dump(&dir, Options::default(), &stopped);
    check_whole_dump(&dir, false, &stopped, "after the stopped rerun");
    let longer = layered_stages(3, 9, 70.0);
    write_dump(&dir, Options::default(), &longer);
    check_whole_dump(&dir, false, &longer, "after the rerun with longer input");
}

#[test]
fn a_rerun_writes_into_the_previous_runs_files() {
    use std::os::unix::fs::MetadataExt;
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    write_dump(&dir, Options::default(), &layered_stages(2, 6, 1.0));
    let inode = |stage: Stage| std::fs::metadata(dir.join(stage.file_name())).unwrap().ino();
    let before: Vec<u64> = layered_stages(2, 6, 1.0).iter().map(|(s, _)| inode(*s)).collect();
    // Shorter this time, so each reused file must also be cut to its new length.
    let second = layered_stages(2, 4, 9.0);
    write_dump(&dir, Options::default(), &second);
    check_whole_dump(&dir, false, &second, "after the rerun");
    let after: Vec<u64> = second.iter().map(|(s, _)| inode(*s)).collect();
    assert_eq!(after, before, "the rerun made new files instead of writing into the previous ones");
}

#[test]
fn a_file_the_user_hard_linked_keeps_the_first_runs_values() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    let first = layered_stages(3, 5, 1.0);
    write_dump(&dir, Options::default(), &first);
    // `cp -al dump kept`: every stage kept under another name.
    let kept = temp.path().join("kept");
    std::fs::create_dir(&kept).unwrap();
    for (stage, _) in &first {
        std::fs::hard_link(dir.join(stage.file_name()), kept.join(stage.file_name())).unwrap();
    }
    let second = layered_stages(3, 5, 500.0);
    write_dump(&dir, Options::default(), &second);
    check_whole_dump(&dir, false, &second, "the rerun's directory");
    for (stage, values) in &first {
        let got = ArrayD::<f32>::read_npy(std::fs::File::open(kept.join(stage.file_name())).unwrap()).unwrap();
        assert!(got == *values, "the kept link to {stage}: expected the first run's {values:?}, got {got:?}");
    }
}

#[test]
fn a_run_that_fails_before_its_first_stage_leaves_the_previous_dump_whole() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    let first = layered_stages(1, 4, 1.0);
    write_dump(&dir, Options::default(), &first);
    drop(writer(&dir));
    check_whole_dump(&dir, false, &first, "after a run that wrote nothing");
}

#[test]
fn an_unfinished_rerun_leaves_no_manifest() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    write_dump(&dir, Options::default(), &[(SCORES, tensor(&[1, 1, 4, 4], 1.0)), (PROBS, tensor(&[1, 1, 4, 4], 2.0))]);
    // A trace that fails after its first stage drops the writer without finishing it: the
    // stage it wrote is whole, the previous run's other file is still ours to clean up, and no
    // manifest says the directory is a dump.
    let mut second = writer(&dir);
    let new = tensor(&[1, 1, 4, 4], 5.0);
    emit(&mut second, SCORES, &new);
    drop(second);
    let mut expected = vec![".bert-trace-dump".to_string(), SCORES.file_name(), PROBS.file_name()];
    expected.sort();
    assert_eq!(listing(&dir), expected);
    let got = ArrayD::<f32>::read_npy(std::fs::File::open(dir.join(SCORES.file_name())).unwrap()).unwrap();
    assert!(got == new, "{SCORES}: the unfinished run's file is not whole");
    // The next run writes a whole dump.
    let next = layered_stages(1, 4, 9.0);
    write_dump(&dir, Options::default(), &next);
    check_whole_dump(&dir, false, &next, "after the next run");
}

#[test]
fn every_stage_holds_exactly_its_values_contiguous_or_not() {
    // Query is emitted as the forward pass emits it: the heads-first view [B,nh,T,hs] of a
    // [B,T,nh,hs] array, which is not contiguous.
    let temp = tempfile::tempdir().unwrap();
    for npz in [false, true] {
        let dir = temp.path().join(format!("dump-{npz}"));
        let mut expected = Vec::new();
        let mut sink = create(&dir, Options { npz, ..Options::default() }).unwrap();
        for (layer, t) in [64, 8, 32, 2, 64, 16].into_iter().enumerate() {
            let scores = tensor(&[1, 4, t, t], layer as f32);
            emit(&mut sink, Stage::layer(layer, StageKind::AttnScores), &scores);
            expected.push((Stage::layer(layer, StageKind::AttnScores), scores));
            let query = tensor(&[1, t, 4, 3], layer as f32 * 1000.0);
            let heads_first = query.view().permuted_axes(IxDyn(&[0, 2, 1, 3]));
            sink.emit(Stage::layer(layer, StageKind::AttnQuery), TensorView::F32(heads_first.clone())).unwrap();
            expected.push((Stage::layer(layer, StageKind::AttnQuery), heads_first.to_owned()));
        }
        sink.finish().unwrap();
        check_whole_dump(&dir, npz, &expected, &format!("npz {npz}"));
    }
}

#[test]
fn files_are_byte_for_byte_what_numpy_writes_and_reruns_repeat_them() {
    let temp = tempfile::tempdir().unwrap();
    let values = tensor(&[2, 3, 5], 0.5);
    let mut expected = Vec::new();
    values.write_npy(&mut expected).unwrap();
    let mut archives = Vec::new();
    for run in 0..2 {
        let dir = temp.path().join(format!("dump{run}"));
        write_dump(&dir, Options::default(), &[(OUTPUT, values.clone())]);
        let got = std::fs::read(dir.join(OUTPUT.file_name())).unwrap();
        assert!(got == expected, "{OUTPUT}: {} bytes written, ndarray-npy writes {}", got.len(), expected.len());
        let npz = temp.path().join(format!("npz{run}"));
        write_dump(&npz, Options { npz: true, ..Options::default() }, &[(OUTPUT, values.clone())]);
        archives.push(std::fs::read(npz.join("trace.npz")).unwrap());
    }
    assert!(archives[0] == archives[1], "two runs wrote different trace.npz bytes");
}

#[test]
fn a_stage_larger_than_the_queue_is_written_whole() {
    // 17 million values, 68 MB: more than the 64 MB of copies the writer may hold, so it is
    // written at once from the view; the stages around it still go through the queue.
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    let large = ArrayD::from_shape_fn(IxDyn(&[1, 17, 1000, 1000]), |i| (i[1] * 1_000_000 + i[2] * 1000 + i[3]) as f32);
    let stages = [(PROBS, tensor(&[1, 2, 8, 8], 1.0)), (SCORES, large), (OUTPUT, tensor(&[1, 8, 4], 2.0))];
    write_dump(&dir, Options::default(), &stages);
    check_whole_dump(&dir, false, &stages, "after the large stage");
}

#[test]
fn npy_and_npz_runs_replace_each_other_in_one_directory() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    let npz = Options { npz: true, ..Options::default() };
    let stages = layered_stages(2, 4, 1.0);
    write_dump(&dir, Options::default(), &stages);
    write_dump(&dir, npz, &stages);
    check_whole_dump(&dir, true, &stages, "an .npz run after an .npy run");
    // The archive itself opens as the dump too.
    check(&dir.join("trace.npz"), OUTPUT, &stages[2].1);
    write_dump(&dir, Options::default(), &stages);
    check_whole_dump(&dir, false, &stages, "an .npy run after an .npz run");
}

#[test]
fn the_next_run_cleans_up_after_a_killed_one() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    write_dump(&dir, Options::default(), &layered_stages(2, 4, 1.0));
    // Killed mid-run: the manifest is gone, a stage, the manifest and the archive were being
    // written under their temporary names.
    std::fs::remove_file(dir.join("manifest.json")).unwrap();
    for name in [format!(".{}.tmp", SCORES.file_name()), ".manifest.json.tmp".into(), ".trace.npz.tmp".into()] {
        std::fs::write(dir.join(name), b"half written").unwrap();
    }
    let second = layered_stages(2, 4, 9.0);
    write_dump(&dir, Options::default(), &second);
    check_whole_dump(&dir, false, &second, "after the run that followed the killed one");
}

#[test]
fn a_second_run_into_a_directory_being_written_is_refused_and_the_first_is_untouched() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    let values = tensor(&[1, 2, 4, 4], 1.0);
    write_dump(&dir, Options::default(), &[(SCORES, values.clone())]);

    let mut first = writer(&dir);
    emit(&mut first, SCORES, &values);
    for options in [Options::default(), Options { npz: true, force: true, ..Options::default() }] {
        match create(&dir, options) {
            Ok(_) => panic!("a second writer was given {} while the first was writing it", dir.display()),
            Err(e) => {
                let expected = format!("{}: another run is writing a dump into this directory", dir.display());
                assert!(e.to_string().starts_with(&expected), "expected `{expected}...`, got `{e}`");
            }
        }
    }
    emit(&mut first, PROBS, &values);
    first.finish().expect("the first run finishes");
    drop(first);
    check_whole_dump(&dir, false, &[(SCORES, values.clone()), (PROBS, values)], "after the first run");
    // Once the first writer is gone, the directory is free again.
    write_dump(&dir, Options::default(), &[(OUTPUT, tensor(&[1, 4, 8], 3.0))]);
}

/// What is at each name in `dir`, recursively: bytes, a link's target, or a directory.
fn contents(dir: &Path) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("readable") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry.file_type().unwrap();
        let what = if kind.is_symlink() {
            format!("link to {}", std::fs::read_link(entry.path()).unwrap().display())
        } else if kind.is_dir() {
            format!("directory {:?}", contents(&entry.path()))
        } else {
            format!("{:?}", std::fs::read(entry.path()).unwrap())
        };
        found.push((name, what));
    }
    found.sort();
    found
}

/// A PyTorch reference dump made by `scripts/dump_reference.py`, committed under golden/.
fn reference_dump() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../golden/tiny/dumps/pair")
}

/// Fills a directory with what a user made there.
type MakeUsersFiles = fn(&Path);

/// Directories holding what the user made under names bert-trace writes, which no run may
/// replace, with or without `--force`, as `.npy` files or `.npz`: refused, and left byte for byte.
#[test]
fn what_the_user_made_under_our_names_is_refused_and_left_byte_for_byte() {
    let cases: [(&str, MakeUsersFiles); 5] = [
        ("a reference dump of dump_reference.py", |dir| {
            for entry in std::fs::read_dir(reference_dump()).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
            }
        }),
        ("another program's manifest.json", |dir| {
            std::fs::write(dir.join("manifest.json"), b"{\"name\": \"my web app\"}").unwrap()
        }),
        ("a bert-trace manifest without the marker, listing the user's thesis", |dir| {
            let manifest = serde_json::json!({"format": "bert-trace-dump/1", "producer": {"name": "bert-trace"},
                "model": "x", "inputs": {"texts": ["x"], "pair": null},
                "stages": [{"name": "embeddings.sum", "shape": [1], "dtype": "float32", "file": "thesis.pdf"}]});
            std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
            std::fs::write(dir.join("thesis.pdf"), b"years of work").unwrap();
        }),
        ("the user's trace.npz", |dir| std::fs::write(dir.join("trace.npz"), b"my archive").unwrap()),
        ("a symbolic link named like a stage, in a directory bert-trace marked", |dir| {
            std::fs::write(dir.join(".bert-trace-dump"), b"").unwrap();
            std::fs::write(dir.parent().unwrap().join("target.npy"), b"the user's bytes").unwrap();
            std::os::unix::fs::symlink("../target.npy", dir.join("embeddings.sum.npy")).unwrap();
        }),
    ];
    assert!(
        reference_dump().join("manifest.json").is_file(),
        "the golden reference dump is at {}",
        reference_dump().display()
    );
    for (what, make) in cases {
        for (force, npz) in [(false, false), (true, false), (false, true), (true, true)] {
            let temp = tempfile::tempdir().unwrap();
            let dir = temp.path().join("theirs");
            std::fs::create_dir(&dir).unwrap();
            make(&dir);
            let before = contents(temp.path());
            let result = create(&dir, Options { force, npz, ..Options::default() });
            assert!(result.is_err(), "{what}, force {force}, npz {npz}: expected the directory refused");
            assert!(contents(temp.path()) == before, "{what}, force {force}, npz {npz}: something changed");
        }
    }
}

/// With `--force`, files that are not ours stay as they were, even names like our temporary
/// files' and a manifest that lists them, in a directory without our marker; and the directory
/// is still refused without `--force` afterwards.
#[test]
fn force_keeps_the_users_other_files() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("mixed");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), b"mine").unwrap();
    std::fs::write(dir.join(".draft.tmp"), b"also mine").unwrap();
    std::fs::create_dir(dir.join("layer0.attention.scores.npy.d")).unwrap();
    for npz in [false, true] {
        let values = tensor(&[2, 3], 1.0);
        write_dump(&dir, Options { force: true, npz, ..Options::default() }, &[(OUTPUT, values.clone())]);
        check(&dir, OUTPUT, &values);
        assert_eq!(std::fs::read(dir.join("notes.txt")).unwrap(), b"mine", "notes.txt");
        assert_eq!(std::fs::read(dir.join(".draft.tmp")).unwrap(), b"also mine", ".draft.tmp");
        assert!(dir.join("layer0.attention.scores.npy.d").is_dir());
        assert!(create(&dir, Options::default()).is_err(), "the user's files are still there: refused without --force");
    }
}

/// One entry a user (or an earlier run) may have left in an output directory.
#[derive(Clone, Debug)]
enum Entry {
    File(&'static str, Vec<u8>),
    Link(&'static str),
    Dir(&'static str),
}

/// Names a run writes, names like them, and names of the user's.
const NAMES: &[&str] = &[
    "manifest.json",
    "trace.npz",
    "embeddings.sum.npy",
    "layer0.attention.scores.npy",
    "layer9.ffn.output.npy",
    ".embeddings.sum.npy.tmp",
    ".manifest.json.tmp",
    ".trace.npz.tmp",
    ".bert-trace-dump",
    "embeddings.npy",
    "notes.txt",
    ".notes.tmp",
    "layer03.ffn.output.npy",
];

fn entry() -> impl Strategy<Value = Entry> {
    let name = proptest::sample::select(NAMES);
    prop_oneof![
        6 => (name.clone(), proptest::collection::vec(any::<u8>(), 0..8)).prop_map(|(n, b)| Entry::File(n, b)),
        1 => name.clone().prop_map(Entry::Link),
        1 => name.prop_map(Entry::Dir),
    ]
}

fn make(dir: &Path, entries: &[Entry], manifest: Option<&str>) {
    for entry in entries {
        let result = match entry {
            Entry::File(name, bytes) => std::fs::write(dir.join(name), bytes),
            Entry::Link(name) => std::os::unix::fs::symlink("../outside", dir.join(name)),
            Entry::Dir(name) => std::fs::create_dir(dir.join(name)),
        };
        // A name given twice keeps its first entry.
        drop(result);
    }
    if let Some(producer) = manifest {
        let text = serde_json::json!({"format": "bert-trace-dump/1", "producer": {"name": producer},
            "model": "x", "inputs": {"texts": ["x"], "pair": null},
            "stages": [{"name": "x", "shape": [], "dtype": "float32", "file": "notes.txt"}]});
        drop(std::fs::write(dir.join("manifest.json"), text.to_string()));
    }
}

/// Whether a run may have replaced or removed what is at `name`: only a regular file with a
/// name bert-trace writes, in a directory that carried the marker before the run.
fn ours(name: &str, what: &str, marked: bool) -> bool {
    marked && !what.starts_with("link to") && !what.starts_with("directory") && bert_core::io::dump::is_our_name(name)
}

proptest! {
    // Failing cases are recorded in dump_writer.proptest-regressions beside this file (commit
    // it) and replayed first on every later run.
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Whatever a directory holds, a run accepted or refused, with or without `--force`, as
    /// `.npy` files or `.npz`: everything that is not ours by the rule stays as it was, and a
    /// refused run changes nothing at all.
    #[test]
    fn a_run_never_changes_what_is_not_ours(
        entries in proptest::collection::vec(entry(), 0..6),
        manifest in proptest::option::of(proptest::sample::select(&["bert-trace", "dump_reference.py"][..])),
        force in any::<bool>(),
        npz in any::<bool>(),
        stop_early in any::<bool>(),
    ) {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join("out");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(temp.path().join("outside"), b"outside").unwrap();
        make(&dir, &entries, manifest);
        let before = contents(temp.path());
        let marked = std::fs::symlink_metadata(dir.join(".bert-trace-dump")).is_ok_and(|m| m.is_file());
        match create(&dir, Options { force, npz, ..Options::default() }) {
            Err(_) => prop_assert_eq!(contents(temp.path()), before, "a refused run changed the directory"),
            Ok(mut sink) => {
                let stages = layered_stages(if stop_early { 1 } else { 2 }, 3, 1.0);
                for (stage, values) in &stages {
                    sink.emit(*stage, TensorView::F32(values.view())).unwrap();
                }
                sink.finish().unwrap();
                let after: std::collections::BTreeMap<String, String> =
                    contents(&dir).into_iter().collect();
                let dir_before = before.iter().find(|(n, _)| n == "out").map(|(_, w)| w.clone()).unwrap();
                for (name, what) in contents_of(&dir_before) {
                    if !ours(&name, &what, marked) {
                        prop_assert_eq!(after.get(&name), Some(&what), "{} changed or went", name);
                    }
                }
                // What the symbolic links point at, outside the directory, is untouched too.
                let outside = |listing: Vec<(String, String)>| listing.into_iter().find(|(n, _)| n == "outside");
                prop_assert_eq!(outside(contents(temp.path())), outside(before.clone()));
                check_whole_dump_lenient(&dir, npz, &stages);
            }
        }
    }
}

/// The entries of a directory as [`contents`] describes it inside its parent's listing.
fn contents_of(description: &str) -> Vec<(String, String)> {
    // `directory [("name", "what"), ...]`: parse the Debug form back.
    let inner = description.strip_prefix("directory ").expect("a directory");
    let mut found = Vec::new();
    let mut rest = inner.trim_start_matches('[');
    while let Some(start) = rest.find("(\"") {
        rest = &rest[start + 2..];
        let end = rest.find("\", \"").expect("name, what");
        let name = rest[..end].to_string();
        rest = &rest[end + 4..];
        let mut what = String::new();
        let mut chars = rest.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    let (_, escaped) = chars.next().expect("an escape");
                    what.push(escaped);
                }
                '"' => {
                    rest = &rest[i + 1..];
                    break;
                }
                c => what.push(c),
            }
        }
        found.push((name, what));
    }
    found
}

/// Every stage of `stages` reads back from `dir`, and the manifest lists them.
fn check_whole_dump_lenient(dir: &Path, npz: bool, stages: &[(Stage, ArrayD<f32>)]) {
    let dump = Dump::open(dir).unwrap();
    assert_eq!(dump.manifest.archive.is_some(), npz);
    assert_eq!(dump.manifest.stages.len(), stages.len());
    for (stage, values) in stages {
        check(dir, *stage, values);
    }
}
