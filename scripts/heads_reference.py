#!/usr/bin/env python3
"""Head importance and head statistics by PyTorch, for the reference `bert-trace heads` is
checked against (crates/bert-trace/tests/all/heads.rs).

    python scripts/heads_reference.py --model DIR --out OUT.json [--pair B ...]
        [--mlm-target WORD ...] [--nsp-label 0|1 ...] [--label NAME ...] TEXT [TEXT ...]

Importance (Michel et al. 2019, their code's way): a gate tensor xi of ones, [layers, heads],
requiring grad, multiplies each head's slice of each layer's self-attention output (the
context, by a forward hook on `bert.encoder.layer.L.attention.self`); the loss is the one the
labels ask for, through transformers' own forward call (BertForPreTraining or
BertForSequenceClassification with `labels=`); `loss.backward()`, and the importance is
|xi.grad|. Each layer's row is then divided by its l2 norm, the heads ranked once (least
important first, ties in the model's order), and the loss measured with the k least important
gates set to 0, k = round(p * N) for p = 0, 0.1, ..., 1 (the pruning curve).

Statistics (Clark et al. 2019): from transformers' own `output_attentions`, per head, the
attention to [CLS], to [SEP], to punctuation tokens (every character ASCII punctuation or
Unicode category P*), to the query itself, to the previous and the next real token, and the
entropy in nats, averaged over the real query tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import unicodedata

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dump_reference import IGNORE, load_model, load_tokenizer, make_labels, tokenize  # noqa: E402

SHARES = [i / 10 for i in range(11)]


def is_punctuation(token: str) -> bool:
    return bool(token) and all(c.isascii() and not c.isalnum() and 33 <= ord(c) <= 126
                               or unicodedata.category(c).startswith("P") for c in token)


def loss_of(model, inputs, labels, gates=None) -> torch.Tensor:
    """The labels' loss through transformers' own forward, with each head's context times its gate."""
    handles = []
    if gates is not None:
        nh = model.config.num_attention_heads
        for i, layer in enumerate(model.bert.encoder.layer):
            def hook(module, args, output, i=i):
                context = output[0] if isinstance(output, tuple) else output
                B, T, H = context.shape
                gated = (context.view(B, T, nh, H // nh) * gates[i].view(1, 1, nh, 1)).view(B, T, H)
                return (gated, *output[1:]) if isinstance(output, tuple) else gated
            handles.append(layer.attention.self.register_forward_hook(hook))
    try:
        if labels.class_labels is not None:
            return model(**inputs, labels=labels.class_labels).loss
        out = model(**inputs)
        loss = torch.zeros((), dtype=torch.float32)
        if labels.labels is not None:
            V = out.prediction_logits.shape[-1]
            loss = loss + torch.nn.functional.cross_entropy(out.prediction_logits.reshape(-1, V),
                                                            labels.labels.reshape(-1), ignore_index=IGNORE)
        if labels.next_sentence_label is not None:
            loss = loss + torch.nn.functional.cross_entropy(out.seq_relationship_logits, labels.next_sentence_label)
        return loss
    finally:
        for handle in handles:
            handle.remove()


def statistics(model, tok, inputs) -> dict[str, list[list[float]]]:
    with torch.no_grad():
        attentions = model.bert(**inputs, output_attentions=True).attentions
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    B, T = ids.shape
    tokens = [tok.convert_ids_to_tokens(row) for row in ids.tolist()]
    names = ["cls", "sep", "punctuation", "self", "previous", "next", "entropy"]
    out = {name: [] for name in names}
    queries = int(mask.sum())
    for probs in attentions:  # [B, nh, T, T]
        rows = {name: [] for name in names}
        for h in range(probs.shape[1]):
            sums = dict.fromkeys(names, 0.0)
            for b in range(B):
                for q in range(T):
                    if not mask[b, q]:
                        continue
                    p = probs[b, h, q].double()
                    sums["cls"] += float(sum(p[k] for k in range(T) if tokens[b][k] == tok.cls_token))
                    sums["sep"] += float(sum(p[k] for k in range(T) if tokens[b][k] == tok.sep_token))
                    sums["punctuation"] += float(sum(p[k] for k in range(T) if mask[b, k] and is_punctuation(tokens[b][k])))
                    sums["self"] += float(p[q])
                    sums["previous"] += float(p[q - 1]) if q > 0 else 0.0
                    sums["next"] += float(p[q + 1]) if q + 1 < T and mask[b, q + 1] else 0.0
                    sums["entropy"] -= float(sum(v * torch.log(v) for v in p if v > 0))
            for name in names:
                rows[name].append(sums[name] / queries)
        for name in names:
            out[name].append(rows[name])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pair", action="append")
    ap.add_argument("--mlm-target", action="append")
    ap.add_argument("--nsp-label", action="append", type=int)
    ap.add_argument("--label", action="append")
    ap.add_argument("texts", nargs="+")
    args = ap.parse_args()
    args.mask_prob = args.seed = args.labels_from = None
    torch.manual_seed(0)

    model = load_model(args.model)
    tok = load_tokenizer(args.model)
    inputs = tokenize(tok, args.model, args.texts, args.pair)
    labels = make_labels(tok, inputs, args, model.config)
    L, nh = model.config.num_hidden_layers, model.config.num_attention_heads

    gates = torch.ones(L, nh, requires_grad=True)
    loss = loss_of(model, inputs, labels, gates)
    loss.backward()
    raw = gates.grad.abs().double()
    normalized = raw / raw.pow(2).sum(-1, keepdim=True).sqrt()
    flat = [(float(normalized[l, h]), l, h) for l in range(L) for h in range(nh)]
    order = [[l, h] for _, l, h in sorted(flat, key=lambda x: x[0])]  # stable: ties in the model's order
    curve = []
    for share in SHARES:
        k = round(share * len(order))
        keep = torch.ones(L, nh)
        for l, h in order[:k]:
            keep[l, h] = 0.0
        with torch.no_grad():
            curve.append({"share": share, "masked": k, "loss": float(loss_of(model, inputs, labels, keep))})

    result = {
        "producer": {"name": "heads_reference.py", "torch": torch.__version__, "transformers": transformers.__version__},
        "model": os.path.basename(os.path.normpath(args.model)),
        "inputs": {"texts": args.texts, "pair": args.pair, "mlm_targets": args.mlm_target,
                   "nsp_label": args.nsp_label, "label": args.label},
        "loss": float(loss.detach()),
        "importance": {"raw": raw.tolist(), "normalized": normalized.tolist(), "order": order, "curve": curve},
        "statistics": statistics(model, tok, inputs),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}: loss {float(loss.detach()):.6f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
