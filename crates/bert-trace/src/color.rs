//! `--color`: when the terminal gets colour (the heatmap of an attention stage `--stop-at`
//! ends at): always, never, or on a terminal unless `NO_COLOR` is set or `TERM` is `dumb`.

use std::io::IsTerminal;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set or `TERM` is `dumb`.
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    /// Whether to draw in colour on stdout.
    pub fn enabled(self) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
                let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
                std::io::stdout().is_terminal() && !no_color && !dumb
            }
        }
    }
}
