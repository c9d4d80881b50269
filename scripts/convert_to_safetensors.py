#!/usr/bin/env python3
"""Convert a checkpoint directory's pytorch_model.bin (a pickle) to model.safetensors.

bert-trace never unpickles: a pickle can run arbitrary code when loaded. This script loads it
with torch's restricted loader (weights_only=True), writes model.safetensors beside it, and
checks that the new file holds exactly the same tensors, bit for bit.

    python scripts/convert_to_safetensors.py DIR

Needs torch and safetensors (scripts/requirements.txt, in a virtual environment outside the repo).
"""
import os
import sys

import torch
from safetensors.torch import load_file, save_file


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    directory = sys.argv[1]
    source = os.path.join(directory, "pytorch_model.bin")
    target = os.path.join(directory, "model.safetensors")
    if not os.path.isfile(source):
        print(f"error: {source}: not found", file=sys.stderr)
        return 2
    if os.path.exists(target):
        print(f"error: {target}: already exists; not overwriting it", file=sys.stderr)
        return 2
    state = torch.load(source, map_location="cpu", weights_only=True)
    if "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    tensors = {}
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            print(f"error: {source}: entry {name!r} is not a tensor", file=sys.stderr)
            return 2
        # safetensors refuses tensors that share memory (tied weights); each gets its own copy.
        tensors[name] = value.detach().clone().contiguous()
    temporary = target + ".tmp"
    save_file(tensors, temporary, metadata={"format": "pt"})
    reloaded = load_file(temporary)
    assert reloaded.keys() == tensors.keys(), "the converted file lost or gained tensors"
    for name, value in tensors.items():
        assert torch.equal(reloaded[name], value), f"{name} changed in conversion"
    os.replace(temporary, target)
    print(f"wrote {target}: {len(tensors)} tensors, checked equal to {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
