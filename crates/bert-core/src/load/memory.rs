//! Whether a run fits in memory, decided before anything large is allocated: an allocation that
//! fails aborts the process ("memory allocation failed") with no word about why.

use crate::error::{BertError, Result};
use crate::load::files::bytes;

/// The memory this machine can give a process now without swapping: `MemAvailable` of
/// `/proc/meminfo`, plus free swap. None where the system does not say (then nothing is refused).
pub fn available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * 1024)
    };
    Some(field("MemAvailable:")? + field("SwapFree:").unwrap_or(0))
}

/// Refuses to go on when `needed` bytes are more than this machine has available; `what` says
/// what they are for, in a phrase that follows "needs about N of memory".
pub fn check(needed: u64, what: &str) -> Result<()> {
    match available() {
        Some(available) if needed > available => Err(BertError::Memory {
            problem: format!(
                "needs about {} of memory {what}, and this machine has {} available",
                bytes(needed),
                bytes(available)
            ),
        }),
        _ => Ok(()),
    }
}
