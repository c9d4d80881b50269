//! How far a long computation is, on standard error when it is a terminal, erased when done:
//! piped output and the tests see nothing of it.

use std::io::{IsTerminal, Write};

/// A counter of `what` (`points`, `passes`) that redraws one line: call it with (done, in all).
pub fn bar(what: &'static str) -> impl FnMut(usize, usize) {
    let terminal = std::io::stderr().is_terminal();
    let mut shown = false;
    move |done, all| {
        if !terminal {
            return;
        }
        if done < all {
            eprint!("\r{done} of {all} {what}");
            shown = true;
        } else if shown {
            eprint!("\r\x1b[K");
            shown = false;
        }
        let _ = std::io::stderr().flush();
    }
}
