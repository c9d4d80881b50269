//! `lens TEXT`: every layer's guess at the `[MASK]` (or at `pos`), read through the MLM head
//! (bert-core's `experiments/lens.rs`), one row per layer.

use crate::refuse;
use bert_core::experiments::lens::LensAt;
use bert_core::words::Opt;

use crate::error::Result;
use crate::experiment::{Experiment, ExperimentReport, ExperimentRequest};
use crate::render::table::new_table;

pub const POS: Opt = Opt("pos");
pub const TOP_K: Opt = Opt("top_k");

/// Which text, which position (None: the `[MASK]`), which target to follow, how many guesses.
#[derive(Clone, Debug)]
pub struct LensRequest {
    pub input: ExperimentRequest,
    pub target: Option<String>,
    pub pos: Option<usize>,
    pub top_k: usize,
}

/// Every layer's guess at the position.
pub fn lens(request: &LensRequest) -> Result<ExperimentReport> {
    let experiment = Experiment::load(&request.input)?;
    let position = match request.pos {
        Some(pos) => {
            let (_, tokens) = experiment.batch.dims();
            if pos >= tokens {
                refuse!("{} is beyond the text's {tokens} tokens (0 to {})", POS.with(pos), tokens - 1);
            }
            (0, pos)
        }
        None => experiment.mask()?,
    };
    let target = request.target.as_deref().map(|word| experiment.target(word)).transpose()?;
    if request.top_k == 0 {
        refuse!("{} shows nothing; give 1 or more", TOP_K.with(0));
    }
    let lens = experiment.model.lens(&experiment.batch, &[position], request.top_k, target)?;
    let at = lens.into_iter().next().expect("one position asked for");
    let text = match request.input.json {
        true => {
            let mut json = serde_json::to_value(&at).expect("a lens serialises");
            json["format"] = "bert-trace-lens/1".into();
            json["model"] = experiment.model_name.clone().into();
            json["target"] = request.target.clone().into();
            format!("{}\n", serde_json::to_string_pretty(&json).expect("JSON prints"))
        }
        false => report(&at, &experiment, request.target.as_deref()),
    };
    Ok(ExperimentReport { notes: experiment.notes, text })
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
