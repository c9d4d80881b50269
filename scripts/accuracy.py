#!/usr/bin/env python3
"""How close is bert-trace's float32 to the exact result, against PyTorch's float32?
(issue 40; a benchmark, not a test: its results and commands are in BENCHMARKS.md.)

    python scripts/accuracy.py --model DIR --work DIR [--bert-trace BIN] [--kernels fast|reference]
        [--sizes 12,128,512] [--texts 3]

For each size (tokens, [CLS] and [SEP] included) and each of `--texts` texts of that length
(words of walkthrough/texts/reviews.tsv, each text starting at another review), it makes three
dumps of the same input: transformers in float64 (the truth: `dump_reference.py --dtype
float64`), transformers in float32 (`dump_reference.py`), and bert-trace's trace. Then, per
float stage the three share, it prints

    ours = max |bert-trace - truth|,  theirs = max |PyTorch - truth|,  ours / theirs,

and counts the stages where ours > theirs + one float32 ulp of the stage's largest |truth|
(the issue's target: none). The dumps are kept in --work; a dump already there is reused.

A stage's error against the truth is its own rounding plus the error it inherits from its inputs,
and the two can cancel: a side can be closer to the truth at one stage by luck. So for every
stage computed from others (the matrix products, the sums, LayerNorms, softmax, GELU, tanh and
mean) it also prints each side's *own* error, max |side - the exact result of the side's own
float32 inputs| (recomputed in float64 with the checkpoint's weights), and counts the stages where
ours is larger than PyTorch's plus one float32 ulp, the matrix products and the rest apart.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def words() -> list[str]:
    out = []
    with open(os.path.join(ROOT, "walkthrough/texts/reviews.tsv"), encoding="utf-8") as f:
        for line in f:
            out.append(line.rstrip("\n").split("\t")[-1])
    return out


def text_of(tokenizer, reviews: list[str], start: int, tokens: int) -> str:
    """Whole reviews from `start` on, then words, until the text is `tokens` tokens long."""
    pieces: list[str] = []
    i = start
    while True:
        for word in reviews[i % len(reviews)].split():
            candidate = " ".join(pieces + [word])
            if len(tokenizer(candidate)["input_ids"]) > tokens:
                return " ".join(pieces)
            pieces.append(word)
        i += 1


def stages(dump: str) -> dict[str, dict]:
    with open(os.path.join(dump, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    return {s["name"]: s for s in manifest["stages"] if s["dtype"].startswith("float")}


def load(dump: str, entry: dict) -> np.ndarray:
    return np.load(os.path.join(dump, entry["file"])).astype(np.float64)


def float64_weights(weights: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """The checkpoint's tensors in float64: the encoder's by their names without the model's
    prefix (`bert.` or none), and the pretraining heads' (`cls.*`) by their full names."""
    prefix = next(k[: -len("embeddings.word_embeddings.weight")] for k in weights
                  if k.endswith("embeddings.word_embeddings.weight"))
    heads = {k: v.astype(np.float64) for k, v in weights.items() if k.startswith("cls.")}
    w = {k[len(prefix):]: v.astype(np.float64) for k, v in weights.items()
         if k.startswith(prefix) and k not in heads}
    return w, heads


def computed_stages(stage_names, w: dict, other: dict, config: dict):
    """Every stage among `stage_names` that is computed from other stages: (name, whether it is a
    matrix product, its inputs' stage names, a function of those inputs as float64 arrays that
    gives the exact result, in the stage's layout). `w` and `other` are `float64_weights`' two
    tables. The texts are unpadded, so no mask enters the scores, the softmax or the mean."""
    import torch

    heads, eps = config["num_attention_heads"], config["layer_norm_eps"]
    # The MLM decoder's bias, under either of the names transformers saves it by.
    mlm_bias = other.get("cls.predictions.bias", other.get("cls.predictions.decoder.bias"))

    def dense(name: str, table: dict):
        return lambda x: x @ table[name + ".weight"].T + table[name + ".bias"]

    def layer_norm(name: str, table: dict):
        def f(x):
            centred = x - x.mean(axis=-1, keepdims=True)
            variance = (centred * centred).mean(axis=-1, keepdims=True)
            return centred / np.sqrt(variance + eps) * table[name + ".weight"] + table[name + ".bias"]
        return f

    def gelu(x):  # the exact (erf) GELU, BERT's "gelu"
        return 0.5 * x * (1.0 + torch.special.erf(torch.from_numpy(x) / np.sqrt(2.0)).numpy())

    def softmax(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    exact_gelu = config.get("hidden_act") == "gelu"

    def split(y):  # [B,T,H] -> [B,nh,T,hs], as the query, key and value stages are kept
        b, t, h = y.shape
        return y.reshape(b, t, heads, h // heads).transpose(0, 2, 1, 3)

    product, other_kind = True, False
    found = [
        ("embeddings.sum", other_kind, ["embeddings.word", "embeddings.position", "embeddings.token_type"],
         lambda a, b, c: a + b + c),
        ("embeddings.layernorm", other_kind, ["embeddings.sum"], layer_norm("embeddings.LayerNorm", w)),
    ]
    layers = sorted({int(n.split(".")[0][5:]) for n in stage_names if n.startswith("layer")})
    for i in layers:
        inp = "embeddings.layernorm" if i == 0 else f"layer{i - 1}.ffn.layernorm"
        at, lay, ffn = f"layer{i}.attention", f"encoder.layer.{i}", f"layer{i}.ffn"
        for part in ("query", "key", "value"):
            f = dense(f"{lay}.attention.self.{part}", w)
            found.append((f"{at}.{part}", product, [inp], lambda x, f=f: split(f(x))))
        # Both sides multiply the sums by the float32 scale (PyTorch by a Python float applied to a
        # float32 tensor), so the exact product is taken with that same constant.
        found.append((f"{at}.scores", product, [f"{at}.query", f"{at}.key"],
                      lambda q, k: (q @ k.transpose(0, 1, 3, 2)) * float(np.float32(q.shape[-1] ** -0.5))))
        found.append((f"{at}.probs", other_kind, [f"{at}.scores"], softmax))
        found.append((f"{at}.context", product, [f"{at}.probs", f"{at}.value"],
                      lambda p, v: (p @ v).transpose(0, 2, 1, 3).reshape(p.shape[0], p.shape[2], -1)))
        found.append((f"{at}.output", product, [f"{at}.context"], dense(f"{lay}.attention.output.dense", w)))
        found.append((f"{at}.residual", other_kind, [f"{at}.output", inp], lambda a, b: a + b))
        found.append((f"{at}.layernorm", other_kind, [f"{at}.residual"],
                      layer_norm(f"{lay}.attention.output.LayerNorm", w)))
        found.append((f"{ffn}.intermediate", product, [f"{at}.layernorm"], dense(f"{lay}.intermediate.dense", w)))
        if exact_gelu:
            found.append((f"{ffn}.activation", other_kind, [f"{ffn}.intermediate"], gelu))
        found.append((f"{ffn}.output", product, [f"{ffn}.activation"], dense(f"{lay}.output.dense", w)))
        found.append((f"{ffn}.residual", other_kind, [f"{ffn}.output", f"{at}.layernorm"], lambda a, b: a + b))
        found.append((f"{ffn}.layernorm", other_kind, [f"{ffn}.residual"], layer_norm(f"{lay}.output.LayerNorm", w)))
    if not layers:
        return []
    last = f"layer{layers[-1]}.ffn.layernorm"
    found.append(("sentence.pooled", other_kind, [last], lambda h: h.mean(axis=1)))
    if "pooler.dense.weight" in w:
        found.append(("pooler.dense", product, [last], lambda h: dense("pooler.dense", w)(h[:, 0])))
        found.append(("pooler.output", other_kind, ["pooler.dense"], np.tanh))
    if "cls.seq_relationship.weight" in other:
        found.append(("nsp.logits", product, ["pooler.output"], dense("cls.seq_relationship", other)))
    if "cls.predictions.transform.dense.weight" in other:
        found.append(("mlm.transform", product, [last], dense("cls.predictions.transform.dense", other)))
        if exact_gelu:
            found.append(("mlm.activation", other_kind, ["mlm.transform"], gelu))
        found.append(("mlm.layernorm", other_kind, ["mlm.activation"],
                      layer_norm("cls.predictions.transform.LayerNorm", other)))
    if mlm_bias is not None:
        found.append(("mlm.logits", product, ["mlm.layernorm"],
                      lambda h: h @ w["embeddings.word_embeddings.weight"].T + mlm_bias))
    return [entry for entry in found if entry[0] in stage_names and all(i in stage_names for i in entry[2])]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--bert-trace", default=os.path.join(ROOT, "target/release/bert-trace"))
    ap.add_argument("--kernels", default="fast")
    ap.add_argument("--sizes", default="12,128,512")
    ap.add_argument("--texts", type=int, default=3)
    ap.add_argument("--only-ours", action="store_true", help="remake only bert-trace's dumps")
    args = ap.parse_args()

    import transformers

    from safetensors.numpy import load_file

    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    encoder_weights, head_weights = float64_weights(load_file(os.path.join(args.model, "model.safetensors")))
    with open(os.path.join(args.model, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    # Own errors, for the matrix products and for the other computed stages apart.
    own = {True: {"total": 0, "behind": 0, "ratios": []}, False: {"total": 0, "behind": 0, "ratios": []}}
    # Stages behind, by kind (the name without its layer): which computations they are.
    kinds = {"stages": {}, "own": {}}

    def tally(which: str, name: str):
        kind = name.split(".", 1)[1] if name.startswith("layer") else name
        kinds[which][kind] = kinds[which].get(kind, 0) + 1
    reviews = words()
    python = sys.executable
    total = behind = 0
    ratios = []
    worst = (0.0, "")
    for size in [int(s) for s in args.sizes.split(",")]:
        for t in range(args.texts):
            text = text_of(tokenizer, reviews, 37 * t + size, size)
            case = os.path.join(args.work, f"{size}-{t}")
            os.makedirs(case, exist_ok=True)
            dumps = {name: os.path.join(case, name) for name in ("truth", "ref", f"trace-{args.kernels}")}
            for name, dtype in (("truth", "float64"), ("ref", "float32")):
                if not os.path.exists(os.path.join(dumps[name], "manifest.json")):
                    subprocess.run([python, os.path.join(ROOT, "scripts/dump_reference.py"), "--model", args.model,
                                    "--out", dumps[name], "--dtype", dtype, text], check=True,
                                   stderr=subprocess.DEVNULL)
            trace = dumps[f"trace-{args.kernels}"]
            if args.only_ours or not os.path.exists(os.path.join(trace, "manifest.json")):
                subprocess.run([args.bert_trace, "--model", args.model, "--out", trace, "--kernels", args.kernels,
                                "--threads", "2", text], check=True, stdout=subprocess.DEVNULL)
            truth, ref, ours = stages(dumps["truth"]), stages(dumps["ref"]), stages(trace)
            n_tokens = len(tokenizer(text)["input_ids"])
            case_behind = []
            for name in truth:
                if name not in ref or name not in ours:
                    continue
                exact = load(dumps["truth"], truth[name])
                theirs = np.abs(load(dumps["ref"], ref[name]) - exact).max()
                mine = np.abs(load(trace, ours[name]) - exact).max()
                ulp = float(np.spacing(np.float32(np.abs(exact).max())))
                total += 1
                ratios.append(mine / theirs if theirs > 0 else (1.0 if mine == 0 else np.inf))
                if mine > theirs + ulp:
                    behind += 1
                    tally("stages", name)
                    case_behind.append((mine / max(theirs, 1e-30), name, mine, theirs))
                    worst = max(worst, (mine / max(theirs, 1e-30), f"{name} at {size} tokens: {mine:.2e} against {theirs:.2e}"))
            case_behind.sort(reverse=True)
            shown = ", ".join(f"{n} {m:.1e}/{r:.1e}" for _, n, m, r in case_behind[:4])
            print(f"{size:4d} tokens (text {t}, {n_tokens} tokens): {len(case_behind)} of {len(truth)} stages behind PyTorch"
                  f"{': ' + shown if shown else ''}")
            # Each computed stage's own error: against the exact result of that side's own inputs.
            case_own = []
            found = computed_stages(set(truth) & set(ref) & set(ours), encoder_weights, head_weights, config)
            for name, is_product, inputs, exact_of in found:
                errors, largest = {}, 0.0
                for side, dump, entries in (("ours", trace, ours), ("theirs", dumps["ref"], ref)):
                    value = load(dump, entries[name])
                    exact = exact_of(*[load(dump, entries[i]) for i in inputs]).reshape(value.shape)
                    errors[side] = np.abs(value - exact).max()
                    largest = max(largest, np.abs(exact).max())
                ulp = float(np.spacing(np.float32(largest)))
                mine, theirs = errors["ours"], errors["theirs"]
                own[is_product]["total"] += 1
                own[is_product]["ratios"].append(mine / theirs if theirs > 0 else (1.0 if mine == 0 else np.inf))
                if mine > theirs + ulp:
                    own[is_product]["behind"] += 1
                    tally("own", name)
                    case_own.append((mine / max(theirs, 1e-30), name, mine, theirs))
            case_own.sort(reverse=True)
            shown = ", ".join(f"{n} {m:.1e}/{r:.1e}" for _, n, m, r in case_own[:4])
            print(f"      own error of its {len(found)} computed stages: {len(case_own)} behind PyTorch's"
                  f"{': ' + shown if shown else ''}")
    ratios = np.array(ratios)
    print(f"\n{args.kernels} kernels: {behind} of {total} stages farther from the truth than PyTorch by more than one "
          f"float32 ulp; ours / PyTorch's error: median {np.median(ratios):.2f}, largest {ratios.max():.2f}")
    if worst[1]:
        print(f"farthest behind: {worst[1]}")
    if kinds["stages"]:
        print("behind, by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds["stages"].items(), key=lambda x: -x[1])))
    for is_product, what in ((True, "the matrix products"), (False, "the other computed stages")):
        counts = own[is_product]
        r = np.array(counts["ratios"] if counts["ratios"] else [np.nan])
        print(f"own error of {what}: {counts['behind']} of {counts['total']} larger than PyTorch's by more than "
              f"one float32 ulp; ours / PyTorch's: median {np.median(r):.2f}, largest {r.max():.2f}")
    if kinds["own"]:
        print("own error behind, by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds["own"].items(), key=lambda x: -x[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
