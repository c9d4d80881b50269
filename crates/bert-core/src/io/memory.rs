//! Whether a run fits in memory, decided before anything large is allocated: an allocation that
//! fails aborts the process ("memory allocation failed") with no word about why.

use crate::error::{BertError, Result};
use crate::io::files::bytes;

/// The memory this machine can give a process now without swapping: `MemAvailable` of
/// `/proc/meminfo`, plus free swap. None where the system does not say (then nothing is refused).
pub fn available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    Some(field(&text, "MemAvailable:")? + field(&text, "SwapFree:").unwrap_or(0))
}

/// A `Name:   N kB` field of a `/proc` file, in bytes.
fn field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kib: u64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// How much more this process may map under its own limits (`ulimit -v`, the address space;
/// `ulimit -d`, the data segment), where it has any: an allocation beyond it fails however
/// much memory the machine has.
pub fn process_limit() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let left = |resource, used: &str| -> Option<u64> {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes the one struct it is given.
        if unsafe { libc::getrlimit(resource, &mut limit) } != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
            return None;
        }
        Some(limit.rlim_cur.saturating_sub(field(&status, used)?))
    };
    match (left(libc::RLIMIT_AS, "VmSize:"), left(libc::RLIMIT_DATA, "VmData:")) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Refuses to go on when `needed` bytes are more than this machine has available, or more than
/// this process may still map under its limits; `what` says what they are for, in a phrase that
/// follows "needs about N of memory".
pub fn check(needed: u64, what: &str) -> Result<()> {
    let problem = |limit: String| BertError::Memory {
        problem: format!("needs about {} of memory {what}, and {limit}", bytes(needed)),
    };
    if let Some(left) = process_limit().filter(|&left| needed > left) {
        return Err(problem(format!(
            "this process may map only {} more under its limits (ulimit -v or -d)",
            bytes(left)
        )));
    }
    match available() {
        Some(available) if needed > available => {
            Err(problem(format!("this machine has {} available", bytes(available))))
        }
        _ => Ok(()),
    }
}
