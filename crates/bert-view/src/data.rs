//! What the page shows, read from a dump: the data of `bert-trace-view/1` (its format is in
//! `assets/COLORS.md`'s companion, the comment at the top of `assets/view.js`, and below).
//!
//! What is only drawn is quantised to 8 bits (the attention probabilities, large heatmaps), and
//! each binary array is deflated and base64-encoded; the page decodes an array only when a view
//! first needs it, so that a 512-token, 12-layer page opens at once.

use std::io::Write;

use crate::error::refuse;
use crate::error::{OrRefuse, Result};
use base64::Engine;
use bert_core::experiments::attention_flow::{rollout_of_every_sequence, RolloutOptions};
use bert_core::experiments::hidden_states::layer_stats;
use bert_core::experiments::segmentation::Segmentation;
use bert_core::io::dump::Dump;
use bert_core::ops;
use bert_core::stage::{self, Part, Stage, StageKind, StageKind::*};
use bert_core::BertModel;
use globset::GlobSet;
use ndarray::{Array2, ArrayD, ArrayView1, Axis, Ix2, Ix3, Ix4};
use serde_json::{json, Value};

use super::shapes::{self, Expected, InputShape};
use bert_core::io::tokenizer::visible;

/// How large the page may grow, base64 and all: it opens in a few seconds in a browser.
const PAGE_BUDGET: usize = 50 << 20;

/// A heatmap stage with more values than this is stored as 8-bit codes, not exact f32.
const EXACT_MAX_VALUES: usize = 1 << 20;

/// Token names: from the tokenizer of the dump's model when it can be found, else `#id`.
pub struct Names<'a> {
    pub model: Option<&'a BertModel>,
}

impl Names<'_> {
    /// The token `id` as shown: control characters spelled out (`table::visible`).
    pub fn token(&self, id: i64) -> String {
        visible(&self.model.and_then(|m| m.tokenizer.id_to_token(id as u32)).unwrap_or_else(|| format!("#{id}")))
    }

    fn mask_id(&self) -> Option<i64> {
        self.model?.tokenizer.token_to_id(bert_core::io::tokenizer::MASK).map(i64::from)
    }
}

/// The stages of a dump the page reads, by name.
pub struct Stages<'a> {
    pub dump: &'a Dump,
}

impl Stages<'_> {
    pub fn has(&self, name: &str) -> bool {
        self.dump.entry(name).is_some()
    }

    pub fn f32(&self, name: &str) -> Result<Option<ArrayD<f32>>> {
        let Some(entry) = self.dump.entry(name) else { return Ok(None) };
        match self.dump.read(entry)?.to_f32() {
            Some(a) => Ok(Some(a)),
            None => refuse!("{}: stage `{name}` holds integers, not floats", self.dump.dir.display()),
        }
    }

    pub fn i64(&self, name: &str) -> Result<Option<ArrayD<i64>>> {
        let Some(entry) = self.dump.entry(name) else { return Ok(None) };
        match self.dump.read(entry)?.to_i64() {
            Some(a) => Ok(Some(a)),
            None => refuse!("{}: stage `{name}` holds floats, not integers", self.dump.dir.display()),
        }
    }

    /// A float stage that must have the shape `expected`: checked in the manifest before it is
    /// read, and in what was read.
    pub fn f32_shaped(&self, name: &str, expected: &[Expected]) -> Result<Option<ArrayD<f32>>> {
        shapes::expect_stage(self.dump, name, expected)?;
        let values = self.f32(name)?;
        if let Some(values) = &values {
            shapes::expect(&self.dump.dir, name, values.shape(), expected)?;
        }
        Ok(values)
    }

    /// `[B,T]` input stage.
    pub fn input(&self, name: &str, dims: InputShape) -> Result<Option<Array2<i64>>> {
        shapes::expect_stage(self.dump, name, &dims.input())?;
        Ok(match self.i64(name)? {
            Some(a) => {
                shapes::expect(&self.dump.dir, name, a.shape(), &dims.input())?;
                Some(a.into_dimensionality::<Ix2>()?)
            }
            None => None,
        })
    }

    /// How many encoder layers the dump has stages of.
    pub fn layers(&self) -> usize {
        (0..)
            .take_while(|&i| {
                self.dump.manifest.stages.iter().filter_map(|s| stage::parse(&s.name)).any(|stage| {
                    // An encoder layer's own stages (`layer{i}.…`), not their gradients, the
                    // parameters of that layer or the logit lens at it.
                    stage.is_value_of(stage.kind)
                        && stage.layer == Some(i)
                        && matches!(stage.info().part, Part::Attention | Part::Ffn)
                })
            })
            .count()
    }
}

/// The sequences' tokens as the model saw them, their segments and padding, and what masking
/// did: everything the page says about the input.
pub struct Sequences {
    pub ids: Array2<i64>,
    pub tokens: Vec<Vec<String>>,
    pub token_type: Array2<i64>,
    pub attention_mask: Array2<i64>,
    /// Per sequence: (position, original, shown, kind) of each labelled position.
    pub masked: Vec<Vec<(usize, String, String, &'static str)>>,
}

impl Sequences {
    pub fn read(stages: &Stages<'_>, names: &Names<'_>) -> Result<Sequences> {
        let dims = InputShape::of(stages.dump)?;
        let ids = stages.input(&named(InputIds), dims)?.or_refuse("InputShape::of found input.ids")?;
        let (b, t) = ids.dim();
        let token_type = stages.input(&named(InputTokenTypeIds), dims)?.unwrap_or_else(|| Array2::zeros((b, t)));
        let attention_mask = stages.input(&named(InputAttentionMask), dims)?.unwrap_or_else(|| Array2::ones((b, t)));
        let recorded = stages
            .dump
            .manifest
            .inputs
            .tokens
            .clone()
            .filter(|rows| rows.len() == b && rows.iter().all(|row| row.len() == t))
            .map(|rows| rows.iter().map(|row| row.iter().map(|token| visible(token)).collect()).collect());
        let tokens: Vec<Vec<String>> = recorded
            .unwrap_or_else(|| ids.outer_iter().map(|row| row.iter().map(|&id| names.token(id)).collect()).collect());
        let labels = stages.input(&named(InputLabels), dims)?;
        let original = stages.input(&named(InputOriginalIds), dims)?;
        let mask_id = names.mask_id();
        let mut masked = vec![Vec::new(); b];
        if let Some(labels) = &labels {
            for ((seq, pos), &label) in labels.indexed_iter().filter(|(_, &l)| l != -100) {
                let shown = ids[[seq, pos]];
                let shown_token = tokens[seq][pos].clone();
                let (original_token, kind) = match &original {
                    Some(original) => {
                        let was = original[[seq, pos]];
                        let kind = if shown == was {
                            "keep"
                        } else if Some(shown) == mask_id || shown_token == "[MASK]" {
                            "mask"
                        } else {
                            "random"
                        };
                        (names.token(was), kind)
                    }
                    // A [MASK] typed in the text, with a target: the label is the target.
                    None => (names.token(label), "mask"),
                };
                masked[seq].push((pos, original_token, shown_token, kind));
            }
        }
        Ok(Sequences { ids, tokens, token_type, attention_mask, masked })
    }

    pub fn json(&self) -> Value {
        let rows = (0..self.tokens.len()).map(|seq| {
            let masked: Vec<Value> = self.masked[seq]
                .iter()
                .map(|(pos, original, shown, kind)| json!({"pos": pos, "original": original, "shown": shown, "kind": kind}))
                .collect();
            json!({
                "tokens": self.tokens[seq],
                "token_type": self.token_type.row(seq).to_vec(),
                "attention_mask": self.attention_mask.row(seq).to_vec(),
                "masked": masked,
                "real": self.attention_mask.row(seq).iter().filter(|&&m| m != 0).count(),
            })
        });
        Value::Array(rows.collect())
    }
}

/// base64 of the zlib (RFC 1950) stream of `bytes`, as `DecompressionStream('deflate')` reads it.
fn pack(bytes: &[u8]) -> String {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(1));
    encoder.write_all(bytes).expect("writing to memory");
    base64::engine::general_purpose::STANDARD.encode(encoder.finish().expect("writing to memory"))
}

/// A probability as an 8-bit code: round(p · 255).
fn probability_code(p: f32) -> u8 {
    if p.is_nan() {
        0
    } else {
        (p.clamp(0.0, 1.0) * 255.0).round() as u8
    }
}

/// Whether a value is a masked score: the library's rule for a picture, which knows values, not
/// keys (`bert_core::divergence::is_masked_score`).
pub fn is_masked(v: f32) -> bool {
    bert_core::divergence::is_masked_score(f64::from(v), None)
}

/// Each sequence's words over its real tokens, as `--words` finds them (WordPiece's, and jieba's
/// for Chinese; the library's segmentation): None for a sequence whose every word is one token,
/// which the page then reads by tokens only.
fn words_of(seqs: &Sequences) -> Vec<Option<(Vec<usize>, Segmentation)>> {
    (0..seqs.tokens.len())
        .map(|seq| {
            let real: Vec<usize> =
                (0..seqs.tokens[seq].len()).filter(|&p| seqs.attention_mask[[seq, p]] != 0).collect();
            let tokens: Vec<String> = real.iter().map(|&p| seqs.tokens[seq][p].clone()).collect();
            let words = Segmentation::automatic(&tokens);
            words.words.iter().any(|w| w.pieces.len() > 1).then_some((real, words))
        })
        .collect()
}

/// The attention block: every layer's probabilities as 8-bit codes, and their thumbnails; and,
/// for each sequence with words of several tokens, every layer's heads read by words (Clark et
/// al.'s rule, the library's), as 8-bit codes of `[nh, W, W]` per layer.
fn attention(stages: &Stages<'_>, layers: usize, dims: InputShape, seqs: &Sequences) -> Result<Option<Value>> {
    let names: Vec<String> = (0..layers).map(|i| in_layer(i, AttnProbs)).collect();
    if layers == 0 || !names.iter().all(|n| stages.has(n)) {
        return Ok(None);
    }
    // Every layer has as many heads as the first: the page draws them in one grid.
    shapes::expect_stage(stages.dump, &names[0], &dims.attention(None))?;
    let heads = stages.dump.entry(&names[0]).map(|e| e.shape[1]);
    let (mut packed, mut thumbs, mut size) = (Vec::new(), Vec::new(), 0);
    let words = words_of(seqs);
    let mut by_words: Vec<Vec<String>> = vec![Vec::new(); words.len()];
    for name in &names {
        let probs =
            stages.f32_shaped(name, &dims.attention(heads))?.or_refuse("listed")?.into_dimensionality::<Ix4>()?;
        let (b, nh, t, _) = probs.dim();
        let codes: Vec<u8> = probs.iter().map(|&p| probability_code(p)).collect();
        packed.push(pack(&codes));
        for (seq, (real, segmentation)) in words.iter().enumerate().filter_map(|(s, w)| Some((s, w.as_ref()?))) {
            let mut codes = Vec::new();
            for head in 0..nh {
                let matrix: Vec<Vec<f64>> =
                    real.iter().map(|&r| real.iter().map(|&c| f64::from(probs[[seq, head, r, c]])).collect()).collect();
                let grouped = segmentation.by_words(&matrix);
                codes.extend(grouped.iter().flatten().map(|&p| probability_code(p as f32)));
            }
            by_words[seq].push(pack(&codes));
        }
        size = t.min(48);
        // Block i covers positions floor(i·T/S) up to floor((i+1)·T/S); its code is the mean
        // probability over the block.
        let edges: Vec<usize> = (0..=size).map(|i| i * t / size).collect();
        let mut thumb = Vec::with_capacity(b * nh * size * size);
        for (bi, hi) in (0..b).flat_map(|bi| (0..nh).map(move |hi| (bi, hi))) {
            for r in 0..size {
                for c in 0..size {
                    let (rows, cols) = (edges[r]..edges[r + 1], edges[c]..edges[c + 1]);
                    let sum: f64 = rows
                        .clone()
                        .flat_map(|i| cols.clone().map(move |j| (i, j)))
                        .map(|(i, j)| probs[[bi, hi, i, j]] as f64)
                        .sum();
                    thumb.push(probability_code((sum / (rows.len() * cols.len()) as f64) as f32));
                }
            }
        }
        thumbs.push(pack(&thumb));
    }
    Ok(Some(json!({
        "stage": AttnProbs.info().pattern,
        // Each layer's stage name, from the stage table, for the page to name them by.
        "stages": names,
        "encoding": "u8",
        "note": "probabilities quantised to 8 bits: value = code / 255 (±0.002)",
        "layers": packed,
        "thumb": {"size": size, "layers": thumbs},
        "words": words_json(&words, by_words),
    })))
}

/// The words block of the attention data: per sequence, null (read by tokens only) or its words
/// (their text and positions in the sequence) and every layer's `[nh, W, W]` codes.
fn words_json(words: &[Option<(Vec<usize>, Segmentation)>], by_words: Vec<Vec<String>>) -> Value {
    let by = words.iter().flatten().map(|(_, s)| s.by).next();
    let sequences: Vec<Value> = words
        .iter()
        .zip(by_words)
        .map(|(words, layers)| match words {
            None => Value::Null,
            Some((real, segmentation)) => {
                let words: Vec<Value> = segmentation
                    .words
                    .iter()
                    .map(|w| json!({"text": visible(&w.text), "positions": w.pieces.iter().map(|&p| real[p]).collect::<Vec<_>>()}))
                    .collect();
                json!({"words": words, "layers": layers})
            }
        })
        .collect();
    json!({"by": by, "sequences": sequences})
}

/// One heatmap of the page: a `[B,nh,T,T]`, `[B,T,H]` or `[B,T,I]` stage.
fn heatmap(name: &str, values: &ArrayD<f32>) -> Option<Value> {
    let shape = values.shape().to_vec();
    let token_cols = match shape.len() {
        4 => true,
        3 => false,
        _ => return None,
    };
    let finite: Vec<f32> = values.iter().copied().filter(|v| v.is_finite() && !is_masked(*v)).collect();
    let min = finite.iter().copied().fold(f32::INFINITY, f32::min);
    let max = finite.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let (min, max) = if finite.is_empty() { (0.0, 0.0) } else { (min, max) };
    let diverging = min < 0.0;
    let (encoding, data, note) = if values.len() <= EXACT_MAX_VALUES {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        ("f32", pack(&bytes), "exact float32 values".to_string())
    } else {
        let span = if max > min { (max - min) as f64 } else { 1.0 };
        let codes: Vec<u8> = values
            .iter()
            .map(|&v| {
                if is_masked(v) || !v.is_finite() {
                    255
                } else {
                    (((v - min) as f64 / span) * 254.0).round().clamp(0.0, 254.0) as u8
                }
            })
            .collect();
        let step = span / 254.0;
        let note = format!(
            "8-bit: value ≈ min + code/254·(max−min), within ±{:.2e}{}",
            step / 2.0,
            if values.iter().any(|v| v.is_nan()) { "; NaN shown as masked" } else { "" }
        );
        ("u8", pack(&codes), note)
    };
    Some(json!({
        "stage": name,
        "shape": shape,
        "rows": "tokens",
        "cols": if token_cols { "tokens" } else { "features" },
        "encoding": encoding,
        "data": data,
        "min": min,
        "max": max,
        "masked_code": 255,
        "diverging": diverging,
        "note": note,
    }))
}

/// Attention rollout through each layer (Abnar and Zuidema 2020, the library's: heads averaged,
/// 0.5 · A + 0.5 · I, rows renormalised, multiplied from the first layer up), every sequence's,
/// as heatmaps `[B, T, T]` of 8-bit codes, padding masked; or why there is none.
fn rollout_heatmaps(dump: &Dump, layers: usize, dims: InputShape) -> std::result::Result<Vec<Value>, String> {
    let rolled = rollout_of_every_sequence(dump, &RolloutOptions::default()).map_err(|e| e.to_string())?;
    let (b, t) = (dims.b, dims.t);
    let note = "attention rollout (Abnar and Zuidema 2020): each layer's heads averaged, 0.5 · A + 0.5 · I, rows \
                renormalised, multiplied from layer 0 up; row: a position of this layer's output, column: an input \
                token; float64 from this dump's probabilities, shown in 8 bits (±0.002); padding greyed";
    Ok((0..layers)
        .map(|layer| {
            let mut codes = vec![255u8; b * t * t];
            for r in &rolled {
                let matrix = &r.rollout[layer];
                for (i, &row) in r.positions.iter().enumerate() {
                    for (j, &col) in r.positions.iter().enumerate() {
                        codes[(r.seq * t + row) * t + col] = (matrix[i][j].clamp(0.0, 1.0) * 254.0).round() as u8;
                    }
                }
            }
            json!({
                "stage": format!("rollout through layer {layer}"),
                "group": "rollout",
                "shape": [b, t, t],
                "rows": "tokens",
                "cols": "tokens",
                "encoding": "u8",
                "data": pack(&codes),
                "min": 0.0,
                "max": 1.0,
                "masked_code": 255,
                "diverging": false,
                "note": note,
            })
        })
        .collect())
}

/// The stages that may become heatmaps, the most useful first: every layer's output, the
/// scores, then the rest of each layer.
fn heatmap_candidates(stages: &Stages<'_>, layers: usize) -> Vec<String> {
    let mut names = vec![named(EmbLayerNorm)];
    names.extend((0..layers).map(|i| in_layer(i, FfnLayerNorm)));
    names.extend((0..layers).map(|i| in_layer(i, AttnScores)));
    for i in 0..layers {
        for kind in [AttnContext, AttnOutput, AttnLayerNorm, FfnActivation] {
            names.push(in_layer(i, kind));
        }
    }
    names.extend([named(EmbSum), named(MlmLayerNorm)]);
    names.retain(|n| stages.has(n));
    names
}

/// Per-layer plots of the hidden states: each token's norm, the mean and std over the real
/// tokens' values, and each token's cosine between consecutive layers.
fn layer_plots(stages: &Stages<'_>, layers: usize, mask: &Array2<i64>, dims: InputShape) -> Result<Option<Value>> {
    let mut names = vec![named(EmbLayerNorm)];
    names.extend((0..layers).map(|i| in_layer(i, FfnLayerNorm)));
    if layers == 0 || !names.iter().all(|n| stages.has(n)) {
        return Ok(None);
    }
    // Consecutive layers are compared token by token: every one is as wide as the first.
    shapes::expect_stage(stages.dump, &names[0], &dims.per_token(None))?;
    let hidden = stages.dump.entry(&names[0]).map(|e| e.shape[2]);
    let mut states = Vec::new();
    for name in &names {
        let state = stages.f32_shaped(name, &dims.per_token(hidden))?.or_refuse("listed")?;
        states.push(state.into_dimensionality::<Ix3>()?.mapv(f64::from));
    }
    let stats = layer_stats(&states, mask);
    let mut labels = vec!["embeddings".to_string()];
    labels.extend((0..layers).map(|i| format!("layer {i}")));
    let mut plots = serde_json::to_value(stats).expect("the statistics serialise");
    plots["labels"] = labels.into();
    Ok(Some(plots))
}

/// The probabilities of one row of logits, in f64: the library's softmax, as the terminal's
/// predictions print them.
fn probabilities(row: &[f32]) -> Vec<f64> {
    ops::softmax_rows(ArrayView1::from(row).mapv(f64::from)).to_vec()
}

/// The heads' outputs, when the dump has them: MLM top-5 at every `[MASK]` and labelled
/// position, NSP and classifier probabilities, and the losses.
fn predictions(stages: &Stages<'_>, names: &Names<'_>, seqs: &Sequences, dims: InputShape) -> Result<Value> {
    let mut out = serde_json::Map::new();
    let labels = stages.input(&named(InputLabels), dims)?;
    if let Some(logits) = stages.f32_shaped(&named(MlmLogits), &dims.per_token(None))? {
        let logits = logits.into_dimensionality::<Ix3>()?;
        if let Some(labels) = &labels {
            check_labels(stages, labels, logits.dim().2)?;
        }
        let mut entries = Vec::new();
        for ((seq, pos), &id) in seqs.ids.indexed_iter() {
            let label = labels.as_ref().map_or(-100, |l| l[[seq, pos]]);
            let is_mask = seqs.tokens[seq].get(pos).is_some_and(|t| t == "[MASK]") || Some(id) == names.mask_id();
            if !is_mask && label == -100 {
                continue;
            }
            let row: Vec<f32> = logits.index_axis(Axis(0), seq).row(pos).to_vec();
            let p = probabilities(&row);
            let mut order: Vec<usize> = (0..p.len()).filter(|&v| !p[v].is_nan()).collect();
            order.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
            let top: Vec<Value> =
                order.iter().take(5).map(|&v| json!({"token": names.token(v as i64), "id": v, "prob": p[v]})).collect();
            let mut entry = json!({"seq": seq, "pos": pos, "target": Value::Null, "top": top});
            if label != -100 {
                // A NaN logit leaves no order to rank by: the rank is null then.
                let finite = row.iter().all(|v| !v.is_nan());
                let rank = finite.then(|| 1 + row.iter().filter(|&&v| v > row[label as usize]).count());
                entry["target"] = names.token(label).into();
                entry["target_rank"] = rank.into();
                entry["target_prob"] = p[label as usize].into();
            }
            entries.push(entry);
        }
        out.insert("mlm".into(), entries.into());
    }
    if let Some(logits) = stages.f32_shaped(&named(NspLogits), &dims.per_sequence(Expected::Is("", 2)))? {
        let logits = logits.into_dimensionality::<Ix2>()?;
        let nsp_labels = stages.i64(&named(InputNextSentenceLabel))?;
        let entries: Vec<Value> = logits
            .outer_iter()
            .enumerate()
            .map(|(seq, row)| {
                let p = probabilities(&row.to_vec());
                let label = nsp_labels.as_ref().and_then(|l| l.get(seq).copied());
                json!({"seq": seq, "is_next": p[0], "random": p[1], "label": label})
            })
            .collect();
        out.insert("nsp".into(), entries.into());
    }
    if let Some(logits) = stages.f32_shaped(&named(ClassifierLogits), &dims.per_sequence(Expected::Any("C")))? {
        let logits = logits.into_dimensionality::<Ix2>()?;
        let label_names = names.model.and_then(|m| m.classifier.as_ref()).map(|c| c.labels.clone());
        let entries: Vec<Value> = logits
            .outer_iter()
            .enumerate()
            .map(|(seq, row)| {
                let p = probabilities(&row.to_vec());
                let labels: Vec<Value> = p
                    .iter()
                    .enumerate()
                    .map(|(i, &prob)| {
                        let label = label_names
                            .as_ref()
                            .and_then(|l| l.get(i).map(|l| visible(l)))
                            .unwrap_or(format!("LABEL_{i}"));
                        json!({"label": label, "prob": prob})
                    })
                    .collect();
                json!({"seq": seq, "labels": labels})
            })
            .collect();
        out.insert("classifier".into(), entries.into());
    }
    let mut losses = serde_json::Map::new();
    for name in [MlmLoss, NspLoss, Loss].map(named) {
        if let Some(value) = stages.f32(&name)? {
            losses.insert(name, value.iter().next().copied().unwrap_or(f32::NAN).into());
        }
    }
    if !losses.is_empty() {
        out.insert("losses".into(), losses.into());
    }
    Ok(Value::Object(out))
}

/// Fails unless every label is -100 (no target) or a token id within the `vocabulary` of
/// `mlm.logits`: the page shows each target's probability and rank there.
fn check_labels(stages: &Stages<'_>, labels: &Array2<i64>, vocabulary: usize) -> Result<()> {
    let outside = labels.indexed_iter().find(|(_, &l)| l != -100 && !(0..vocabulary as i64).contains(&l));
    if let Some(((seq, pos), label)) = outside {
        refuse!(
            "{}: stage `input.labels` has {label} at sequence {seq}, position {pos}, outside the vocabulary of \
             mlm.logits (0 to {}); the dump disagrees with itself",
            stages.dump.dir.display(),
            vocabulary - 1
        );
    }
    Ok(())
}

/// Whether stage `name`, of `shape`, is drawn as a heatmap: `[B,nh,T,T]` and `[B,T,X]` stages
/// are, after their shape is checked; other ranks, and `[B,nh,T,hs]` (queries, keys, values),
/// are not.
fn is_heatmap(stages: &Stages<'_>, name: &str, shape: &[usize], dims: InputShape) -> Result<bool> {
    let attention = stage::parse(name).is_some_and(|stage| matches!(stage.kind, AttnScores | AttnProbs));
    match shape.len() {
        4 if attention || shape[2..] == [dims.t, dims.t] => {
            shapes::expect(&stages.dump.dir, name, shape, &dims.attention(None))?;
            Ok(true)
        }
        3 => {
            shapes::expect(&stages.dump.dir, name, shape, &dims.per_token(None))?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// The page's data, and the stages left out of it to keep it within its budget.
pub fn page(dump: &Dump, names: &Names<'_>, chosen: Option<&GlobSet>) -> Result<(Value, Vec<String>)> {
    let stages = Stages { dump };
    let seqs = Sequences::read(&stages, names)?;
    let dims = InputShape::of(dump)?;
    let layers = stages.layers();
    let (b, t) = seqs.ids.dim();
    let attention = attention(&stages, layers, dims, &seqs)?;
    let heads = dump
        .entry(&in_layer(0, AttnProbs))
        .or_else(|| dump.entry(&in_layer(0, AttnQuery)))
        .map_or(0, |e| e.shape.get(1).copied().unwrap_or(0));
    let hidden = dump.entry(&named(EmbLayerNorm)).map_or(0, |e| e.shape.last().copied().unwrap_or(0));
    let mut used = attention.as_ref().map_or(0, |a| a.to_string().len());
    let mut heatmaps = Vec::new();
    let mut left_out = Vec::new();
    let candidates = match chosen {
        Some(globs) => dump.manifest.stages.iter().map(|s| s.name.clone()).filter(|n| globs.is_match(n)).collect(),
        None => heatmap_candidates(&stages, layers),
    };
    for name in candidates {
        let entry = dump.entry(&name).or_refuse("listed in the manifest")?;
        if !is_heatmap(&stages, &name, &entry.shape, dims)? {
            continue;
        }
        // Integer stages (the inputs, which `--heatmap '*'` matches too) are not heatmaps.
        let Some(values) = dump.read(entry)?.to_f32() else { continue };
        let Some(map) = heatmap(&name, &values) else { continue };
        let size = map.to_string().len();
        if used + size > PAGE_BUDGET && chosen.is_none() {
            left_out.push(name);
            continue;
        }
        used += size;
        heatmaps.push(map);
    }
    // Rollout, after the stages, within the same budget.
    let mut rollout_note = Value::Null;
    if attention.is_some() {
        match rollout_heatmaps(dump, layers, dims) {
            Ok(maps) => {
                for map in maps {
                    let size = map.to_string().len();
                    if used + size > PAGE_BUDGET {
                        left_out.push(map["stage"].as_str().unwrap_or_default().to_string());
                        continue;
                    }
                    used += size;
                    heatmaps.push(map);
                }
            }
            Err(why) => rollout_note = format!("No attention rollout: {why}").into(),
        }
    }
    let title = dump.manifest.inputs.texts.join(" · ");
    let producer = dump.manifest.producer.get("name").and_then(Value::as_str).unwrap_or("unknown").to_string();
    let version =
        dump.manifest.producer.get("version").and_then(Value::as_str).map(|v| format!(" {v}")).unwrap_or_default();
    let data = json!({
        "format": "bert-trace-view/1",
        "title": title,
        // The page greys a score at or below this, by the library's one rule.
        "masked_at": bert_core::divergence::MASKED,
        "model": dump.manifest.model,
        "producer": format!("{producer}{version}"),
        "dims": {"batch": b, "tokens": t, "layers": layers, "heads": heads, "hidden": hidden},
        "sequences": seqs.json(),
        "attention": attention,
        "heatmaps": heatmaps,
        "rollout_note": rollout_note,
        "layer_plots": layer_plots(&stages, layers, &seqs.attention_mask, dims)?,
        "predictions": predictions(&stages, names, &seqs, dims)?,
    });
    Ok((data, left_out))
}

/// The name of a stage outside the encoder layers, from the stage table.
fn named(kind: StageKind) -> String {
    Stage::new(kind).name()
}

/// The name of layer `i`'s stage of `kind`, from the stage table.
fn in_layer(i: usize, kind: StageKind) -> String {
    Stage::layer(i, kind).name()
}
