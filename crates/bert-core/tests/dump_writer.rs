//! `DumpWriter` on its own: what a rerun does with the previous run's files, and that the
//! recycled copy buffers never leak one stage's values into another's file.

#![cfg(unix)]

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use bert_core::dump::{Dump, DumpWriter};
use bert_core::manifest::Inputs;
use bert_core::stage::{Stage, StageKind};
use bert_core::trace::{Sink, Tensor, TensorView};
use ndarray::{ArrayD, Dimension, IxDyn};
use ndarray_npy::{ReadNpyExt, WriteNpyExt};

fn writer(dir: &Path) -> DumpWriter {
    two_threads();
    let inputs = Inputs { texts: vec!["test".into()], pair: None };
    DumpWriter::create(dir, serde_json::json!({"name": "test"}), "test".into(), inputs, false).expect("dump directory")
}

/// Fixes the thread count at two, before any writer asks for it, so that stages are written
/// side by side, and each long chain of same-sized stages has two carriers, whatever the machine.
fn two_threads() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        bert_core::threads::set_threads(2).expect("no forward pass has fixed the count yet");
    });
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
fn write_dump(dir: &Path, stages: &[(Stage, ArrayD<f32>)]) {
    let mut sink = writer(dir);
    for (stage, values) in stages {
        emit(&mut sink, *stage, values);
    }
    sink.finish().expect("finish");
}

/// Reads `stage` from the dump in `dir` and checks it equals `want`, naming the stage if not.
fn check(dir: &Path, stage: Stage, want: &ArrayD<f32>) {
    let dump = Dump::open(dir).expect("a finished dump");
    let entry = dump.entry(&stage.name()).unwrap_or_else(|| panic!("{stage}: not in the manifest"));
    match dump.read(entry).expect("readable") {
        Tensor::F32(got) => assert!(got == *want, "{stage}: expected {want:?}, got {got:?}"),
        other => panic!("{stage}: expected float32, got {other:?}"),
    }
}

fn inode(path: &Path) -> u64 {
    std::fs::metadata(path).expect("exists").ino()
}

/// The file names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("readable")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

const SCORES: Stage = Stage { layer: Some(0), kind: StageKind::AttnScores };
const PROBS: Stage = Stage { layer: Some(0), kind: StageKind::AttnProbs };
const OUTPUT: Stage = Stage { layer: Some(0), kind: StageKind::AttnOutput };

#[test]
fn a_rerun_writes_over_the_previous_files_and_removes_those_it_did_not_write() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    write_dump(
        &dir,
        &[
            (SCORES, tensor(&[1, 2, 64, 64], 1.0)),
            (PROBS, tensor(&[1, 2, 64, 64], 2.0)),
            (OUTPUT, tensor(&[1, 64, 8], 3.0)),
        ],
    );
    // Held open, the first run's file keeps its inode number from being given to a new file.
    let scores_file = dir.join(SCORES.file_name());
    let held = std::fs::File::open(&scores_file).unwrap();

    // Shorter this time, so the reused file must also be cut to its new length; probs is not
    // written at all, as after --stop-at.
    let scores = tensor(&[1, 2, 5, 5], 10.0);
    let output = tensor(&[1, 5, 8], 30.0);
    write_dump(&dir, &[(SCORES, scores.clone()), (OUTPUT, output.clone())]);

    assert_eq!(inode(&scores_file), held.metadata().unwrap().ino(), "{SCORES}: the previous file was not reused");
    check(&dir, SCORES, &scores);
    check(&dir, OUTPUT, &output);
    let expected = vec![".bert-trace-dump".to_string(), OUTPUT.file_name(), SCORES.file_name(), "manifest.json".into()];
    assert_eq!(listing(&dir), expected, "the rerun's directory");
}

#[test]
fn a_previous_file_with_another_link_is_left_alone() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    let old = tensor(&[3, 4], 1.0);
    write_dump(&dir, &[(OUTPUT, old.clone())]);
    // The user keeps the first run's file under another name, as `cp -al dump kept` would.
    let kept = temp.path().join("kept.npy");
    std::fs::hard_link(dir.join(OUTPUT.file_name()), &kept).unwrap();

    let new = tensor(&[3, 4], 100.0);
    write_dump(&dir, &[(OUTPUT, new.clone())]);

    check(&dir, OUTPUT, &new);
    let kept_values = ArrayD::<f32>::read_npy(std::fs::File::open(&kept).unwrap()).unwrap();
    assert!(kept_values == old, "the kept link: expected the first run's {old:?}, got {kept_values:?}");
}

#[test]
fn an_unfinished_rerun_leaves_no_manifest_and_none_of_the_previous_files() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    write_dump(&dir, &[(SCORES, tensor(&[1, 1, 4, 4], 1.0)), (PROBS, tensor(&[1, 1, 4, 4], 2.0))]);

    // A trace that fails after its first stage drops the writer without finishing it.
    let mut second = writer(&dir);
    emit(&mut second, SCORES, &tensor(&[1, 1, 4, 4], 5.0));
    drop(second);
    assert_eq!(listing(&dir), vec![".bert-trace-dump".to_string(), SCORES.file_name()], "after the failed rerun");
}

#[test]
fn recycled_buffers_hold_exactly_each_stages_values() {
    // Stages of falling and rising sizes, so that small stages are copied into buffers that
    // held larger ones. Query is emitted as the forward pass emits it: the heads-first view
    // [B,nh,T,hs] of a [B,T,nh,hs] array, which is not contiguous.
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    let mut expected = Vec::new();
    let mut sink = writer(&dir);
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
    for (stage, values) in &expected {
        check(&dir, *stage, values);
    }
}

#[test]
fn files_are_byte_for_byte_what_ndarray_npy_writes() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    let values = tensor(&[2, 3, 5], 0.5);
    write_dump(&dir, &[(OUTPUT, values.clone())]);
    let mut expected = Vec::new();
    values.write_npy(&mut expected).unwrap();
    let got = std::fs::read(dir.join(OUTPUT.file_name())).unwrap();
    assert!(got == expected, "{OUTPUT}: {} bytes written, ndarray-npy writes {}", got.len(), expected.len());
}

#[test]
fn a_stage_file_replaced_by_a_symbolic_link_is_never_written_through() {
    two_threads();
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    write_dump(&dir, &[(OUTPUT, tensor(&[3, 4], 1.0))]);
    // The user points the stage's name at a file of their own.
    let theirs = temp.path().join("theirs.npy");
    std::fs::write(&theirs, b"the user's bytes").unwrap();
    let link = dir.join(OUTPUT.file_name());
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&theirs, &link).unwrap();

    let inputs = Inputs { texts: vec!["test".into()], pair: None };
    let refused = DumpWriter::create(&dir, serde_json::json!({}), "test".into(), inputs.clone(), false);
    assert!(refused.is_err(), "a symbolic link is not a file of ours: the directory must be refused without force");
    let mut forced = DumpWriter::create(&dir, serde_json::json!({}), "test".into(), inputs, true).unwrap();
    let new = tensor(&[3, 4], 7.0);
    emit(&mut forced, OUTPUT, &new);
    forced.finish().unwrap();

    assert_eq!(std::fs::read(&theirs).unwrap(), b"the user's bytes", "the link's target changed");
    check(&dir, OUTPUT, &new);
}

#[test]
fn a_stage_larger_than_the_queue_is_written_whole() {
    // 17 million values, 68 MB: more than the 64 MB of copies the writer may hold, so it is
    // written at once from the view; the stages around it still go through the queue.
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    let large = ArrayD::from_shape_fn(IxDyn(&[1, 17, 1000, 1000]), |i| (i[1] * 1_000_000 + i[2] * 1000 + i[3]) as f32);
    let stages = [(PROBS, tensor(&[1, 2, 8, 8], 1.0)), (SCORES, large), (OUTPUT, tensor(&[1, 8, 4], 2.0))];
    write_dump(&dir, &stages);
    for (stage, values) in &stages {
        check(&dir, *stage, values);
    }
}

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
/// the directory holds the marker, the stage files and the manifest, nothing else. `when` names
/// the moment in the test's message.
fn check_whole_dump(dir: &Path, stages: &[(Stage, ArrayD<f32>)], when: &str) {
    for (stage, values) in stages {
        check(dir, *stage, values);
    }
    let mut expected: Vec<String> = stages.iter().map(|(stage, _)| stage.file_name()).collect();
    expected.extend([".bert-trace-dump".to_string(), "manifest.json".into()]);
    expected.sort();
    assert_eq!(listing(dir), expected, "{when}");
}

#[cfg(target_os = "linux")]
#[test]
fn a_rerun_carries_each_stage_into_place_in_the_previous_runs_files() {
    // With four layers each size has one donor, its last stage. With twelve, each size has one
    // per writing thread (two), so that two threads can carry stages of one size at once.
    for layers in [4, 12] {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join("dump");
        let first = layered_stages(layers, 6, 1.0);
        write_dump(&dir, &first);
        // Held open, the first run's files keep their inode numbers from being given to new files.
        let held: Vec<std::fs::File> =
            first.iter().map(|(stage, _)| std::fs::File::open(dir.join(stage.file_name())).unwrap()).collect();
        let old_inode = |stage: Stage| inode(&dir.join(stage.file_name()));
        let before: Vec<(Stage, u64)> = first.iter().map(|(stage, _)| (*stage, old_inode(*stage))).collect();
        let was = |stage: Stage| before.iter().find(|(s, _)| *s == stage).expect("in the first run").1;

        let second = layered_stages(layers, 6, 1000.0);
        write_dump(&dir, &second);

        check_whole_dump(&dir, &second, &format!("the rerun's directory, {layers} layers"));
        // No file was created: every stage went into a file of the first run.
        let after: Vec<(Stage, u64)> = second.iter().map(|(stage, _)| (*stage, old_inode(*stage))).collect();
        for (stage, got) in &after {
            assert!(
                before.iter().any(|(_, old)| old == got),
                "{layers} layers, {stage}: inode {got} is a new file, expected one of the first run's {before:?}"
            );
        }
        // The last stages of each size lend their files (they are its donors) to earlier stages
        // of that size. Which stages those are depends on which thread writes first (the forward
        // pass's thread helps at the end); that one of them has a donor's file does not. With
        // two donors, one writing thread may carry the whole chain, and the other donor's file
        // then waits, unused, for its own stage; so only one donor per size is certain to lend.
        let last = layers - 1;
        let donors = [
            (
                [Stage::layer(last, StageKind::AttnProbs), Stage::layer(last, StageKind::AttnScores)],
                [StageKind::AttnScores, StageKind::AttnProbs],
            ),
            (
                [Stage::layer(last, StageKind::AttnOutput), Stage::layer(last - 1, StageKind::AttnOutput)],
                [StageKind::AttnOutput, StageKind::AttnOutput],
            ),
        ];
        for (candidates, size_class) in donors {
            let holders: Vec<(Stage, Option<Stage>)> = candidates
                .iter()
                .map(|&donor| (donor, after.iter().find(|(_, got)| *got == was(donor)).map(|(stage, _)| *stage)))
                .collect();
            assert!(
                holders.iter().any(|(donor, holder)| holder.is_some_and(|stage| stage != *donor && size_class.contains(&stage.kind))),
                "{layers} layers: expected one of these first files under an earlier stage of its size, got (donor, holder) {holders:?}"
            );
        }
        drop(held);
    }
}

#[test]
fn a_rerun_that_stops_early_or_changes_shape_leaves_only_its_own_files() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    write_dump(&dir, &layered_stages(4, 6, 1.0));

    // Stopped after two layers, as with --stop-at: the chains never reach their donors.
    let stopped = layered_stages(2, 6, 50.0);
    write_dump(&dir, &stopped);
    check_whole_dump(&dir, &stopped, "after the stopped rerun");

    // Longer input: no previous file has the size of any stage.
    let longer = layered_stages(3, 9, 70.0);
    write_dump(&dir, &longer);
    check_whole_dump(&dir, &longer, "after the rerun with longer input");
}

#[test]
fn a_hard_link_anywhere_in_a_chain_keeps_the_first_runs_values() {
    // With four layers, layer 1's file is in the middle of its chain and layer 3's is the
    // chain's donor. With twelve, layers 10 and 11 are the two donors of their size.
    for (layers, layer) in [(4, 1), (4, 3), (12, 10), (12, 11)] {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join("dump");
        let first = layered_stages(layers, 5, 1.0);
        write_dump(&dir, &first);
        let kept_stage = Stage::layer(layer, StageKind::AttnOutput);
        let kept_values = &first.iter().find(|(stage, _)| *stage == kept_stage).unwrap().1;
        let kept = temp.path().join("kept.npy");
        std::fs::hard_link(dir.join(kept_stage.file_name()), &kept).unwrap();

        let second = layered_stages(layers, 5, 500.0);
        write_dump(&dir, &second);

        check_whole_dump(&dir, &second, &format!("the rerun's directory, {layers} layers, {kept_stage} linked"));
        let got = ArrayD::<f32>::read_npy(std::fs::File::open(&kept).unwrap()).unwrap();
        assert!(
            got == *kept_values,
            "the kept link to {kept_stage}: expected the first run's {kept_values:?}, got {got:?}"
        );
    }
}

#[test]
fn the_next_run_cleans_up_after_a_killed_one() {
    two_threads();
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    let first = layered_stages(2, 4, 1.0);
    write_dump(&dir, &first);
    // Killed mid-run: the manifest is gone (removed at the start of every run), a stage was
    // being written under its temporary name, and a carrier was waiting.
    std::fs::remove_file(dir.join("manifest.json")).unwrap();
    let leftovers = [format!(".{}.tmp", SCORES.file_name()), ".bert-trace-carrier-3.tmp".to_string()];
    for name in &leftovers {
        std::fs::write(dir.join(name), b"half written").unwrap();
    }

    let second = layered_stages(2, 4, 9.0);
    write_dump(&dir, &second);
    check_whole_dump(&dir, &second, "after the run that followed the killed one");

    // A hidden file of the user's is not ours, even in our directory.
    std::fs::write(dir.join(".notes.txt"), b"mine").unwrap();
    let inputs = Inputs { texts: vec!["test".into()], pair: None };
    let refused = DumpWriter::create(&dir, serde_json::json!({}), "test".into(), inputs, false);
    assert!(refused.is_err(), "a directory holding the user's .notes.txt must be refused without --force");
    assert_eq!(std::fs::read(dir.join(".notes.txt")).unwrap(), b"mine", "the user's file changed");
}

#[test]
fn a_second_run_into_a_directory_being_written_is_refused_and_the_first_is_untouched() {
    two_threads();
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("dump");
    let values = tensor(&[1, 2, 4, 4], 1.0);
    write_dump(&dir, &[(SCORES, values.clone())]);

    let mut first = writer(&dir);
    emit(&mut first, SCORES, &values);
    let inputs = Inputs { texts: vec!["other".into()], pair: None };
    match DumpWriter::create(&dir, serde_json::json!({"name": "test"}), "test".into(), inputs, false) {
        Ok(_) => panic!("a second writer was given {} while the first was writing it", dir.display()),
        Err(e) => {
            let message = e.to_string();
            let expected = format!("{}: another run is writing a dump into this directory", dir.display());
            assert!(message.starts_with(&expected), "expected `{expected}...`, got `{message}`");
        }
    }
    emit(&mut first, PROBS, &values);
    first.finish().expect("the first run finishes");
    drop(first);
    check_whole_dump(
        &dir,
        &[(SCORES, values.clone()), (PROBS, values.clone())],
        "after the first run, with the second refused",
    );
    // Once the first writer is gone, the directory is free again.
    write_dump(&dir, &[(OUTPUT, tensor(&[1, 4, 8], 3.0))]);
}

/// Every file under `dir` (one level), with its bytes, sorted by name.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("readable")
        .map(|e| {
            let e = e.expect("entry");
            (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).expect("a file"))
        })
        .collect();
    files.sort();
    files
}

/// A PyTorch reference dump made by `scripts/dump_reference.py`, committed under golden/.
fn reference_dump() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../golden/tiny/dumps/pair")
}

/// Fills a directory with what a user made there.
type MakeUsersFiles = fn(&Path);

/// Directories holding what the user made, which no run may replace, with or without `--force`:
/// a PyTorch reference dump of `scripts/dump_reference.py` (the same format and file names as
/// ours), and a `manifest.json` of some other program's.
#[test]
fn what_the_user_made_is_refused_and_left_byte_for_byte() {
    two_threads();
    let cases: [(&str, MakeUsersFiles); 2] = [
        ("a reference dump of dump_reference.py", |dir| {
            for entry in std::fs::read_dir(reference_dump()).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
            }
        }),
        ("another program's manifest.json", |dir| {
            std::fs::write(dir.join("manifest.json"), b"{\"name\": \"my web app\"}").unwrap()
        }),
    ];
    assert!(
        reference_dump().join("manifest.json").is_file(),
        "the golden reference dump is at {}",
        reference_dump().display()
    );
    for (what, make) in cases {
        for force in [false, true] {
            let temp = tempfile::tempdir().unwrap();
            let dir = temp.path().join("theirs");
            std::fs::create_dir(&dir).unwrap();
            make(&dir);
            let before = contents(&dir);
            let inputs = Inputs { texts: vec!["test".into()], pair: None };
            let result = DumpWriter::create(&dir, serde_json::json!({"name": "test"}), "test".into(), inputs, force);
            assert!(result.is_err(), "{what}, force {force}: expected the directory refused, it was accepted");
            assert!(contents(&dir) == before, "{what}, force {force}: the directory changed");
        }
    }
}

/// With `--force`, files that are not ours and have names a run never writes stay as they were,
/// even names like our temporary files', in a directory without our marker.
#[test]
fn force_keeps_the_users_other_files() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("mixed");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), b"mine").unwrap();
    std::fs::write(dir.join(".draft.tmp"), b"also mine").unwrap();
    two_threads();
    let inputs = Inputs { texts: vec!["test".into()], pair: None };
    let mut sink = DumpWriter::create(&dir, serde_json::json!({"name": "test"}), "test".into(), inputs, true)
        .expect("accepted with force");
    let values = tensor(&[2, 3], 1.0);
    emit(&mut sink, OUTPUT, &values);
    sink.finish().expect("finish");
    check(&dir, OUTPUT, &values);
    assert_eq!(std::fs::read(dir.join("notes.txt")).unwrap(), b"mine", "notes.txt");
    assert_eq!(std::fs::read(dir.join(".draft.tmp")).unwrap(), b"also mine", ".draft.tmp");
}
