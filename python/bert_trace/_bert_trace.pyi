"""Type stubs of the extension module (documented in its docstrings)."""

import os
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, TypedDict, Union

from typing_extensions import Unpack

import numpy as np

__version__: str

PathLike = Union[str, "os.PathLike[str]"]
Hook = Callable[[np.ndarray], Optional[np.ndarray]]
Index = Union[int, slice, Sequence[Union[int, slice]]]

class TraceOptions(TypedDict, total=False):
    """The keywords of `trace` and `Model.trace`, written once for both: each is the option of
    the same name in `bert-trace --help`, whose default it takes when left out."""

    hooks: Optional[Mapping[str, Hook]]
    file: Optional[PathLike]
    pair: Union[None, str, Sequence[str]]
    stop_at: Optional[str]
    only: Union[None, str, Sequence[str]]
    out: Optional[PathLike]
    mask_prob: Optional[float]
    seed: Optional[int]
    mlm_target: Union[None, str, Sequence[str]]
    nsp_label: Union[None, int, Sequence[int]]
    label: Union[None, str, Sequence[str]]
    kernels: Optional[str]
    precision: str
    weights: Optional[str]
    no_dump: bool
    npz: bool
    force: bool
    truncate: bool
    color: str
    head: Optional[int]
    top_k: int
    threads: Optional[int]
    reference: Optional[PathLike]
    ablate: Union[None, str, Sequence[str]]
    ablate_with: str
    patch: Union[None, str, Sequence[str]]
    lens: bool
    backward: bool
    atol: Optional[float]
    rtol: Optional[float]

class Model:
    def __init__(self, path_or_id: Optional[PathLike] = None) -> None: ...
    def trace(self, text: Union[str, Sequence[str]], **options: Unpack[TraceOptions]) -> Trace: ...
    @property
    def source(self) -> str: ...

class Trace(Mapping[str, np.ndarray]):
    def __getitem__(self, name: str) -> np.ndarray: ...
    def __contains__(self, name: object) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[str]: ...
    def keys(self) -> list[str]: ...  # type: ignore[override]
    def values(self) -> list[np.ndarray]: ...  # type: ignore[override]
    def items(self) -> list[tuple[str, np.ndarray]]: ...  # type: ignore[override]
    def get(self, name: str, default: Any = None) -> Any: ...
    @property
    def tokens(self) -> list[list[str]]: ...
    @property
    def manifest(self) -> dict[str, Any]: ...
    @property
    def model(self) -> Optional[Model]: ...
    @property
    def report(self) -> Optional[DiffReport]: ...
    def predictions(self, k: Optional[int] = None) -> list[dict[str, Any]]: ...
    def explain(
        self, stage: str, index: Index, *, model: Union[None, PathLike, Model] = None
    ) -> Union[Explanation, list[Explanation]]: ...
    def formula(self, stage: str) -> str: ...
    def stage_table(self) -> list[dict[str, Any]]: ...
    def save(self, dir: PathLike, *, force: bool = False, npz: bool = False) -> None: ...
    def view(self) -> Page: ...
    def serve(
        self,
        *,
        model: Union[None, PathLike, Model] = None,
        host: str = "127.0.0.1",
        port: int = 0,
        heatmap: Union[None, str, Sequence[str]] = None,
    ) -> Server: ...
    def _repr_html_(self) -> str: ...

class Explanation:
    """One element explained, with the fields of `bert-trace explain --json`."""

    @property
    def stage(self) -> str: ...
    @property
    def index(self) -> list[int]: ...
    @property
    def value(self) -> Union[None, float, int]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def recomputed(self) -> Union[None, float, int]: ...
    @property
    def formula(self) -> str: ...
    @property
    def inputs(self) -> list[dict[str, Any]]: ...
    @property
    def steps(self) -> list[dict[str, Any]]: ...
    @property
    def terms(self) -> list[dict[str, Any]]: ...
    def _repr_html_(self) -> str: ...

class DiffReport:
    passed: bool
    @property
    def rows(self) -> list[dict[str, Any]]: ...
    @property
    def first_divergence(self) -> Optional[str]: ...
    @property
    def json(self) -> dict[str, Any]: ...
    def __bool__(self) -> bool: ...
    def _repr_html_(self) -> str: ...

class Server:
    url: str
    @property
    def running(self) -> bool: ...
    def stop(self) -> None: ...
    def __enter__(self) -> Server: ...
    def __exit__(self, *exc: object) -> bool: ...
    def _repr_html_(self) -> str: ...

class Page:
    html: str
    def save(self, path: PathLike) -> None: ...
    def _repr_html_(self) -> str: ...

def trace(
    text: Union[str, Sequence[str]],
    model: Union[None, PathLike, Model] = None,
    **options: Unpack[TraceOptions],
) -> Trace: ...
def load(dir: PathLike, model: Union[None, PathLike, Model] = None) -> Trace: ...
def padding(
    text: Union[None, str, Sequence[str]] = None,
    model: Union[None, PathLike, Model] = None,
    *,
    file: Optional[PathLike] = None,
    batched: Union[None, Trace, PathLike] = None,
    alone: Optional[Sequence[Union[Trace, PathLike]]] = None,
    threads: Optional[int] = None,
    kernels: Optional[str] = None,
) -> dict[str, Any]: ...
def tolerances(
    text: Union[None, str, Sequence[str]] = None,
    model: Union[None, PathLike, Model] = None,
    *,
    file: Optional[PathLike] = None,
    out: PathLike,
    headroom: Optional[float] = None,
    reference: Union[None, PathLike, Sequence[PathLike]] = None,
    truth: Union[None, PathLike, Sequence[PathLike]] = None,
    threads: Optional[int] = None,
    kernels: Optional[str] = None,
) -> dict[str, Any]: ...
def diff(
    reference: Union[Trace, PathLike],
    trace: Union[Trace, PathLike],
    *,
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
    isolate: bool = False,
    truth: Union[None, Trace, PathLike] = None,
    model: Union[None, PathLike, Model] = None,
    tolerances: Optional[PathLike] = None,
) -> DiffReport: ...
def compare(a: Union[Trace, PathLike], b: Union[Trace, PathLike], *, top: int = 10) -> dict[str, Any]: ...
def rollout(
    text: Optional[str] = None,
    model: Union[None, PathLike, Model] = None,
    *,
    dump: Union[None, Trace, PathLike] = None,
    seq: int = 0,
    residual: float = 0.5,
    heads: str = "mean",
    flow: bool = False,
    top: int = 5,
    words: Union[None, bool, str] = None,
    threads: Optional[int] = None,
    kernels: Optional[str] = None,
) -> dict[str, Any]: ...
def view(
    dump: PathLike,
    *,
    out: Optional[PathLike] = None,
    stage: Optional[str] = None,
    head: Optional[int] = None,
    seq: int = 0,
    lines: bool = False,
    svg: Optional[PathLike] = None,
    png: Optional[PathLike] = None,
    heatmap: Union[None, str, Sequence[str]] = None,
    words: Union[None, bool, str] = None,
    model: Optional[PathLike] = None,
) -> str: ...
def serve(
    dump: PathLike,
    *,
    model: Optional[PathLike] = None,
    host: str = "127.0.0.1",
    port: int = 0,
    heatmap: Union[None, str, Sequence[str]] = None,
) -> Server: ...
def explain(
    dump: PathLike, stage: str, index: Index, *, model: Union[None, PathLike, Model] = None
) -> Union[Explanation, list[Explanation]]: ...
def stages(model: Union[None, PathLike] = None) -> list[dict[str, Any]]: ...
def inspect(model: Union[None, PathLike] = None, *, config: Optional[PathLike] = None) -> dict[str, Any]: ...
def lens(
    text: str,
    model: Union[None, PathLike] = None,
    *,
    target: Optional[str] = None,
    pos: Optional[int] = None,
    top_k: int = 3,
    json: bool = False,
    threads: Optional[int] = None,
    kernels: Optional[str] = None,
) -> dict[str, Any]: ...
def ablate(
    text: str,
    model: Union[None, PathLike] = None,
    *,
    target: str,
    ablate_with: str = "zero",
    top: int = 10,
    json: bool = False,
    threads: Optional[int] = None,
    kernels: Optional[str] = None,
) -> dict[str, Any]: ...
def keep_freed_memory() -> bool: ...
def evaluate(
    file: PathLike,
    model: Optional[PathLike] = None,
    *,
    documents: bool = False,
    max_len: Optional[int] = None,
    batch_size: Optional[int] = None,
    seed: Optional[int] = None,
    each_token: bool = False,
    threads: Optional[int] = None,
    kernels: Optional[str] = None,
) -> dict[str, Any]: ...
def train(
    file: Optional[PathLike] = None,
    model: Optional[PathLike] = None,
    *,
    on_step: Optional[Callable[[dict[str, Any]], None]] = None,
    on_eval: Optional[Callable[[dict[str, Any]], None]] = None,
    eval_file: Optional[PathLike] = None,
    eval_split: Optional[float] = None,
    eval_every: Optional[int] = None,
    steps: Optional[int] = None,
    lr: Optional[float] = None,
    warmup_steps: Union[None, int, float] = None,
    batch_size: Optional[int] = None,
    max_len: Optional[int] = None,
    mask_prob: Optional[float] = None,
    nsp_negatives: Optional[float] = None,
    seed: Optional[int] = None,
    betas: Optional[str] = None,
    eps: Optional[float] = None,
    weight_decay: Optional[float] = None,
    max_grad_norm: Optional[float] = None,
    no_decay: Union[None, str, Sequence[str]] = None,
    dropout: Optional[float] = None,
    from_config: bool = False,
    documents: bool = False,
    nsp: bool = False,
    save: Optional[PathLike] = None,
    save_every: Optional[int] = None,
    resume: Optional[PathLike] = None,
    dump_step: Union[None, int, str, Sequence[Union[int, str]]] = None,
    log_every: int = 1,
    threads: Optional[int] = None,
    kernels: Optional[str] = None,
) -> list[dict[str, Any]]: ...

def heads(
    text: Union[None, str, Sequence[str]] = None,
    model: Optional[PathLike] = None,
    *,
    file: Optional[PathLike] = None,
    pair: Union[None, str, Sequence[str]] = None,
    mlm_target: Union[None, str, Sequence[str]] = None,
    nsp_label: Union[None, int, Sequence[int]] = None,
    label: Union[None, str, Sequence[str]] = None,
    importance: bool = False,
    statistics: bool = False,
    batch_size: Optional[int] = None,
    json: bool = False,
    threads: Optional[int] = None,
    kernels: Optional[str] = None,
) -> dict[str, Any]: ...

def attribute(
    text: Union[None, str, Sequence[str]] = None,
    model: Optional[PathLike] = None,
    *,
    file: Optional[PathLike] = None,
    pair: Union[None, str, Sequence[str]] = None,
    method: Optional[str] = None,
    target: Union[None, str, Sequence[str]] = None,
    label: Union[None, str, Sequence[str]] = None,
    nsp_label: Union[None, int, Sequence[int]] = None,
    of: Optional[str] = None,
    occlude_with: Optional[str] = None,
    baseline: Optional[str] = None,
    ig_steps: Optional[int] = None,
    ig_rule: Optional[str] = None,
    json: bool = False,
    words: Union[None, bool, str] = None,
    threads: Optional[int] = None,
    kernels: Optional[str] = None,
) -> dict[str, Any]: ...

def _picture(json: str) -> str: ...

def finetune(
    file: Optional[PathLike] = None,
    model: Optional[PathLike] = None,
    *,
    on_step: Optional[Callable[[dict[str, Any]], None]] = None,
    on_eval: Optional[Callable[[dict[str, Any]], None]] = None,
    eval_file: Optional[PathLike] = None,
    eval_split: Optional[float] = None,
    eval_every: Optional[int] = None,
    epochs: Optional[int] = None,
    steps: Optional[int] = None,
    lr: Optional[float] = None,
    warmup_steps: Union[None, int, float] = None,
    batch_size: Optional[int] = None,
    max_len: Optional[int] = None,
    seed: Optional[int] = None,
    betas: Optional[str] = None,
    eps: Optional[float] = None,
    weight_decay: Optional[float] = None,
    max_grad_norm: Optional[float] = None,
    no_decay: Union[None, str, Sequence[str]] = None,
    dropout: Optional[float] = None,
    from_config: bool = False,
    save: Optional[PathLike] = None,
    save_every: Optional[int] = None,
    resume: Optional[PathLike] = None,
    dump_step: Union[None, int, str, Sequence[Union[int, str]]] = None,
    log_every: int = 1,
    threads: Optional[int] = None,
    kernels: Optional[str] = None,
) -> dict[str, Any]: ...
