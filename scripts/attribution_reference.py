#!/usr/bin/env python3
"""Attributions by Captum on transformers' BERT, for the reference `bert-trace attribute` is
checked against (crates/bert-trace/tests/all/attribute.rs).

    python scripts/attribution_reference.py --model DIR --out OUT.json
        (--target WORD | --label NAME | --nsp-label 0|1 | nothing on a classifier)
        [--pair B] TEXT

One text, one target: an MLM token at the text's one [MASK] (--target), a classifier's class
(--label, by default the class the model predicts) or the NSP label (--nsp-label, with --pair).
The function attributed, f, is the target's log-probability ("logprob") or its logit ("logit"),
as a function of the word embeddings the model looks up (transformers' `inputs_embeds`:
position and token-type embeddings, LayerNorm and everything after are recomputed).

- Integrated gradients: Captum's `IntegratedGradients` (method "gausslegendre" or
  "riemann_middle", `return_convergence_delta=True`) from a baseline in which [CLS], [SEP] and
  the target's [MASK] keep their embeddings and every other token becomes [PAD]'s ("pad") or a
  zero vector ("zero"). Each token's attribution is the sum of Captum's over the hidden size.
- Gradient times input: Captum's `InputXGradient`, summed over the hidden size.
- Occlusion: f with the token's id replaced by [MASK], subtracted from f with every token.

Every number is written for every token position; the positions kept by the baseline are
listed, as bert-trace attributes only the others.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import captum
import torch
import transformers
from captum.attr import InputXGradient, IntegratedGradients

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dump_reference import class_id, load_model, load_tokenizer, target_id, tokenize  # noqa: E402

STEPS = [8, 50]
RULES = {"gauss-legendre": "gausslegendre", "midpoint": "riemann_middle"}


def scorer(model, inputs, target, of):
    """f(embeds): the target's log-probability or logit, one per row of `embeds`."""
    kind, where, index = target

    def f(embeds):
        n = embeds.shape[0]
        out = model(inputs_embeds=embeds, attention_mask=inputs["attention_mask"].expand(n, -1),
                    token_type_ids=inputs["token_type_ids"].expand(n, -1))
        if kind == "mlm":
            logits = (out.prediction_logits if hasattr(out, "prediction_logits") else out.logits)[:, where]
        elif kind == "nsp":
            logits = out.seq_relationship_logits
        else:
            logits = out.logits
        scores = torch.log_softmax(logits, -1) if of == "logprob" else logits
        return scores[:, index]
    return f


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pair")
    ap.add_argument("--target")
    ap.add_argument("--label")
    ap.add_argument("--nsp-label", type=int)
    ap.add_argument("text")
    args = ap.parse_args()
    torch.manual_seed(0)

    model = load_model(args.model)
    tok = load_tokenizer(args.model)
    inputs = tokenize(tok, args.model, [args.text], [args.pair] if args.pair else None)
    ids = inputs["input_ids"][0]
    T = ids.shape[0]
    table = model.get_input_embeddings().weight
    kept = {tok.cls_token_id, tok.sep_token_id}
    if args.target is not None:
        masks = (ids == tok.mask_token_id).nonzero().flatten().tolist()
        assert len(masks) == 1, "one [MASK]"
        target = ("mlm", masks[0], target_id(tok, args.target))
    elif args.nsp_label is not None:
        target = ("nsp", None, args.nsp_label)
    else:
        with torch.no_grad():
            predicted = int(model(**inputs).logits[0].argmax())
        target = ("class", None, class_id(model.config, args.label) if args.label is not None else predicted)
    keep = [int(ids[t]) in kept or (target[0] == "mlm" and t == target[1]) for t in range(T)]

    with torch.no_grad():
        x = table[ids].unsqueeze(0).detach()
        pad = table[tok.pad_token_id]
    baselines = {
        "pad": torch.stack([x[0, t] if keep[t] else pad for t in range(T)]).unsqueeze(0),
        "zero": torch.stack([x[0, t] if keep[t] else torch.zeros_like(pad) for t in range(T)]).unsqueeze(0),
    }
    results = {}
    for of in ("logprob", "logit"):
        f = scorer(model, inputs, target, of)
        with torch.no_grad():
            score = float(f(x)[0])
        entry = {"score": score, "integrated_gradients": [], "occlusion": None}
        for baseline_name, baseline in baselines.items():
            with torch.no_grad():
                baseline_score = float(f(baseline)[0])
            for rule, method in RULES.items():
                for steps in STEPS:
                    ig = IntegratedGradients(f)
                    attr, delta = ig.attribute(x, baselines=baseline, n_steps=steps, method=method,
                                               return_convergence_delta=True)
                    entry["integrated_gradients"].append({
                        "baseline": baseline_name, "rule": rule, "steps": steps,
                        "baseline_score": baseline_score,
                        "attributions": attr[0].double().sum(-1).tolist(),
                        "delta": float(delta[0]),
                    })
        entry["grad_input"] = InputXGradient(f).attribute(x.clone())[0].double().sum(-1).tolist()
        occluded = []
        for t in range(T):
            if keep[t]:
                occluded.append(None)
                continue
            hidden = ids.clone()
            hidden[t] = tok.mask_token_id
            with torch.no_grad():
                occluded.append(score - float(f(table[hidden].unsqueeze(0))[0]))
        entry["occlusion"] = occluded
        results[of] = entry

    result = {
        "producer": {"name": "attribution_reference.py", "torch": torch.__version__,
                     "transformers": transformers.__version__, "captum": captum.__version__},
        "model": os.path.basename(os.path.normpath(args.model)),
        "inputs": {"text": args.text, "pair": args.pair, "target": args.target, "label": args.label,
                   "nsp_label": args.nsp_label},
        "tokens": tok.convert_ids_to_tokens(ids.tolist()),
        "target": {"kind": target[0], "position": target[1], "index": target[2]},
        "kept": [t for t in range(T) if keep[t]],
        "results": results,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
