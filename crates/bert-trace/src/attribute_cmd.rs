//! `bert-trace attribute --target WORD TEXT`: occlusion (bert-core's
//! `experiments/attribute.rs`): each token hidden in turn, and how much the prediction of the
//! `[MASK]` falls, printed with a bar per token.

use anyhow::Result;
use bert_core::experiments::attribute::Occlusion;
use bert_core::io::tokenizer::{MASK, UNK};

use crate::cli::{AttributeArgs, OccludeWith};
use crate::experiment_input::Experiment;
use crate::table::{new_table, visible};

pub fn run(args: &AttributeArgs) -> Result<i32> {
    let experiment = Experiment::load(&args.input)?;
    let position = experiment.mask()?;
    let target = experiment.target(&args.target)?;
    let hide = match args.occlude_with {
        OccludeWith::Mask => MASK,
        OccludeWith::Unk => UNK,
    };
    let occlusion = experiment.model.occlude(&experiment.batch, position, (&args.target, target), hide)?;
    if args.input.json {
        let mut json = serde_json::to_value(&occlusion)?;
        json["model"] = experiment.model_name.clone().into();
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{}", report(&occlusion));
    }
    Ok(0)
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
