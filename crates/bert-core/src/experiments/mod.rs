//! Experiments on the model: change a stage and watch the prediction move.
//!
//! - `intervention.rs`: ablating heads and patching stages from another run, applied through
//!   the tracer's one seam ([`crate::pass::hook::Hook`]) and recorded in the manifest;
//! - `ablation.rs`: each head ablated alone, and the change in a masked word's log-probability
//!   (`bert-trace ablate`);
//! - `logit_lens.rs`: every layer's guess through the MLM head (`bert-trace lens`);
//! - `token_importance/`: which input tokens a prediction rests on: each hidden in turn
//!   (occlusion), integrated gradients and gradient × input (`bert-trace attribute`);
//! - `head_importance.rs`: each head's importance by the backward pass, the loss as the least
//!   important are masked, and where each head looks (`bert-trace heads`);
//! - `readout.rs`: the MLM head's prediction at one position, which all three read;
//! - `attention_flow/`: what each layer's output reads from the input through every layer below it,
//!   by attention rollout and attention flow, from a dump's attention (`bert-trace rollout`);
//! - `segmentation.rs`: words instead of word pieces, and a token × token matrix read word by
//!   word (`--words`).
//!
//! Which checkpoint a dump was made with (so that a patch from another model is refused) is
//! `io/fingerprint.rs`.

pub mod ablation;
pub mod attention_flow;
pub mod head_importance;
pub mod hidden_states;
pub mod intervention;
pub mod logit_lens;
pub mod readout;
pub mod segmentation;
pub mod token_importance;

use std::fmt;

/// One attention head: head `head` of encoder layer `layer`, written `layer{L}.head{H}` (as
/// `--ablate` takes it, and every report names a head) by its `Display`, the one place that
/// spelling is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttentionHead {
    pub layer: usize,
    pub head: usize,
}

impl fmt::Display for AttentionHead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "layer{}.head{}", self.layer, self.head)
    }
}
