//! What the page of `view --serve` can ask its server: why an element of the dump is what it
//! is (`explain`'s JSON), and a `step` session on the dump's pass (its commands, its state,
//! what its changes did, and the picture of the stage under its cursor). Each answer is the
//! library's; nothing is recomputed in the page.

use std::path::Path;

use bert_core::explanation::{self, Target};
use bert_core::io::dump::Dump;
use bert_core::stage::DType;
use bert_core::words::{in_dialect, Dialect};
use bert_core::BertModel;
use bert_view::{Names, PictureOptions};

use crate::error::{drawn, Error, Result};
use crate::explain::{self as explain_command, model_for};
use crate::step::{Effect, StepSession, StepState};

/// The model that explains the dump's elements, in the dump's precision.
enum Explainer {
    /// A float32 dump's model, which the step session holds when there is one.
    F32(Option<BertModel>),
    F64(BertModel<f64>),
}

/// A dump, its model, and a step session on its pass; what cannot be done is kept with why.
pub struct PageSession {
    dump: Dump,
    explainer: std::result::Result<Explainer, String>,
    step: std::result::Result<StepSession, String>,
    /// What the session's changes did, and the changes it is of: two whole passes, made again
    /// only when the changes change (not at every `next`).
    effect: Option<(Vec<String>, Option<Effect>)>,
    pub notes: Vec<String>,
}

/// The answer to one step command: its text, as `step` prints it, where the session is then,
/// and what its changes do to the whole pass.
#[derive(serde::Serialize)]
pub struct StepAnswer {
    pub reply: String,
    pub done: bool,
    pub state: StepState,
    pub effect: Option<Effect>,
}

impl PageSession {
    /// Opens `dump` with its model (`model`, or the one its manifest names). The model the
    /// manifest names, when it cannot be found or is not the dump's, leaves the page read-only,
    /// and the page says why; a `model` the caller named must load and be the dump's.
    pub fn open(dump: Dump, model: Option<&Path>) -> Result<PageSession> {
        let mut notes: Vec<String> = bert_core::divergence::isolate::model_check_note(&dump).into_iter().collect();
        let simulation = dump.simulation();
        let exact = dump.float_dtype() == DType::F64 || !simulation.is_none();
        let (explainer, step) = match exact {
            true => {
                let explainer = model_for::<f64>(&dump, model)
                    .and_then(|m| checked(m, &dump))
                    .map(Explainer::F64)
                    .map_err(|e| e.to_string());
                let why = explainer.as_ref().err().cloned().unwrap_or_else(|| match simulation.is_none() {
                    true => "stepping runs the pass in float32, and this dump is float64: explain its elements, or \
                             trace it again in float32 to step through it"
                        .to_string(),
                    false => format!(
                        "stepping runs the pass in float32, and this dump is a pass {}: explain its elements, or \
                         trace it again in float32 to step through it",
                        simulation.describe()
                    ),
                });
                (explainer, Err(why))
            }
            false => match model_for::<f32>(&dump, model).and_then(|m| checked(m, &dump)) {
                Err(error) => (Err(error.to_string()), Err(error.to_string())),
                Ok(loaded) => {
                    let name = dump.manifest.model.clone();
                    // The session takes the model, and explains with it; when there can be no
                    // session, the model comes back to explain on its own.
                    match StepSession::of_dump(&dump, loaded, name) {
                        Ok(session) => (Ok(Explainer::F32(None)), Ok(session)),
                        Err(refused) => {
                            let (error, loaded) = *refused;
                            (Ok(Explainer::F32(Some(loaded))), Err(error.to_string()))
                        }
                    }
                }
            },
        };
        if let (Err(why), Some(_)) = (&explainer, model) {
            return Err(Error::Request(why.clone()));
        }
        if let Err(why) = &explainer {
            notes.push(format!("note: the page is read-only: {why}"));
        } else if let Err(why) = &step {
            notes.push(format!("note: the page explains, but cannot step: {why}"));
        }
        Ok(PageSession { dump, explainer, step, effect: None, notes })
    }

    /// The dump's model, for the tokens' names.
    pub fn model(&self) -> Option<&BertModel> {
        match (&self.explainer, &self.step) {
            (_, Ok(session)) => Some(session.model()),
            (Ok(Explainer::F32(Some(model))), _) => Some(model),
            _ => None,
        }
    }

    pub fn dump(&self) -> &Dump {
        &self.dump
    }

    /// What the page can do, and why not, its options spelled in `dialect`: what the page reads
    /// at its start.
    pub fn abilities(&self, dialect: Dialect) -> serde_json::Value {
        let why = |reason: Option<&String>| reason.map(|r| in_dialect(r, dialect));
        serde_json::json!({
            "explain": self.explainer.is_ok(),
            "why_not_explain": why(self.explainer.as_ref().err()),
            "step": self.step.is_ok(),
            "why_not_step": why(self.step.as_ref().err()),
            "model": self.dump.manifest.model,
        })
    }

    /// Gives up the step session after a request failed inside it, which may have left it half
    /// changed: the page goes on explaining, and says that stepping ended.
    pub fn give_up_stepping(&mut self) {
        if self.step.is_ok() {
            self.step =
                Err("a request failed inside bert-trace and the step session ended; start the server again".into());
            self.effect = None;
        }
    }

    /// The explanation of `target` (`STAGE[INDEX]`) in the dump, as JSON: `explanation`, the
    /// object (or, for a row, the array) `explain --json` prints, with `own_error` (each
    /// element's value less its recomputation) and `text`, what `explain` prints.
    pub fn explain(&self, target: &str) -> Result<String> {
        let explainer = self.explainer.as_ref().map_err(|why| Error::Request(format!("cannot explain: {why}")))?;
        let target = Target::parse(target)?;
        // A row of mlm.logits is 30,522 explanations of 768 operands each: the page asks for one
        // element, and a row is `explain`'s.
        if target.is_row() {
            return Err(Error::Request(format!(
                "{}: the page explains one element; ‹@explain› explains a row",
                target.text
            )));
        }
        let explanations = match explainer {
            Explainer::F32(Some(model)) => explanation::explain_checked(model, &self.dump, &target)?,
            Explainer::F32(None) => {
                let session = self.step.as_ref().map_err(|why| Error::Request(why.clone()))?;
                explanation::explain_checked(session.model(), &self.dump, &target)?
            }
            Explainer::F64(model) => explanation::explain_checked(model, &self.dump, &target)?,
        };
        let own_errors: Vec<f64> = explanations.iter().map(|e| e.own_error()).collect();
        let report = explain_command::report(&self.dump, &target, explanations);
        // The object is `explain --json`'s own text, not a value parsed back, so that its
        // float32 numbers keep their shortest digits.
        Ok(format!(
            "{{\"explanation\": {}, \"own_error\": {}, \"text\": {}}}",
            report.to_json(),
            serde_json::to_string(&own_errors).expect("numbers are JSON"),
            serde_json::to_string(&report.text).expect("text is JSON")
        ))
    }

    /// Runs one step command; a bad one is an error, and the session goes on.
    pub fn step(&mut self, line: &str) -> Result<StepAnswer> {
        let session = self.step.as_mut().map_err(|why| Error::Request(format!("cannot step: {why}")))?;
        let word = line.split_whitespace().next().unwrap_or_default();
        // The server reads no file but the dump: `patch` would read any dump a request names.
        if word == "patch" {
            return Err(Error::Request("patch reads another dump from disk, which the page's server does not".into()));
        }
        // A row of mlm.logits is 30,522 explanations, and one request must not hold the server.
        if matches!(word, "explain" | "e") && line.contains(':') {
            return Err(Error::Request(format!("{line}: the page explains one element; ‹@explain› explains a row")));
        }
        let reply = session.run(line)?;
        self.answer(reply.text, reply.done)
    }

    /// Where the session is, without a command.
    pub fn state(&mut self) -> Result<StepAnswer> {
        self.answer(String::new(), false)
    }

    fn answer(&mut self, reply: String, done: bool) -> Result<StepAnswer> {
        let session = self.step.as_ref().map_err(|why| Error::Request(format!("cannot step: {why}")))?;
        let state = session.state();
        let effect = match &self.effect {
            Some((changes, effect)) if *changes == state.changes => effect.clone(),
            _ => {
                let effect = session.effect()?;
                self.effect = Some((state.changes.clone(), effect.clone()));
                effect
            }
        };
        Ok(StepAnswer { reply, done, state, effect })
    }

    /// The picture `view --svg` draws of the stage under the cursor, from the session's pass
    /// (with its changes): sequence `seq`, head `head` of an attention stage. The inner error
    /// is why the stage has no picture (an answer); the outer one a bad request.
    pub fn picture(&self, seq: usize, head: Option<usize>) -> Result<std::result::Result<String, String>> {
        let session = self.step.as_ref().map_err(|why| Error::Request(format!("cannot step: {why}")))?;
        let (stage, shape) =
            session.current_stage().ok_or_else(|| Error::Request("before the first stage: type next".into()))?;
        if shape.first().is_some_and(|&sequences| seq >= sequences) {
            return Err(Error::Request(format!("picture: seq={seq}: {stage} has {} sequence(s)", shape[0])));
        }
        if let Some(head) = head.filter(|&h| shape.len() != 4 || h >= shape[1]) {
            return Err(Error::Request(format!("picture: head={head}: {stage} {shape:?} has no such head")));
        }
        let computed = session.computed_for_picture()?;
        let names = Names { model: Some(session.model()) };
        let options = PictureOptions { seq, head, lines: false, words: None };
        Ok(bert_view::picture(&computed, &names, &stage, options).map(|p| p.svg).map_err(|e| drawn(e).to_string()))
    }
}

/// `model` when it is the dump's (`explain`'s check, made once here, not at every click).
fn checked<F: bert_core::ops::Float>(model: BertModel<F>, dump: &Dump) -> Result<BertModel<F>> {
    bert_core::divergence::isolate::check_model(&model, dump)?;
    Ok(model)
}
