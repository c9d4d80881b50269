//! What the command-line tests share: the repository root, running the built binary there (and
//! what a run did, judged as one clear line or not), named batteries of cases, snapshots of
//! directories, and writing a `.npy` header as numpy does.

pub mod console;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use ndarray::ArrayD;
use ndarray_npy::{ReadNpyExt, WriteNpyExt};

/// The repository root, where the tests run the binary (so `golden/...` paths resolve).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `bert-trace ARGS` from the repository root and returns what it did. No test reaches the
/// network: hub ids resolve offline.
#[allow(dead_code)]
pub fn bert_trace<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bert-trace"))
        .args(args)
        .current_dir(root())
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .expect("bert-trace runs")
}

/// The commands that load a model and take `--model` after their name; a trace takes it first.
const MODEL_COMMANDS: &[&str] =
    &["lens", "ablate", "attribute", "heads", "stages", "inspect", "train", "finetune", "evaluate", "step"];

/// `args` with `--model tiny`, the built-in random model whose small shapes and numbers most
/// tests are written against (english-small, the default, is the docs' and `models.rs`'s):
/// first for a trace, after the name of a command that loads a model, and nowhere for a command
/// that reads dumps, nor where `args` name a model or resume a run.
#[allow(dead_code)]
pub fn tiny<S: AsRef<str>>(args: &[S]) -> Vec<String> {
    let args: Vec<String> = args.iter().map(|a| a.as_ref().to_string()).collect();
    // A resumed run has its model, and `--from-config` without one is a refusal to be tested.
    if args.iter().any(|a| a == "--model" || a == "--resume" || a == "--from-config") {
        return args;
    }
    let at = match args.first().map(String::as_str) {
        Some(command) if MODEL_COMMANDS.contains(&command) => 1,
        Some("diff" | "view" | "compare" | "explain") => return args,
        _ => 0,
    };
    let mut with = args[..at].to_vec();
    with.extend(["--model".to_string(), "tiny".to_string()]);
    with.extend(args[at..].iter().cloned());
    with
}

/// [`bert_trace`] with the built-in tiny model ([`tiny`]).
#[allow(dead_code)]
pub fn bert_trace_tiny<S: AsRef<str>>(args: &[S]) -> Output {
    bert_trace(&tiny(args))
}

/// The header of a `.npy` file (format 1.0, C order) of `descr` values of `shape`, as numpy
/// writes it: the values' bytes follow it.
#[allow(dead_code)]
pub fn npy_header(descr: &str, shape: &[usize]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}").into_bytes();
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(b' ');
    }
    header.push(b'\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header);
    bytes
}

/// What a run did.
#[allow(dead_code)]
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Ran {
    /// The lines of stderr that are not notes.
    pub fn errors(&self) -> Vec<&str> {
        self.stderr.lines().filter(|l| !l.starts_with("note:")).collect()
    }
}

/// Runs `bert-trace args` in the repository root with `env`, killed after `limit`.
#[allow(dead_code)]
pub fn run_with(args: &[String], env: &[(&str, &str)], limit: Duration) -> Ran {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bert-trace"));
    command.args(args).current_dir(root()).stdout(Stdio::piped()).stderr(Stdio::piped());
    command.env("HF_HUB_OFFLINE", "1");
    for (name, value) in env {
        command.env(name, value);
    }
    let start = Instant::now();
    let mut child = command.spawn().expect("bert-trace starts");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out_reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut out, &mut text).ok();
        text
    });
    let err_reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut err, &mut text).ok();
        text
    });
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if start.elapsed() > limit {
            child.kill().ok();
            child.wait().ok();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ran { code, stdout: out_reader.join().unwrap(), stderr: err_reader.join().unwrap(), elapsed: start.elapsed() }
}

#[allow(dead_code)]
pub fn run(args: &[String]) -> Ran {
    run_with(args, &[], Duration::from_secs(60))
}

/// Whether `ran` is one error line containing `needle`, with exit status 2 and no panic.
#[allow(dead_code)]
pub fn one_line(ran: &Ran, needle: &str) -> Result<(), String> {
    let lines = ran.errors();
    if ran.code.is_none() {
        Err(format!("killed after {:.1} s without an answer", ran.elapsed.as_secs_f64()))
    } else if ran.code != Some(2) {
        Err(format!("exit status {:?}, expected 2", ran.code))
    } else if lines.len() != 1 {
        Err(format!("{} lines on stderr, expected 1", lines.len()))
    } else if !lines[0].contains(needle) {
        Err(format!("expected `{needle}` in the line"))
    } else if ran.stderr.contains("panicked") {
        Err("a panic reached the user".into())
    } else {
        Ok(())
    }
}

/// Collects the failures of a class of cases, each named, and asserts there are none.
#[allow(dead_code)]
#[derive(Default)]
pub struct Cases {
    pub count: usize,
    pub failures: Vec<String>,
}

#[allow(dead_code)]
impl Cases {
    pub fn check(&mut self, name: &str, result: Result<(), String>, ran: Option<&Ran>) {
        self.count += 1;
        if let Err(problem) = result {
            let detail = ran.map(|r| format!("\n  stdout: {}\n  stderr: {}", r.stdout.trim(), r.stderr.trim()));
            self.failures.push(format!("{name}: {problem}{}", detail.unwrap_or_default()));
        }
    }

    pub fn finish(self, class: &str) {
        println!("{class}: {} cases", self.count);
        assert!(
            self.failures.is_empty(),
            "{class}: {} of {} cases failed:\n{}",
            self.failures.len(),
            self.count,
            self.failures.join("\n")
        );
    }
}

#[allow(dead_code)]
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
        }
    }
}

/// Every entry under `dir` (recursively) with its bytes or what it is.
#[allow(dead_code)]
pub fn snapshot(dir: &Path) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            found.push((name, format!("link {}", std::fs::read_link(entry.path()).unwrap().display())));
        } else if kind.is_dir() {
            for (inner, what) in snapshot(&entry.path()) {
                found.push((format!("{name}/{inner}"), what));
            }
        } else if kind.is_file() {
            found.push((name, format!("{:x?}", ring_like_digest(&std::fs::read(entry.path()).unwrap()))));
        } else {
            found.push((name, "special".into()));
        }
    }
    found.sort();
    found
}

/// A cheap fingerprint of some bytes (length and a rolling sum), enough to see a change.
#[allow(dead_code)]
pub fn ring_like_digest(bytes: &[u8]) -> (usize, u64) {
    (bytes.len(), bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100000001b3)))
}

#[allow(dead_code)]
pub fn unchanged(before: &[(String, String)], dir: &Path) -> Result<(), String> {
    let after = snapshot(dir);
    if after == before {
        Ok(())
    } else {
        Err(format!("{} changed:\n  before {before:?}\n  after  {after:?}", dir.display()))
    }
}

/// Writes `values` over stage `stage` of the dump in `dir`, keeping its shape.
#[allow(dead_code)]
pub fn set_stage(dir: &Path, stage: &str, change: impl Fn(&mut ArrayD<f32>)) {
    let path = dir.join(format!("{stage}.npy"));
    let mut values = ArrayD::<f32>::read_npy(std::fs::File::open(&path).unwrap()).unwrap();
    change(&mut values);
    values.write_npy(std::fs::File::create(&path).unwrap()).unwrap();
}

/// Sets every value of the f32 tensor `name` of a safetensors file to NaN.
#[allow(dead_code)]
pub fn poison_tensor(path: &Path, name: &str) {
    let mut bytes = std::fs::read(path).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let offsets = &header[name]["data_offsets"];
    let (start, end) = (offsets[0].as_u64().unwrap() as usize, offsets[1].as_u64().unwrap() as usize);
    for chunk in bytes[8 + header_len + start..8 + header_len + end].chunks_exact_mut(4) {
        chunk.copy_from_slice(&f32::NAN.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

/// A resource limit a test runs bert-trace under.
#[allow(dead_code)]
#[derive(Clone, Copy)]
pub enum Limit {
    /// Every file the process writes (`RLIMIT_FSIZE`). `SIGXFSZ` is left as it is: bert-trace
    /// itself ignores it, so that a longer write fails with an error it reports.
    FileSize,
    /// The process's address space (`RLIMIT_AS`).
    AddressSpace,
}

/// Runs `command`'s process under `limit` of `bytes`.
#[allow(dead_code)]
#[cfg(unix)]
pub fn limit(command: &mut Command, limit: Limit, bytes: u64) {
    use std::os::unix::process::CommandExt;
    let resource = match limit {
        Limit::FileSize => libc::RLIMIT_FSIZE,
        Limit::AddressSpace => libc::RLIMIT_AS,
    };
    // SAFETY: between fork and exec this calls only setrlimit, which is async-signal-safe, and
    // allocates nothing.
    unsafe {
        command.pre_exec(move || {
            let rlimit = libc::rlimit { rlim_cur: bytes as libc::rlim_t, rlim_max: bytes as libc::rlim_t };
            if libc::setrlimit(resource, &rlimit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
