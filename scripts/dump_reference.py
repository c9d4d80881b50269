#!/usr/bin/env python3
"""Dump every named intermediate tensor of a BERT forward pass, computed by PyTorch.

Usage:

    python scripts/dump_reference.py --model DIR --out OUT [--model-name NAME]
        [--pair TEXT_B ...] [--only-stages GLOB[,GLOB...]]
        [--mask-prob P --seed N] [--mlm-target WORD ...] [--nsp-label 0|1 ...] [--label NAME ...]
        [--labels-from DUMP] [--dtype float32|float64] TEXT [TEXT ...]

DIR is any Hugging Face BERT checkpoint directory (config.json, model.safetensors,
and a tokenizer: tokenizer.json or vocab.txt + tokenizer_config.json). The model
class is chosen from the tensor names in the safetensors file:

    cls.predictions.* and cls.seq_relationship.*  -> BertForPreTraining
    cls.predictions.* only                         -> BertForMaskedLM
    cls.seq_relationship.* only                    -> BertForNextSentencePrediction
    classifier.*                                   -> BertForSequenceClassification
    none of these                                  -> BertModel (pooler if pooler.* is stored)

It is loaded with attn_implementation="eager", in float32, in eval mode.

--dtype float64 (default float32) makes a float64 "truth" dump: the model is loaded as
above and then converted with model.double(), so every weight, every float input and
mask, every stage and every reference it is checked against is float64 (the int64 inputs
are unchanged). transformers builds its additive attention mask in the dtype of the
embeddings, so with padding a masked score is torch.finfo(float64).min (-1.797...e308),
not float32's minimum; the scores' formula in the manifest says so. The float stages are
then written as float64 (.npy `<f8`, manifest dtype "float64"), the manifest's producer
records "dtype": "float64", and every check below uses atol = rtol = 1e-10 instead of
1e-5 (the float64 mean that sentence.pooled is checked against stays float64). Without
--dtype, or with --dtype float32, the output is exactly what it was before the flag.

A sentence-transformers model directory (modules.json naming a
sentence_transformers.models.Pooling module, or a 1_Pooling/ folder) whose
pooling config asks for mean pooling and nothing else gets one more stage after
the heads, sentence.pooled [B, H]: the mean of the last hidden state over the
real tokens, computed with the same torch expression as sentence-transformers'
Pooling.forward. It is checked against a float64 recomputation (and against
sentence-transformers itself when that package is installed).

The texts are tokenized by AutoTokenizer.from_pretrained(DIR), with the padding
and truncation stored in tokenizer.json switched off: a single input is never
padded, and a batch (several TEXTs) is padded on the right to its longest member.
Each --pair gives the sentence B of one TEXT, in order (give none or one per TEXT).

The forward pass is then recomputed step by step by calling transformers' own
submodules (word_embeddings, query, key, value, dense, LayerNorm, ...) and each
stage of the bert-trace contract is kept. Before anything is written, the stages
that HF also returns are checked against a normal forward call
(output_hidden_states=True, output_attentions=True) with
torch.testing.assert_close(atol=1e-5, rtol=1e-5):

    embeddings.layernorm       == hidden_states[0]
    layer{i}.ffn.layernorm     == hidden_states[i+1]
    layer{i}.attention.probs   == attentions[i]
    pooler.output              == pooler_output
    mlm.logits                 == prediction_logits (or logits for BertForMaskedLM)
    nsp.logits                 == seq_relationship_logits (or logits)
    classifier.logits          == logits

OUT then gets one OUT/<stage>.npy per stage (float32 -- float64 with --dtype float64 --,
or int64 for input.*, little-endian, C order) and OUT/manifest.json (format "bert-trace-dump/3"). Files
are written to a temporary directory next to OUT and moved into place, the
manifest last. An OUT that is not empty and has no manifest.json of ours is
refused. --only-stages keeps the stages matching any of the given glob patterns
(comma-separated or repeated; input.* are always kept), e.g.
--only-stages 'embeddings.*,pooler.*'.

Pretraining objectives (labels and losses)
------------------------------------------

These flags are a contract with the Rust side (`bert-trace` has the same ones and must give
the same masks, labels and stages):

--mask-prob P --seed N (always together; 0 < P <= 1, N a decimal integer in 0..2^64-1)
    BERT's random masking of the tokenized input, as DataCollatorForLanguageModeling does it
    (80% [MASK], 10% a random id, 10% kept), but drawn from SplitMix64 so that any language
    can reproduce it:

        state = N
        next():    state = (state + 0x9E3779B97F4A7C15) mod 2^64
                   z = state
                   z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) mod 2^64
                   z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) mod 2^64
                   return z ^ (z >> 31)
        uniform(): (next() >> 11) * 2^-53              (a float64 in [0, 1))

    (seed 0 gives next() = 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F, ...)
    One generator for the whole batch, walked sequence by sequence (b = 0..B-1), position by
    position (t = 0..T-1). A position is eligible when attention_mask[b,t] == 1 and
    input_ids[b,t] is not one of tok.all_special_ids ([CLS] [SEP] [PAD] [UNK] [MASK]); only
    eligible positions draw numbers. At an eligible position: u = uniform(); it is chosen if
    u < P. If chosen, labels[b,t] = the original id, then v = uniform():
        v < 0.8  -> the id becomes tok.mask_token_id                       (kind "mask")
        v < 0.9  -> the id becomes next() % len(tok) (any id of the vocab)  (kind "random")
        else     -> the id is kept                                          (kind "keep")
    so an eligible position draws 1, 2 or 3 numbers. The eligible set is asserted to equal
    DataCollatorForLanguageModeling's (tok.get_special_tokens_mask(ids,
    already_has_special_tokens=True) plus padding). If no position is chosen the script exits
    with one line "error: ..." (try another --seed or a larger --mask-prob).

--mlm-target WORD (repeatable)
    One per [MASK] typed in the texts, in order (sequence by sequence, left to right over the
    whole row, sentence B included). WORD is tokenized without special tokens and must give
    exactly one token that is not [UNK]; the label at that [MASK] is its id. The count must
    equal the number of typed [MASK]s. Combines with --mask-prob (a typed [MASK] is special,
    so random masking never picks it).

--nsp-label 0|1 (once for every sequence, or once per TEXT; needs --pair)
    0 = sentence B follows A, 1 = B is random (transformers' convention).

--labels-from DUMP (excludes the four flags above)
    Take input.ids, input.labels and input.next_sentence_label (whichever exist), and
    input.original_ids when it exists, from the dump in DUMP (manifest.json + .npy,
    bert-trace-dump/1 or /2) instead of masking here. DUMP's input.original_ids (or input.ids when it
    has none) must equal this script's own tokenization, with the same shapes (its
    token_type_ids and attention_mask too, when present).

Stages, in execution order (each only when it applies):

    input.original_ids [B,T] int64        (only with --mask-prob: the ids before masking)
    input.ids          [B,T] int64        (what the model sees, after masking)
    input.token_type_ids, input.attention_mask
    input.labels       [B,T] int64        (any MLM label: -100 where nothing is predicted)
    input.next_sentence_label [B] int64   (--nsp-label)
    embeddings.*, layer{i}.*, pooler.dense, pooler.output,
    mlm.transform, mlm.activation, mlm.layernorm, mlm.logits,
    mlm.losses [B,T] float32   CrossEntropyLoss(reduction="none", ignore_index=-100): exactly
                               0.0 where the label is -100
    mlm.loss   []    float32   mean of mlm.losses over the labelled positions
    nsp.logits,
    nsp.losses [B]   float32   per-sequence cross-entropy of nsp.logits and the NSP label
    nsp.loss   []    float32   their mean
    loss       []    float32   mlm.loss + nsp.loss (as BertForPreTraining), or the one that exists
    classifier.logits, sentence.pooled

MLM labels on a model without cls.predictions.*, or --nsp-label without cls.seq_relationship.*,
is a one-line error. Before anything is written the losses are checked against transformers:
BertForPreTraining(labels=, next_sentence_label=).loss when both kinds of label are given, and
BertForMaskedLM(labels=).loss / BertForNextSentencePrediction(labels=).loss (loaded from the same
directory) for mlm.loss / nsp.loss.

The manifest's "inputs" holds "texts" and "pair", "tokens" (per sequence, the token strings of
input.ids as the model sees them, [PAD] included), and, only when set, "mask_prob" (float),
"seed" (int), "mlm_targets" (list of str), "nsp_label" (list of int, one per sequence) and
"labels_from" (the DUMP path as given; mask_prob/seed/mlm_targets/nsp_label are then copied from
DUMP's manifest when it has them). These keys are enough to reproduce the dump.

Experiments (interventions and the logit lens)

--ablate layerL.headH | layerL.heads (repeatable), --ablate-with zero|mean
    The head's slice of layerL.attention.context (columns h*hs to (h+1)*hs) is replaced before
    the output projection reads it: by zeros, or by its mean over the sequence's real tokens
    (attention_mask 1) at every position. layerL.attention.probs is traced as computed.
--patch DUMP:STAGE | DUMP:STAGE@POSITIONS (repeatable; positions 3 or 1-4, inclusive)
    The stage (or those token positions of it, for every sequence) takes DUMP's value, and the
    pass goes on from it. Stages: embeddings.layernorm, layer{i}.attention.context,
    layer{i}.attention.output, layer{i}.attention.layernorm, layer{i}.ffn.intermediate,
    layer{i}.ffn.activation, layer{i}.ffn.output, layer{i}.ffn.layernorm, pooler.output. Shapes
    must match (for positions: every axis but the tokens); a DUMP whose manifest names another
    model fingerprint is refused.
    Order: the patches of a stage in command-line order, then the ablations.
--lens
    Adds lens.embeddings.logits and lens.layer{i}.logits [B,T,V] after every other stage: the
    MLM head (cls.predictions) applied to hidden_states[k]. The last equals mlm.logits exactly.

The recomputation applies them inline; the check against transformers runs the model with
forward hooks that do the same on the modules whose outputs the stages are (attention.self for
the context, attention.output.dense, attention.output, intermediate.dense, intermediate,
output.dense, output, bert.embeddings, bert.pooler), so PyTorch's own outputs must agree. The
manifest records them in "interventions" ({"ablate": "layer1.head2", "with": "zero"},
{"patch": STAGE, "positions": "1-3", "from": DUMP}), "lens": true, and every dump carries
"model_fingerprint": the first 16 hex digits of the sha256 of the position-embedding table
(float32, little-endian, C order), and "model_tensors": the digest of every parameter
(scripts/fingerprint.py), by which a reader refuses a model that differs in any weight.

Example:

    python scripts/dump_reference.py --model golden/tiny --model-name golden/tiny \\
        --out golden/tiny/dumps/mask "When in Rome, do as the [MASK] do."
    python scripts/dump_reference.py --model golden/tiny --model-name golden/tiny \\
        --out golden/tiny/dumps/mlm_target --mlm-target romans "When in Rome, do as the [MASK] do."
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
import transformers
from safetensors import safe_open
from torch import nn

FORMAT = "bert-trace-dump/3"
# Every format this script reads (an earlier dump in OUT, --labels-from, --patch): version 2
# added the interventions, the lens and the model fingerprint, version 3 the digest of every
# tensor (model_tensors), and each reads the earlier ones unchanged.
READABLE_FORMATS = ("bert-trace-dump/1", "bert-trace-dump/2", "bert-trace-dump/3")
ATOL = 1e-5
RTOL = 1e-5
# The tolerances of every check against transformers, per --dtype.
# bfloat16 and float16: two units in the last place at 1 (the recomputation runs the same
# operations as transformers' forward, so it is equal but for the order of some sums).
TOLERANCES = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-10, 1e-10), torch.bfloat16: (2 ** -6, 2 ** -6),
              torch.float16: (2 ** -9, 2 ** -9)}
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "float16": torch.float16}


# --------------------------------------------------------------------------------------
# Loading


def stored_tensor_names(model_dir: str) -> list[str]:
    """Tensor names of the checkpoint, from model.safetensors (or its sharded index)."""
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(single):
        with safe_open(single, "pt") as f:
            return list(f.keys())
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            return list(json.load(f)["weight_map"].keys())
    sys.exit(f"error: no model.safetensors in {model_dir}")


def pick_model_class(names: list[str]) -> tuple[type, dict]:
    """Choose the transformers class from the stored tensor names."""
    def has(prefix: str) -> bool:
        return any(n.startswith(prefix) or n.startswith("bert." + prefix) for n in names)

    mlm, nsp, clf = has("cls.predictions."), has("cls.seq_relationship."), has("classifier.")
    if clf:
        return transformers.BertForSequenceClassification, {}
    if mlm and nsp:
        return transformers.BertForPreTraining, {}
    if mlm:
        return transformers.BertForMaskedLM, {}
    if nsp:
        return transformers.BertForNextSentencePrediction, {}
    return transformers.BertModel, {"add_pooling_layer": has("pooler.")}


def quantize_int8(weight: np.ndarray) -> np.ndarray:
    """bert-trace's --weights int8, in NumPy: a [out, in] float32 weight quantized symmetrically
    per output channel (row) and back, float32 throughout: scale = max|w| / 127, q =
    clip(rint(w / scale), -127, 127) (rint rounds ties to even), w' = q * scale; a row of
    zeros stays zeros."""
    assert weight.dtype == np.float32 and weight.ndim == 2, (weight.dtype, weight.shape)
    scale = np.abs(weight).max(axis=1, keepdims=True) / np.float32(127)
    safe = np.where(scale == 0, np.float32(1), scale)
    q = np.clip(np.rint(weight / safe), np.float32(-127), np.float32(127))
    return np.where(scale == 0, np.float32(0), q * safe).astype(np.float32)


def hold_weights_int8(model: nn.Module) -> None:
    """Every nn.Linear's weight replaced by its int8 rule (quantize_int8), in float32; the MLM
    decoder, tied to the word embeddings, is untied first and given its own quantized copy (the
    embedding lookup keeps the float table)."""
    predictions = getattr(getattr(model, "cls", None), "predictions", None)
    if predictions is not None:
        predictions.decoder.weight = nn.Parameter(predictions.decoder.weight.detach().clone())
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                held = quantize_int8(module.weight.detach().cpu().numpy())
                module.weight.copy_(torch.from_numpy(held))


def load_model(model_dir: str, dtype: torch.dtype = torch.float32, int8: bool = False) -> nn.Module:
    names = stored_tensor_names(model_dir)
    cls, extra = pick_model_class(names)
    model, info = cls.from_pretrained(
        model_dir,
        attn_implementation="eager",
        dtype=torch.float32,
        output_loading_info=True,
        **extra,
    )
    # A missing weight would be silently random-initialised: refuse.
    if info.get("missing_keys"):
        sys.exit(f"error: weights missing from {model_dir}: {sorted(info['missing_keys'])}")
    if info.get("mismatched_keys"):
        sys.exit(f"error: weights with the wrong shape in {model_dir}: {info['mismatched_keys']}")
    unexpected = sorted(info.get("unexpected_keys") or [])
    if unexpected:
        print(f"note: stored but unused by {cls.__name__}: {unexpected}", file=sys.stderr)
    model.eval()
    if int8:
        hold_weights_int8(model)  # in float32, before any conversion
    if dtype != torch.float32:
        # Loaded in float32 as always, then every parameter and buffer converted (model.double()
        # for float64); transformers then builds its mask in this dtype (finfo(dtype).min).
        model.to(dtype)
    cfg = model.config
    assert cfg._attn_implementation == "eager", cfg._attn_implementation
    assert not cfg.is_decoder and not cfg.add_cross_attention, "only encoder BERT is supported"
    assert getattr(cfg, "position_embedding_type", "absolute") == "absolute", "only absolute positions"
    assert cfg.chunk_size_feed_forward == 0, "chunked feed-forward is not mirrored"
    for p in model.parameters():
        assert p.dtype == dtype, p.dtype
    dtype_note = f", {str(dtype).removeprefix('torch.')} (model.to(dtype))" if dtype != torch.float32 else ""
    dtype_note += ", every nn.Linear's weight held in int8 (per output channel)" if int8 else ""
    print(f"model: {cls.__name__} from {model_dir} ({len(names)} stored tensors){dtype_note}", file=sys.stderr)
    return model


def load_tokenizer(model_dir: str):
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    backend = tok.backend_tokenizer
    # tokenizer.json may store a fixed padding (MiniLM: 128) and a truncation; drop both.
    backend.no_padding()
    backend.no_truncation()
    assert tok.padding_side == "right", tok.padding_side

    # transformers 5 can silently ignore a vocab (BertTokenizer(vocab_file=...) falls
    # back to a 5-entry default): check the loaded vocab is the one on disk.
    vocab_txt = os.path.join(model_dir, "vocab.txt")
    if os.path.exists(vocab_txt):
        with open(vocab_txt, encoding="utf-8") as f:
            on_disk = {line.rstrip("\n"): i for i, line in enumerate(f)}
        loaded = tok.get_vocab()
        if loaded != on_disk:
            diff = sorted(set(loaded.items()) ^ set(on_disk.items()))[:10]
            sys.exit(f"error: tokenizer vocab differs from vocab.txt, e.g. {diff}")
    return tok


def tokenize(tok, model_dir: str, texts: list[str], pairs: list[str] | None) -> dict[str, torch.Tensor]:
    batch = len(texts) > 1
    enc = tok(
        texts,
        pairs,
        padding="longest" if batch else False,
        truncation=False,
        return_tensors="pt",
        return_token_type_ids=True,
        return_attention_mask=True,
    )
    out = {k: enc[k].to(torch.int64) for k in ("input_ids", "token_type_ids", "attention_mask")}

    # Cross-check against the tokenizers library reading tokenizer.json directly.
    tok_json = os.path.join(model_dir, "tokenizer.json")
    if os.path.exists(tok_json):
        import tokenizers

        raw = tokenizers.Tokenizer.from_file(tok_json)
        raw.no_padding()
        raw.no_truncation()
        inputs = list(zip(texts, pairs)) if pairs else texts
        encs = raw.encode_batch(inputs, add_special_tokens=True)
        t = max(len(e.ids) for e in encs)
        pad_id = raw.token_to_id("[PAD]")
        want_ids = [e.ids + [pad_id] * (t - len(e.ids)) for e in encs]
        want_types = [e.type_ids + [0] * (t - len(e.ids)) for e in encs]
        want_mask = [e.attention_mask + [0] * (t - len(e.ids)) for e in encs]
        assert out["input_ids"].tolist() == want_ids, "input_ids differ from tokenizer.json"
        assert out["token_type_ids"].tolist() == want_types, "token_type_ids differ from tokenizer.json"
        assert out["attention_mask"].tolist() == want_mask, "attention_mask differs from tokenizer.json"
        print("tokenizer: ids equal those of tokenizer.json (tokenizers library, no padding)", file=sys.stderr)
    for row in out["input_ids"].tolist():
        print("tokens: " + " ".join(tok.convert_ids_to_tokens(row)), file=sys.stderr)
    return out


def sentence_pooling_config(model_dir: str) -> str | None:
    """The pooling config.json of a sentence-transformers model whose pooling is the mean alone.

    None for a plain BERT directory, or when the pooling is something else (CLS, max, ...):
    bert-trace traces only mean pooling.
    """
    modules = os.path.join(model_dir, "modules.json")
    if os.path.exists(modules):
        with open(modules, encoding="utf-8") as f:
            paths = [m["path"] for m in json.load(f) if m["type"] == "sentence_transformers.models.Pooling"]
        if not paths:
            return None
        path = os.path.join(model_dir, paths[0], "config.json")
    else:
        path = os.path.join(model_dir, "1_Pooling", "config.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    others = ["pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
              "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"]
    if cfg.get("pooling_mode_mean_tokens") and not any(cfg.get(k) for k in others):
        return path
    return None


def mean_pooling(token_embeddings: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """sentence-transformers' Pooling.forward for pooling_mode_mean_tokens, line for line."""
    input_mask_expanded = attention_mask.unsqueeze(-1).expand(token_embeddings.size()).to(token_embeddings.dtype)
    sum_embeddings = torch.sum(token_embeddings * input_mask_expanded, 1)  # (B, H)
    sum_mask = input_mask_expanded.sum(1)  # (B, H)
    sum_mask = torch.clamp(sum_mask, min=1e-9)
    return sum_embeddings / sum_mask


# --------------------------------------------------------------------------------------
# Pretraining labels: random masking (SplitMix64), typed [MASK] targets, NSP labels

MASK64 = (1 << 64) - 1
IGNORE = -100  # CrossEntropyLoss's ignore_index: no prediction at this position


class SplitMix64:
    """The documented generator behind --mask-prob/--seed (see the module docstring)."""

    def __init__(self, seed: int):
        assert 0 <= seed <= MASK64, seed
        self.state = seed

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self) -> float:
        return (self.next() >> 11) * 2.0 ** -53  # exact: a 53-bit integer times a power of two


# The first outputs for seed 0 (the reference values of SplitMix64); checked on every run.
_gen = SplitMix64(0)
assert [_gen.next() for _ in range(3)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
del _gen


@dataclass
class Labels:
    """What the pretraining flags add to the inputs, and how to record them."""
    original_ids: torch.Tensor | None = None  # (B, T), only when --mask-prob masked the ids
    ids: torch.Tensor | None = None  # (B, T), the ids the model sees (None: the tokenizer's)
    labels: torch.Tensor | None = None  # (B, T), -100 where nothing is predicted
    next_sentence_label: torch.Tensor | None = None  # (B,)
    class_labels: torch.Tensor | None = None  # (B,), a classifier's classes (--label)
    record: dict | None = None  # the manifest "inputs" keys these came from

    def pair_required(self) -> bool:
        return self.next_sentence_label is not None


def eligible_positions(tok, ids: torch.Tensor, mask: torch.Tensor) -> list[list[bool]]:
    """Positions random masking may choose: real tokens that are not special tokens.

    Asserted equal to what DataCollatorForLanguageModeling allows (its special-tokens mask from
    the tokenizer, plus padding)."""
    special = set(tok.all_special_ids)
    ours = [[m == 1 and i not in special for i, m in zip(row, mrow)]
            for row, mrow in zip(ids.tolist(), mask.tolist())]
    collator = [[not s and m == 1 for s, m in zip(tok.get_special_tokens_mask(row, already_has_special_tokens=True),
                                                   mrow)]
                for row, mrow in zip(ids.tolist(), mask.tolist())]
    assert ours == collator, "eligible positions differ from DataCollatorForLanguageModeling's"
    return ours


def random_masking(tok, ids: torch.Tensor, mask: torch.Tensor, prob: float, seed: int,
                   labels: torch.Tensor) -> tuple[torch.Tensor, list[tuple[int, int, str, int, int]]]:
    """BERT's 80/10/10 masking drawn from SplitMix64(seed); fills `labels` in place.

    Every sequence with a maskable token gets at least one (as d2l's max(1, round(0.15 n))):
    after the pass, each sequence with none chosen gets its (next() % n)-th maskable position,
    replaced by the same rule, as bert-core's objectives/masking.rs does.
    Returns the masked ids and, per chosen position, (b, t, kind, original id, new id)."""
    eligible = eligible_positions(tok, ids, mask)
    gen = SplitMix64(seed)
    out = ids.clone()
    chosen = []
    n_vocab = len(tok)

    def replace(b: int, t: int) -> None:
        original = int(ids[b, t])
        labels[b, t] = original
        v = gen.uniform()
        if v < 0.8:
            kind, new = "mask", tok.mask_token_id
        elif v < 0.9:
            kind, new = "random", gen.next() % n_vocab
        else:
            kind, new = "keep", original
        out[b, t] = new
        chosen.append((b, t, kind, original, new))

    for b, row in enumerate(eligible):
        for t, ok in enumerate(row):
            if not ok:
                continue  # draws nothing
            if gen.uniform() < prob:
                replace(b, t)
    for b, row in enumerate(eligible):
        positions = [t for t, ok in enumerate(row) if ok]
        if positions and not any(c[0] == b for c in chosen):
            replace(b, positions[gen.next() % len(positions)])
    chosen.sort()
    return out, chosen


def target_id(tok, word: str) -> int:
    """The id of --mlm-target WORD: exactly one token of the vocabulary, not [UNK]."""
    ids = tok(word, add_special_tokens=False)["input_ids"]
    if len(ids) != 1 or ids[0] == tok.unk_token_id:
        pieces = " ".join(tok.convert_ids_to_tokens(ids)) if ids else "nothing"
        sys.exit(f"error: --mlm-target {word!r} tokenizes as {pieces} ({len(ids)} token{'s' * (len(ids) != 1)}); "
                 "it must be exactly one token of the vocabulary that is not [UNK]")
    return ids[0]


def read_label_dump(path: str) -> tuple[dict, dict[str, np.ndarray]]:
    """The manifest and the input.* arrays of a dump directory (for --labels-from)."""
    manifest = read_our_manifest(path)
    if manifest is None:
        sys.exit(f"error: --labels-from {path}: no {FORMAT} manifest.json there")
    arrays = {}
    for st in manifest.get("stages", []):
        if st["name"] in ("input.original_ids", "input.ids", "input.token_type_ids", "input.attention_mask",
                          "input.labels", "input.next_sentence_label"):
            arr = np.load(os.path.join(path, st["file"]), allow_pickle=False)
            if arr.dtype != np.int64 or list(arr.shape) != st["shape"]:
                sys.exit(f"error: --labels-from {path}: {st['file']} is {arr.dtype} {list(arr.shape)}, "
                         f"the manifest says int64 {st['shape']}")
            arrays[st["name"]] = arr
    return manifest, arrays


def labels_from_dump(tok, inputs: dict[str, torch.Tensor], path: str) -> Labels:
    manifest, arrays = read_label_dump(path)
    ids = inputs["input_ids"]
    B, T = ids.shape
    if "input.ids" not in arrays:
        sys.exit(f"error: --labels-from {path}: the dump has no input.ids")
    if "input.labels" not in arrays and "input.next_sentence_label" not in arrays:
        sys.exit(f"error: --labels-from {path}: the dump has neither input.labels nor input.next_sentence_label")
    source = "input.original_ids" if "input.original_ids" in arrays else "input.ids"
    for name, ours in [(source, ids), ("input.ids", ids), ("input.token_type_ids", inputs["token_type_ids"]),
                       ("input.attention_mask", inputs["attention_mask"]), ("input.labels", ids)]:
        if name in arrays and list(arrays[name].shape) != [B, T]:
            sys.exit(f"error: --labels-from {path}: {name} has shape {list(arrays[name].shape)}, "
                     f"this tokenization gives {[B, T]}")
    for name, ours in [(source, ids), ("input.token_type_ids", inputs["token_type_ids"]),
                       ("input.attention_mask", inputs["attention_mask"])]:
        if name in arrays and not np.array_equal(arrays[name], ours.numpy()):
            sys.exit(f"error: --labels-from {path}: its {name} differ from this script's tokenization of the texts")
    nsl = arrays.get("input.next_sentence_label")
    if nsl is not None and list(nsl.shape) != [B]:
        sys.exit(f"error: --labels-from {path}: input.next_sentence_label has shape {list(nsl.shape)}, want {[B]}")
    labels = arrays.get("input.labels")
    n_vocab = len(tok)
    if labels is not None and not np.all((labels == IGNORE) | ((labels >= 0) & (labels < n_vocab))):
        sys.exit(f"error: --labels-from {path}: input.labels holds values other than -100 and 0..{n_vocab - 1}")
    if nsl is not None and not np.all((nsl == 0) | (nsl == 1)):
        sys.exit(f"error: --labels-from {path}: input.next_sentence_label holds values other than 0 and 1")
    if not np.all((arrays["input.ids"] >= 0) & (arrays["input.ids"] < n_vocab)):
        sys.exit(f"error: --labels-from {path}: input.ids holds ids outside 0..{n_vocab - 1}")
    src_inputs = manifest.get("inputs") or {}
    record = {k: src_inputs[k] for k in ("mask_prob", "seed", "mlm_targets", "nsp_label") if k in src_inputs}
    if nsl is not None and "nsp_label" in record and record["nsp_label"] != nsl.tolist():
        sys.exit(f"error: --labels-from {path}: its manifest's nsp_label differs from its input.next_sentence_label")
    record["labels_from"] = path
    print(f"labels: from {path} ({', '.join(n for n in arrays if n in ('input.labels', 'input.next_sentence_label'))})",
          file=sys.stderr)
    return Labels(
        original_ids=torch.from_numpy(arrays["input.original_ids"].copy()) if "input.original_ids" in arrays else None,
        ids=torch.from_numpy(arrays["input.ids"].copy()),
        labels=torch.from_numpy(labels.copy()) if labels is not None else None,
        next_sentence_label=torch.from_numpy(nsl.copy()) if nsl is not None else None,
        record=record,
    )


def make_labels(tok, inputs: dict[str, torch.Tensor], args, cfg) -> Labels:
    """The labels asked for by --mask-prob/--seed, --mlm-target, --nsp-label and --label (or
    --labels-from)."""
    if args.labels_from is not None:
        return labels_from_dump(tok, inputs, args.labels_from)
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    B, T = ids.shape
    out = Labels(record={})
    if args.mlm_target or args.mask_prob is not None:
        labels = torch.full((B, T), IGNORE, dtype=torch.int64)
        if args.mlm_target:
            typed = [(b, t) for b in range(B) for t in range(T)
                     if int(mask[b, t]) == 1 and int(ids[b, t]) == tok.mask_token_id]
            if len(typed) != len(args.mlm_target):
                sys.exit(f"error: {len(args.mlm_target)} --mlm-target for {len(typed)} [MASK] in the texts: "
                         "give one per [MASK], in order")
            for (b, t), word in zip(typed, args.mlm_target):
                labels[b, t] = target_id(tok, word)
                print(f"mlm target: sequence {b} position {t} [MASK] -> {word!r} (id {int(labels[b, t])})",
                      file=sys.stderr)
            out.record["mlm_targets"] = list(args.mlm_target)
        if args.mask_prob is not None:
            masked, chosen = random_masking(tok, ids, mask, args.mask_prob, args.seed, labels)
            if not chosen:
                sys.exit("error: the text has no token that can be masked (it holds only special tokens), "
                         "so there is nothing to predict")
            for b, t, kind, old, new in chosen:
                old_tok, new_tok = tok.convert_ids_to_tokens([old, new])
                print(f"masking: sequence {b} position {t} {old_tok} -> {new_tok} ({kind})", file=sys.stderr)
            out.original_ids, out.ids = ids, masked
            out.record["mask_prob"] = args.mask_prob
            out.record["seed"] = args.seed
        out.labels = labels
    if args.nsp_label:
        nsl = args.nsp_label * B if len(args.nsp_label) == 1 else list(args.nsp_label)
        out.next_sentence_label = torch.tensor(nsl, dtype=torch.int64)
        out.record["nsp_label"] = nsl
    if args.label:
        out.class_labels = torch.tensor([class_id(cfg, label) for label in args.label] * (B if len(args.label) == 1 else 1),
                                        dtype=torch.int64)
        out.record["label"] = list(args.label)
    return out


def class_id(cfg, label: str) -> int:
    """A --label as the classifier's class: its name in config.json's id2label, or its index."""
    by_name = {name: int(index) for index, name in cfg.id2label.items()}
    if label in by_name:
        return by_name[label]
    if label.isdigit() and int(label) < cfg.num_labels:
        return int(label)
    sys.exit(f"error: --label {label!r} is not one of the classifier's labels: {', '.join(cfg.id2label.values())}")


def require_heads(model: nn.Module, model_dir: str, mlm: bool, nsp: bool, classes: bool = False) -> None:
    """One-line errors for labels the model has no head for."""
    if classes and not hasattr(model, "classifier"):
        sys.exit(f"error: --label needs a classifier, but {model_dir} has no classifier.* weights")
    heads = getattr(model, "cls", None)
    if mlm and getattr(heads, "predictions", None) is None:
        sys.exit(f"error: MLM labels need an MLM head, but {model_dir} has no cls.predictions.* weights")
    if nsp and getattr(heads, "seq_relationship", None) is None:
        sys.exit(f"error: NSP labels need an NSP head, but {model_dir} has no cls.seq_relationship.* weights")


# --------------------------------------------------------------------------------------
# The step-by-step forward pass


@dataclass
class Stage:
    name: str
    tensor: torch.Tensor
    hf: str
    formula: str


@torch.no_grad()
def trace(model: nn.Module, inputs: dict[str, torch.Tensor], sentence_pooling: bool = False,
          labels: Labels | None = None, iv: Interventions | None = None, lens: bool = False) -> list[Stage]:
    """Recompute BERT's forward pass with HF's own submodules, keeping every stage.

    This mirrors transformers 5.23 modeling_bert.py / masking_utils.py line by line.
    `inputs` holds the ids the model sees (after masking); `labels` adds the pretraining
    stages (input.original_ids, input.labels, input.next_sentence_label and the losses).
    """
    labels = labels or Labels()
    iv = iv or Interventions()
    path = {id(m): n for n, m in model.named_modules()}  # module -> its HF name

    def hf(m: nn.Module) -> str:
        return path[id(m)]

    bert = model.bert if hasattr(model, "bert") else model
    cfg = model.config
    dtype = bert.embeddings.word_embeddings.weight.dtype  # float32, or float64 with --dtype float64
    ids, types, mask = inputs["input_ids"], inputs["token_type_ids"], inputs["attention_mask"]
    B, T = ids.shape
    H, nh = cfg.hidden_size, cfg.num_attention_heads
    hs = H // nh
    stages: list[Stage] = []

    def keep(name, tensor, hf_name, formula):
        stages.append(Stage(name, tensor, hf_name, formula))

    pair = "tokenizer(text, text_pair)" if (types != 0).any() else "tokenizer(text)"
    if labels.original_ids is not None:
        keep("input.original_ids", labels.original_ids, "input_ids (before masking)", f"{pair}.input_ids")
        keep("input.ids", ids, "input_ids",
             f"input.original_ids, masked: chosen with p = mask_prob (SplitMix64 seed), "
             "then 80% [MASK], 10% a random id, 10% kept")
    else:
        keep("input.ids", ids, "input_ids", f"{pair}.input_ids")
    keep("input.token_type_ids", types, "token_type_ids", f"{pair}.token_type_ids")
    keep("input.attention_mask", mask, "attention_mask", f"{pair}.attention_mask (1 = token, 0 = padding)")
    if labels.labels is not None:
        keep("input.labels", labels.labels, "labels",
             "the original id where a token is to be predicted, -100 elsewhere")
    if labels.next_sentence_label is not None:
        keep("input.next_sentence_label", labels.next_sentence_label, "next_sentence_label",
             "0 = sentence B follows A, 1 = B is random")
    if labels.class_labels is not None:
        keep("input.class_labels", labels.class_labels, "labels (BertForSequenceClassification)",
             "each sequence's class, its index in id2label")
    losses: list[torch.Tensor] = []

    # ---- Embeddings (BertEmbeddings.forward) --------------------------------------
    emb = bert.embeddings
    position_ids = emb.position_ids[:, :T]  # (1, T): 0..T-1, no past key values
    word = emb.word_embeddings(ids)  # (B, T, H)
    token_type = emb.token_type_embeddings(types)  # (B, T, H)
    position = emb.position_embeddings(position_ids)  # (1, T, H), broadcast over the batch
    # HF adds in this order: (inputs_embeds + token_type_embeddings) + position_embeddings.
    summed = (word + token_type) + position  # (B, T, H)
    x = iv.apply("embeddings.layernorm", emb.LayerNorm(summed), mask)  # (B, T, H); dropout is the identity
    hidden_states = [x]  # for the lens
    keep("embeddings.word", word, hf(emb.word_embeddings), "word_embeddings.weight[input_ids]")
    keep("embeddings.position", position.expand(B, T, H), hf(emb.position_embeddings),
         "position_embeddings.weight[arange(T)], broadcast over the batch")
    keep("embeddings.token_type", token_type, hf(emb.token_type_embeddings),
         "token_type_embeddings.weight[token_type_ids]")
    keep("embeddings.sum", summed, f"{hf(emb)} (LayerNorm input)", "(word + token_type) + position")
    keep("embeddings.layernorm", x, "hidden_states[0]", "LayerNorm(sum)")

    # ---- Attention mask (BertModel._create_attention_masks) -----------------------
    # transformers 5.23: create_bidirectional_mask -> eager_mask -> sdpa_mask builds a
    # bool mask (B, 1, T, T) (the padding mask over keys, expanded over query rows) and
    # turns it into torch.where(mask, 0.0, finfo(dtype).min), dtype that of the embeddings
    # (float32; float64 after model.double()). When no token is padding
    # it returns None and nothing is added to the scores (adding 0.0 would change no bit).
    if bool(mask.all()):
        additive = None
        mask_text = "(no padding, so HF adds no mask)"
    else:
        keep_kv = mask.to(torch.bool)[:, None, None, :].expand(B, 1, T, T)  # (B, 1, T, T)
        additive = torch.where(keep_kv, torch.zeros((), dtype=dtype), torch.finfo(dtype).min)  # (B, 1, T, T)
        mask_text = f"+ where(attention_mask[key], 0, finfo({str(dtype).removeprefix('torch.')}).min)"

    # ---- Encoder layers (BertLayer.forward) ---------------------------------------
    for i, layer in enumerate(bert.encoder.layer):
        p = f"layer{i}"
        sa = layer.attention.self
        assert sa.scaling == hs ** -0.5 and sa.attention_head_size == hs
        q = sa.query(x).view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = sa.key(x).view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        v = sa.value(x).view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        # eager_attention_forward: matmul(q, k^T) * scaling, then + mask, then softmax.
        scores = torch.matmul(q, k.transpose(2, 3)) * sa.scaling  # (B, nh, T, T)
        if additive is not None:
            scores = scores + additive
        probs = nn.functional.softmax(scores, dim=-1)  # (B, nh, T, T); dropout off
        context = torch.matmul(probs, v).transpose(1, 2).contiguous()  # (B, T, nh, hs)
        context = context.reshape(B, T, H).contiguous()  # (B, T, H)
        # Interventions replace a stage before the next one reads it (identity without any).
        context = iv.apply(f"{p}.attention.context", context, mask)
        so = layer.attention.output
        att_out = iv.apply(f"{p}.attention.output", so.dense(context), mask)  # (B, T, H)
        att_res = att_out + x  # HF: LayerNorm(hidden_states + input_tensor)
        att_ln = iv.apply(f"{p}.attention.layernorm", so.LayerNorm(att_res), mask)  # (B, T, H)

        inter = iv.apply(f"{p}.ffn.intermediate", layer.intermediate.dense(att_ln), mask)  # (B, T, I)
        act = iv.apply(f"{p}.ffn.activation", layer.intermediate.intermediate_act_fn(inter), mask)  # (B, T, I)
        ffn_out = iv.apply(f"{p}.ffn.output", layer.output.dense(act), mask)  # (B, T, H)
        ffn_res = ffn_out + att_ln
        x = iv.apply(f"{p}.ffn.layernorm", layer.output.LayerNorm(ffn_res), mask)  # (B, T, H)
        hidden_states.append(x)

        keep(f"{p}.attention.query", q, hf(sa.query), "query(x).view(B,T,nh,hs).transpose(1,2)")
        keep(f"{p}.attention.key", k, hf(sa.key), "key(x).view(B,T,nh,hs).transpose(1,2)")
        keep(f"{p}.attention.value", v, hf(sa.value), "value(x).view(B,T,nh,hs).transpose(1,2)")
        keep(f"{p}.attention.scores", scores, f"{hf(sa)} (eager_attention_forward, before softmax)",
             f"(query @ key^T) * hs^-0.5 {mask_text}")
        keep(f"{p}.attention.probs", probs, f"attentions[{i}]", "softmax(scores, dim=-1)")
        keep(f"{p}.attention.context", context, f"{hf(sa)} output", "(probs @ value).transpose(1,2).reshape(B,T,H)")
        keep(f"{p}.attention.output", att_out, hf(so.dense), "dense(context)")
        keep(f"{p}.attention.residual", att_res, f"{hf(so.LayerNorm)} input", "attention.output + x")
        keep(f"{p}.attention.layernorm", att_ln, hf(so.LayerNorm), "LayerNorm(attention.residual)")
        keep(f"{p}.ffn.intermediate", inter, hf(layer.intermediate.dense), "dense(attention.layernorm)")
        keep(f"{p}.ffn.activation", act, f"{hf(layer.intermediate)}.intermediate_act_fn",
             f"{cfg.hidden_act}(ffn.intermediate)")
        keep(f"{p}.ffn.output", ffn_out, hf(layer.output.dense), "dense(ffn.activation)")
        keep(f"{p}.ffn.residual", ffn_res, f"{hf(layer.output.LayerNorm)} input", "ffn.output + attention.layernorm")
        keep(f"{p}.ffn.layernorm", x, f"hidden_states[{i + 1}]", "LayerNorm(ffn.residual)")

    # ---- Pooler (BertPooler.forward) ----------------------------------------------
    pooled = None
    if bert.pooler is not None:
        pool_dense = bert.pooler.dense(x[:, 0])  # (B, H): the [CLS] token
        pooled = iv.apply("pooler.output", bert.pooler.activation(pool_dense), mask)  # (B, H), tanh
        keep("pooler.dense", pool_dense, hf(bert.pooler.dense), "dense(last ffn.layernorm[:, 0])")
        keep("pooler.output", pooled, "pooler_output", "tanh(pooler.dense)")

    # ---- Heads --------------------------------------------------------------------
    heads = getattr(model, "cls", None)
    predictions = getattr(heads, "predictions", None)
    seq_relationship = getattr(heads, "seq_relationship", None)
    only_logits = not (predictions is not None and seq_relationship is not None)
    if predictions is not None:
        tr = predictions.transform
        dec = predictions.decoder
        tied = dec.weight is bert.embeddings.word_embeddings.weight
        assert tied or model.int8_weights, "MLM decoder weight is not tied to the word embeddings"
        assert dec.bias is predictions.bias, "MLM decoder bias is not cls.predictions.bias"
        m_dense = tr.dense(x)  # (B, T, H)
        m_act = tr.transform_act_fn(m_dense)  # (B, T, H)
        m_ln = tr.LayerNorm(m_act)  # (B, T, H)
        logits = dec(m_ln)  # (B, T, V)
        keep("mlm.transform", m_dense, hf(tr.dense), "dense(last ffn.layernorm)")
        keep("mlm.activation", m_act, f"{hf(tr)}.transform_act_fn", f"{cfg.hidden_act}(mlm.transform)")
        keep("mlm.layernorm", m_ln, hf(tr.LayerNorm), "LayerNorm(mlm.activation)")
        keep("mlm.logits", logits, "logits" if only_logits else "prediction_logits",
             "mlm.layernorm @ word_embeddings.weight^T + cls.predictions.bias (decoder tied)")
        if labels.labels is not None:
            lab = labels.labels
            V = logits.shape[-1]
            per_token = nn.functional.cross_entropy(logits.reshape(-1, V), lab.reshape(-1), reduction="none",
                                                    ignore_index=IGNORE).view(B, T)  # (B, T)
            # Exactly 0.0 (not -0.0) where nothing is predicted.
            per_token = torch.where(lab == IGNORE, torch.zeros((), dtype=dtype), per_token)
            mlm_loss = per_token[lab != IGNORE].mean()  # ()
            keep("mlm.losses", per_token, "CrossEntropyLoss(reduction='none')(prediction_logits, labels)",
                 "-log_softmax(mlm.logits)[input.labels], 0 where input.labels == -100")
            keep("mlm.loss", mlm_loss, "masked_lm_loss", "mean of mlm.losses over positions with input.labels != -100")
            losses.append(mlm_loss)
    if seq_relationship is not None:
        nsp_logits = seq_relationship(pooled)  # (B, 2)
        keep("nsp.logits", nsp_logits, "logits" if only_logits else "seq_relationship_logits",
             "cls.seq_relationship(pooler.output)")
        if labels.next_sentence_label is not None:
            per_seq = nn.functional.cross_entropy(nsp_logits, labels.next_sentence_label, reduction="none")  # (B,)
            nsp_loss = per_seq.mean()  # ()
            keep("nsp.losses", per_seq, "CrossEntropyLoss(reduction='none')(seq_relationship_logits, next_sentence_label)",
                 "-log_softmax(nsp.logits)[input.next_sentence_label]")
            keep("nsp.loss", nsp_loss, "next_sentence_loss", "mean of nsp.losses")
            losses.append(nsp_loss)
    if hasattr(model, "classifier"):
        class_logits = model.classifier(pooled)  # (B, C); dropout is the identity
        keep("classifier.logits", class_logits, "logits", "classifier(pooler.output)")
        if labels.class_labels is not None:
            # BertForSequenceClassification's single-label loss: num_labels > 1 and integer labels.
            per_seq = nn.functional.cross_entropy(class_logits, labels.class_labels, reduction="none")  # (B,)
            class_loss = per_seq.mean()  # ()
            keep("classifier.losses", per_seq, "CrossEntropyLoss(reduction='none')(logits, labels)",
                 "-log_softmax(classifier.logits)[input.class_labels]")
            keep("classifier.loss", class_loss, "loss (BertForSequenceClassification)", "mean of classifier.losses")
            losses.append(class_loss)
    if losses:
        total = losses[0]
        for part in losses[1:]:
            total = total + part
        names = [name for name, on in (("mlm.loss", labels.labels is not None),
                                        ("nsp.loss", labels.next_sentence_label is not None),
                                        ("classifier.loss", labels.class_labels is not None)) if on]
        keep("loss", total, "loss", " + ".join(names))

    # ---- sentence-transformers mean pooling (1_Pooling) --------------------------------
    if sentence_pooling:
        keep("sentence.pooled", mean_pooling(x, mask), "sentence_embedding (sentence-transformers Pooling, mean)",
             "sum(last ffn.layernorm * attention_mask, dim=1) / clamp(sum(attention_mask), min=1e-9)")

    # ---- The logit lens: the MLM head on every layer's output ------------------------
    if lens:
        for k, hidden in enumerate(hidden_states):
            name = "lens.embeddings.logits" if k == 0 else f"lens.layer{k - 1}.logits"
            source = "embeddings.layernorm" if k == 0 else f"layer{k - 1}.ffn.layernorm"
            keep(name, predictions(hidden), f"cls.predictions(hidden_states[{k}])", f"mlm head applied to {source}")
        assert torch.equal(stages[-1].tensor, next(s.tensor for s in stages if s.name == "mlm.logits")), \
            "the lens's last row is not mlm.logits"
    return stages


def expected_shape(name: str, B: int, T: int, cfg) -> list[int]:
    """The shape the stage contract gives each stage name."""
    H, nh, I, V = cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size, cfg.vocab_size
    hs = H // nh
    tail = name.split(".", 1)[1] if name.startswith("layer") else name
    if name.startswith("lens."):
        return [B, T, V]
    scalars_and_vectors = {"input.next_sentence_label": [B], "mlm.losses": [B, T], "mlm.loss": [],
                           "nsp.losses": [B], "nsp.loss": [], "loss": [], "input.class_labels": [B],
                           "classifier.losses": [B], "classifier.loss": []}
    if name in scalars_and_vectors:
        return scalars_and_vectors[name]
    table = {
        "attention.query": [B, nh, T, hs], "attention.key": [B, nh, T, hs], "attention.value": [B, nh, T, hs],
        "attention.scores": [B, nh, T, T], "attention.probs": [B, nh, T, T],
        "ffn.intermediate": [B, T, I], "ffn.activation": [B, T, I],
        "pooler.dense": [B, H], "pooler.output": [B, H],
        "mlm.logits": [B, T, V], "nsp.logits": [B, 2], "classifier.logits": [B, cfg.num_labels],
        "sentence.pooled": [B, H],
    }
    if name.startswith("input."):
        return [B, T]
    return table.get(tail, [B, T, H])


# --------------------------------------------------------------------------------------
# The check against HF's own forward call


@torch.no_grad()
def check_against_hf(model: nn.Module, inputs: dict[str, torch.Tensor], stages: list[Stage],
                     iv: Interventions | None = None) -> None:
    iv = iv or Interventions()
    bert = model.bert if hasattr(model, "bert") else model
    # The interventions as forward hooks on transformers' modules: its outputs are then those of
    # the changed model, which the recomputation must equal.
    with iv.hooked(bert):
        out = model(**inputs, output_hidden_states=True, output_attentions=True, return_dict=True)
        # Head models (BertForPreTraining, ...) do not return pooler_output: take it from
        # their BertModel called on the same inputs.
        pooler_output = model.bert(**inputs, return_dict=True).pooler_output \
            if hasattr(model, "bert") and model.bert.pooler is not None else None
    by_name = {s.name: s for s in stages}
    refs: dict[str, torch.Tensor] = {"embeddings.layernorm": out.hidden_states[0]}
    if pooler_output is not None:
        refs["pooler.output"] = pooler_output
    predictions = getattr(getattr(model, "cls", None), "predictions", None)
    for k, hidden in enumerate(out.hidden_states):
        name = "lens.embeddings.logits" if k == 0 else f"lens.layer{k - 1}.logits"
        if name in by_name:
            refs[name] = predictions(hidden)
    n_layers = model.config.num_hidden_layers
    assert len(out.hidden_states) == n_layers + 1 and len(out.attentions) == n_layers
    for i in range(n_layers):
        refs[f"layer{i}.ffn.layernorm"] = out.hidden_states[i + 1]
        refs[f"layer{i}.attention.probs"] = out.attentions[i]
    for name, field in [("pooler.output", "pooler_output"), ("mlm.logits", "prediction_logits"),
                        ("nsp.logits", "seq_relationship_logits")]:
        if getattr(out, field, None) is not None:
            refs[name] = getattr(out, field)
    if getattr(out, "logits", None) is not None:
        for name in ("mlm.logits", "nsp.logits", "classifier.logits"):
            if name in by_name and name not in refs:
                refs[name] = out.logits
    for name in by_name:
        if name.endswith(("logits", "pooler.output")) and name not in refs:
            raise AssertionError(f"no HF output to check {name} against")
    if "sentence.pooled" in by_name:
        refs["sentence.pooled"] = sentence_reference(model, inputs, out.hidden_states[-1])
    atol, rtol = TOLERANCES[out.hidden_states[0].dtype]
    for name in [s.name for s in stages if s.name in refs]:
        ref, got = refs[name], by_name[name].tensor
        assert got.dtype == ref.dtype, (name, got.dtype, ref.dtype)
        torch.testing.assert_close(got, ref, atol=atol, rtol=rtol, msg=lambda m: f"{name}: {m}")
        diff = (got - ref).abs().max().item()
        same = "bitwise equal" if torch.equal(got, ref) else f"max |diff| {diff:.3g}"
        print(f"check: {name:28s} == {by_name[name].hf:26s} {same}", file=sys.stderr)
    print(f"check: {len(refs)} stages match HF's forward (assert_close atol={atol} rtol={rtol})", file=sys.stderr)


def load_head_model(cls: type, model_dir: str, dtype: torch.dtype = torch.float32, int8: bool = False) -> nn.Module:
    """A single-head class (BertForMaskedLM, ...) loaded from model_dir, to check a loss with."""
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # the other head's weights are "unused": expected
    try:
        model, info = cls.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32,
                                          output_loading_info=True)
    finally:
        transformers.logging.set_verbosity(verbosity)
    if info.get("missing_keys"):
        sys.exit(f"error: {cls.__name__} from {model_dir}: weights missing: {sorted(info['missing_keys'])}")
    model.eval()
    if int8:
        hold_weights_int8(model)  # as load_model does for --weights int8
    if dtype != torch.float32:
        model.to(dtype)  # as load_model does for --dtype
    return model


@torch.no_grad()
def check_losses(model: nn.Module, model_dir: str, inputs: dict[str, torch.Tensor], stages: list[Stage],
                 labels: Labels, iv: Interventions | None = None) -> None:
    """The loss stages against the losses transformers itself returns (of the changed model, with
    the interventions hooked into each head model)."""
    iv = iv or Interventions()
    by_name = {s.name: s.tensor for s in stages}
    dtype = next(model.parameters()).dtype
    atol, rtol = TOLERANCES[dtype]
    checks = []  # (stage, reference, what the reference is)
    mlm, nsl = labels.labels, labels.next_sentence_label
    if mlm is not None:
        head = model if type(model) is transformers.BertForMaskedLM else \
            load_head_model(transformers.BertForMaskedLM, model_dir, dtype, model.int8_weights)
        with iv.hooked(head.bert):
            checks.append(("mlm.loss", head(**inputs, labels=mlm, return_dict=True).loss,
                           "BertForMaskedLM(labels=).loss"))
    if nsl is not None:
        head = model if type(model) is transformers.BertForNextSentencePrediction else \
            load_head_model(transformers.BertForNextSentencePrediction, model_dir, dtype, model.int8_weights)
        with iv.hooked(head.bert):
            checks.append(("nsp.loss", head(**inputs, labels=nsl, return_dict=True).loss,
                           "BertForNextSentencePrediction(labels=).loss"))
    classes = labels.class_labels
    if classes is not None:
        assert type(model) is transformers.BertForSequenceClassification, type(model)
        with iv.hooked(model.bert):
            checks.append(("classifier.loss", model(**inputs, labels=classes, return_dict=True).loss,
                           "BertForSequenceClassification(labels=).loss"))
    if mlm is not None and nsl is not None:
        assert type(model) is transformers.BertForPreTraining, type(model)
        with iv.hooked(model.bert):
            out = model(**inputs, labels=mlm, next_sentence_label=nsl, return_dict=True)
        checks.append(("loss", out.loss, "BertForPreTraining(labels=, next_sentence_label=).loss"))
    elif checks:
        checks.append(("loss", checks[0][1], checks[0][2]))
    for name, ref, what in checks:
        got = by_name[name]
        assert ref is not None and ref.shape == got.shape == torch.Size([]), (name, ref)
        assert got.dtype == ref.dtype == dtype, (name, got.dtype, ref.dtype)
        torch.testing.assert_close(got, ref, atol=atol, rtol=rtol, msg=lambda m: f"{name}: {m}")
        diff = (got - ref).abs().item()
        same = "bitwise equal" if torch.equal(got, ref) else f"max |diff| {diff:.3g}"
        print(f"check: {name:28s} == {what} {same} ({got.item():.6f})", file=sys.stderr)
    # The per-position losses: their mean over the labelled positions is the loss by definition.
    if mlm is not None:
        n = int((mlm != IGNORE).sum())
        print(f"check: mlm.losses has {n} labelled position(s), 0.0 elsewhere", file=sys.stderr)
        assert bool((by_name["mlm.losses"][mlm == IGNORE] == 0).all()) and n > 0
    if checks:
        print(f"check: {len(checks)} losses match transformers' (assert_close atol={atol} rtol={rtol})",
              file=sys.stderr)


def gradient_stages(model: nn.Module, inputs: dict[str, torch.Tensor], stages: list[Stage], labels: Labels,
                    iv: Interventions, sentence_pooling: bool) -> list[Stage]:
    """The backward pass by autograd: grad.<stage> for every float stage the loss depends on
    (retain_grad on each stage of the recomputation, then loss.backward()), in reverse order of
    the forward, then grad.param.<name> for every parameter of model.named_parameters() that the
    loss reaches, in that order. A parameter it does not reach (the pooler under an MLM-only loss)
    has no .grad and no stage. The tied decoder is one parameter with the word embeddings, so its
    gradient is added into theirs, as PyTorch does.

    The parameters' gradients are checked against a second backward, through transformers' own
    forward call (BertForPreTraining's logits and the same losses)."""
    if labels.labels is None and labels.next_sentence_label is None and labels.class_labels is None:
        sys.exit("error: --backward needs a loss: give --mlm-target, --mask-prob, --nsp-label or --label")
    # The reference: autograd through transformers' own forward call.
    model.zero_grad(set_to_none=True)
    with torch.enable_grad(), iv.hooked(model.bert):
        if labels.class_labels is not None:
            # BertForSequenceClassification computes its own loss from its labels.
            out = model(**inputs, labels=labels.class_labels, return_dict=True)
            loss = out.loss
        else:
            out = model(**inputs, return_dict=True)
            loss = torch.zeros((), dtype=out.prediction_logits.dtype)
        if labels.labels is not None and labels.class_labels is None:
            V = out.prediction_logits.shape[-1]
            loss = loss + nn.functional.cross_entropy(out.prediction_logits.reshape(-1, V), labels.labels.reshape(-1),
                                                      ignore_index=IGNORE)
        if labels.next_sentence_label is not None and labels.class_labels is None:
            loss = loss + nn.functional.cross_entropy(out.seq_relationship_logits, labels.next_sentence_label)
        loss.backward()
    reference = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    # The recomputation again, with every stage kept in the graph.
    with torch.enable_grad():
        # trace() runs under no_grad for the dumps; its undecorated body builds the graph.
        graph = trace.__wrapped__(model, inputs, sentence_pooling=sentence_pooling, labels=labels, iv=iv)
        for st in graph:
            if st.tensor.is_floating_point() and st.tensor.requires_grad:
                st.tensor.retain_grad()
        total = next(st.tensor for st in graph if st.name == "loss")
        traced = next(st.tensor for st in stages if st.name == "loss")
        torch.testing.assert_close(total.detach(), traced, atol=0, rtol=0)
        torch.testing.assert_close(total.detach(), loss.detach(), atol=1e-6, rtol=1e-6)
        total.backward()
    grads = [Stage(f"grad.{st.name}", st.tensor.grad.detach().clone(), f"{st.hf}.grad", f"d loss / d {st.name}")
             for st in reversed(graph) if st.tensor.is_floating_point() and st.tensor.grad is not None]
    atol, rtol = TOLERANCES[loss.dtype]
    for name, param in model.named_parameters():
        if param.grad is None:
            assert name not in reference, f"{name}: a gradient through transformers' forward, none through ours"
            continue
        torch.testing.assert_close(param.grad, reference[name], atol=atol, rtol=rtol, msg=lambda m: f"{name}: {m}")
        grads.append(Stage(f"grad.param.{name}", param.grad.detach().clone(), f"{name}.grad",
                           f"d loss / d {name} (autograd)"))
    print(f"check: {len(reference)} parameter gradients match autograd through transformers' forward "
          f"(assert_close atol={atol} rtol={rtol}); loss {loss.item():.6f}", file=sys.stderr)
    model.zero_grad(set_to_none=True)
    return grads


def sentence_reference(model: nn.Module, inputs: dict[str, torch.Tensor], last_hidden: torch.Tensor) -> torch.Tensor:
    """The sentence embedding from sentence-transformers' own Pooling module when it is installed,
    else from a float64 mean over the real tokens of HF's last hidden state."""
    mask = inputs["attention_mask"]
    try:
        from sentence_transformers.models import Pooling
    except ImportError:
        weights = mask.to(torch.float64).unsqueeze(-1)  # (B, T, 1)
        mean = (last_hidden.to(torch.float64) * weights).sum(1) / weights.sum(1)  # (B, H)
        print("check: sentence.pooled against a float64 mean (sentence-transformers is not installed)",
              file=sys.stderr)
        return mean.to(last_hidden.dtype)  # float32, or float64 (then the mean itself)
    pooling = Pooling(last_hidden.shape[-1], pooling_mode="mean")
    features = {"token_embeddings": last_hidden, "attention_mask": mask}
    print("check: sentence.pooled against sentence_transformers.models.Pooling", file=sys.stderr)
    return pooling(features)["sentence_embedding"]


# --------------------------------------------------------------------------------------
# Interventions: ablated heads, patched stages

# The stages a patch may replace, and the module (relative to the BertModel) whose output is
# that stage, for the hooks of the check against transformers. {i} is the layer.
PATCHABLE = {
    "embeddings.layernorm": "embeddings",
    "layer{i}.attention.context": "encoder.layer.{i}.attention.self",
    "layer{i}.attention.output": "encoder.layer.{i}.attention.output.dense",
    "layer{i}.attention.layernorm": "encoder.layer.{i}.attention.output",
    "layer{i}.ffn.intermediate": "encoder.layer.{i}.intermediate.dense",
    "layer{i}.ffn.activation": "encoder.layer.{i}.intermediate",
    "layer{i}.ffn.output": "encoder.layer.{i}.output.dense",
    "layer{i}.ffn.layernorm": "encoder.layer.{i}.output",
    "pooler.output": "pooler",
}


def patchable_module(stage: str, n_layers: int) -> str | None:
    """The module whose output `stage` is, if a patch may replace it."""
    for pattern, module in PATCHABLE.items():
        if "{i}" not in pattern:
            if stage == pattern:
                return module
            continue
        before, after = pattern.split("{i}")
        index = stage[len(before):len(stage) - len(after)] if stage.startswith(before) and stage.endswith(after) else ""
        if index.isdigit() and str(int(index)) == index and int(index) < n_layers:
            return module.replace("{i}", index)
    return None


def canonical_index(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and str(int(text)) == text else None


def parse_positions(text: str) -> tuple[int, int] | None:
    first, _, last = text.partition("-") if "-" in text else (text, "", text)
    a, b = canonical_index(first), canonical_index(last)
    return (a, b) if a is not None and b is not None and a <= b else None


@dataclass
class Patch:
    stage: str
    positions: tuple[int, int] | None
    value: torch.Tensor
    source: str


@dataclass
class Interventions:
    ablate: list[tuple[int, int | None]] = field(default_factory=list)  # (layer, head or None: all)
    ablate_with: str = "zero"
    patches: list[Patch] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    heads: int = 1

    def apply(self, name: str, tensor: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The stage `name` as the rest of the pass reads it: patched, then ablated."""
        for patch in (p for p in self.patches if p.stage == name):
            assert tensor.shape == patch.value.shape or patch.positions is not None
            tensor = tensor.clone()
            if patch.positions is None:
                tensor[...] = patch.value.to(tensor.dtype)
            else:
                a, b = patch.positions
                tensor[:, a:b + 1] = patch.value[:, a:b + 1].to(tensor.dtype)  # the token axis is 1
        layer = name.removeprefix("layer").split(".")[0]
        if name.endswith(".attention.context") and layer.isdigit():
            for abl_layer, head in self.ablate:
                if abl_layer == int(layer):
                    tensor = self.ablated(tensor, head, mask)
        return tensor

    def ablated(self, context: torch.Tensor, head: int | None, mask: torch.Tensor) -> torch.Tensor:
        """context [B,T,H] with head's columns (all heads' for None) zeroed or set to their mean."""
        context = context.clone()
        hs = context.shape[-1] // self.heads
        for h in range(self.heads) if head is None else [head]:
            cols = slice(h * hs, (h + 1) * hs)
            if self.ablate_with == "zero":
                context[..., cols] = 0.0
            else:
                for b in range(context.shape[0]):
                    real = mask[b].to(torch.bool)
                    context[b, :, cols] = context[b, real, cols].mean(dim=0)
        return context

    @contextmanager
    def hooked(self, bert: nn.Module):
        """The same changes as forward hooks on transformers' modules, while the block runs."""
        handles = []
        mask_holder: dict[str, torch.Tensor] = {}

        def remember_mask(module, args, kwargs):
            mask_holder["mask"] = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)

        def hook_for(stage: str):
            def hook(module, args, output):
                first = output[0] if isinstance(output, tuple) else output
                changed = self.apply(stage, first, mask_holder["mask"])
                return (changed, *output[1:]) if isinstance(output, tuple) else changed
            return hook

        handles.append(bert.register_forward_pre_hook(remember_mask, with_kwargs=True))
        stages = {p.stage for p in self.patches} | {f"layer{layer}.attention.context" for layer, _ in self.ablate}
        for stage in stages:
            module = bert.get_submodule(patchable_module(stage, bert.config.num_hidden_layers))
            handles.append(module.register_forward_hook(hook_for(stage)))
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()


def model_tensors(model: nn.Module) -> dict:
    """The digest of every parameter (scripts/fingerprint.py), by the name bert-trace gives it:
    transformers' name, with `bert.` before an encoder's own when the model is a bare BertModel."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from fingerprint import tensor_digest

    bare = not hasattr(model, "bert")
    digests = {}
    for name, param in model.named_parameters():
        name = f"bert.{name}" if bare else name
        digests[name] = tensor_digest(name, param.detach().to(torch.float32).cpu().numpy())
    return dict(sorted(digests.items()))


def model_fingerprint(model: nn.Module) -> str:
    """The first 16 hex digits of the sha256 of the position-embedding table as float32."""
    bert = model.bert if hasattr(model, "bert") else model
    table = bert.embeddings.position_embeddings.weight.detach().to(torch.float32).cpu().numpy()
    return hashlib.sha256(np.ascontiguousarray(table, dtype="<f4").tobytes()).hexdigest()[:16]


def make_interventions(args, model: nn.Module, B: int, T: int) -> Interventions:
    cfg = model.config
    n_layers, n_heads, H = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.hidden_size
    iv = Interventions(ablate_with=args.ablate_with, heads=n_heads)
    for spec in args.patch or []:
        dump, sep, target = spec.rpartition(":")
        if not sep or not dump:
            sys.exit(f"error: --patch {spec}: expected DUMP:STAGE or DUMP:STAGE@POSITIONS")
        stage, _, positions_text = target.partition("@")
        positions = parse_positions(positions_text) if positions_text else None
        if positions_text and positions is None:
            sys.exit(f"error: --patch {spec}: positions `{positions_text}` are not a position (3) or a range (1-4)")
        if patchable_module(stage, n_layers) is None:
            sys.exit(f"error: --patch {spec}: this script patches only "
                     f"{', '.join(PATCHABLE)} (layers 0 to {n_layers - 1})")
        manifest = read_our_manifest(dump)
        if manifest is None:
            sys.exit(f"error: --patch {spec}: no bert-trace-dump manifest.json in {dump}")
        theirs = manifest.get("model_fingerprint")
        if theirs is not None and theirs != model_fingerprint(model):
            sys.exit(f"error: --patch {spec}: {dump} was made with another model (fingerprint {theirs}), "
                     f"this one is {model_fingerprint(model)}")
        entry = next((st for st in manifest["stages"] if st["name"] == stage), None)
        if entry is None:
            sys.exit(f"error: --patch {spec}: {dump} has no stage {stage}")
        value = torch.from_numpy(np.load(os.path.join(dump, entry["file"]), allow_pickle=False).copy())
        want = [B, H] if stage == "pooler.output" else [B, T, cfg.intermediate_size if ".ffn.intermediate" in stage
                                                         or ".ffn.activation" in stage else H]
        found = list(value.shape)
        if positions is None and found != want:
            sys.exit(f"error: --patch {spec}: {stage} is {found} in {dump}, {want} in this run")
        if positions is not None:
            if len(found) != 3 or found[0] != want[0] or found[2] != want[2]:
                sys.exit(f"error: --patch {spec}: {stage} is {found} in {dump}, {want} in this run")
            if positions[1] >= min(found[1], T):
                sys.exit(f"error: --patch {spec}: position {positions[1]} is beyond {stage}'s tokens")
        iv.patches.append(Patch(stage, positions, value, dump))
        record = {"patch": stage}
        if positions_text:
            record["positions"] = f"{positions[0]}" if positions[0] == positions[1] else f"{positions[0]}-{positions[1]}"
        record["from"] = dump
        iv.records.append(record)
    for spec in args.ablate or []:
        layer_text, _, head_text = spec.removeprefix("layer").partition(".")
        layer = canonical_index(layer_text) if spec.startswith("layer") else None
        head = None if head_text == "heads" else canonical_index(head_text.removeprefix("head"))
        if layer is None or layer >= n_layers or (head_text != "heads" and (not head_text.startswith("head")
                                                                            or head is None or head >= n_heads)):
            sys.exit(f"error: --ablate {spec}: expected layerL.headH or layerL.heads with L < {n_layers}, H < {n_heads}")
        iv.ablate.append((layer, head))
        iv.records.append({"ablate": spec, "with": args.ablate_with})
    return iv


# --------------------------------------------------------------------------------------
# Writing


def read_our_manifest(out_dir: str) -> dict | None:
    path = os.path.join(out_dir, "manifest.json")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("format") in READABLE_FORMATS else None


def to_numpy(t: torch.Tensor) -> np.ndarray:
    # A bfloat16 or float16 stage is written as float32, every value exactly the format's (NumPy
    # has no bfloat16, and bert-trace reads float32 and float64).
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.to(torch.float32)
    arr = t.detach().cpu().contiguous().numpy()
    dtype = {np.dtype(np.float32): np.dtype("<f4"), np.dtype(np.float64): np.dtype("<f8"),
             np.dtype(np.int64): np.dtype("<i8")}[arr.dtype]
    # ascontiguousarray turns a 0-d array (mlm.loss, nsp.loss, loss) into shape (1,): put the shape back.
    out = np.ascontiguousarray(arr.astype(dtype, copy=False)).reshape(tuple(t.shape))
    assert out.shape == tuple(t.shape) and out.flags["C_CONTIGUOUS"], (out.shape, t.shape)
    return out


def to_numpy_dtype(dtype: str) -> str:
    """The dtype of a float stage's file: float32 for a bfloat16 or float16 pass (to_numpy)."""
    return "float32" if dtype in ("bfloat16", "float16") else dtype


def manifest_json(manifest: dict) -> str:
    """Pretty JSON with one line per stage, so the manifest reads as a table."""
    head = {k: v for k, v in manifest.items() if k != "stages"}
    # The token strings go one sequence per line: placeholders, replaced after dumping.
    rows = head.get("inputs", {}).get("tokens")
    if rows is not None:
        head["inputs"] = dict(head["inputs"], tokens=[f"\0tokens{i}\0" for i in range(len(rows))])
    text = json.dumps(head, indent=2, ensure_ascii=False)
    for i, row in enumerate(rows or []):
        text = text.replace(json.dumps(f"\0tokens{i}\0"), json.dumps(row, ensure_ascii=False), 1)
    rows = ",\n".join("    " + json.dumps(st, ensure_ascii=False) for st in manifest["stages"])
    return text[:-2] + ',\n  "stages": [\n' + rows + "\n  ]\n}\n"


def previous_dump(out_dir: str) -> dict | None:
    """The manifest of an earlier dump in OUT, None if OUT is new or empty; exit if it is not ours."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        sys.exit(f"error: {out_dir} exists and is not a directory")
    if not os.path.isdir(out_dir) or not os.listdir(out_dir):
        return None
    old = read_our_manifest(out_dir)
    if old is None:
        sys.exit(f"error: {out_dir} is not empty and has no {FORMAT} manifest.json: refusing to write there")
    return old


def write_dump(out_dir: str, manifest: dict, stages: list[Stage]) -> None:
    out_dir = os.path.abspath(out_dir)
    old = previous_dump(out_dir)
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".dump-", dir=parent)
    try:
        for s in stages:
            np.save(os.path.join(tmp, f"{s.name}.npy"), to_numpy(s.tensor), allow_pickle=False)
        with open(os.path.join(tmp, "manifest.json"), "w", encoding="utf-8", newline="\n") as f:
            f.write(manifest_json(manifest))
        os.makedirs(out_dir, exist_ok=True)
        if old is not None:
            # Invalidate the old dump first, then drop its files, then move the new ones in.
            os.remove(os.path.join(out_dir, "manifest.json"))
            for st in old.get("stages", []):
                stale = os.path.join(out_dir, os.path.basename(st.get("file", "")))
                if os.path.isfile(stale):
                    os.remove(stale)
        for s in stages:
            os.replace(os.path.join(tmp, f"{s.name}.npy"), os.path.join(out_dir, f"{s.name}.npy"))
        os.replace(os.path.join(tmp, "manifest.json"), os.path.join(out_dir, "manifest.json"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(
        description="Dump every stage of a BERT forward pass (PyTorch reference for bert-trace).",
        epilog="See the module docstring for details.",
    )
    ap.add_argument("--model", required=True, help="HF checkpoint directory")
    ap.add_argument("--out", required=True, help="output directory (new, empty, or an earlier dump)")
    ap.add_argument("--model-name", help="path-independent model name for the manifest "
                    "(default: the directory's base name)")
    ap.add_argument("--pair", action="append", metavar="TEXT_B",
                    help="sentence B, once per TEXT in the same order")
    ap.add_argument("--only-stages", action="append", metavar="GLOB[,GLOB...]",
                    help="keep only stages matching one of these globs (repeatable or comma-separated; "
                    "input.* are always kept)")
    ap.add_argument("--mask-prob", type=float, metavar="P",
                    help="BERT's random masking: choose each eligible token with probability P (0 < P <= 1); "
                    "needs --seed")
    ap.add_argument("--seed", metavar="N", help="seed of the SplitMix64 generator behind --mask-prob (0..2^64-1)")
    ap.add_argument("--mlm-target", action="append", metavar="WORD",
                    help="the word to predict at a [MASK] typed in the texts, one per [MASK] in order")
    ap.add_argument("--nsp-label", action="append", type=int, choices=[0, 1], metavar="0|1",
                    help="NSP label (0 = B follows A, 1 = B is random): once, or once per TEXT; needs --pair")
    ap.add_argument("--label", action="append", metavar="NAME",
                    help="a classifier's class (its name in id2label, or its index): once, or once per TEXT")
    ap.add_argument("--labels-from", metavar="DUMP",
                    help="take input.ids and the labels from this dump instead of masking here")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                    help="float32 (the default: the reference dumps) or float64 (a truth dump: the model is "
                    "converted with model.double() after loading, and every float stage is float64)")
    ap.add_argument("--weights", choices=["int8"],
                    help="hold every nn.Linear's weight in int8, per output channel, as bert-trace's --weights "
                    "int8 does (see quantize_int8); the activations stay in --dtype")
    ap.add_argument("--ablate", action="append", metavar="layerL.headH",
                    help="zero (or --ablate-with mean) a head's slice of layerL.attention.context; layerL.heads for all")
    ap.add_argument("--ablate-with", choices=["zero", "mean"], default="zero",
                    help="what an ablated head's slice becomes (default zero)")
    ap.add_argument("--patch", action="append", metavar="DUMP:STAGE[@POSITIONS]",
                    help="replace a stage (or token positions 3 or 1-4 of it) by DUMP's")
    ap.add_argument("--lens", action="store_true", help="add the logit lens: lens.embeddings.logits, lens.layer{i}.logits")
    ap.add_argument("--backward", action="store_true",
                    help="add grad.<stage> and grad.param.<name> (autograd's .grad) for what the loss reaches; needs labels")
    ap.add_argument("texts", nargs="+", metavar="TEXT")
    args = ap.parse_args()

    if args.pair is not None and len(args.pair) != len(args.texts):
        ap.error(f"got {len(args.pair)} --pair for {len(args.texts)} TEXT: give one per TEXT")
    if (args.mask_prob is None) != (args.seed is None):
        ap.error("--mask-prob and --seed go together: give both or neither")
    if args.mask_prob is not None and not 0.0 < args.mask_prob <= 1.0:
        ap.error(f"--mask-prob {args.mask_prob}: must be a probability in (0, 1]")
    if args.seed is not None:
        if not (args.seed.isascii() and args.seed.isdigit()) or int(args.seed) > MASK64:
            ap.error(f"--seed {args.seed}: must be a decimal integer in 0..{MASK64}")
        args.seed = int(args.seed)
    if args.nsp_label is not None:
        if args.pair is None:
            ap.error("--nsp-label needs sentence pairs (--pair)")
        if len(args.nsp_label) not in (1, len(args.texts)):
            ap.error(f"got {len(args.nsp_label)} --nsp-label for {len(args.texts)} TEXT: give one, or one per TEXT")
    if args.label is not None and len(args.label) not in (1, len(args.texts)):
        ap.error(f"got {len(args.label)} --label for {len(args.texts)} TEXT: give one, or one per TEXT")
    if args.labels_from is not None:
        others = [flag for flag, value in [("--mask-prob", args.mask_prob), ("--seed", args.seed),
                                           ("--mlm-target", args.mlm_target), ("--nsp-label", args.nsp_label),
                                           ("--label", args.label)]
                  if value is not None]
        if others:
            ap.error(f"--labels-from takes the labels from the dump: it excludes {', '.join(others)}")
    previous_dump(args.out)  # refuse early, before the slow part
    torch.manual_seed(0)

    dtype = DTYPES[args.dtype]
    model = load_model(args.model, dtype, int8=args.weights == "int8")
    model.int8_weights = args.weights == "int8"
    tok = load_tokenizer(args.model)
    inputs = tokenize(tok, args.model, args.texts, args.pair)
    B, T = inputs["input_ids"].shape
    if T > model.config.max_position_embeddings:
        sys.exit(f"error: {T} tokens but max_position_embeddings is {model.config.max_position_embeddings}")
    # The heads first (before any masking is drawn), then again for labels read from a dump.
    require_heads(model, args.model, bool(args.mlm_target) or args.mask_prob is not None, bool(args.nsp_label),
                  bool(args.label))
    labels = make_labels(tok, inputs, args, model.config)
    require_heads(model, args.model, labels.labels is not None, labels.next_sentence_label is not None,
                  labels.class_labels is not None)
    if labels.pair_required() and args.pair is None:
        sys.exit(f"error: --labels-from {args.labels_from} has NSP labels, which need sentence pairs (--pair)")
    if labels.ids is not None:
        inputs = dict(inputs, input_ids=labels.ids)  # what the model sees
        if labels.original_ids is not None:
            for row in labels.ids.tolist():
                print("masked: " + " ".join(tok.convert_ids_to_tokens(row)), file=sys.stderr)

    pooling_config = sentence_pooling_config(args.model)
    if pooling_config:
        print(f"sentence pooling: mean, from {pooling_config}", file=sys.stderr)
    if args.lens and getattr(getattr(model, "cls", None), "predictions", None) is None:
        sys.exit(f"error: --lens: {args.model} has no MLM head (cls.predictions.*)")
    iv = make_interventions(args, model, B, T)
    stages = trace(model, inputs, sentence_pooling=pooling_config is not None, labels=labels, iv=iv, lens=args.lens)
    for s in stages:
        want = expected_shape(s.name, B, T, model.config)
        assert list(s.tensor.shape) == want, f"{s.name}: shape {list(s.tensor.shape)}, contract says {want}"
        assert s.tensor.dtype == (torch.int64 if s.name.startswith("input.") else dtype), s.name
    check_against_hf(model, inputs, stages, iv)
    check_losses(model, args.model, inputs, stages, labels, iv)
    if args.backward:
        stages += gradient_stages(model, inputs, stages, labels, iv, pooling_config is not None)
        unreached = [name for name, _ in model.named_parameters() if f"grad.param.{name}" not in
                     {s.name for s in stages}]

    if args.only_stages:
        args.only_stages = [p for arg in args.only_stages for p in arg.split(",") if p]
        for pat in args.only_stages:
            if not any(fnmatch.fnmatchcase(s.name, pat) for s in stages):
                sys.exit(f"error: --only-stages {pat!r} matches no stage")
        stages = [s for s in stages if s.name.startswith("input.")
                  or any(fnmatch.fnmatchcase(s.name, pat) for pat in args.only_stages)]

    manifest = {
        "format": FORMAT,
        "producer": {
            "name": "dump_reference.py",
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            # Only for a float64 truth dump, so that a float32 dump is byte for byte what it was.
            **({"dtype": args.dtype} if dtype != torch.float32 else {}),
            **({"weights": args.weights} if args.weights else {}),
        },
        "model": args.model_name or os.path.basename(os.path.normpath(args.model)),
        "inputs": {
            "texts": list(args.texts),
            "pair": list(args.pair) if args.pair else None,
            # The token strings of input.ids as the model sees them (after masking, [PAD] included).
            "tokens": [tok.convert_ids_to_tokens(row) for row in inputs["input_ids"].tolist()],
            # Only the keys that were set, in this order: mask_prob, seed, mlm_targets, nsp_label, label,
            # labels_from.
            **{k: labels.record[k] for k in ("mask_prob", "seed", "mlm_targets", "nsp_label", "label", "labels_from")
               if k in labels.record},
        },
        # A subset is recorded, so that a reader (and the Rust golden test) can tell a
        # deliberately partial dump from a truncated one.
        **({"only_stages": args.only_stages} if args.only_stages else {}),
        "model_fingerprint": model_fingerprint(model),
        "model_tensors": model_tensors(model),
        **({"interventions": iv.records} if iv.records else {}),
        **({"lens": True} if args.lens else {}),
        # The parameters a backward pass did not reach: no grad.param.* file, as .grad is None.
        **({"no_gradient": unreached} if args.backward and unreached else {}),
        "stages": [
            {
                "name": s.name,
                "shape": list(s.tensor.shape),
                "dtype": "int64" if s.tensor.dtype == torch.int64 else to_numpy_dtype(args.dtype),
                "file": f"{s.name}.npy",
                "hf": s.hf,
                "formula": s.formula,
            }
            for s in stages
        ],
    }
    write_dump(args.out, manifest, stages)
    size = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(f"wrote {len(stages)} stages, {size} bytes, to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
