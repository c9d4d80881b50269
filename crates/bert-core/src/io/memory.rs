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
    let limit = |resource| -> Option<u64> {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes the one struct it is given.
        if unsafe { libc::getrlimit(resource, &mut limit) } != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
            return None;
        }
        Some(limit.rlim_cur)
    };
    let (address_space, data) = (limit(libc::RLIMIT_AS), limit(libc::RLIMIT_DATA));
    // Most processes have no limit: then /proc/self/status, which a `diff` of many small files
    // would read once a file, is not read at all.
    if address_space.is_none() && data.is_none() {
        return None;
    }
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let left = |limit: Option<u64>, used: &str| Some(limit?.saturating_sub(field(&status, used)?));
    match (left(address_space, "VmSize:"), left(data, "VmData:")) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Refuses to go on when `needed` bytes are more than this machine has available, or more than
/// this process may still map under its limits; `what` says what they are for, in a phrase that
/// follows "needs about N of memory".
pub fn check(needed: u64, what: &str) -> Result<()> {
    // Less than this is never what runs a machine out of memory, and checking it costs two reads
    // of /proc, which a `diff` of 100,000 one-value files would make 100,000 times.
    const TOO_SMALL_TO_REFUSE: u64 = 1 << 20;
    if needed < TOO_SMALL_TO_REFUSE {
        return Ok(());
    }
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
