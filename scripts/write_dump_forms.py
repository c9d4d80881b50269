#!/usr/bin/env python3
"""Writes a golden dump's stages in every form `bert-trace diff` reads, each with a broken twin.

Usage: write_dump_forms.py GOLDEN_DUMP OUT_DIR

GOLDEN_DUMP is a bert-trace dump directory (manifest.json and one .npy per stage). Under OUT_DIR
this writes the same stages as a learner's numpy, PyTorch or safetensors code might have saved
them, one form per directory or file:

  flat/                   np.save per stage, no manifest
  nested/                 layer0/attention/probs.npy: the stage name split on '.'
  savez.npz               np.savez
  savez_compressed.npz    np.savez_compressed
  lzma.npz                zipfile with ZIP_LZMA, members written by np.lib.format.write_array
  safetensors.safetensors safetensors.numpy.save_file
  float16/ float64/       float stages cast, integer stages kept
  big_endian/             every array in big-endian byte order
  fortran/                every array in Fortran (column-major) order
  v1/ v2/ v3/             .npy format versions 1.0, 2.0 and 3.0
  int32_inputs/           integer stages as int32
  no_batch/               a stage whose batch axis is 1 saved without it (only for a batch of one)
  presplit_qkv/           query, key and value as [B,T,H], before the split into heads
  mask_1e4/ mask_neg_inf/ scores at padding keys as -10000.0 or -inf (only with padding)

Each form has a twin named `<form>.perturbed` (`savez.perturbed.npz` for a file) in which
exactly one float stage differs far beyond any tolerance. The change is made before the form's
conversion, so the twin is in the same form; `bert-trace diff GOLDEN TWIN` must name that stage
as the first failing one. The one summary line says which stage each twin breaks.

Only numpy and safetensors are used, so the script runs in the test venv (scripts/test.sh).
"""

import json
import os
import sys
import zipfile

import numpy as np
from safetensors.numpy import save_file

# Far beyond the widest tolerance a stage gets (float16's 2^-10 relative and absolute), and
# small enough that a float16 copy still holds it.
DELTA = 0.05


def read_golden(golden):
    """The golden's stages, in the manifest's order, as {name: array}."""
    with open(os.path.join(golden, "manifest.json")) as f:
        manifest = json.load(f)
    return {s["name"]: np.load(os.path.join(golden, s["file"])) for s in manifest["stages"]}


def is_float(a):
    return np.issubdtype(a.dtype, np.floating)


def attention_stages(stages, part):
    """The `layerN.attention.<part>` stages the golden has, last layer first."""
    names = [n for n in stages if n.startswith("layer") and n.endswith(".attention." + part)]
    return sorted(names, key=lambda n: int(n.split(".")[0][len("layer"):]), reverse=True)


def pick(stages, part):
    """The stage to break: the same part of attention in layer 1 if there is one, else the last
    layer's. Breaking a late stage checks that every stage before it still passes."""
    names = attention_stages(stages, part)
    if not names:
        raise SystemExit(f"error: the golden has no layerN.attention.{part} stage to perturb")
    return "layer1.attention." + part if "layer1.attention." + part in names else names[0]


def add_delta(stages, name, index=None):
    """A copy of `stages` with DELTA added to one element of `name` (the first, unless given)."""
    out = dict(stages)
    a = stages[name].copy()
    index = index if index is not None else (0,) * a.ndim
    a[index] += DELTA
    out[name] = a
    return out


# Conversions: each takes {name: array} and returns {name: array} in the form's shape or dtype.


def same(stages):
    return stages


def cast_floats(dtype):
    def convert(stages):
        # float32's minimum, HF's mask at padding keys, is beyond float16's range and becomes
        # -inf, as it does in PyTorch's `.half()`: still a masked score.
        with np.errstate(over="ignore"):
            return {n: a.astype(dtype) if is_float(a) else a for n, a in stages.items()}

    return convert


def big_endian(stages):
    return {n: a.astype(a.dtype.newbyteorder(">")) for n, a in stages.items()}


def fortran(stages):
    return {n: np.asfortranarray(a) for n, a in stages.items()}


def int32_inputs(stages):
    return {n: a.astype(np.int32) if np.issubdtype(a.dtype, np.integer) else a for n, a in stages.items()}


def no_batch(stages):
    # A [1,...] stage of two or more axes loses its batch axis; a [B] or 0-d stage has nothing
    # left to drop (it would become a scalar of no stage's shape), so it is kept.
    return {n: a[0] if a.ndim >= 2 and a.shape[0] == 1 else a for n, a in stages.items()}


def presplit_qkv(stages):
    # [B,nh,T,hs] -> [B,T,nh,hs] -> [B,T,H]: the Linear's output before HF's view and transpose.
    out = dict(stages)
    for part in ("query", "key", "value"):
        for name in attention_stages(stages, part):
            a = stages[name]
            out[name] = a.transpose(0, 2, 1, 3).reshape(a.shape[0], a.shape[2], -1)
    return out


def masked_with(constant):
    """Scores at padding keys (mask[b, key] == 0) replaced by `constant`, whatever they were."""

    def convert(stages):
        keys = stages["input.attention_mask"] == 0  # [B,T]
        out = dict(stages)
        for name in attention_stages(stages, "scores"):
            a = stages[name].copy()  # [B,nh,T,T]
            a[np.broadcast_to(keys[:, None, None, :], a.shape)] = constant
            out[name] = a
        return out

    return convert


# Writers: each writes {name: array} at a path (a directory, or a file with its extension).


def write_dir(path, stages, write=None):
    os.makedirs(path)
    for name, a in stages.items():
        with open(os.path.join(path, name + ".npy"), "wb") as f:
            if write is None:
                np.save(f, a)
            else:
                write(f, a)


def write_nested(path, stages):
    for name, a in stages.items():
        file = os.path.join(path, *name.split(".")) + ".npy"
        os.makedirs(os.path.dirname(file), exist_ok=True)
        np.save(file, a)


def write_version(major):
    return lambda path, stages: write_dir(path, stages, lambda f, a: np.lib.format.write_array(f, a, version=(major, 0)))


def write_savez(path, stages):
    np.savez(path, **stages)


def write_savez_compressed(path, stages):
    np.savez_compressed(path, **stages)


def write_lzma(path, stages):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_LZMA) as archive:
        for name, a in stages.items():
            with archive.open(name + ".npy", "w") as f:
                np.lib.format.write_array(f, a)


def write_safetensors(path, stages):
    # safetensors stores bytes in C order and refuses a view that is not contiguous.
    save_file({name: np.ascontiguousarray(a) for name, a in stages.items()}, path)


def forms(stages):
    """(name, extension, write, convert, stage broken in the twin, how, twin) for each form;
    `twin(stages)` is the broken copy in the form's conversion."""
    rows = [
        ("flat", "", write_dir, same),
        ("nested", "", write_nested, same),
        ("savez", ".npz", write_savez, same),
        ("savez_compressed", ".npz", write_savez_compressed, same),
        ("lzma", ".npz", write_lzma, same),
        ("safetensors", ".safetensors", write_safetensors, same),
        ("float16", "", write_dir, cast_floats(np.float16)),
        ("float64", "", write_dir, cast_floats(np.float64)),
        ("big_endian", "", write_dir, big_endian),
        ("fortran", "", write_dir, fortran),
        ("v1", "", write_version(1), same),
        ("v2", "", write_version(2), same),
        ("v3", "", write_version(3), same),
        ("int32_inputs", "", write_dir, int32_inputs),
    ]
    if stages["input.ids"].shape[0] == 1:
        rows.append(("no_batch", "", write_dir, no_batch))
    probs = pick(stages, "probs")
    out = [(name, ext, write, convert, probs) for name, ext, write, convert in rows]
    # Breaking query itself checks that the heads are split back in the right order.
    out.append(("presplit_qkv", "", write_dir, presplit_qkv, pick(stages, "query")))
    out = [
        (name, ext, write, convert, stage, f"+{DELTA} at the first element",
         lambda s, convert=convert, stage=stage: convert(add_delta(s, stage)))
        for name, ext, write, convert, stage in out
    ]
    mask = stages.get("input.attention_mask")
    if mask is not None and (mask == 0).any():
        scores = pick(stages, "scores")
        b, key = (int(i) for i in np.argwhere(mask == 0)[0])
        index = (b, 0, 0, key)
        # The bug a learner makes: one padding key left unmasked, its score 0 where the mask
        # puts a large negative. Masked scores are compared by their effect, not their value,
        # so this checks that an unmasked one is not taken for masked. It is unmasked after the
        # conversion, which would mask it again.
        to_1e4 = masked_with(-10000.0)
        out.append(("mask_1e4", "", write_dir, to_1e4, scores, f"0.0 at padding key {list(index)}",
                    lambda s: unmask(to_1e4(s), scores, index)))
        to_inf = masked_with(-np.inf)
        out.append(("mask_neg_inf", "", write_dir, to_inf, scores, f"+{DELTA} at the first element",
                    lambda s: to_inf(add_delta(s, scores))))
    return out


def unmask(stages, name, index):
    a = stages[name].copy()
    a[index] = 0.0
    return {**stages, name: a}


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: write_dump_forms.py GOLDEN_DUMP OUT_DIR")
    golden, out_dir = sys.argv[1], sys.argv[2]
    stages = read_golden(golden)
    os.makedirs(out_dir, exist_ok=True)
    broken = []
    for name, ext, write, convert, stage, how, twin in forms(stages):
        write(os.path.join(out_dir, name + ext), convert(stages))
        write(os.path.join(out_dir, name + ".perturbed" + ext), twin(stages))
        broken.append(f"{name}: {stage} ({how})")
    print(f"wrote {len(broken)} forms and their .perturbed twins to {out_dir}; perturbed: " + "; ".join(broken))


if __name__ == "__main__":
    main()
