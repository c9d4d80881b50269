//! `evaluate`: a model measured on held-out text, as `train` and `finetune` measure it as they
//! go (`bert_core::training::held_out`): for a model with the MLM head, the MLM loss, perplexity
//! and top-1 and top-5 accuracy at a fixed, seeded 15% of the text's tokens, each shown as
//! `[MASK]`, beside the best guess that ignores the text; for a classifier, on labelled
//! examples, its loss, accuracy and confusion table.

use std::path::PathBuf;

use bert_core::training::corpus::{Batching, Corpus};
use bert_core::training::held_out::{self, Evaluation};
use bert_core::training::labelled::Labelled;
use bert_core::training::options::{self, BATCH_SIZE, MAX_LEN};
use bert_core::BertModel;
use serde::Serialize;

use crate::error::Result;
use crate::refuse;
use crate::settings::PassSettings;
use crate::source;

/// What to measure, on what; each field is the option of that name.
#[derive(Clone, Debug, Default)]
pub struct EvaluateRequest {
    /// None: the built-in model.
    pub model: Option<PathBuf>,
    /// The held-out text: one example a line (a label, a tab and a text for a classifier), or
    /// documents with `documents`.
    pub file: PathBuf,
    /// `file` is documents, packed into sequences of up to `max_len` tokens as `train
    /// --documents` packs them.
    pub documents: bool,
    /// Tokens per sequence [default: the model's longest input, at most 128].
    pub max_len: Option<usize>,
    /// Examples per pass [default: 32]; the masks are drawn batch by batch (as a run's held-out
    /// measure draws them), so a measure is of a batch size and a seed.
    pub batch_size: Option<usize>,
    /// The seed of the masks (and of the packing) [default: 0].
    pub seed: Option<u64>,
    /// Mask every token of every example in turn, one a pass, instead of a seeded 15%: the
    /// pseudo-perplexity of Salazar et al. (2020), for short texts such as famous lines.
    pub each_token: bool,
    pub pass: PassSettings,
}

/// The measure, and what it was made of.
#[derive(Clone, Debug, Serialize)]
pub struct EvaluateReport {
    pub model: String,
    pub file: PathBuf,
    pub file_sha256: String,
    pub seed: u64,
    pub max_len: usize,
    pub evaluation: Evaluation,
    #[serde(skip)]
    pub notes: Vec<String>,
}

/// Measures the model on the file, as `request` says.
pub fn evaluate(request: &EvaluateRequest) -> Result<EvaluateReport> {
    let (_, kernels) = request.pass.apply()?;
    let batch_size = request.batch_size.unwrap_or(32);
    if batch_size == 0 {
        refuse!("{} gives no examples to a pass; give 1 or more", BATCH_SIZE.with(0));
    }
    let loaded = source::load(request.model.as_deref())?;
    let mut model: BertModel = loaded.model;
    model.kernels = kernels;
    let longest = model.config.max_position_embeddings;
    let max_len = request.max_len.unwrap_or(longest.min(options::DEFAULT_MAX_LEN));
    if max_len < 3 || max_len > longest {
        refuse!(
            "{} is not a length this model reads: give 3 to {longest} ([CLS] and [SEP] take 2)",
            MAX_LEN.with(max_len)
        );
    }
    if let (true, Some(seed)) = (request.each_token, request.seed) {
        refuse!(
            "{} chooses masks, and {} chooses none: every token is masked in turn",
            options::SEED.with(seed),
            options::EACH_TOKEN.on()
        );
    }
    let seed = request.seed.unwrap_or(0);
    let batching = Batching {
        batch_size,
        max_len,
        mask_prob: options::DEFAULT_MASK_PROB,
        nsp_negatives: 0.0,
        seed,
        documents: request.documents,
        nsp: false,
    };
    let file = &request.file;
    // Documents are measured by the MLM head; lines by the classifier when the model has one.
    let examples = match (&model.classifier, request.documents) {
        (_, true) => Corpus::read_documents(file, &model.tokenizer, &batching)?,
        (_, false) if request.each_token => Corpus::read(file)?,
        (Some(classifier), false) => Labelled::read(file)?.into_corpus(&classifier.labels)?,
        (None, false) => Corpus::read(file)?,
    };
    if examples.classes.is_none() && model.mlm.is_none() {
        refuse!(
            "{} has no MLM head (cls.predictions.*) to fill masks with{}",
            loaded.name,
            match model.classifier {
                Some(_) => format!(
                    "; its classifier is measured on labelled lines, without {}",
                    if request.documents { options::DOCUMENTS } else { options::EACH_TOKEN }
                ),
                None => String::new(),
            }
        );
    }
    examples.check(&model.tokenizer, &batching)?;
    let evaluation = match request.each_token {
        true => held_out::evaluate_each_token(&model, &examples, &batching)?,
        false => held_out::evaluate(&model, &examples, &batching, 0)?,
    };
    Ok(EvaluateReport {
        model: loaded.name,
        file: file.clone(),
        file_sha256: examples.sha256.clone(),
        seed,
        max_len,
        evaluation,
        notes: loaded.notes,
    })
}

impl std::fmt::Display for EvaluateReport {
    /// What was measured, then the measure and the best guess that ignores the text.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let e = &self.evaluation;
        if !e.classes.is_empty() {
            writeln!(f, "{} on {}: {} labelled examples", self.model, self.file.display(), e.examples)?;
            let table = e.to_string();
            let table = table.split_once('\n').map_or("", |(_, rest)| rest);
            writeln!(f, "loss {:.4}  accuracy {:.4} ({} of {})\n{table}", e.loss, e.accuracy, e.correct, e.examples)?;
            return Ok(());
        }
        let (chosen, perplexity) = match e.each_token {
            true => ("every token masked in turn, one a pass".to_string(), "pseudo-perplexity"),
            false => (format!("15% of its tokens, chosen by seed {}, each shown as [MASK]", self.seed), "perplexity"),
        };
        writeln!(
            f,
            "{} on {}: {} masked tokens ({chosen}; sequences of at most {} tokens)",
            self.model,
            self.file.display(),
            e.examples,
            self.max_len
        )?;
        let value = e.perplexity.map_or("beyond f64".into(), |p| format!("{p:.2}"));
        writeln!(f, "mlm loss {:.4}  {perplexity} {value}", e.loss)?;
        writeln!(f, "top-1 accuracy {:.4} ({} of {})", e.accuracy, e.correct, e.examples)?;
        if let (Some(share), Some(n)) = (e.top5_accuracy, e.top5_correct) {
            writeln!(f, "top-5 accuracy {share:.4} ({n} of {})", e.examples)?;
        }
        if let Some(guess) = &e.constant_guess {
            writeln!(
                f,
                "always guessing {:?}, the most frequent of the masked tokens: {:.4} ({} of {})",
                guess.token, guess.accuracy, guess.correct, e.examples
            )?;
        }
        Ok(())
    }
}
