"""The digest of one tensor, as a format-3 manifest records every tensor of the model a dump was
made with (`model_tensors`). bert-trace computes the same in
crates/bert-core/src/io/fingerprint.rs; `dump_reference.py` writes it, and the Python package's
tests check bert-trace's against this one. NumPy only.

The digest: the first 16 hex digits of the SHA-256 of the tensor's name, a newline, its shape
(decimal, comma-separated), a newline, `float32`, a newline, then its values as little-endian
float32 in C order: all of them when there are at most SAMPLE, else the ⌊i · n / SAMPLE⌋-th for
i = 0 .. SAMPLE - 1.
"""

import hashlib

import numpy as np

SAMPLE = 4096


def tensor_digest(name: str, array) -> str:
    """The digest of `array` under `name` (its transformers name, `bert.` prefix included)."""
    values = np.ascontiguousarray(array, dtype="<f4").ravel()
    shape = ",".join(str(d) for d in np.shape(array))
    h = hashlib.sha256(f"{name}\n{shape}\nfloat32\n".encode())
    n = values.size
    if n > SAMPLE:
        values = values[(np.arange(SAMPLE, dtype=np.uint64) * np.uint64(n)) // np.uint64(SAMPLE)]
    h.update(values.tobytes())
    return h.hexdigest()[:16]
