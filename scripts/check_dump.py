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
tokens) when DIR is a sentence-transformers model with mean pooling.

This is a second, torch-free reading of the stage contract, so a mistake in
dump_reference.py's reading of it (not only in its arithmetic) shows up here.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np
from safetensors.numpy import load_file

ATOL = 1e-4
RTOL = 1e-4
F32_MIN = float(np.finfo(np.float32).min)
_erf = np.vectorize(math.erf)


def gelu(x):  # exact (erf) GELU, HF's "gelu"
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)  # biased, as torch
    return (x - mu) / np.sqrt(var + eps) * w + b


def contract_order(cfg: dict, heads: set[str]) -> list[str]:
    names = ["input.ids", "input.token_type_ids", "input.attention_mask",
             "embeddings.word", "embeddings.position", "embeddings.token_type",
             "embeddings.sum", "embeddings.layernorm"]
    for i in range(cfg["num_hidden_layers"]):
        names += [f"layer{i}.attention.{s}" for s in
                  ("query", "key", "value", "scores", "probs", "context", "output", "residual", "layernorm")]
        names += [f"layer{i}.ffn.{s}" for s in ("intermediate", "activation", "output", "residual", "layernorm")]
    if "pooler" in heads:
        names += ["pooler.dense", "pooler.output"]
    if "mlm" in heads:
        names += ["mlm.transform", "mlm.activation", "mlm.layernorm", "mlm.logits"]
    if "nsp" in heads:
        names += ["nsp.logits"]
    if "classifier" in heads:
        names += ["classifier.logits"]
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


def forward(w: dict, cfg: dict, ids, types, mask) -> dict[str, np.ndarray]:
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
        act = gelu(inter)
        f_out = lin(act, f"{L}.output.dense")
        x = layer_norm(f_out + a_ln, g(f"{L}.output.LayerNorm.weight"), g(f"{L}.output.LayerNorm.bias"), eps)
        p = f"layer{i}"
        out.update({f"{p}.attention.query": q, f"{p}.attention.key": k, f"{p}.attention.value": v,
                    f"{p}.attention.scores": scores, f"{p}.attention.probs": probs,
                    f"{p}.attention.context": ctx, f"{p}.attention.output": a_out,
                    f"{p}.attention.residual": a_out + x_in, f"{p}.attention.layernorm": a_ln, f"{p}.ffn.intermediate": inter,
                    f"{p}.ffn.activation": act, f"{p}.ffn.output": f_out,
                    f"{p}.ffn.residual": f_out + a_ln, f"{p}.ffn.layernorm": x})
    pooled = None
    if f"{root}pooler.dense.weight" in w:
        pd = lin(x[:, 0], f"{root}pooler.dense")
        pooled = np.tanh(pd)
        out.update({"pooler.dense": pd, "pooler.output": pooled})
    if "cls.predictions.transform.dense.weight" in w:
        t = lin(x, "cls.predictions.transform.dense")
        a = gelu(t)
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


def check(model_dir: str, dump: str) -> bool:
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    assert cfg.get("hidden_act", "gelu") == "gelu", "only the erf GELU is implemented here"
    w = load_file(os.path.join(model_dir, "model.safetensors"))
    with open(os.path.join(dump, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["format"] == "bert-trace-dump/1", manifest["format"]
    required = {"format", "producer", "model", "inputs", "stages"}
    optional = {"only_stages", "stopped_at"}
    assert required <= set(manifest) <= required | optional, sorted(manifest)
    texts, pair = manifest["inputs"]["texts"], manifest["inputs"]["pair"]
    assert pair is None or len(pair) == len(texts)

    arrays = {}
    for st in manifest["stages"]:
        assert set(st) == {"name", "shape", "dtype", "file", "hf", "formula"}, st
        assert st["file"] == st["name"] + ".npy", st
        arr = np.load(os.path.join(dump, st["file"]), allow_pickle=False)
        want_dtype = {"float32": "<f4", "int64": "<i8"}[st["dtype"]]
        assert arr.dtype.str == want_dtype, (st["name"], arr.dtype.str)
        assert arr.flags["C_CONTIGUOUS"] and list(arr.shape) == st["shape"], (st["name"], arr.shape)
        arrays[st["name"]] = arr

    heads = {h for h, key in [("pooler", "pooler.dense.weight"), ("mlm", "cls.predictions.bias"),
                              ("nsp", "cls.seq_relationship.weight"), ("classifier", "classifier.weight")]
             if key in w or "bert." + key in w}
    if mean_pooling_wanted(model_dir):
        heads.add("sentence")
    order = [n for n in contract_order(cfg, heads) if n in arrays]
    assert list(arrays) == order, "stages are not in contract order (or unknown stage names)"
    assert {"input.ids", "input.token_type_ids", "input.attention_mask"} <= set(arrays)

    ref = forward(w, cfg, arrays["input.ids"], arrays["input.token_type_ids"], arrays["input.attention_mask"])
    ok = True
    print(f"{dump}: {manifest['model']}, B,T = {list(arrays['input.ids'].shape)}")
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
    ap.add_argument("dumps", nargs="+")
    args = ap.parse_args()
    results = [check(args.model, d) for d in args.dumps]
    print("all OK" if all(results) else "NOT OK")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
