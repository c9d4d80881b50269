//! `attribute --target WORD TEXT`: occlusion (bert-core's `experiments/attribute.rs`): each
//! token hidden in turn, and how much the prediction of the `[MASK]` falls, with a bar per
//! token.

use bert_core::experiments::attribute::Occlusion;
use bert_core::io::tokenizer::MASK;

use crate::error::Result;
use crate::experiment::{Experiment, ExperimentReport, ExperimentRequest};
use crate::render::table::{new_table, visible};

/// Which text and target, and the token that hides another (`[MASK]` or `[UNK]`).
#[derive(Clone, Debug)]
pub struct AttributeRequest {
    pub input: ExperimentRequest,
    pub target: String,
    pub occlude_with: &'static str,
}

/// Hides each token in turn.
pub fn attribute(request: &AttributeRequest) -> Result<ExperimentReport> {
    let experiment = Experiment::load(&request.input)?;
    let position = experiment.mask()?;
    let target = experiment.target(&request.target)?;
    let occlusion =
        experiment.model.occlude(&experiment.batch, position, (&request.target, target), request.occlude_with)?;
    let text = match request.input.json {
        true => {
            let mut json = serde_json::to_value(&occlusion).expect("an occlusion serialises");
            json["model"] = experiment.model_name.clone().into();
            format!("{}\n", serde_json::to_string_pretty(&json).expect("JSON prints"))
        }
        false => report(&occlusion),
    };
    Ok(ExperimentReport { notes: experiment.notes, text })
}

/// The widest bar, in characters.
const BAR: usize = 24;

fn report(occlusion: &Occlusion) -> String {
    let mut out = format!(
        "{MASK} at position {}: log p({}) = {:.4} with every token; each token hidden by {} in turn:\n",
        occlusion.position.1, occlusion.target, occlusion.log_prob, occlusion.occluded_with
    );
    if occlusion.tokens.is_empty() {
        out += "nothing to hide: the text has no token besides [CLS], [SEP] and the [MASK]\n";
        return out;
    }
    let largest = occlusion.tokens.iter().map(|t| t.change.abs()).fold(0.0, f64::max);
    let mut table = new_table(&["pos", "token", "change", ""], &[0, 2]);
    for token in &occlusion.tokens {
        // A bar to the left for a token that helped (hiding it lowers the target), to the right
        // for one that hurt, its length in proportion to the largest change.
        let cells = if largest > 0.0 { (token.change.abs() / largest * BAR as f64).round() as usize } else { 0 };
        let bar = if token.change < 0.0 {
            format!("{:>BAR$}|", "█".repeat(cells))
        } else {
            format!("{:>BAR$}|{}", "", "█".repeat(cells))
        };
        table.add_row(vec![token.position.to_string(), visible(&token.token), format!("{:+.4}", token.change), bar]);
    }
    out += &format!("{table}\n(negative: the prediction leans on the token; bars to the left)\n");
    out
}
