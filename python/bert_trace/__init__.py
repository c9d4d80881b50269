"""Trace BERT tensor by tensor: every stage of the forward (and backward) pass as a numpy array.

    >>> import bert_trace
    >>> t = bert_trace.trace("When in Rome, do as the [MASK] do.")
    >>> t["layer0.attention.probs"].shape
    (1, 4, 13, 13)

The work is done by the same Rust code as the `bert-trace` command (the extension module
`bert_trace._bert_trace`); this package only names it.
"""

from collections.abc import Mapping as _Mapping

from ._bert_trace import (
    DiffReport,
    Explanation,
    Model,
    Page,
    Server,
    Trace,
    __version__,
    ablate,
    attribute,
    compare,
    diff,
    evaluate,
    explain,
    finetune,
    heads,
    inspect,
    keep_freed_memory,
    lens,
    load,
    padding,
    rollout,
    serve,
    stages,
    tolerances,
    trace,
    train,
    view,
)
from ._reports import Report
from .errors import Error, FileError, InputError, NotFoundError

# A trace is a read-only mapping from stage name to array: say so to isinstance().
_Mapping.register(Trace)

__all__ = [
    "DiffReport",
    "Error",
    "Explanation",
    "FileError",
    "InputError",
    "Model",
    "NotFoundError",
    "Page",
    "Report",
    "Server",
    "Trace",
    "__version__",
    "ablate",
    "attribute",
    "compare",
    "diff",
    "evaluate",
    "explain",
    "finetune",
    "heads",
    "inspect",
    "keep_freed_memory",
    "lens",
    "load",
    "padding",
    "rollout",
    "serve",
    "stages",
    "tolerances",
    "trace",
    "train",
    "view",
]
