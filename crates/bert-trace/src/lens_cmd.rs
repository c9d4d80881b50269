//! `bert-trace lens TEXT`: every layer's guess at the `[MASK]` (or `--pos N`), read through the
//! MLM head (bert-core's `experiments/lens.rs`), one row per layer.

use anyhow::{bail, Result};
use bert_core::experiments::lens::LensAt;

use crate::cli::LensArgs;
use crate::experiment_input::Experiment;
use crate::table::new_table;

pub fn run(args: &LensArgs) -> Result<i32> {
    let experiment = Experiment::load(&args.input)?;
    let position = match args.pos {
        Some(pos) => {
            let (_, tokens) = experiment.batch.dims();
            if pos >= tokens {
                bail!("--pos {pos} is beyond the text's {tokens} tokens (0 to {})", tokens - 1);
            }
            (0, pos)
        }
        None => experiment.mask()?,
    };
    let target = args.target.as_deref().map(|word| experiment.target(word)).transpose()?;
    if args.top_k == 0 {
        bail!("--top-k 0 shows nothing; give 1 or more");
    }
    let lens = experiment.model.lens(&experiment.batch, &[position], args.top_k, target)?;
    let at = lens.into_iter().next().expect("one position asked for");
    if args.input.json {
        let mut json = serde_json::to_value(&at)?;
        json["format"] = "bert-trace-lens/1".into();
        json["model"] = experiment.model_name.clone().into();
        json["target"] = args.target.clone().into();
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{}", report(&at, &experiment, args.target.as_deref()));
    }
    Ok(0)
}

fn report(at: &LensAt, experiment: &Experiment, target: Option<&str>) -> String {
    let (_, pos) = at.position;
    let seen = experiment.token(experiment.batch.ids[[0, pos]] as u32);
    let mut out = format!("position {pos} ({seen}): what each layer's output predicts through the MLM head\n");
    let mut header = vec!["after".to_string(), "guesses".to_string()];
    if let Some(word) = target {
        header.extend([format!("P({word})"), "rank".to_string()]);
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = new_table(&header, &[2, 3]);
    for row in &at.rows {
        let after = row.stage.trim_start_matches("lens.").trim_end_matches(".logits").to_string();
        let guesses: Vec<String> = row.top.iter().map(|&(id, p)| format!("{} {p:.3}", experiment.token(id))).collect();
        let mut cells = vec![after, guesses.join(", ")];
        if let Some((p, rank)) = row.target {
            let rank = rank.map_or("non-finite".to_string(), |r| r.to_string());
            cells.extend([if p.is_nan() { "non-finite".into() } else { format!("{p:.4}") }, rank]);
        }
        table.add_row(cells);
    }
    out += &format!("{table}\n");
    out
}
