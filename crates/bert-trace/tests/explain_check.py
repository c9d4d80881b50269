"""Checks `bert-trace explain --json` outputs from the JSON alone, in numpy (run by explain.rs).

usage: explain_check.py DUMP MODEL_DIR JSON...

For each explanation: its `value` is the dump's value at its index; every input is the dump's (or
the checkpoint's, for `param.*`) value at its index; and the element recomputed in f64 from the
listed inputs and the formula of its kind equals `value` within the stage's rounding. So the
inputs are what the formula reads, and nothing it reads is missing from them.
"""

import json
import math
import re
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

dump, model = Path(sys.argv[1]), Path(sys.argv[2])
weights = load_file(model / "model.safetensors")
config = json.loads((model / "config.json").read_text())
manifest = json.loads((dump / "manifest.json").read_text())
files = {s["name"]: s["file"] for s in manifest["stages"]}
arrays = {}


def stage_value(name, index):
    if name.startswith("param."):
        hf = name[len("param."):]
        # A checkpoint may store the encoder's weights without the `bert.` prefix (MiniLM does).
        for key in (hf, hf[len("bert."):] if hf.startswith("bert.") else hf, "cls.predictions.decoder.bias"):
            if key in weights and (key != "cls.predictions.decoder.bias" or hf == "cls.predictions.bias"):
                return weights[key][tuple(index)]
        raise KeyError(hf)
    if name not in arrays:
        arrays[name] = np.load(dump / files[name])
    return arrays[name][tuple(index)]


def stage_kind(name):
    """`layer3.attention.probs` -> `attention.probs`: the kind, whatever the layer."""
    return ".".join(p for p in name.split(".") if not re.fullmatch(r"layer\d+", p))


def gelu(x):
    act = config["hidden_act"]
    if act == "gelu":
        return 0.5 * x * (1 + math.erf(x / math.sqrt(2)))
    if act == "relu":
        return max(x, 0.0)
    return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def gelu_derivative(x):
    act = config["hidden_act"]
    if act == "gelu":
        return 0.5 * (1 + math.erf(x / math.sqrt(2))) + x * math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    if act == "relu":
        return 1.0 if x > 0 else 0.0
    c = math.sqrt(2 / math.pi)
    inner = c * (x + 0.044715 * x**3)
    t = math.tanh(inner)
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)


def pairs_sum(values):
    """Σ a·b over consecutive (a, b) pairs."""
    return sum(a * b for a, b in zip(values[0::2], values[1::2]))


def grouped_dot(inputs):
    """Σ over each run of a stage followed by a run of another of the same length: their dot."""
    runs = []
    for i in inputs:
        if runs and runs[-1][0] == i["stage"]:
            runs[-1][1].append(i["value"])
        else:
            runs.append((i["stage"], [i["value"]]))
    assert len(runs) % 2 == 0, [r[0] for r in runs]
    return sum(float(np.dot(a[1], b[1])) for a, b in zip(runs[0::2], runs[1::2]))


def recompute_grad(e, kind):
    """A gradient's element from its inputs alone, by the backward rule of its kind."""
    x = [i["value"] for i in e["inputs"]]
    index = e["index"]
    hs = config["hidden_size"] // config["num_attention_heads"]
    if kind == "loss":
        assert not x
        return 1.0
    if kind in ("mlm.loss", "nsp.loss", "classifier.loss", "ffn.output", "attention.output", "embeddings.word",
                "embeddings.position", "embeddings.token_type"):
        assert len(x) == 1
        return x[0]
    if kind in ("mlm.losses", "nsp.losses", "classifier.losses"):
        labels = {tuple(i["index"]): i["value"] for i in e["inputs"][:-1]}
        count = sum(1 for v in labels.values() if v != -100)
        return 0.0 if labels[tuple(index)] == -100 else x[-1] / count
    if kind in ("mlm.logits", "nsp.logits", "classifier.logits"):
        logits = [i["value"] for i in e["inputs"] if i["stage"].endswith("logits")]
        labels = {tuple(i["index"]): i["value"] for i in e["inputs"] if not i["stage"].endswith("logits")}
        label = labels[tuple(index[:-1])]
        if label == -100:
            return 0.0
        count = sum(1 for v in labels.values() if v != -100)
        row = np.array(logits)
        p = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
        return (p[index[-1]] - (1.0 if index[-1] == label else 0.0)) / count
    if kind in ("mlm.layernorm", "pooler.output", "ffn.activation", "attention.context", "attention.probs",
                "attention.value"):
        return grouped_dot(e["inputs"])
    if kind in ("mlm.activation", "ffn.residual", "attention.residual", "embeddings.sum"):
        n = len(x) // 3
        row, d, gamma = np.array(x[:n]), np.array(x[n:2 * n]), np.array(x[2 * n:])
        i = index[-1]
        mean = row.mean()
        rstd = 1 / math.sqrt(((row - mean) ** 2).mean() + config["layer_norm_eps"])
        x_hat = (row - mean) * rstd
        g = d * gamma
        return rstd * (g[i] - g.mean() - x_hat[i] * (g * x_hat).mean())
    if kind in ("mlm.transform", "ffn.intermediate"):
        assert len(x) == 2
        return x[1] * gelu_derivative(x[0])
    if kind == "pooler.dense":
        assert len(x) == 2
        return x[1] * (1 - x[0] * x[0])
    if kind in ("ffn.layernorm", "embeddings.layernorm"):
        if not e["inputs"]:
            # The last hidden state at a token no head the loss uses reads.
            return 0.0
        if e["inputs"][0]["stage"].endswith("attention.residual"):
            # A layer's input: the next layer's residual, then (d, W) pairs of its projections.
            return x[0] + pairs_sum(x[1:])
        return grouped_dot(e["inputs"])
    if kind == "attention.layernorm":
        return x[0] + grouped_dot(e["inputs"][1:])
    if kind == "attention.scores":
        n = len(x) // 2
        p, d = np.array(x[:n]), np.array(x[n:])
        j = index[-1]
        return p[j] * (d[j] - (p * d).sum())
    if kind in ("attention.query", "attention.key"):
        return hs ** -0.5 * grouped_dot(e["inputs"])
    return None


def recompute(e):
    """The element from its inputs and steps alone, by its stage's kind."""
    name = e["stage"]
    kind = stage_kind(name)
    if name.startswith("grad."):
        return recompute_grad(e, kind[len("grad."):])
    x = [i["value"] for i in e["inputs"]]
    steps = {s["name"]: s["value"] for s in e["steps"]}
    if kind in ("embeddings.word", "embeddings.token_type"):
        assert len(x) == 2
        return x[1]
    if kind == "embeddings.position":
        assert len(x) == 1
        return x[0]
    if kind in ("embeddings.sum", "attention.residual", "ffn.residual"):
        assert len(x) in (2, 3)
        return (x[0] + x[1]) + (x[2] if len(x) == 3 else 0.0)
    if kind.endswith("layernorm") and not kind.startswith("lens"):
        row, gamma, beta = np.array(x[:-2]), x[-2], x[-1]
        h = e["index"][-1]
        mean = row.mean()
        var = ((row - mean) ** 2).mean()
        return (row[h] - mean) / math.sqrt(var + config["layer_norm_eps"]) * gamma + beta
    if kind in (
        "attention.query", "attention.key", "attention.value", "attention.output", "ffn.intermediate",
        "ffn.output", "mlm.transform", "mlm.logits", "pooler.dense", "nsp.logits", "classifier.logits",
    ):
        n = (len(x) - 1) // 2
        assert len(x) == 2 * n + 1
        return x[-1] + float(np.dot(x[:n], x[n:2 * n]))
    if kind in ("ffn.activation", "mlm.activation"):
        assert len(x) == 1
        return gelu(x[0])
    if kind == "pooler.output":
        assert len(x) == 1
        return math.tanh(x[0])
    if kind == "attention.scores":
        n = (len(x) - 1) // 2
        assert len(x) == 2 * n + 1
        return float(np.dot(x[:n], x[n:2 * n])) * n ** -0.5 + steps["mask"]
    if kind == "attention.probs":
        row = np.array(x)
        j = e["index"][-1]
        return math.exp(row[j] - row.max()) / np.exp(row - row.max()).sum()
    if kind == "attention.context":
        n = len(x) // 2
        return float(np.dot(x[:n], x[n:]))
    if kind in ("mlm.losses", "nsp.losses", "classifier.losses"):
        row, label = np.array(x[:-1]), int(x[-1])
        if label == -100:
            return 0.0
        return float(row.max() + math.log(np.exp(row - row.max()).sum()) - row[label])
    if kind in ("mlm.loss", "nsp.loss", "classifier.loss"):
        losses, labels = x[0::2], x[1::2]
        kept = [l for l, y in zip(losses, labels) if y != -100]
        return sum(kept) / len(kept)
    if kind == "loss":
        return sum(x)
    if kind == "sentence.pooled":
        mask, hidden = x[0::2], x[1::2]
        return sum(m * h for m, h in zip(mask, hidden)) / max(sum(mask), 1e-9)
    return None


checked, failures, kinds = 0, [], set()
for path in sys.argv[3:]:
    explanations = json.loads(Path(path).read_text())
    for e in explanations if isinstance(explanations, list) else [explanations]:
        where = f"{e['stage']}{e['index']}"
        dtype = np.float64 if e["dtype"] == "float64" else np.float32
        dumped = stage_value(e["stage"], e["index"])
        if e["value"] is None or dtype(e["value"]) != dumped:
            failures.append(f"{where}: value {e['value']}, the dump holds {dumped}")
        for i in e["inputs"]:
            held = np.asarray(stage_value(i["stage"], i["index"]))
            # The JSON's number read back in the file's own dtype.
            if i["value"] is None or held.dtype.type(i["value"]) != held:
                failures.append(f"{where}: input {i['stage']}{i['index']} is {i['value']}, the file holds {held}")
                break
        for t in e["terms"]:
            a, b = (e["inputs"][k]["value"] for k in t["inputs"])
            if not math.isclose(a * b, t["value"], rel_tol=1e-6, abs_tol=1e-12):
                failures.append(f"{where}: term {t} is not the product of its inputs {a} · {b}")
        mine = recompute(e)
        if mine is None:
            continue
        kinds.add(stage_kind(e["stage"]))
        # The f64 sum of the listed inputs against the value: the stage's own rounding, at most.
        if e["stage"].startswith("grad."):
            # Gradients are small: relative to the value, with a floor far below any of them.
            tol = (1e-9 if dtype == np.float64 else 1e-4) * abs(e["value"]) + 1e-9
        else:
            tol = (1e-9 if dtype == np.float64 else 2e-5) * max(1.0, abs(e["value"]))
        if not abs(mine - e["value"]) <= tol:
            failures.append(f"{where}: recomputed from the JSON alone {mine}, value {e['value']}")
        checked += 1

print(f"{checked} elements recomputed from their JSON, of {len(kinds)} kinds: {sorted(kinds)}")
if failures:
    print("\n".join(failures))
    sys.exit(1)
