//! One concrete stage ([`Stage`]: a kind, its layer, and whether it is the value, its gradient or
//! a parameter after an update) and its names: the stage name, the Hugging Face name, the formula,
//! the file name and the symbolic shape, all filled in from the table's row; [`parse`], which
//! reads a name back, and [`execution_key`], which orders names as the passes produce them.

use std::fmt;

use super::{Dims, Part, StageInfo, StageKind, STAGES};

/// Whether a stage is the value the forward pass computed or d loss / d that value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Of {
    #[default]
    Value,
    /// d loss / d the value, from a backward pass: the name gets `grad.` in front.
    Grad,
    /// A parameter after an optimizer's step (`bert-trace train`): the name gets `updated.` in
    /// front. Only the parameter rows have it.
    Updated,
}

/// The rule of a parameter's update, the formula of every `updated.param.*` stage: AdamW as
/// `torch.optim.AdamW` computes it (`training/adamw.rs`).
const ADAMW_RULE: &str = "θ·(1 − lr·λ) − lr/(1 − β1^t) · m / (√v / √(1 − β2^t) + ε)";

/// One concrete stage: a kind, for per-layer kinds the layer index, and whether it is the value
/// or its gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stage {
    pub kind: StageKind,
    pub layer: Option<usize>,
    pub of: Of,
}

impl Stage {
    /// A stage outside the encoder layers.
    pub fn new(kind: StageKind) -> Stage {
        debug_assert!(!kind.per_layer(), "{kind:?} needs a layer index");
        Stage { kind, layer: None, of: Of::Value }
    }

    /// A stage of encoder layer `layer_idx`.
    pub fn layer(layer_idx: usize, kind: StageKind) -> Stage {
        debug_assert!(kind.per_layer(), "{kind:?} is not a per-layer stage");
        Stage { kind, layer: Some(layer_idx), of: Of::Value }
    }

    /// d loss / d this stage.
    pub fn grad(self) -> Stage {
        Stage { of: Of::Grad, ..self }
    }

    /// A parameter's value after the optimizer's step.
    pub fn updated(self) -> Stage {
        debug_assert!(self.info().part == Part::Param, "only a parameter is updated");
        Stage { of: Of::Updated, ..self }
    }

    /// Whether this is a gradient.
    pub fn is_grad(&self) -> bool {
        self.of == Of::Grad
    }

    /// Whether this is the value the forward pass computes for a stage of `kind`: not its
    /// gradient, nor a parameter after an update. A reader that wants, say, attention
    /// probabilities asks this, since `grad.layer0.attention.probs` has the same kind.
    pub fn is_value_of(&self, kind: StageKind) -> bool {
        self.of == Of::Value && self.kind == kind
    }

    pub fn info(&self) -> &'static StageInfo {
        self.kind.info()
    }

    /// The stage name, e.g. `layer3.ffn.layernorm`, or `grad.layer3.ffn.layernorm` for its
    /// gradient.
    pub fn name(&self) -> String {
        match self.of {
            Of::Value => self.fill(self.info().pattern),
            Of::Grad => format!("grad.{}", self.fill(self.info().pattern)),
            Of::Updated => format!("updated.{}", self.fill(self.info().pattern)),
        }
    }

    /// The `.npy` file name inside a dump directory.
    pub fn file_name(&self) -> String {
        format!("{}.npy", self.name())
    }

    /// The Hugging Face module or output this stage equals (`.grad` of it, for a gradient).
    pub fn hf(&self) -> String {
        match self.of {
            Of::Value => self.fill(self.info().hf),
            Of::Grad => format!("{}.grad", self.fill(self.info().hf)),
            Of::Updated => format!("{} after optimizer.step()", self.fill(self.info().hf)),
        }
    }

    /// The concrete shape for the given dimensions.
    pub fn shape(&self, dims: &Dims) -> Vec<usize> {
        self.info().shape.iter().map(|&d| dims.size(d)).collect()
    }

    /// The one line of math the stage table shows: the forward formula of a value, the backward
    /// rule of a gradient, with the layer's index filled in as [`Stage::name`] has it.
    pub fn formula(&self) -> String {
        match self.of {
            Of::Value => self.fill(self.info().formula),
            Of::Grad => self.fill(self.info().backward),
            Of::Updated => ADAMW_RULE.to_string(),
        }
    }

    /// The symbolic shape, e.g. `[B,nh,T,hs]`.
    pub fn shape_symbols(&self) -> String {
        let symbols: Vec<&str> = self.info().shape.iter().map(|d| d.symbol()).collect();
        format!("[{}]", symbols.join(","))
    }

    fn fill(&self, pattern: &str) -> String {
        match self.layer {
            Some(i) => pattern.replace("{i+1}", &(i + 1).to_string()).replace("{i}", &i.to_string()),
            None => pattern.to_string(),
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// The stage a name denotes (`layer3.ffn.layernorm`, `lens.layer3.logits`), if it is one of the
/// table's.
pub fn parse(name: &str) -> Option<Stage> {
    if let Some(value) = name.strip_prefix("grad.") {
        return parse(value).filter(|s| s.of == Of::Value).map(Stage::grad);
    }
    if let Some(value) = name.strip_prefix("updated.") {
        return parse(value).filter(|s| s.of == Of::Value && s.info().part == Part::Param).map(Stage::updated);
    }
    for info in STAGES {
        // Split at the `{i}` by its first byte: a char pattern is a memchr, where a string
        // pattern builds a searcher for each of the table's rows at each name parsed.
        if let Some((before, after)) = info.pattern.split_once('{').map(|(b, a)| (b, a.strip_prefix("i}").unwrap_or(a)))
        {
            let Some(index) = name.strip_prefix(before).and_then(|rest| rest.strip_suffix(after)) else { continue };
            // `layer03` is not `layer3`: only the canonical spelling names a stage.
            if let Some(layer_idx) = index.parse::<usize>().ok().filter(|i| i.to_string() == index) {
                return Some(Stage::layer(layer_idx, info.kind));
            }
        } else if info.pattern == name {
            return Some(Stage::new(info.kind));
        }
    }
    None
}

/// Orders stage names as the forward pass produces them; names outside the table go last.
pub fn execution_key(name: &str) -> (usize, usize, usize) {
    match parse(name) {
        Some(stage) if stage.info().part == Part::Param => {
            // The parameters in the order of named_parameters(): the embeddings', each layer's,
            // then the pooler's and the heads'; their gradients, then their values before and
            // after a training step.
            let section = match stage.of {
                Of::Grad => 9,
                Of::Value => 10,
                Of::Updated => 11,
            };
            let layer = match stage.layer {
                Some(layer) => layer + 1,
                None if matches!(stage.kind, StageKind::Param(param) if param.is_embeddings()) => 0,
                None => usize::MAX,
            };
            (section, layer, stage.kind.index())
        }
        Some(stage) => {
            if stage.is_grad() {
                // The backward's order: the heads, the layers from the last, the embeddings,
                // then the parameters.
                let (section, layer) = match (stage.info().part, stage.layer) {
                    (Part::Input | Part::Embeddings, _) => (8, 0),
                    (_, Some(layer)) => (7, usize::MAX - layer),
                    (_, None) => (6, 0),
                };
                return (section, layer, usize::MAX - stage.kind.index());
            }
            let section = match (stage.info().part, stage.layer, stage.kind < StageKind::AttnQuery) {
                (Part::Lens, _, _) => 3,
                (_, None, true) => 0,
                (_, Some(_), _) => 1,
                (_, None, false) => 2,
            };
            // The lens reads the embeddings first, then each layer in turn.
            let layer = stage.layer.map_or(0, |i| i + usize::from(stage.info().part == Part::Lens));
            (section, layer, stage.kind.index())
        }
        None => (12, 0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::{plan, Objectives, OutputHeads, StageKind::*};

    #[test]
    fn parse_inverts_name() {
        let all = OutputHeads { pooler: true, mlm: true, nsp: true, classifier: true, sentence: true };
        for stage in plan(12, all, Objectives::ALL) {
            assert_eq!(parse(&stage.name()), Some(stage), "parse({})", stage.name());
        }
        for bad in ["layer", "layer03.ffn.output", "layerx.ffn.output", "embeddings", "mlm.logit", "lens.layer.logits"]
        {
            assert_eq!(parse(bad), None, "parse({bad})");
        }
    }

    #[test]
    fn hf_names_fill_layer_indices() {
        let stage = Stage::layer(3, FfnLayerNorm);
        assert_eq!(stage.hf(), "hidden_states[4]");
        assert_eq!(stage.name(), "layer3.ffn.layernorm");
    }

    #[test]
    fn no_printed_formula_has_a_placeholder() {
        let all = OutputHeads { pooler: true, mlm: true, nsp: true, classifier: true, sentence: true };
        let values = crate::stage::plan(4, all, Objectives::ALL).into_iter();
        let parameters = crate::stage::parameters(4, all).into_iter().flat_map(|p| [p, p.updated()]);
        for stage in values.chain(parameters) {
            let formula = stage.formula();
            assert!(!formula.contains('{'), "{stage}: {formula}");
        }
    }
}
