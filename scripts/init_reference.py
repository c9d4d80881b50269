"""Statistics of transformers' own initialisation, for `train --from-config` to be held to.

    python scripts/init_reference.py CONFIG_JSON OUT_JSON [--seeds 3]

Builds `BertForPreTraining(config)` (transformers draws every weight with `_init_weights`)
under a few seeds and writes, for each parameter of `named_parameters()` in order, its name and
shape and, over all seeds, the mean and standard deviation of its values, the share that is
exactly 0, the share exactly 1 and the share beyond two
initializer ranges from 0 (which tells a plain normal from a truncated one). `crates/bert-core/tests/all/training.rs` draws new weights for the
same config with bert-trace and compares: the names, shapes and order must be the same, a
parameter transformers fills with zeros or ones must be filled so, and a drawn one must have the
same spread within its sampling error.
"""

import argparse
import json
import sys

import torch
import transformers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("out")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    config = transformers.BertConfig.from_json_file(args.config)
    values = {}
    shapes = {}
    order = []
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        model = transformers.BertForPreTraining(config).eval()
        for name, param in model.named_parameters():
            if name not in shapes:
                order.append(name)
                shapes[name] = list(param.shape)
                values[name] = []
            values[name].append(param.detach().double().flatten())
    out = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "config": args.config,
        "seeds": args.seeds,
        "parameters": [],
    }
    for name in order:
        v = torch.cat(values[name])
        out["parameters"].append(
            {
                "name": name,
                "shape": shapes[name],
                "mean": v.mean().item(),
                "std": v.std(unbiased=False).item(),
                "zeros": (v == 0).double().mean().item(),
                "ones": (v == 1).double().mean().item(),
                # A plain normal has 4.55% beyond 2σ, a normal truncated there none.
                "beyond_2std": (v.abs() > 2 * config.initializer_range).double().mean().item(),
            }
        )
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"{len(order)} parameters written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
