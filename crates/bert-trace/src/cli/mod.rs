//! The command line: `bert-trace [OPTIONS] [TEXT]...` traces; `diff`, `stages` and `inspect`
//! compare and look around; `ablate`, `lens` and `attribute` experiment on the model.
//!
//! This file declares every command's arguments (the `--help` text); each command's file here
//! (`cli/diff.rs`, ...) turns them into the library's request and prints the report. The work
//! is `bert_core`'s (named for what it computes: `divergence`, `training`, ...), the requests
//! and reports `bert_commands`' (named as the commands are typed).

// The doc comments below are the `--help` text, which names BERT's tokens as users type them
// (`[MASK]`), not as rustdoc links or code.
#![allow(rustdoc::broken_intra_doc_links)]

pub mod ablate;
pub mod attribute;
pub mod compare;
pub mod diff;
pub mod evaluate;
pub mod explain;
pub mod finetune;
pub mod heads;
pub mod inspect;
pub mod lens;
pub mod padding;
pub mod rollout;
pub mod settings;
pub mod stages;
pub mod step;
pub mod tolerances;
pub mod trace;
pub mod train;
pub mod view;

use std::path::PathBuf;

use bert_commands::attribute::{Method, OccludeWith};
use bert_commands::trace::Precision;
use bert_core::experiments::attention_flow::HeadFusion;
use bert_core::experiments::intervention::AblateWith;
use bert_core::experiments::token_importance::integrated::Baseline;
use bert_core::experiments::token_importance::Rule;
use bert_core::experiments::token_importance::Score;
use bert_core::ops::Kernels;
use bert_core::precision::WeightFormat;
use bert_core::training::options::Warmup;
use bert_core::training::TrainSettings;
use bert_core::words::Choice;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};

use crate::color::ColorChoice;

/// Show what BERT does, tensor by tensor: trace a sentence through the forward pass, print every
/// stage's shape and statistics, write each stage to .npy, and diff against PyTorch.
///
/// To trace a text that is the name of a command (lens, diff, compare, ...), put -- before it:
/// bert-trace -- lens
#[derive(Debug, Parser)]
#[command(name = "bert-trace", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub trace: TraceArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compare two dumps (directories or .npz) stage by stage (exit 0: all pass, 1: some fail, 2: bad input)
    Diff(DiffArgs),
    /// List every stage name in execution order, with its shape, HF equivalent and formula
    Stages(StagesArgs),
    /// Show the model's config and its parameter counts per part
    Inspect(InspectArgs),
    /// Does padding change a real token's numbers? Each text traced alone and all of them as
    /// one padded batch, in float64 and float32, every stage's real positions compared; or a
    /// batch's dump against its texts' own (--batched, --alone). The first stage the padding
    /// reaches is named (exit 0: none, 1: padding leaks, 2: bad input)
    Padding(PaddingArgs),
    /// Measure each stage's honest float32 error against float64 on texts (each alone and as one
    /// padded batch, and other dumps against their truths) and write a tolerance file that
    /// `diff --tolerances` holds each stage to
    Tolerances(TolerancesArgs),
    /// Compare the traces of two models on the same input (a base model and its fine-tuned
    /// version): per stage the cosine similarity and relative difference, per attention head the
    /// Jensen-Shannon divergence of where it looks, the most changed heads first
    Compare(CompareArgs),
    /// What each layer's output reads from the input tokens through every layer below it:
    /// attention rollout and, with --flow, attention flow (Abnar and Zuidema 2020), from a fresh
    /// pass of a text or a dump's attention probabilities, on one sequence's real tokens; the
    /// tokens the [MASK] (else [CLS]) reads most after each layer
    Rollout(RolloutArgs),
    /// Draw a dump: one self-contained HTML page (head view, model view, heatmaps, layer plots,
    /// predictions; it needs no network), or one stage as an SVG or PNG picture
    View(ViewArgs),
    /// Ablate each attention head alone and show how the prediction of a [MASK] changes: a
    /// layers x heads grid of the change in the target's log-probability, the most harmful
    /// heads first
    Ablate(AblateArgs),
    /// The logit lens: every layer's guess at a [MASK], from the embeddings to the last layer,
    /// read through the MLM head
    Lens(LensArgs),
    /// Which input tokens a prediction rests on (a word at the [MASK], a classifier's class, the
    /// NSP label): each token hidden in turn, integrated gradients, or gradient × input
    Attribute(AttributeArgs),
    /// Which heads matter: each head's importance |dL/dgate| by the backward pass (Michel et al.
    /// 2019) with the loss as its least important heads are masked, and where each head looks
    /// (Clark et al. 2019: [CLS], [SEP], punctuation, itself, its neighbours, entropy)
    Heads(HeadsArgs),
    /// Why is this number what it is: one element of a dump's stage, its formula with the real
    /// operands, the value recomputed from them by the stage's own function, and every element it
    /// reads
    Explain(ExplainArgs),
    /// Step through one forward pass like a debugger: next, back, goto, show, explain, set, ablate,
    /// patch, continue (type help). On a terminal with line editing; otherwise the commands are
    /// read from standard input, --script or -c, and a bad one ends the run (exit 2)
    Step(StepArgs),
    /// Pretrain BERT on a text file: BERT's masking and the MLM loss (plus NSP for a file of
    /// sentence pairs), AdamW as PyTorch computes it, a linear warm-up and decay; save a
    /// checkpoint transformers loads, and dump any step's every tensor
    Train(TrainArgs),
    /// Fine-tune a classifier on labelled examples (a label, a tab and a text per line), as
    /// BertForSequenceClassification computes it: the classifier's loss traced and checked
    /// against PyTorch, held-out accuracy and a confusion table as it goes, a checkpoint
    /// transformers loads
    Finetune(FinetuneArgs),
    /// Measure a model on held-out text: the MLM loss, perplexity and top-1 and top-5 accuracy at
    /// a fixed, seeded 15% of its tokens (each shown as [MASK]) beside the best guess that
    /// ignores the text; or a classifier's accuracy and confusion table on labelled examples
    Evaluate(EvaluateArgs),
}

/// Where the model comes from.
#[derive(Debug, Args, Clone)]
pub struct ModelArgs {
    /// A model directory (config.json, model.safetensors, tokenizer.json or vocab.txt), or a
    /// Hugging Face model id (`bert-base-uncased`, `org/name`, `org/name@revision`), taken from the
    /// HF cache (HF_HOME, HF_HUB_CACHE) or downloaded into it (HF_ENDPOINT; none with
    /// HF_HUB_OFFLINE=1), or a model built into bert-trace: `english-small` (the default, the
    /// course's pretrained English BERT), `chinese-small` (its Chinese sibling, which reads
    /// classical Chinese a character at a time) or `tiny` (random weights with small numbers).
    #[arg(long, value_name = "DIR|ID")]
    pub model: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The text to trace; several texts make a padded batch
    #[arg(value_name = "TEXT")]
    pub texts: Vec<String>,

    /// Read more texts from FILE, one per line (UTF-8; empty lines are skipped)
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,

    #[command(flatten)]
    pub model: ModelArgs,

    /// Explain one element after the pass: STAGE[INDEX], as `bert-trace explain` does for a dump
    /// (e.g. 'layer0.attention.probs[0,0,3,5]'; `:` on one axis for a whole row)
    #[arg(long, value_name = "STAGE[INDEX]")]
    pub explain: Option<String>,

    /// Sentence B, for sentence pairs; give it once per TEXT
    #[arg(long, value_name = "TEXT")]
    pub pair: Vec<String>,

    /// Stop after this stage or group (`layer0.attention`, `layer3`, `embeddings`); nothing after it is computed
    #[arg(long, value_name = "NAME")]
    pub stop_at: Option<String>,

    /// Write and show only the stages matching this glob (`layer0.*`, `*.probs`), and the inputs; repeatable
    #[arg(long, value_name = "PATTERN")]
    pub only: Vec<String>,

    /// The dump directory
    #[arg(long, value_name = "DIR", default_value = "trace")]
    pub out: PathBuf,

    /// Mask tokens at random as BERT's pretraining does: each token that is not special or
    /// padding is chosen with probability P, then becomes [MASK] (80%), a random token (10%) or
    /// stays (10%); adds the MLM loss. Needs --seed
    #[arg(allow_hyphen_values = true, long, value_name = "P")]
    pub mask_prob: Option<f64>,

    /// The seed of --mask-prob's random numbers (SplitMix64): the same seed gives the same masks
    /// on every machine
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub seed: Option<u64>,

    #[command(flatten)]
    pub losses: LossArgs,

    #[command(flatten)]
    pub pass: PassArgs,

    /// The element type of the whole pass: f32, BERT's own; f64, to see how far f32 rounding
    /// takes each stage (the dump is then float64; `diff --truth` reads it); bf16 or f16,
    /// simulated: f32 arithmetic, every weight and stage rounded to bfloat16 or float16 where
    /// PyTorch's forward in that format rounds
    #[arg(long, value_name = "TYPE", value_parser = choice::<Precision>(), default_value = "f32")]
    pub precision: Precision,

    /// Hold every dense layer's weight as int8, simulated: symmetric, one scale per output
    /// channel (max |w| / 127), used dequantized; the activations stay in float
    #[arg(long, value_name = "FORMAT", value_parser = choice::<WeightFormat>())]
    pub weights: Option<WeightFormat>,

    /// Only print; write nothing
    #[arg(long, conflicts_with_all = ["npz", "reference"])]
    pub no_dump: bool,

    /// Write one OUT/trace.npz instead of one .npy file per stage
    #[arg(long)]
    pub npz: bool,

    /// Write into OUT even if it holds files that are not a bert-trace dump (they are kept; a
    /// file named like one bert-trace writes, or another program's dump, is refused even so)
    #[arg(long)]
    pub force: bool,

    /// Cut inputs longer than max_position_embeddings instead of refusing them
    #[arg(long)]
    pub truncate: bool,

    /// When to draw in colour: after --stop-at an attention stage, a heatmap of one head
    /// (--head) of the first sequence (auto: on a terminal, unless NO_COLOR is set)
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,

    /// The head the colour heatmap of an attention stage shows, 0 to num_attention_heads - 1
    /// [default: 0]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub head: Option<usize>,

    /// How many predictions to show for each [MASK]
    #[arg(allow_hyphen_values = true, long, value_name = "K", default_value_t = 5)]
    pub top_k: usize,

    /// After tracing, diff the dump against this reference dump (as `bert-trace diff`)
    #[arg(long, value_name = "DIR")]
    pub reference: Option<PathBuf>,

    /// Ablate an attention head: `layerL.headH`, or `layerL.heads` for all of a layer's heads
    /// (repeatable). Its slice of layerL.attention.context is replaced (--ablate-with) before the
    /// output projection mixes the heads; layerL.attention.probs is traced as computed
    #[arg(long, value_name = "layerL.headH")]
    pub ablate: Vec<String>,

    /// What an ablated head's slice becomes: zero, or its mean over the sequence's real tokens
    #[arg(long, value_name = "HOW", value_parser = choice::<AblateWith>(), default_value = "zero")]
    pub ablate_with: AblateWith,

    /// Replace a stage by the same stage of another dump of the same model, or only some token
    /// positions of it (STAGE@3, STAGE@1-4): activation patching (repeatable)
    #[arg(long, value_name = "DUMP:STAGE[@POSITIONS]")]
    pub patch: Vec<String>,

    /// Also trace the logit lens: the MLM head applied to the embeddings' and every layer's
    /// output (lens.embeddings.logits, lens.layer{i}.logits)
    #[arg(long)]
    pub lens: bool,

    /// After the forward pass, run the backward pass and trace every gradient: grad.STAGE (d
    /// loss / d that stage) and grad.param.NAME (d loss / d each parameter, named as in
    /// transformers' BertForPreTraining). Needs a loss: --mlm-target, --mask-prob or --nsp-label
    #[arg(long)]
    pub backward: bool,

    #[command(flatten)]
    pub tolerance: ToleranceArgs,
}

/// Tolerance overrides; by default each kind of stage has its own.
#[derive(Debug, Args, Clone, Copy)]
pub struct ToleranceArgs {
    /// Absolute tolerance for every stage: |ours - ref| <= atol + rtol * |ref|
    #[arg(allow_hyphen_values = true, long, value_name = "ATOL", value_parser = tolerance)]
    pub atol: Option<f64>,
    /// Relative tolerance for every stage
    #[arg(allow_hyphen_values = true, long, value_name = "RTOL", value_parser = tolerance)]
    pub rtol: Option<f64>,
}

/// AdamW's two betas, `B1,B2`.
fn betas(text: &str) -> Result<(f64, f64), String> {
    let parsed = text.split_once(',').and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
    parsed.ok_or_else(|| format!("`{text}` is not two numbers B1,B2 (PyTorch's default is 0.9,0.999)"))
}

/// A tolerance: a finite number, 0 or more.
fn tolerance(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && value >= 0.0 => Ok(value),
        _ => Err(format!("`{text}` is not a tolerance: expected a finite number, 0 or more")),
    }
}

#[derive(Debug, Args)]
pub struct StagesArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print only the stage names, one per line (for scripts)
    #[arg(long)]
    pub names: bool,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The reference dump (e.g. from scripts/dump_reference.py): a directory, or its trace.npz
    pub reference: PathBuf,
    /// The dump to check (e.g. from bert-trace): a directory, or its trace.npz
    pub trace: PathBuf,
    #[command(flatten)]
    pub tolerance: ToleranceArgs,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
    /// Whose error is it: recompute every stage of each side from that side's own values of its
    /// inputs, with --model's weights, and report each stage's own error and the culprit, the
    /// first stage whose own error fails its tolerance
    #[arg(long)]
    pub isolate: bool,
    /// Which side is closer to the exact result: measure both against this float64 dump of the
    /// same input (`scripts/dump_reference.py --dtype float64`), stage by stage
    #[arg(long, value_name = "DUMP")]
    pub truth: Option<PathBuf>,
    /// The model both dumps were made with (for --isolate)
    #[command(flatten)]
    pub model: ModelArgs,
    /// Hold each stage to the tolerance this file measured (`bert-trace tolerances`) instead of
    /// the fixed table's; --atol and --rtol still override both
    #[arg(long, value_name = "FILE")]
    pub tolerances: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The dump: a directory written by bert-trace or scripts/dump_reference.py, or its trace.npz
    pub dump: PathBuf,
    /// The element: STAGE[INDEX], e.g. 'layer0.attention.probs[0,0,3,5]'; `:` on one axis for a
    /// whole row ('layer0.attention.probs[0,0,3,:]')
    #[arg(value_name = "STAGE[INDEX]")]
    pub target: String,
    /// Print the explanation as JSON (an array of objects for a row)
    #[arg(long)]
    pub json: bool,
    /// The model the dump was made with. Default: the one its manifest names, as a directory next
    /// to the dump, then here, then a built-in model by that name, then as a hub id (checked
    /// against the fingerprint the dump recorded)
    #[arg(long, value_name = "DIR|ID")]
    pub model: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StepArgs {
    /// The text to step through; several texts make a padded batch
    #[arg(value_name = "TEXT")]
    pub texts: Vec<String>,
    /// Read more texts from FILE, one per line (UTF-8; empty lines are skipped)
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Sentence B of a pair, for each text
    #[arg(long, value_name = "TEXT")]
    pub pair: Vec<String>,
    /// The word each [MASK] is to be predicted as (gives the MLM loss)
    #[arg(long, value_name = "WORD")]
    pub mlm_target: Vec<String>,
    /// The commands, separated by `;` (e.g. -c 'next 3; show; quit')
    #[arg(short = 'c', value_name = "COMMANDS", conflicts_with = "script")]
    pub commands: Option<String>,
    /// Read the commands from FILE, one per line
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// Write the pass as a dump to DIR when `continue` runs it to the end, with every set,
    /// ablate and patch recorded in its manifest (nothing is written without it)
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Write into --out even if it holds other files
    #[arg(long, requires = "out")]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The first model's dump (a directory, an .npz or a .safetensors file)
    pub a: PathBuf,
    /// The second model's dump, of the same input
    pub b: PathBuf,
    /// How many of the most changed heads to list
    #[arg(allow_hyphen_values = true, long, value_name = "N", default_value_t = bert_commands::ablate::TOP_DEFAULT)]
    pub top: usize,
    /// Print the comparison as JSON (which `bert-trace view` draws as a layers x heads grid)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RolloutArgs {
    /// The text to run the model on (a fresh pass); or give --dump
    #[arg(value_name = "TEXT", conflicts_with = "dump")]
    pub text: Option<String>,
    /// Read the attention of this dump instead (a directory, an .npz or a .safetensors file, with
    /// every layer's attention.probs); --model then only names its tokens
    #[arg(long, value_name = "DUMP")]
    pub dump: Option<PathBuf>,
    /// Which sequence of the dump's batch
    #[arg(allow_hyphen_values = true, long, value_name = "N", default_value_t = 0)]
    pub seq: usize,
    /// The residual connection's weight r in (1 - r) · attention + r · identity, from 0 to 1
    #[arg(allow_hyphen_values = true, long, value_name = "R", default_value_t = bert_core::experiments::attention_flow::RESIDUAL_DEFAULT)]
    pub residual: f64,
    /// How each layer's heads become one matrix
    #[arg(long, value_name = "HOW", value_parser = choice::<HeadFusion>(), default_value = "mean")]
    pub heads: HeadFusion,
    /// Attention flow too: a maximum flow per layer and pair of real tokens (at most 48 tokens)
    #[arg(long)]
    pub flow: bool,
    /// How many tokens each layer's line names
    #[arg(allow_hyphen_values = true, long, value_name = "K", default_value_t = bert_commands::rollout::TOP_DEFAULT)]
    pub top: usize,
    /// Read by words, not word pieces: alone, WordPiece's words (## joins a piece to the word
    /// before it) and Chinese words as jieba cuts them (jieba-rs, jieba's dictionary); with words
    /// separated by spaces, those (a Chinese text's own segmentation: --words="当 你 在 罗马"). A
    /// word reads the mean of its pieces' rows, and is read by the sum of its pieces' columns
    #[arg(long, value_name = "WORDS", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub words: Option<String>,
    /// Print the report as JSON, with every layer's whole matrices
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub pass: PassArgs,
}

#[derive(Debug, Args)]
pub struct ViewArgs {
    /// The dump: a directory written by bert-trace or scripts/dump_reference.py, a directory of
    /// .npy files, an .npz or a .safetensors file; or the JSON of `bert-trace compare --json`,
    /// `ablate --json` or `heads --json` (drawn as layers x heads grids), `attribute --json` (a row
    /// of tokens) or `rollout --json` (a tokens x tokens grid per layer)
    pub dump: PathBuf,
    /// The page to write (a file bert-trace did not write is never replaced) [default: view.html]
    #[arg(long, value_name = "FILE.html", conflicts_with_all = ["svg", "png"])]
    pub out: Option<PathBuf>,
    /// Draw this stage alone, for --svg or --png: a [B,nh,T,T] stage (scores, probabilities) or a
    /// [B,T,H] or [B,T,I] one (hidden states, feed-forward activations)
    #[arg(long, value_name = "NAME")]
    pub stage: Option<String>,
    /// The head of a [B,nh,T,T] stage [default: 0, or all heads with --lines]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub head: Option<usize>,
    /// The sequence of a batch to draw
    #[arg(allow_hyphen_values = true, long, value_name = "N", default_value_t = 0)]
    pub seq: usize,
    /// Draw attention probabilities as the head view's lines between the tokens, not a heatmap
    #[arg(long)]
    pub lines: bool,
    /// Write the picture of --stage as SVG (text stays text)
    #[arg(long, value_name = "FILE.svg")]
    pub svg: Option<PathBuf>,
    /// Write the picture of --stage as PNG, rendered with the CJK-capable font bert-trace ships
    #[arg(long, value_name = "FILE.png")]
    pub png: Option<PathBuf>,
    /// Embed the heatmaps of these stages (a glob, repeatable) [default: as many layer outputs,
    /// scores and activations as keep the page under about 55 MB]
    #[arg(long = "heatmap", value_name = "GLOB")]
    pub heatmaps: Vec<String>,
    /// Draw an attention.probs picture by words, not word pieces, its padding left out: alone,
    /// WordPiece's words and Chinese words as jieba cuts them; with words separated by spaces,
    /// those (a Chinese text's own). A word reads the mean of its pieces' rows and is read by the
    /// sum of their columns
    #[arg(long, value_name = "WORDS", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub words: Option<String>,
    /// Serve the page from this machine, with the dump's model behind it: click any cell to see
    /// why it is what it is, step through the pass, set a value and watch the prediction move.
    /// Prints the URL (with the session's token) and serves until Ctrl-C
    #[arg(long, conflicts_with_all = ["out", "svg", "png", "stage", "head", "lines", "words"])]
    pub serve: bool,
    /// The port to serve on, with --serve [default: a free one]
    #[arg(long, value_name = "N", requires = "serve")]
    pub port: Option<u16>,
    /// The address to serve on, with --serve: this machine's address as other machines reach it
    /// lets them ask too (the page answers only requests sent to the address it serves on)
    #[arg(long, value_name = "IP", requires = "serve", default_value = "127.0.0.1")]
    pub host: String,
    /// Open the served page in the browser $BROWSER names (or the desktop's), with --serve; the
    /// URL, with its token, is on that command's line, where other users of this machine can read it
    #[arg(long, requires = "serve")]
    pub open: bool,
    #[command(flatten)]
    pub model: ModelArgs,
}

#[derive(Debug, Args)]
pub struct EvaluateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The held-out text: one example per line (for a classifier: a label, a tab and a text), or
    /// documents with --documents
    #[arg(long, value_name = "FILE")]
    pub file: PathBuf,
    /// FILE is documents, as train --documents reads them (a paragraph a line, a blank line
    /// between documents), packed into sequences of up to --max-len tokens
    #[arg(long)]
    pub documents: bool,
    /// Tokens per sequence, [CLS] and [SEP] included [default: the model's longest input, at
    /// most 128]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub max_len: Option<usize>,
    /// Sequences per pass; the masks are drawn batch by batch, so a measure is of a batch size
    /// and a seed [default: 32]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub batch_size: Option<usize>,
    /// The seed that chooses the masked tokens [default: 0]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub seed: Option<u64>,
    /// Mask every token of every line in turn, one a pass, instead of a seeded 15%: the
    /// pseudo-perplexity of Salazar et al. (2020), for short texts such as famous lines
    #[arg(long)]
    pub each_token: bool,
    /// Print the measure as JSON
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub pass: PassArgs,
}

#[derive(Debug, Args)]
pub struct PaddingArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The texts, of different lengths: each is traced alone and in the padded batch of all
    #[arg(value_name = "TEXT")]
    pub texts: Vec<String>,
    /// Read more texts from FILE, one per line (UTF-8; empty lines are skipped)
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// A padded batch's dump (a port's, PyTorch's), set against --alone instead of tracing
    #[arg(long, value_name = "DUMP", conflicts_with_all = ["texts", "file", "model"])]
    pub batched: Option<PathBuf>,
    /// The dump of one row's text alone, once for each row of --batched, in its order
    #[arg(long, value_name = "DUMP", requires = "batched")]
    pub alone: Vec<PathBuf>,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub pass: PassArgs,
}

#[derive(Debug, Args)]
pub struct TolerancesArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The texts to measure on
    #[arg(value_name = "TEXT")]
    pub texts: Vec<String>,
    /// Read more texts from FILE, one per line (UTF-8; empty lines are skipped)
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// The tolerance file to write (JSON); it must not exist
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// The measured envelope is multiplied by this [default: 4]
    #[arg(allow_hyphen_values = true, long, value_name = "X")]
    pub headroom: Option<f64>,
    /// Another float32 dump to measure (PyTorch's), against the --truth given in the same place
    #[arg(long, value_name = "DUMP")]
    pub reference: Vec<PathBuf>,
    /// The float64 dump of a --reference's input (scripts/dump_reference.py --dtype float64)
    #[arg(long, value_name = "DUMP")]
    pub truth: Vec<PathBuf>,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub pass: PassArgs,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Inspect a config.json alone, without weights
    #[arg(long, value_name = "FILE", conflicts_with = "model")]
    pub config: Option<PathBuf>,
}

/// How a command's passes run: the options of every command that runs the model, declared once.
#[derive(Debug, Args)]
pub struct PassArgs {
    /// Threads for the passes [default: BERT_TRACE_THREADS, else all physical cores]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub threads: Option<usize>,
    /// Which implementation of BERT's operations to run: fast (the default: fast kernels where
    /// this CPU has them) or reference (the plain formulas the walkthrough quotes; slower)
    /// [env: BERT_TRACE_KERNELS]
    #[arg(long, value_name = "KIND", value_parser = choice::<Kernels>())]
    pub kernels: Option<Kernels>,
}

/// How each step of `train` and `finetune` updates the model: dropout in its pass, the
/// gradients' clipping and AdamW's settings, declared once for both.
#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// AdamW's β1 and β2 [default: 0.9,0.999, PyTorch's]
    #[arg(allow_hyphen_values = true, long, value_name = "B1,B2", value_parser = betas)]
    pub betas: Option<(f64, f64)>,
    /// AdamW's ε [default: 1e-8, PyTorch's]
    #[arg(allow_hyphen_values = true, long, value_name = "E")]
    pub eps: Option<f64>,
    /// AdamW's decoupled weight decay [default: 0.01, PyTorch's]
    #[arg(allow_hyphen_values = true, long, value_name = "W")]
    pub weight_decay: Option<f64>,
    /// Clip the gradients' global norm to this before each update, as HF Trainer does (1.0)
    /// [default: no clipping, as plain torch.optim.AdamW]
    #[arg(allow_hyphen_values = true, long, value_name = "NORM")]
    pub max_grad_norm: Option<f64>,
    /// Drop out with probability P wherever BERT does (the embeddings, the attention
    /// probabilities, each block's output, a classifier's input), in training only; 0: none
    /// [default: the model's config.json, hidden_dropout_prob and attention_probs_dropout_prob]
    #[arg(allow_hyphen_values = true, long, value_name = "P")]
    pub dropout: Option<f64>,
    /// No weight decay for the parameters whose names contain one of these, as BERT's recipe
    /// (bias,LayerNorm) [default: every parameter decays]
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub no_decay: Option<Vec<String>>,
}

impl UpdateArgs {
    /// `settings` with these options in their fields.
    pub fn settings(&self, settings: TrainSettings) -> TrainSettings {
        TrainSettings {
            betas: self.betas,
            eps: self.eps,
            weight_decay: self.weight_decay,
            max_grad_norm: self.max_grad_norm,
            dropout: self.dropout,
            no_decay: self.no_decay.clone(),
            ..settings
        }
    }
}

/// An option that takes one of the library's words for a value (`--kernels`, `--method`, ...),
/// parsed into the library's own type: the words are the library's, listed once.
fn choice<T: Choice>() -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(T::ALL.iter().map(|value| value.name()))
        .map(|word: String| T::parse(&word).expect("a word the library gave"))
}

/// What every experiment reads: a text with one [MASK], the model, and how to run the passes.
#[derive(Debug, Args)]
pub struct ExperimentInput {
    /// The text, with exactly one [MASK]
    #[arg(value_name = "TEXT")]
    pub text: String,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub pass: PassArgs,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct AblateArgs {
    #[command(flatten)]
    pub input: ExperimentInput,
    /// The word the [MASK] is to be predicted as
    #[arg(long, value_name = "WORD")]
    pub target: String,
    /// What an ablated head's slice becomes: zero, or its mean over the sequence's real tokens
    #[arg(long = "with", value_name = "HOW", value_parser = choice::<AblateWith>(), default_value = "zero")]
    pub with: AblateWith,
    /// How many of the most harmful heads to list
    #[arg(allow_hyphen_values = true, long, value_name = "N", default_value_t = 10)]
    pub top: usize,
}

/// The labels that give a pass its loss: a trace's and `heads`'.
#[derive(Debug, Args)]
pub struct LossArgs {
    /// The word each [MASK] you typed is to be predicted as, in order (repeatable); adds the MLM loss
    #[arg(long = "mlm-target", value_name = "WORD")]
    pub mlm_targets: Vec<String>,

    /// With --pair: 0 when sentence B follows A, 1 when B is random (once for all pairs, or once
    /// per TEXT); adds the NSP loss
    #[arg(allow_hyphen_values = true, long = "nsp-label", value_name = "0|1")]
    pub nsp_labels: Vec<i64>,

    /// On a classifier: each text's class, by its name in the config's id2label or its index
    /// (once for all texts, or once per TEXT); adds the classifier's loss
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
}

#[derive(Debug, Args)]
pub struct HeadsArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The texts; several make padded batches (--batch-size), whose losses the importance is of
    #[arg(value_name = "TEXT")]
    pub texts: Vec<String>,
    /// More texts, one per line
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Sentence B for each TEXT, in order (repeatable)
    #[arg(long, value_name = "TEXT")]
    pub pair: Vec<String>,
    #[command(flatten)]
    pub losses: LossArgs,
    /// Only each head's importance and the pruning curve (needs a loss) [default: both measures]
    #[arg(long)]
    pub importance: bool,
    /// Only where each head looks
    #[arg(long)]
    pub statistics: bool,
    /// Texts per pass: the importance is the mean over batches of |dL/dgate|, as Michel et al.'s
    /// code takes it [default: 16]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub batch_size: Option<usize>,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub pass: PassArgs,
}

#[derive(Debug, Args)]
pub struct LensArgs {
    #[command(flatten)]
    pub input: ExperimentInput,
    /// Show the rank and probability of this word in every layer's guess
    #[arg(long, value_name = "WORD")]
    pub target: Option<String>,
    /// Read this token position instead of the [MASK] (0 is [CLS])
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub pos: Option<usize>,
    /// How many guesses to show per layer
    #[arg(allow_hyphen_values = true, long, value_name = "K", default_value_t = bert_commands::lens::TOP_K_DEFAULT)]
    pub top_k: usize,
}

#[derive(Debug, Args)]
pub struct AttributeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The texts; each is attributed on its own
    #[arg(value_name = "TEXT")]
    pub texts: Vec<String>,
    /// More texts, one per line
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Sentence B (once for all texts, or once per TEXT)
    #[arg(long, value_name = "TEXT")]
    pub pair: Vec<String>,
    /// How: occlusion (each token hidden in turn), integrated-gradients, or grad-input
    #[arg(long, value_name = "METHOD", value_parser = choice::<Method>(), default_value = "occlusion")]
    pub method: Method,
    /// The word the [MASK] is to be predicted as (once for all texts, or once per TEXT)
    #[arg(long, value_name = "WORD")]
    pub target: Vec<String>,
    /// On a classifier: the class attributed, by name or index (once, or once per TEXT)
    /// [default: the predicted class]
    #[arg(long, value_name = "NAME")]
    pub label: Vec<String>,
    /// With --pair: the NSP label attributed, 0 (B follows A) or 1 (B is random)
    #[arg(allow_hyphen_values = true, long = "nsp-label", value_name = "0|1")]
    pub nsp_label: Vec<i64>,
    /// What is attributed: the target's log-probability (logprob) or its logit
    #[arg(long, value_name = "WHAT", value_parser = choice::<Score>(), default_value = "logprob")]
    pub of: Score,
    /// Occlusion: what hides a token, mask ([MASK]) or unk ([UNK]) [default: mask]
    #[arg(long, value_name = "TOKEN", value_parser = choice::<OccludeWith>())]
    pub occlude_with: Option<OccludeWith>,
    /// Integrated gradients: the baseline's tokens, pad ([PAD]'s embedding) or zero [default: pad]
    #[arg(long, value_name = "KIND", value_parser = choice::<Baseline>())]
    pub baseline: Option<Baseline>,
    /// Integrated gradients: points on the path [default: 50]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub ig_steps: Option<usize>,
    /// Integrated gradients: gauss-legendre or midpoint [default: gauss-legendre]
    #[arg(long, value_name = "RULE", value_parser = choice::<Rule>())]
    pub ig_rule: Option<Rule>,
    /// Print the result as JSON
    /// Also by words: the attributions summed over each word's pieces. Alone, WordPiece's words
    /// (## joins a piece to the word before it) and Chinese words as jieba cuts them; with words
    /// separated by spaces, those (one text's own segmentation)
    #[arg(long, value_name = "WORDS", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub words: Option<String>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub pass: PassArgs,
}

/// `bert-trace train`. The options that decide a run's numbers default as PyTorch's AdamW and
/// BERT's pretraining do; a resumed run takes them from its checkpoint.
#[derive(Debug, Args)]
pub struct TrainArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Start from new weights drawn for --model's config.json from --seed, as transformers'
    /// BertForPreTraining(config) draws them, rather than from the weights there
    #[arg(long)]
    pub from_config: bool,
    /// The text to train on: one example per line, or a sentence pair per line (sentence A, a
    /// tab, sentence B), which adds the NSP loss. Blank lines are skipped
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Held-out text, in the same form: its MLM loss, perplexity and the share of masked tokens
    /// guessed right, every --eval-every steps and at the end (the same masks each time)
    #[arg(long, value_name = "FILE", conflicts_with = "eval_split")]
    pub eval_file: Option<PathBuf>,
    /// Hold out this share of FILE's lines instead, chosen by --seed [e.g. 0.1]
    #[arg(allow_hyphen_values = true, long, value_name = "P")]
    pub eval_split: Option<f64>,
    /// Evaluate every N steps (and after the last) [default: after the last only]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub eval_every: Option<usize>,
    /// How many optimizer steps the run takes; the learning rate falls to 0 at the last
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub steps: Option<usize>,
    /// The peak learning rate [default: 1e-4, BERT's]
    #[arg(allow_hyphen_values = true, long, value_name = "LR")]
    pub lr: Option<f64>,
    /// Steps over which the learning rate rises linearly from 0, or a share of --steps below 1
    /// (0.1: the first 10%, BERT's warmup_proportion) [default: 0]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub warmup_steps: Option<Warmup>,
    /// Examples per batch [default: 8]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub batch_size: Option<usize>,
    /// Tokens per sequence, [CLS] and [SEP] included: longer lines are cut [default: 128, at most
    /// the model's max_position_embeddings]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub max_len: Option<usize>,
    /// The share of tokens masked for the MLM loss [default: 0.15]
    #[arg(allow_hyphen_values = true, long, value_name = "P")]
    pub mask_prob: Option<f64>,
    /// FILE is documents, as Google's create_pretraining_data.py reads them: one sentence or
    /// paragraph a line, a blank line between documents. A document's lines are packed into
    /// sequences of up to --max-len tokens (a long line is cut at a word)
    #[arg(long)]
    pub documents: bool,
    /// With --documents: each sequence is split into sentence A and the sentence B that follows
    /// it, for the NSP loss (B replaced by another sequence's at --nsp-negatives)
    #[arg(long, requires = "documents")]
    pub nsp: bool,
    /// For sentence pairs: the chance that sentence B is replaced by another line's (NSP label 1)
    /// [default: 0.5]
    #[arg(allow_hyphen_values = true, long, value_name = "P")]
    pub nsp_negatives: Option<f64>,
    /// The seed of every random choice: the order of the lines, the masks, the NSP negatives and
    /// new heads' weights [default: 0]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub seed: Option<u64>,
    #[command(flatten)]
    pub update: UpdateArgs,
    /// Save the trained model here (config.json, model.safetensors, the tokenizer's files, and
    /// the optimizer's state to resume from): a new or empty directory, or one this command wrote
    #[arg(long, value_name = "DIR")]
    pub save: Option<PathBuf>,
    /// Also save a checkpoint every N steps, into SAVE/checkpoint-STEP/
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub save_every: Option<usize>,
    /// Continue the run saved in DIR (by --save or --save-every) from the step it reached; the
    /// options above default to the run's, and one that differs is refused
    #[arg(long, value_name = "DIR", conflicts_with = "model")]
    pub resume: Option<PathBuf>,
    /// Write every tensor of step K into SAVE/step-K/: the batch, the forward pass, the
    /// gradients, and each parameter before (param.*) and after (updated.param.*) the update.
    /// Repeatable; a range 1-10 names several
    #[arg(long, value_name = "K|A-B")]
    pub dump_step: Vec<String>,
    /// Print a loss line every N steps (and after the last): the mean loss of those steps, as
    /// transformers' Trainer logs it
    #[arg(allow_hyphen_values = true, long, value_name = "N", default_value_t = 1)]
    pub log_every: usize,
    #[command(flatten)]
    pub pass: PassArgs,
}

/// `bert-trace finetune`'s arguments.
#[derive(Args, Debug)]
pub struct FinetuneArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Start from new weights drawn for --model's config.json from --seed, as transformers draws
    /// them, rather than from the weights there: what fine-tuning makes of an unpretrained model
    #[arg(long)]
    pub from_config: bool,
    /// The labelled examples, one per line: a label, a tab and a text, or for sentence pairs a
    /// label and two texts, tab-separated; or any column order a header line gives (label,
    /// sentence or sentence1 and sentence2), as GLUE's files have. Labels are class ids or names
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Held-out examples to evaluate on, in the same form
    #[arg(long, value_name = "FILE", conflicts_with = "eval_split")]
    pub eval_file: Option<PathBuf>,
    /// Hold out this share of FILE's examples for evaluation, chosen by --seed [e.g. 0.1]
    #[arg(allow_hyphen_values = true, long, value_name = "P")]
    pub eval_split: Option<f64>,
    /// Evaluate every N steps (and after the last) [default: after the last only]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub eval_every: Option<usize>,
    /// Passes over the examples [default: 3, BERT's recipe]
    #[arg(allow_hyphen_values = true, long, value_name = "N", conflicts_with = "steps")]
    pub epochs: Option<usize>,
    /// Optimizer steps instead of --epochs; the learning rate falls to 0 at the last
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub steps: Option<usize>,
    /// The peak learning rate [default: 2e-5, BERT's fine-tuning recipe]
    #[arg(allow_hyphen_values = true, long, value_name = "LR")]
    pub lr: Option<f64>,
    /// Steps over which the learning rate rises linearly from 0, or a share of --steps below 1
    /// (0.1: the first 10%, BERT's warmup_proportion) [default: 0]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub warmup_steps: Option<Warmup>,
    /// Examples per batch [default: 32]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub batch_size: Option<usize>,
    /// Tokens per sequence, [CLS] and [SEP] included: longer examples are cut [default: 128, at
    /// most the model's max_position_embeddings]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub max_len: Option<usize>,
    /// The seed of every random choice: the order of the examples, the held-out split and new
    /// heads' weights [default: 0]
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub seed: Option<u64>,
    #[command(flatten)]
    pub update: UpdateArgs,
    /// Save the fine-tuned model here (what BertForSequenceClassification.from_pretrained loads,
    /// and the optimizer's state to resume from): a new or empty directory, or one this command
    /// wrote
    #[arg(long, value_name = "DIR")]
    pub save: Option<PathBuf>,
    /// Also save a checkpoint every N steps, into SAVE/checkpoint-STEP/
    #[arg(allow_hyphen_values = true, long, value_name = "N")]
    pub save_every: Option<usize>,
    /// Continue the run saved in DIR from the step it reached; the options above default to the
    /// run's, and one that differs is refused
    #[arg(long, value_name = "DIR", conflicts_with = "model")]
    pub resume: Option<PathBuf>,
    /// Write every tensor of step K into SAVE/step-K/: the batch, the forward pass, the
    /// gradients, and each parameter before and after the update. Repeatable; 1-10 names several
    #[arg(long, value_name = "K|A-B")]
    pub dump_step: Vec<String>,
    /// Print a loss line every N steps (and after the last)
    #[arg(allow_hyphen_values = true, long, value_name = "N", default_value_t = 1)]
    pub log_every: usize,
    #[command(flatten)]
    pub pass: PassArgs,
}

/// A clap error in one line, with clap's tip when it has one: what `bert-trace` prints, and the
/// message of the Python package's exception for a bad option.
pub fn one_line(error: &clap::Error) -> String {
    let text = error.render().to_string();
    // clap's message: the problem (sometimes continued on indented lines, such as the missing
    // arguments), a blank line, then tips and the usage block.
    let mut paragraphs = text.split("\n\n");
    let problem: Vec<&str> = paragraphs.next().unwrap_or("bad arguments").lines().map(str::trim).collect();
    let problem = problem.join(" ");
    let problem = problem.trim_start_matches("error: ");
    let tip = text.lines().find_map(|l| l.trim().strip_prefix("tip: ")).map(|t| format!("; {t}")).unwrap_or_default();
    format!("{problem}{tip}")
}
