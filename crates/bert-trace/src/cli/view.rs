//! `bert-trace view DUMP`: a dump, or a command's JSON, drawn (`bert_commands::view`); with
//! `--serve`, its page served with its model behind it (`bert_commands::view::serve`).

use std::io::Write;

use anyhow::Result;
use bert_commands::view::serve::{self, ServeRequest};
use bert_commands::view::{self, ViewRequest};

use crate::cli::ViewArgs;

pub fn run(args: &ViewArgs) -> Result<i32> {
    let request = ViewRequest {
        dump: args.dump.clone(),
        out: args.out.clone(),
        stage: args.stage.clone(),
        head: args.head,
        seq: args.seq,
        lines: args.lines,
        svg: args.svg.clone(),
        png: args.png.clone(),
        heatmaps: args.heatmaps.clone(),
        model: args.model.model.clone(),
        words: args.words.clone(),
    };
    if args.serve {
        let serving = serve::serve(&ServeRequest {
            view: request,
            host: args.host.clone(),
            port: args.port.unwrap_or(0),
            dialect: bert_core::words::Dialect::Flags,
        })?;
        crate::print(&serving.notes, "");
        println!("serving {} at {}", args.dump.display(), serving.url);
        println!("open it in a browser; Ctrl-C ends the server");
        std::io::stdout().flush()?;
        if args.open {
            open_in_browser(&serving.url);
        }
        if let Err(failure) = serving.wait() {
            eprintln!("error: {failure}");
            return Ok(1);
        }
        return Ok(0);
    }
    let report = view::view(&request)?;
    crate::print(&report.notes, &report.text);
    Ok(0)
}

/// Opens `url` in the browser `$BROWSER` names, or the desktop's (`xdg-open`, macOS's `open`);
/// where none is set up, says so and goes on serving.
fn open_in_browser(url: &str) {
    let candidates: Vec<String> = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .into_iter()
        .chain(["xdg-open".to_string(), "open".to_string()])
        .collect();
    for program in candidates {
        let started = std::process::Command::new(&program)
            .arg(url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if started.is_ok() {
            return;
        }
    }
    eprintln!("note: --open: no browser is set up here ($BROWSER, xdg-open): open the URL above yourself");
}
