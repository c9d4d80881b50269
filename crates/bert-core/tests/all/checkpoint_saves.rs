//! Every save of a training checkpoint is all or nothing: a save into a directory that holds a
//! checkpoint, stopped at any point it passes (a failure there, as a full disk or a failed
//! rename gives, or the process killed there), leaves the old checkpoint whole or the new one
//! whole, once the directory is next opened. The points are the library's own
//! ([`SavePoint`]): each file written, the staging done, the journal, each file moved in, the
//! end. Both kinds of checkpoint are tried: the top of `--save DIR` and `DIR/checkpoint-K/`.
//!
//! A killed save runs in a child process: this test binary again, running the ignored test
//! `killed_child`, which is told where to stop by its environment (the test's, not the
//! library's: the library knows only its observer).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use bert_core::training::corpus::Corpus;
use bert_core::training::save::{read_state, CheckpointDir, ModelFiles, SaveObserver, SavePoint};
use bert_core::training::{TrainSettings, Trainer};
use bert_core::{BertModel, Discard};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// golden/tiny trained for `steps` steps on a few lines, with `seed`: two seeds, two different
/// checkpoints.
fn trained(steps: usize, seed: u64) -> Trainer {
    let model = BertModel::load(&root().join("golden/tiny")).unwrap();
    let text = "the romans built roads\nthe people built houses in rome\nwhen in rome do as the romans do\n";
    let corpus = Corpus::parse(text, Path::new("text.txt")).unwrap();
    let settings = TrainSettings { steps: Some(steps), seed: Some(seed), batch_size: Some(2), ..Default::default() };
    let options = settings.resolve(None, &model.config, bert_core::training::options::PRETRAINING).unwrap();
    let mut trainer = Trainer::new(model, corpus, options).unwrap();
    while !trainer.finished() {
        trainer.step(&mut Discard).unwrap();
    }
    trainer
}

fn files() -> ModelFiles {
    let dir = root().join("golden/tiny");
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    ModelFiles {
        config_json: read("config.json"),
        tokenizer: vec![
            ("vocab.txt".into(), read("vocab.txt")),
            ("tokenizer_config.json".into(), read("tokenizer_config.json")),
        ],
    }
}

/// Every file under `dir` that a checkpoint is read from (its visible files), with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().unwrap().is_file() && !name.starts_with('.') {
            files.insert(name, std::fs::read(entry.path()).unwrap());
        }
    }
    files
}

/// Where a save goes: the directory's top, or its `checkpoint-2/`.
#[derive(Clone, Copy, Debug)]
enum Target {
    Top,
    Subdir,
}

impl Target {
    fn save(self, dir: &CheckpointDir, trainer: &Trainer, observer: &mut dyn SaveObserver) -> bert_core::Result<()> {
        match self {
            Target::Top => dir.save(trainer, &files(), observer),
            Target::Subdir => dir.save_subdir("checkpoint-2", trainer, &files(), observer),
        }
    }

    /// The directory that holds the checkpoint.
    fn checkpoint(self, dir: &Path) -> PathBuf {
        match self {
            Target::Top => dir.to_path_buf(),
            Target::Subdir => dir.join("checkpoint-2"),
        }
    }
}

/// Counts the points a save passes, and fails at the `stop`-th (from 0), as a disk would.
struct FailAt {
    stop: Option<usize>,
    seen: Vec<String>,
}

impl SaveObserver for FailAt {
    fn reached(&mut self, point: SavePoint<'_>) -> std::io::Result<()> {
        self.seen.push(format!("{point:?}"));
        if Some(self.seen.len() - 1) == self.stop {
            return Err(std::io::Error::other(format!("the test stops the save at {point:?}")));
        }
        Ok(())
    }
}

/// The old checkpoint A in a fresh directory; B is what a second save writes over it.
fn with_old(tmp: &Path, name: &str, target: Target, a: &Trainer) -> PathBuf {
    let dir = tmp.join(name);
    let claimed = CheckpointDir::claim(&dir).unwrap();
    target.save(&claimed, a, &mut FailAt { stop: None, seen: Vec::new() }).unwrap();
    dir
}

/// The points a whole save passes.
fn points(tmp: &Path, target: Target, a: &Trainer, b: &Trainer) -> Vec<String> {
    let dir = with_old(tmp, "count", target, a);
    let mut counter = FailAt { stop: None, seen: Vec::new() };
    target.save(&CheckpointDir::claim(&dir).unwrap(), b, &mut counter).unwrap();
    counter.seen
}

/// Whether the checkpoint at `dir` is `a`'s or `b`'s, whole, after the directory is opened
/// again (which completes a save a killed run left after its journal).
fn whole(
    dir: &Path,
    target: Target,
    a: &BTreeMap<String, Vec<u8>>,
    b: &BTreeMap<String, Vec<u8>>,
) -> Result<char, String> {
    drop(CheckpointDir::claim(dir).map_err(|e| format!("cannot open the directory again: {e}"))?);
    let checkpoint = target.checkpoint(dir);
    let now = snapshot(&checkpoint);
    let which = if &now == a {
        'A'
    } else if &now == b {
        'B'
    } else {
        let names: Vec<&String> = now.keys().collect();
        return Err(format!("neither checkpoint whole: {names:?}"));
    };
    read_state(&checkpoint).map_err(|e| format!("checkpoint {which} does not resume: {e}"))?;
    let leftovers: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".save") || n.ends_with(".new") || n.ends_with(".old"))
        .collect();
    if !leftovers.is_empty() {
        return Err(format!("left {leftovers:?} behind"));
    }
    Ok(which)
}

#[test]
fn a_save_that_fails_at_any_point_leaves_one_checkpoint_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (trained(1, 1), trained(2, 2));
    let mut failures = Vec::new();
    for target in [Target::Top, Target::Subdir] {
        let (old, new) = {
            let dir_a = with_old(tmp.path(), &format!("{target:?}-a"), target, &a);
            let dir_b = with_old(tmp.path(), &format!("{target:?}-b"), target, &b);
            (snapshot(&target.checkpoint(&dir_a)), snapshot(&target.checkpoint(&dir_b)))
        };
        assert_ne!(old, new, "two different checkpoints to tell apart");
        let points = points(tmp.path(), target, &a, &b);
        assert!(points.len() >= 8, "{target:?}: a save passes every file and step: {points:?}");
        for (at, point) in points.iter().enumerate() {
            let dir = with_old(tmp.path(), &format!("{target:?}-{at}"), target, &a);
            let result =
                target.save(&CheckpointDir::claim(&dir).unwrap(), &b, &mut FailAt { stop: Some(at), seen: Vec::new() });
            let outcome = whole(&dir, target, &old, &new);
            // A failure before the end is undone: the old checkpoint stays, and the save says it failed.
            let expected = if point == "Done" { 'B' } else { 'A' };
            match (result.is_err(), outcome) {
                (true, Ok(which)) if which == expected => {}
                (failed, got) => failures.push(format!("{target:?} stopped at {point}: failed {failed}, then {got:?}")),
            }
        }
        println!("{target:?}: {} points, each stopped at: {points:?}", points.len());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_save_killed_at_any_point_leaves_one_checkpoint_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (trained(1, 1), trained(2, 2));
    let mut failures = Vec::new();
    let mut seen = 0;
    for target in [Target::Top, Target::Subdir] {
        let (old, new) = {
            let dir_a = with_old(tmp.path(), &format!("{target:?}-a"), target, &a);
            let dir_b = with_old(tmp.path(), &format!("{target:?}-b"), target, &b);
            (snapshot(&target.checkpoint(&dir_a)), snapshot(&target.checkpoint(&dir_b)))
        };
        let points = points(tmp.path(), target, &a, &b);
        for (at, point) in points.iter().enumerate() {
            let dir = with_old(tmp.path(), &format!("killed-{target:?}-{at}"), target, &a);
            let status = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "checkpoint_saves::killed_child", "--ignored", "--nocapture", "--test-threads=1"])
                .env("CHECKPOINT_KILL_DIR", &dir)
                .env("CHECKPOINT_KILL_AT", at.to_string())
                .env("CHECKPOINT_KILL_TARGET", format!("{target:?}"))
                .output()
                .unwrap();
            let killed = status.status.code().is_none();
            match whole(&dir, target, &old, &new) {
                Ok(_) if killed => seen += 1,
                outcome => failures.push(format!(
                    "{target:?} killed at {point}: killed {killed}, then {outcome:?}; child said {}",
                    String::from_utf8_lossy(&status.stderr)
                )),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(seen >= 16, "expected a kill at every point of both kinds of save, saw {seen}");
}

/// The child of [`a_save_killed_at_any_point_leaves_one_checkpoint_whole`]: saves checkpoint B
/// over the directory it is given, and kills itself (SIGKILL, as `kill -9` would) at the point it
/// is told.
#[test]
#[ignore = "run by a_save_killed_at_any_point_leaves_one_checkpoint_whole, in a child process"]
fn killed_child() {
    let (Ok(dir), Ok(at), Ok(target)) = (
        std::env::var("CHECKPOINT_KILL_DIR"),
        std::env::var("CHECKPOINT_KILL_AT"),
        std::env::var("CHECKPOINT_KILL_TARGET"),
    ) else {
        return;
    };
    struct KillAt(usize, usize);
    impl SaveObserver for KillAt {
        fn reached(&mut self, _: SavePoint<'_>) -> std::io::Result<()> {
            if self.0 == self.1 {
                // SAFETY: a signal to this process itself.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            }
            self.1 += 1;
            Ok(())
        }
    }
    let target = if target == "Top" { Target::Top } else { Target::Subdir };
    let b = trained(2, 2);
    let dir = CheckpointDir::claim(Path::new(&dir)).unwrap();
    target.save(&dir, &b, &mut KillAt(at.parse().unwrap(), 0)).unwrap();
}

/// A save whose every point passes, then a resume of it: the checkpoint round-trips, learning
/// rates included, bit for bit.
#[test]
fn a_saved_state_reads_back_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    let trainer = trained(2, 5);
    let dir = tmp.path().join("run");
    CheckpointDir::claim(&dir).unwrap().save(&trainer, &files(), &mut FailAt { stop: None, seen: Vec::new() }).unwrap();
    let state = read_state(&dir).unwrap();
    assert_eq!(state.options, trainer.options);
    for (saved, ran) in state.log_history.iter().zip(&trainer.log) {
        assert_eq!(saved.lr.to_bits(), ran.lr.to_bits(), "step {}: the learning rate", ran.step);
        assert_eq!(saved.loss.to_bits(), ran.loss.to_bits(), "step {}: the loss", ran.step);
    }
}

/// serde_json reads back every f64 it wrote, to the bit: 10,000 random ones, of every size
/// (the `float_roundtrip` feature; without it, some read back one last digit off).
#[test]
fn every_f64_round_trips_through_json() {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut differ = Vec::new();
    for _ in 0..10_000 {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let value = f64::from_bits(z ^ (z >> 31));
        if !value.is_finite() {
            continue;
        }
        let text = serde_json::to_string(&value).unwrap();
        let back: f64 = serde_json::from_str(&text).unwrap();
        if back.to_bits() != value.to_bits() {
            differ.push(format!("{value:?} read back as {back:?}"));
        }
    }
    assert!(differ.is_empty(), "{} of 10,000 differ, e.g. {:?}", differ.len(), &differ[..differ.len().min(3)]);
    let lr: f64 = serde_json::from_str("0.00009970000000000001").unwrap();
    assert_eq!(lr, 9.970000000000001e-05);
}
