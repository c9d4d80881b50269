//! `attribute`: which input tokens a prediction rests on (bert-core's
//! `experiments/token_importance/` computes it), for one target per text: an MLM word at the
//! `[MASK]` (`target`), a classifier's class (`label`, by default the predicted one) or the NSP
//! label (`nsp_label`).
//! By occlusion, integrated gradients or gradient × input, as a table with a bar per token, or
//! JSON that `view` draws.

use std::path::PathBuf;

use bert_core::experiments::readout::the_mask;
use bert_core::experiments::segmentation::{Segmentation, WORDS};
use bert_core::experiments::token_importance::integrated::{Baseline, PathSpec};
use bert_core::experiments::token_importance::{self, Attribution, Prediction, Rule, Score};
use bert_core::io::dump::manifest::Inputs;
use bert_core::io::tokenizer::{MASK, UNK};
use bert_core::words::{Choice, Opt};
use bert_core::{BertError, BertModel};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::refuse;
use crate::render::text_table::{new_table, visible};
use crate::report::{Report, Reported};
use crate::settings::PassSettings;
use crate::source;

pub const METHOD: Opt = Opt("method");
pub const TARGET: Opt = Opt("target");
pub const LABEL: Opt = Opt("label");
pub const NSP_LABEL: Opt = Opt("nsp_label");
pub const PAIR: Opt = Opt("pair");
pub const BASELINE: Opt = Opt("baseline");
pub const IG_STEPS: Opt = Opt("ig_steps");
pub const IG_RULE: Opt = Opt("ig_rule");
pub const OCCLUDE_WITH: Opt = Opt("occlude_with");
pub const OF: Opt = Opt("of");

/// How the tokens are attributed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Each token hidden in turn.
    #[default]
    Occlusion,
    /// Integrated gradients along a straight path from a baseline.
    IntegratedGradients,
    /// The gradient at the input times the input.
    GradInput,
}

bert_core::choice!(Method {
    Occlusion => "occlusion",
    IntegratedGradients => "integrated-gradients",
    GradInput => "grad-input",
});

/// What hides a token in occlusion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OccludeWith {
    #[default]
    Mask,
    Unk,
}

bert_core::choice!(OccludeWith { Mask => "mask", Unk => "unk" });

/// The texts, the target and the method; each field is the option of that name. The options of
/// one method are None unless given, so that one given to another method is refused.
#[derive(Clone, Debug, Default)]
pub struct AttributeRequest {
    pub texts: Vec<String>,
    pub file: Option<PathBuf>,
    pub pair: Vec<String>,
    pub model: Option<PathBuf>,
    pub method: Method,
    /// The word each text's `[MASK]` is to be predicted as (once, or once per text).
    pub targets: Vec<String>,
    /// A classifier's class per text (once, or once per text); none: the predicted class.
    pub labels: Vec<String>,
    pub nsp_labels: Vec<i64>,
    pub of: Score,
    pub occlude_with: Option<OccludeWith>,
    pub baseline: Option<Baseline>,
    pub ig_steps: Option<usize>,
    pub ig_rule: Option<Rule>,
    pub settings: PassSettings,
    /// Also by words: None by tokens only; Some("") by the words found automatically (WordPiece's, and jieba's for Chinese); Some(words) by the
    /// words given, separated by spaces (one text only).
    pub words: Option<String>,
}

/// The default number of points on the path.
pub const IG_STEPS_DEFAULT: usize = 50;

/// The most points on the path: a backward pass each.
pub const IG_STEPS_MAX: usize = 10_000;

/// One text's attribution.
#[derive(Clone, Debug, Serialize)]
pub struct Example {
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pair: Option<String>,
    #[serde(flatten)]
    pub attribution: Attribution,
    /// The attributions summed over each word's pieces, when asked for by words: they add up
    /// to what the tokens' do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub words: Option<Vec<WordAttribution>>,
}

/// One word's attribution: the sum of its pieces'.
#[derive(Clone, Debug, Serialize)]
pub struct WordAttribution {
    pub word: String,
    /// Its pieces' positions in the sequence.
    pub positions: Vec<usize>,
    pub attribution: f64,
}

/// `attribution`'s tokens grouped into words as `words` asks (see [`AttributeRequest::words`]).
fn by_words(attribution: &Attribution, words: &str) -> Result<Vec<WordAttribution>> {
    let tokens: Vec<String> = attribution.tokens.iter().map(|t| t.token.clone()).collect();
    let segmentation = Segmentation::asked(&tokens, words).map_err(|problem| {
        Error::Request(format!("{}: {problem} (the tokens attributed: {})", WORDS.with(words), tokens.join(" ")))
    })?;
    Ok(segmentation
        .words
        .into_iter()
        .map(|word| WordAttribution {
            positions: word.pieces.iter().map(|&p| attribution.tokens[p].position).collect(),
            attribution: word.pieces.iter().map(|&p| attribution.tokens[p].attribution).sum(),
            word: word.text,
        })
        .collect())
}

/// `attribute --json`, and what Python returns.
#[derive(Clone, Debug, Serialize)]
pub struct AttributeReport {
    pub format: &'static str,
    pub model: String,
    pub method: Method,
    pub of: Score,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub occluded_with: Option<&'static str>,
    pub examples: Vec<Example>,
}

impl Report for AttributeReport {
    fn text(&self) -> String {
        text_report(self)
    }
}

/// Attributes each text's target; `progress` hears (text, points done, points in all) as
/// integrated gradients go.
pub fn attribute(
    request: &AttributeRequest,
    progress: &mut dyn FnMut(usize, usize, usize),
) -> Result<Reported<AttributeReport>> {
    let (_, kernels) = request.settings.apply()?;
    check_options(request)?;
    let with_origins = crate::trace::texts_with_origins(&request.texts, request.file.as_deref())?;
    let (texts, origins): (Vec<String>, Vec<String>) = with_origins.into_iter().unzip();
    crate::trace::refuse_no_text(&texts, request.file.as_deref())?;
    let per_text = |values: usize, option: Opt| -> Result<()> {
        if values > 1 && values != texts.len() {
            refuse!(
                "{option} is given {values} times for {} text{}: give it once for all, or once per text",
                texts.len(),
                if texts.len() == 1 { "" } else { "s" }
            );
        }
        Ok(())
    };
    per_text(request.targets.len(), TARGET)?;
    per_text(request.labels.len(), LABEL)?;
    per_text(request.nsp_labels.len(), NSP_LABEL)?;
    per_text(request.pair.len(), PAIR)?;
    if request.words.as_deref().is_some_and(|w| !w.is_empty()) && texts.len() > 1 {
        refuse!(
            "{} gives the words of one text, and there are {}: give {} alone for the words found automatically",
            WORDS.with(request.words.as_deref().unwrap_or_default()),
            texts.len(),
            WORDS.on()
        );
    }
    let loaded = source::load(request.model.as_deref())?;
    let mut model = loaded.model;
    model.kernels = kernels;
    let pick = |values: &[String], i: usize| values.get(if values.len() == 1 { 0 } else { i }).cloned();
    // Every text is tokenized together first, so that a message about one names it as the
    // input gives it; then each text's target is found, all before any attribution runs.
    let pairs =
        (!request.pair.is_empty()).then(|| (0..texts.len()).filter_map(|i| pick(&request.pair, i)).collect::<Vec<_>>());
    model.encode(&texts, pairs.as_deref(), false)?;
    let mut targets = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let pair = pick(&request.pair, i);
        let nsp = request.nsp_labels.get(if request.nsp_labels.len() == 1 { 0 } else { i }).copied();
        let (batch, target) =
            target_of(&model, text, pair.clone(), pick(&request.targets, i), pick(&request.labels, i), nsp)
                .map_err(|e| within_text(e, &origins[i], texts.len()))?;
        targets.push((pair, batch, target));
    }
    let hide = match request.occlude_with.unwrap_or_default() {
        OccludeWith::Mask => MASK,
        OccludeWith::Unk => UNK,
    };
    let mut examples = Vec::new();
    for (i, (text, (pair, batch, target))) in texts.iter().zip(targets).enumerate() {
        let attribution = match request.method {
            Method::Occlusion => model.occlude(&batch, target, request.of, hide),
            Method::GradInput => model.grad_input(&batch, target, request.of),
            Method::IntegratedGradients => {
                let path = PathSpec {
                    baseline: request.baseline.unwrap_or_default(),
                    rule: request.ig_rule.unwrap_or_default(),
                    steps: request.ig_steps.unwrap_or(IG_STEPS_DEFAULT),
                };
                model.integrated_gradients(&batch, target, request.of, path, &mut |done, all| progress(i, done, all))
            }
        }
        .map_err(|e| within_text(e.into(), &origins[i], texts.len()))?;
        let words = request.words.as_deref().map(|words| by_words(&attribution, words)).transpose()?;
        examples.push(Example { text: text.clone(), pair, attribution, words });
    }
    let report = AttributeReport {
        format: token_importance::FORMAT,
        model: loaded.name,
        method: request.method,
        of: request.of,
        occluded_with: (request.method == Method::Occlusion).then_some(hide),
        examples,
    };
    Ok(Reported { notes: loaded.notes, report })
}

/// Refuses a method's option given to another method, and a path of no points.
fn check_options(request: &AttributeRequest) -> Result<()> {
    let integrated = request.method == Method::IntegratedGradients;
    for (given, option) in [
        (request.baseline.is_some(), BASELINE),
        (request.ig_steps.is_some(), IG_STEPS),
        (request.ig_rule.is_some(), IG_RULE),
    ] {
        if given && !integrated {
            refuse!(
                "{option} is for {}, not {}",
                METHOD.with(Method::IntegratedGradients.name()),
                METHOD.with(request.method.name())
            );
        }
    }
    if request.occlude_with.is_some() && request.method != Method::Occlusion {
        refuse!("{OCCLUDE_WITH} is for {}, not {}", METHOD.with("occlusion"), METHOD.with(request.method.name()));
    }
    match request.ig_steps {
        Some(0) => refuse!("{}: the path needs at least one point", IG_STEPS.with(0)),
        Some(n) if n > IG_STEPS_MAX => refuse!(
            "{}: at most {IG_STEPS_MAX} points (Gauss–Legendre's gap is at float32's rounding long before)",
            IG_STEPS.with(n)
        ),
        _ => {}
    }
    let kinds = [!request.targets.is_empty(), !request.labels.is_empty(), !request.nsp_labels.is_empty()];
    if kinds.iter().filter(|&&k| k).count() > 1 {
        refuse!("one target at a time: {TARGET} (a word at the [MASK]), {LABEL} (a classifier's class) or {NSP_LABEL}");
    }
    if !request.nsp_labels.is_empty() && request.pair.is_empty() {
        refuse!("{NSP_LABEL} needs sentence pairs: give sentence B with {PAIR}");
    }
    Ok(())
}

/// The text's batch (one sequence, no labels) and its target.
fn target_of(
    model: &BertModel,
    text: &str,
    pair: Option<String>,
    word: Option<String>,
    label: Option<String>,
    nsp: Option<i64>,
) -> Result<(bert_core::Batch, Prediction)> {
    let inputs = Inputs {
        texts: vec![text.to_string()],
        pair: pair.map(|p| vec![p]),
        label: label.clone().map(|l| vec![l]),
        nsp_label: nsp.map(|l| vec![l]),
        ..Inputs::default()
    };
    let mut batch = model.encode_inputs(&inputs, false)?;
    let target = if let Some(word) = word {
        let (_, position) = the_mask(model.tokenizer.token_to_id(MASK), &batch)?;
        let id = model.tokenizer.single_token(&word).map_err(BertError::Labels)?;
        Prediction::Masked { position, id }
    } else if let Some(classes) = &batch.labels.class {
        Prediction::Class(classes[0] as usize)
    } else if let Some(labels) = &batch.labels.nsp {
        Prediction::NextSentence(labels[0] as usize)
    } else if model.classifier.is_some() {
        Prediction::Class(model.predicted_class(&batch)?)
    } else {
        refuse!(
            "nothing to attribute: give {TARGET} WORD (the word at the text's [MASK]), {NSP_LABEL} with {PAIR}, or \
             {LABEL} on a classifier"
        );
    };
    batch.labels = Default::default();
    Ok((batch, target))
}

/// `error`, saying which text it is about (`text 2`, `reviews.txt: line 7`) when there are
/// several.
fn within_text(error: crate::Error, origin: &str, texts: usize) -> crate::Error {
    match texts {
        1 => error,
        _ => crate::Error::Within { what: origin.to_string(), inner: Box::new(error) },
    }
}

/// The widest bar, in characters.
const BAR: usize = 24;

fn text_report(report: &AttributeReport) -> String {
    let mut out = String::new();
    for (i, example) in report.examples.iter().enumerate() {
        let a = &example.attribution;
        if report.examples.len() > 1 {
            out += &format!("{}text {}: {}\n", if i > 0 { "\n" } else { "" }, i + 1, example.text);
        }
        let score = score_name(report.of, &a.target.name);
        let at = match (a.target.kind, a.target.position) {
            ("mlm", Some(position)) => format!(" at the {MASK} (position {position})"),
            _ => String::new(),
        };
        out += &match report.method {
            Method::Occlusion => format!(
                "{score}{at} = {:.4} with every token; each token hidden by {} in turn:\n",
                a.score,
                report.occluded_with.unwrap_or(MASK)
            ),
            Method::GradInput => {
                format!("{score}{at} = {:.4}; gradient × input, summed over the hidden size:\n", a.score)
            }
            Method::IntegratedGradients => {
                let c = a.completeness.as_ref().expect("integrated gradients say whether they add up");
                format!(
                    "{score}{at} = {:.4}, and {:.4} at the {} baseline; integrated gradients in {} {} points:\n",
                    a.score,
                    c.baseline_score,
                    c.baseline.name(),
                    c.steps,
                    match c.rule {
                        Rule::GaussLegendre => "Gauss–Legendre",
                        Rule::Midpoint => "midpoint",
                    }
                )
            }
        };
        if a.tokens.is_empty() {
            let what = if report.method == Method::Occlusion { "hide" } else { "attribute" };
            let besides = if a.target.kind == "mlm" { "[CLS], [SEP] and the [MASK]" } else { "[CLS] and [SEP]" };
            out += &format!("nothing to {what}: the text has no token besides {besides}\n");
            continue;
        }
        out += &bars(a);
        if let Some(words) = &example.words {
            let shown: Vec<String> = words.iter().map(|w| format!("{} {:+.4}", w.word, w.attribution)).collect();
            out += &format!("by words: {}\n", shown.join(", "));
        }
        if let Some(c) = &a.completeness {
            out += &format!(
                "sum {:+.4} against {:+.4} = {score} − its value at the baseline: a gap of {:.2e}\n",
                c.sum, c.difference, c.gap
            );
            if c.gap.abs() > 0.01 * c.difference.abs().max(1e-3) {
                out += &format!(
                    "the gap is more than 1% of the difference: more points would shrink it ({})\n",
                    IG_STEPS.with(c.steps * 4)
                );
            }
        }
    }
    let names: Vec<&str> = report.examples.iter().map(|e| e.attribution.target.name.as_str()).collect();
    let raised = match names.windows(2).all(|w| w[0] == w[1]) {
        true => score_name(report.of, names[0]),
        false => format!("the target's {}", if report.of == Score::Logit { "logit" } else { "log-probability" }),
    };
    out += &format!("(positive: the token raises {raised}; bars to the right)\n");
    out
}

/// `log p(word)` or `logit(word)`.
fn score_name(of: Score, name: &str) -> String {
    let name = visible(name);
    match of {
        Score::Logprob => format!("log p({name})"),
        Score::Logit => format!("logit({name})"),
    }
}

/// A table of the tokens, with a bar each: to the right for a token that raises the score, to
/// the left for one that lowers it, its length in proportion to the largest.
fn bars(a: &Attribution) -> String {
    let largest = a.tokens.iter().map(|t| t.attribution.abs()).fold(0.0, f64::max);
    let mut table = new_table(&["pos", "token", "attribution", ""], &[0, 2]);
    for token in &a.tokens {
        let cells = if largest > 0.0 { (token.attribution.abs() / largest * BAR as f64).round() as usize } else { 0 };
        let bar = if token.attribution < 0.0 {
            format!("{:>BAR$}|", "█".repeat(cells))
        } else {
            format!("{:>BAR$}|{}", "", "█".repeat(cells))
        };
        table.add_row(vec![
            token.position.to_string(),
            visible(&token.token),
            format!("{:+.4}", token.attribution),
            bar,
        ]);
    }
    format!("{table}\n")
}
