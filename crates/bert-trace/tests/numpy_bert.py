"""A port of BERT's encoder to NumPy, float32, written from the formulas: the "user's port" that
`bert-trace padding --batched --alone` checks (run by padding.rs).

usage: numpy_bert.py MODEL_DIR INPUTS_DUMP OUT [--ignore-mask] [--bug NAME]

Reads the ids, token types and attention mask of INPUTS_DUMP (a bert-trace dump), runs the
embeddings and every encoder layer of MODEL_DIR's weights, and writes OUT as a bert-trace dump
(one .npy per stage and a manifest). --ignore-mask is the bug `padding` must catch: the
attention mask is never added to the scores, so a padded batch's real queries see the padding.
--bug NAME puts one of the bugs ports are known for into the port, which `diff` must find at the
stage that holds it (diff.rs's injected bugs):

  eps            LayerNorm's eps 1e-5 (PyTorch's default) for the config's 1e-12
  eps-flax       LayerNorm's eps 1e-6 (flax.linen.LayerNorm's default) for the config's 1e-12
  tanh-gelu      the tanh approximation of GELU for the exact one
  no-token-type  the token type embedding left out of the sum
  scale-hidden   the scores scaled by 1/sqrt(H) instead of 1/sqrt(hs)
  swap-qk        query and key swapped in the scores (key @ query^T)
  no-mask        the attention mask not added (as --ignore-mask)
  softmax-axis   softmax over the queries instead of the keys
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

model_dir, inputs_dump, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
flags = sys.argv[4:]
bug = flags[flags.index("--bug") + 1] if "--bug" in flags else None
assert bug in (None, "eps", "eps-flax", "tanh-gelu", "no-token-type", "scale-hidden", "swap-qk", "no-mask", "softmax-axis"), bug
ignore_mask = "--ignore-mask" in flags or bug == "no-mask"
config = json.loads((model_dir / "config.json").read_text())
stored = load_file(model_dir / "model.safetensors")
manifest = json.loads((inputs_dump / "manifest.json").read_text())
files = {s["name"]: s["file"] for s in manifest["stages"]}


def weight(name):
    for key in ("bert." + name, name):
        if key in stored:
            return stored[key].astype(np.float32)
    raise KeyError(name)


ids = np.load(inputs_dump / files["input.ids"])
types = np.load(inputs_dump / files["input.token_type_ids"])
mask = np.load(inputs_dump / files["input.attention_mask"])
B, T = ids.shape
H, nh = config["hidden_size"], config["num_attention_heads"]
hs = H // nh
eps = np.float32({"eps": 1e-5, "eps-flax": 1e-6}.get(bug, config["layer_norm_eps"]))
erf = np.vectorize(math.erf)
stages = []


def keep(name, value):
    stages.append((name, np.ascontiguousarray(value)))


def layer_norm(x, prefix):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return ((x - mean) / np.sqrt(var + eps) * weight(prefix + ".weight") + weight(prefix + ".bias")).astype(np.float32)


def dense(x, prefix):
    return (x @ weight(prefix + ".weight").T + weight(prefix + ".bias")).astype(np.float32)


def heads(x):
    return x.reshape(B, T, nh, hs).transpose(0, 2, 1, 3)


keep("input.ids", ids)
keep("input.token_type_ids", types)
keep("input.attention_mask", mask)
word = weight("embeddings.word_embeddings.weight")[ids]
position = np.broadcast_to(weight("embeddings.position_embeddings.weight")[:T], (B, T, H))
token_type = weight("embeddings.token_type_embeddings.weight")[types]
summed = (word + (0 if bug == "no-token-type" else token_type)) + position
x = layer_norm(summed, "embeddings.LayerNorm")
for name, value in [("word", word), ("position", position), ("token_type", token_type), ("sum", summed),
                    ("layernorm", x)]:
    keep(f"embeddings.{name}", value)
additive = np.where(mask == 1, np.float32(0), np.finfo(np.float32).min).astype(np.float32)[:, None, None, :]
for i in range(config["num_hidden_layers"]):
    p, at = f"layer{i}", f"encoder.layer.{i}"
    q, k, v = (heads(dense(x, f"{at}.attention.self.{n}")) for n in ("query", "key", "value"))
    scale = np.float32((H if bug == "scale-hidden" else hs) ** -0.5)
    scores = ((k @ q.transpose(0, 1, 3, 2)) if bug == "swap-qk" else (q @ k.transpose(0, 1, 3, 2))) * scale
    if not ignore_mask:
        scores = scores + additive
    axis = -2 if bug == "softmax-axis" else -1
    e = np.exp(scores - scores.max(axis, keepdims=True))
    probs = (e / e.sum(axis, keepdims=True)).astype(np.float32)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(B, T, H)
    output = dense(context, f"{at}.attention.output.dense")
    residual = output + x
    attended = layer_norm(residual, f"{at}.attention.output.LayerNorm")
    intermediate = dense(attended, f"{at}.intermediate.dense")
    if bug == "tanh-gelu":
        inner = math.sqrt(2 / math.pi) * (intermediate + 0.044715 * intermediate ** 3)
        activation = (0.5 * intermediate * (1 + np.tanh(inner))).astype(np.float32)
    else:
        activation = (0.5 * intermediate * (1 + erf(intermediate / math.sqrt(2)))).astype(np.float32)
    ffn_output = dense(activation, f"{at}.output.dense")
    ffn_residual = ffn_output + attended
    x = layer_norm(ffn_residual, f"{at}.output.LayerNorm")
    for name, value in [("attention.query", q), ("attention.key", k), ("attention.value", v),
                        ("attention.scores", scores), ("attention.probs", probs), ("attention.context", context),
                        ("attention.output", output), ("attention.residual", residual),
                        ("attention.layernorm", attended), ("ffn.intermediate", intermediate),
                        ("ffn.activation", activation), ("ffn.output", ffn_output), ("ffn.residual", ffn_residual),
                        ("ffn.layernorm", x)]:
        keep(f"{p}.{name}", value)

out.mkdir(parents=True, exist_ok=True)
entries = []
for name, value in stages:
    np.save(out / f"{name}.npy", value)
    entries.append({"name": name, "shape": list(value.shape), "dtype": str(value.dtype), "file": f"{name}.npy",
                    "hf": "", "formula": ""})
(out / "manifest.json").write_text(json.dumps({
    "format": "bert-trace-dump/3",
    "producer": {"name": "numpy_bert.py"},
    "model": str(model_dir),
    "inputs": manifest["inputs"],
    "stages": entries,
}, indent=1))
