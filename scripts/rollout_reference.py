#!/usr/bin/env python3
"""Attention rollout and attention flow (Abnar and Zuidema 2020) of one sequence of a golden
dump, computed the way the paper's code does, for the reference `bert-trace rollout` is checked
against (crates/bert-core/tests/all/rollout.rs).

    python scripts/rollout_reference.py DUMP_DIR --out OUT.json [--seq N] [--flow]

From the dump's own `layer{i}.attention.probs` (PyTorch's `output_attentions`) and
`input.attention_mask`, in float64, on the sequence's real tokens: each layer's heads averaged;
the residual added as the identity, A + I, and every row divided by its sum; rollout the product
of those from the first layer up. Flow: a directed graph (networkx) whose nodes are every
layer's positions and the input tokens, an edge from layer l's position a to layer l-1's
position b with the capacity of that layer's augmented attention [a, b]; for each position of
each layer and each input token, the maximum flow between them (Edmonds-Karp, as the paper's
code calls it), each row divided by its sum.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import networkx as nx
import numpy as np


def layers(dump: Path, seq: int) -> tuple[list[int], list[np.ndarray]]:
    mask = np.load(dump / "input.attention_mask.npy")[seq]
    real = [int(j) for j in np.nonzero(mask)[0]]
    probs = []
    while (dump / f"layer{len(probs)}.attention.probs.npy").exists():
        p = np.load(dump / f"layer{len(probs)}.attention.probs.npy").astype(np.float64)[seq]
        probs.append(p[:, real][:, :, real])
    return real, probs


def augmented(probs: list[np.ndarray]) -> list[np.ndarray]:
    out = []
    for p in probs:
        a = p.sum(axis=0) / p.shape[0] + np.eye(p.shape[1])
        out.append(a / a.sum(axis=-1, keepdims=True))
    return out


def rollout(aug: list[np.ndarray]) -> list[np.ndarray]:
    joint = [aug[0]]
    for a in aug[1:]:
        joint.append(a @ joint[-1])
    return joint


def flow(aug: list[np.ndarray]) -> list[np.ndarray]:
    n = aug[0].shape[0]
    graph = nx.DiGraph()
    for below, a in enumerate(aug):
        for f in range(n):
            for t in range(n):
                if a[f, t] > 0:
                    graph.add_edge((below + 1, f), (below, t), capacity=float(a[f, t]))
    out = []
    for layer in range(1, len(aug) + 1):
        flows = np.zeros((n, n))
        for f in range(n):
            for t in range(n):
                flows[f, t] = nx.maximum_flow_value(graph, (layer, f), (0, t),
                                                    flow_func=nx.algorithms.flow.edmonds_karp)
            flows[f] /= flows[f].sum()
        out.append(flows)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dump", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seq", type=int, default=0)
    parser.add_argument("--flow", action="store_true")
    args = parser.parse_args()
    real, probs = layers(args.dump, args.seq)
    aug = augmented(probs)
    report = {"seq": args.seq, "residual": 0.5, "heads": "mean", "positions": real,
              "rollout": [m.tolist() for m in rollout(aug)],
              "flow": [m.tolist() for m in flow(aug)] if args.flow else None}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
