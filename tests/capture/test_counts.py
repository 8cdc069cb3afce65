"""graphdbg's counts are torch's own (issue 19), measured in the same process
on the same program: graphs are `counters["stats"]["unique_graphs"]`;
recompiles are the compiles torch made of code it had compiled before (its
compilation metrics with a `recompile_reason`), which is the number of
"Recompiling function" records of TORCH_LOGS=recompiles less the ones the
recompile limit refused (torch logs those too, then its "hit
config.recompile_limit" warning); graph breaks are the "Graph break in user
code" records of TORCH_LOGS=graph_breaks.

One change reaching several compiled frames in one call (a forward that
graph-breaks, functions compiled one by one) is one finding that lists the
frames, counted once per frame as torch counts them. A graph break that Dynamo
cannot resume after (an unsupported context manager) skips the frame, which
runs eagerly: a graph break, no compile error.

Real torch.compile, in-process, backend "eager"."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from dataclasses import dataclass

import pytest
import torch
import torch._dynamo
import torch.nn as nn

import graphdbg
from conftest import line_of, report_doc, report_text, stack
from graphdbg.runfile.query import Run
from graphdbg.testing import Limits, counts_of, violations

HERE = __file__
in_process = pytest.mark.usefixtures("clean_torch")

_LOGGERS = ("torch._dynamo.guards.__recompiles",
            "torch._dynamo.symbolic_convert.__graph_breaks",
            "torch._dynamo.convert_frame.__graph_breaks",
            "torch._dynamo.convert_frame")


@dataclass
class TorchCounts:
    """What torch itself counted over a block."""
    graphs: int = 0               # counters["stats"]["unique_graphs"]
    recompiles: int = 0           # compilation metrics with a recompile reason, not refused
    refused: int = 0              # ... refused by the recompile limit
    recompiling_records: int = 0  # "Recompiling function ..." (TORCH_LOGS=recompiles)
    limit_warnings: int = 0       # "torch._dynamo hit config.recompile_limit ..."
    graph_break_records: int = 0  # "Graph break ... in user code" (TORCH_LOGS=graph_breaks)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def torch_counts():
    """torch's own counts of what the block compiles (enter it outside
    `graphdbg.capture`: torch's set_logs resets its trace handlers)."""
    from torch._dynamo.utils import clear_compilation_metrics, counters, get_compilation_metrics
    out = TorchCounts()
    clear_compilation_metrics()
    graphs = counters["stats"]["unique_graphs"]
    records = _Records()
    torch._logging.set_logs(recompiles=True, graph_breaks=True)
    loggers = [logging.getLogger(n) for n in _LOGGERS]
    for lg in loggers:
        lg.addHandler(records)
    try:
        yield out
    finally:
        for lg in loggers:
            lg.removeHandler(records)
        torch._logging.set_logs()
    metrics = [m for m in get_compilation_metrics() if m.recompile_reason is not None]
    out.refused = sum("recompile limit exceeded" in (m.fail_reason or "")
                      or m.fail_type == "FailOnRecompileLimitHit" for m in metrics)
    out.recompiles = len(metrics) - out.refused
    out.graphs = counters["stats"]["unique_graphs"] - graphs
    out.recompiling_records = sum(m.startswith("Recompiling function") for m in records.messages)
    out.limit_warnings = sum(m.startswith("torch._dynamo hit config.") for m in records.messages)
    out.graph_break_records = sum(m.startswith("Graph break ")
                                  for m in records.messages)


def assert_counts_are_torchs(run_path, tc: TorchCounts) -> dict:
    """graphdbg's counts (the report's, the pytest marker's, the run's) are
    torch's; returns the report document."""
    doc = report_doc(run_path)
    with Run(str(run_path)) as run:
        mine = counts_of(run)
    # torch's two records of recompiles agree: its log less the refused ones
    assert tc.recompiles == tc.recompiling_records - tc.limit_warnings
    assert tc.refused == tc.limit_warnings
    assert mine.graphs == len(doc["graphs"]) == tc.graphs
    assert mine.recompiles == tc.recompiles
    assert doc["run"]["counts"].get("recompiles", 0) == tc.recompiles
    assert doc["run"]["counts"].get("recompile_limit_hits", 0) == tc.limit_warnings
    assert mine.graph_breaks == tc.graph_break_records
    assert doc["run"]["torch_counters"]["unique_graphs"] >= tc.graphs
    return doc


def kinds(doc: dict) -> list[tuple[str, str, str, int]]:
    return sorted((d["kind"], d["severity"], d["file"], d["line"]) for d in doc["diagnostics"])


# -- 1. the recompile limit: the refused recompile and the limit count no recompile ----------

def times(x, k):
    return x * k  # MARK k used


@in_process
def test_the_recompile_limit_counts_only_the_recompiles_torch_made(tmp_path):
    # 2 graphs (1 recompile), then the limit refuses the third: 1 recompile,
    # as torch counts it, and one error for the limit
    run = tmp_path / "x.run"
    with torch_counts() as tc:
        with torch._dynamo.config.patch(recompile_limit=2), graphdbg.capture(str(run)):
            f = torch.compile(times, backend="eager", dynamic=False)
            for k in range(3):
                assert torch.equal(f(torch.ones(2), k), torch.full((2,), float(k)))  # MARK calls
    assert (tc.graphs, tc.recompiles, tc.refused) == (2, 1, 1)
    doc = assert_counts_are_torchs(run, tc)
    site = line_of(HERE, "k used")
    assert kinds(doc) == [("compile_error", "error", HERE, site),
                          ("recompile", "warning", HERE, site)]
    (limit,) = [d for d in doc["diagnostics"] if d["kind"] == "compile_error"]
    (guard,) = [d for d in doc["diagnostics"] if d["kind"] == "recompile"]
    assert guard["count"] == 1 and guard["message"].endswith("k changed: was 0, now 1")
    assert guard["detail"]["frame_recompiles"] == 1
    assert limit["count"] == 1 and limit["detail"]["recompile_limit"] is True
    assert ("recompile limit hit (recompile_limit=2): times() at test_counts.py:"
            f"{times.__code__.co_firstlineno} is not compiled again (k changed: was 1, now 2)"
            in limit["message"])
    assert "k is not one of 0, 1" in limit["message"]
    assert limit["detail"]["refused"]["change"] == "k changed: was 1, now 2"
    assert limit["detail"]["guard_finding"] is not None
    assert (HERE, line_of(HERE, "calls")) in stack(limit)
    assert "2 graphs, 1 recompile, 1 compile error" in report_text(run)
    # the pytest marker: 1 recompile is within max_recompiles=1; the limit is an error
    with Run(str(run)) as r:
        over = violations(r, Limits(max_recompiles=1, compare=False))
    assert [v.what for v in over] == ["1 error(s) in compiles"]
    assert [f.kind for f in over[0].findings] == ["compile_error"]


@in_process
def test_a_recompile_limit_of_one_refuses_the_first_recompile(tmp_path):
    run = tmp_path / "x.run"
    with torch_counts() as tc:
        with torch._dynamo.config.patch(recompile_limit=1), graphdbg.capture(str(run)):
            f = torch.compile(times, backend="eager", dynamic=False)
            f(torch.ones(2), 0)
            f(torch.ones(2), 1)
    assert (tc.graphs, tc.recompiles, tc.refused) == (1, 0, 1)
    doc = assert_counts_are_torchs(run, tc)
    assert kinds(doc) == [("compile_error", "error", HERE, line_of(HERE, "k used"))]
    (limit,) = doc["diagnostics"]
    assert "(k changed: was 0, now 1)" in limit["message"]
    # no recompile finding to point at: the guard's own advice
    assert "torch.tensor(k)" in limit["hint"] and "recompile_limit" in limit["hint"]


# -- 2. one change, several compiled frames: one finding -------------------------------------

class Chatty(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.c = nn.Linear(4, 4)

    def forward(self, x):
        h = self.a(x)
        print("after a")  # MARK first break
        h = self.b(h).relu()
        print("after b")  # MARK second break
        return self.c(h)


@in_process
def test_one_size_change_through_graph_breaks_is_one_finding(tmp_path, capsys):
    # the forward runs as 3 compiled frames (itself and two resume functions),
    # each guarding the sequence length: a new length recompiles all three
    run = tmp_path / "x.run"
    model = Chatty()
    with torch_counts() as tc:
        with graphdbg.capture(str(run)):
            m = torch.compile(model, backend="eager", dynamic=False)
            m(torch.randn(2, 8, 4))
            m(torch.randn(2, 12, 4))  # MARK new length
            m(torch.randn(2, 8, 4))   # compiled for 8 already
            m(torch.randn(2, 16, 4))  # MARK newer length
    assert (tc.graphs, tc.recompiles) == (9, 6)
    doc = assert_counts_are_torchs(run, tc)
    assert kinds(doc) == [("graph_break", "warning", HERE, line_of(HERE, "first break")),
                          ("graph_break", "warning", HERE, line_of(HERE, "second break")),
                          ("recompile", "warning", HERE, line_of(HERE, "new length"))]
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "recompile"]
    assert (HERE, line_of(HERE, "newer length")) not in stack(d)  # the first call's stack
    assert d["count"] == d["detail"]["frame_recompiles"] == 6
    assert len(d["compile_ids"]) == 6
    fwd = Chatty.forward.__code__.co_firstlineno
    names = [f["name"] for f in d["detail"]["frames"]]
    assert names == [f"forward() at test_counts.py:{line}" for line in
                     (fwd, line_of(HERE, "first break"), line_of(HERE, "second break"))]
    assert [f["recompiles"] for f in d["detail"]["frames"]] == [2, 2, 2]
    # what each call changed since the call before (the length 8 was used last)
    assert d["detail"]["changes"] == [{"expected": "8", "actual": "12"},
                                      {"expected": "8", "actual": "16"}]
    assert d["message"] == (f"recompile of forward() at test_counts.py:{fwd}: tensor 'x' size "
                            f"(dim 1) changed 2 times: 8 -> 12 -> 8 -> 16 (3 compiled frames "
                            f"recompiled: {', '.join(names)})")
    assert "mark_dynamic(x, 1)" in d["hint"]


def helper(h):
    h = h.cos()
    print("inside helper")  # MARK helper break
    return h + 1


def outer(x):
    return helper(x.sin()) * 2  # MARK outer calls helper


@in_process
def test_a_nested_function_compiled_as_frames_of_its_own_is_one_finding(tmp_path, capsys):
    # Dynamo cannot inline `helper` (it graph-breaks): outer, helper and the
    # resume functions after each break are compiled frames of their own
    run = tmp_path / "x.run"
    with torch_counts() as tc:
        with graphdbg.capture(str(run)):
            f = torch.compile(outer, backend="eager", dynamic=False)
            f(torch.randn(4))
            f(torch.randn(2))  # MARK nested call
    assert tc.recompiles >= 3
    doc = assert_counts_are_torchs(run, tc)
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "recompile"]
    assert (d["kind"], d["severity"], d["file"], d["line"]) == (
        "recompile", "warning", HERE, line_of(HERE, "nested call"))
    assert [(b["kind"], b["severity"], b["file"], b["line"]) for b in doc["diagnostics"]
            if b["kind"] == "graph_break"] == [
        ("graph_break", "warning", HERE, line_of(HERE, "helper break"))]
    assert d["count"] == d["detail"]["frame_recompiles"] == tc.recompiles
    functions = [f["function"] for f in d["detail"]["frames"]]
    assert functions[0] == "outer" and "helper" in functions
    assert len(functions) == tc.recompiles
    assert d["message"].startswith(f"recompile of outer() at test_counts.py:"
                                   f"{outer.__code__.co_firstlineno}: tensor 'x' size (dim 0) "
                                   f"changed: was 4, now 2 ({tc.recompiles} compiled frames "
                                   f"recompiled: outer() at test_counts.py:")


def first_half(x):
    return x.sin() * 2


def second_half(x):
    return x.cos() + 1


c_first = c_second = None


def two_compiled_halves(x):
    return c_second(c_first(x))  # MARK halves


def two_compiled_lines(x):
    h = c_first(x)  # MARK first line
    return c_second(h)  # MARK second line


@in_process
def test_functions_compiled_one_by_one(tmp_path):
    # called on one line: one finding; on two lines: two (a finding's frames
    # are those of one line's call)
    global c_first, c_second
    run = tmp_path / "x.run"
    with torch_counts() as tc:
        with graphdbg.capture(str(run)):
            c_first = torch.compile(first_half, backend="eager", dynamic=False)
            c_second = torch.compile(second_half, backend="eager", dynamic=False)
            two_compiled_halves(torch.randn(4))
            two_compiled_halves(torch.randn(2))  # MARK halves again
            # another call, another change: a finding of its own (a dtype, not a size)
            two_compiled_halves(torch.randn(2, dtype=torch.float64))  # MARK halves double
            # on two lines: two findings (here a new requires_grad)
            two_compiled_lines(torch.randn(2, requires_grad=True))
    c_first = c_second = None
    assert (tc.graphs, tc.recompiles) == (8, 6)
    doc = assert_counts_are_torchs(run, tc)
    site = line_of(HERE, "halves")
    assert kinds(doc) == sorted([("recompile", "warning", HERE, site)] * 2 + [
        ("recompile", "warning", HERE, line_of(HERE, "first line")),
        ("recompile", "warning", HERE, line_of(HERE, "second line"))])
    size, dtype = sorted((d for d in doc["diagnostics"] if d["line"] == site),
                         key=lambda d: d["id"])
    assert (HERE, line_of(HERE, "halves again")) in stack(size)
    assert (HERE, line_of(HERE, "halves double")) in stack(dtype)
    for d in (size, dtype):
        assert d["count"] == d["detail"]["frame_recompiles"] == 2
        assert [f["function"] for f in d["detail"]["frames"]] == ["first_half", "second_half"]
    assert size["message"].endswith("tensor 'x' size (dim 0) changed: was 4, now 2 (2 compiled "
                                    "frames recompiled: first_half() at test_counts.py:"
                                    f"{first_half.__code__.co_firstlineno}, second_half() at "
                                    f"test_counts.py:{second_half.__code__.co_firstlineno})")
    assert "tensor 'x' dtype changed: was Float, now Double (2 compiled frames" in dtype["message"]
    for mark in ("first line", "second line"):
        (d,) = [d for d in doc["diagnostics"] if d["line"] == line_of(HERE, mark)]
        assert d["count"] == 1 and len(d["detail"]["frames"]) == 1
        assert "requires_grad changed: was False, now True" in d["message"]


@in_process
def test_a_tiny_transformers_model_recompiles_once_per_new_length(tmp_path, monkeypatch):
    # transformers 5 graph-breaks with labels (a logging call in its loss
    # property): the wrapper, the model's forward, the loss and its output's
    # __init__ are compiled frames, each recompiled for a new sequence length
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32,
                                     n_positions=32, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).eval()
    run = tmp_path / "x.run"
    with torch_counts() as tc:
        with graphdbg.capture(str(run), eager=False, compare=False):
            m = torch.compile(model, backend="eager")
            for t in (8, 12):
                ids = torch.randint(0, 32, (2, t))
                m(ids, labels=ids)  # MARK hf call
    assert tc.recompiles >= 2
    doc = assert_counts_are_torchs(run, tc)
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "recompile"]
    assert (d["kind"], d["severity"], d["file"], d["line"]) == (
        "recompile", "warning", HERE, line_of(HERE, "hf call"))
    assert d["count"] == d["detail"]["frame_recompiles"] == tc.recompiles
    assert len(d["detail"]["frames"]) == tc.recompiles
    assert "size (dim 1) changed: was 8, now 12" in d["message"]
    assert f"({tc.recompiles} compiled frames recompiled: " in d["message"]
    assert {f["function"] for f in d["detail"]["frames"]} >= {"forward", "ForCausalLMLoss"}


# -- 3. a graph break Dynamo cannot resume after: no compile error -----------------------------

LOCK = threading.Lock()


def under_a_lock(x):
    y = x + 1
    with LOCK:  # MARK lock
        y = y * 2
    return y.sin()


class DevNull:
    def __enter__(self):
        self.f = open(os.devnull)  # MARK open
        return self

    def __exit__(self, *exc):
        self.f.close()
        return False


def under_a_user_context_manager(x):
    y = x + 1
    with DevNull():  # MARK user with
        y = y * 2
    return y.cos()


@in_process
def test_an_unsupported_context_manager_is_a_graph_break_only(tmp_path):
    run = tmp_path / "x.run"
    x = torch.randn(3)
    with torch_counts() as tc:
        with graphdbg.capture(str(run)):
            a = torch.compile(under_a_lock, backend="eager")(x)
            b = torch.compile(under_a_user_context_manager, backend="eager")(x)
            b2 = torch.compile(under_a_user_context_manager, backend="eager")(x)
    assert torch.equal(a, ((x + 1) * 2).sin()) and torch.equal(b, ((x + 1) * 2).cos())
    assert torch.equal(b2, b)
    assert tc.graphs == 0 and tc.graph_break_records == 2
    doc = assert_counts_are_torchs(run, tc)
    assert kinds(doc) == sorted([("graph_break", "warning", HERE, line_of(HERE, "lock")),
                                 ("graph_break", "warning", HERE, line_of(HERE, "open"))])
    lock, user = sorted(doc["diagnostics"], key=lambda d: d["line"] != line_of(HERE, "lock"))
    assert lock["detail"]["gb_type"] == "Unsupported context manager"
    assert lock["message"].startswith("graph break: Unsupported context manager (torch.compile "
                                      "cannot resume after it: under_a_lock() at test_counts.py:")
    assert lock["message"].endswith("runs eagerly)")
    assert user["message"].startswith("graph break: Failed to trace builtin operator")
    assert (HERE, line_of(HERE, "user with")) in stack(user)
    for d in (lock, user):
        assert d["count"] == 1 and d["detail"]["frame_skipped"] is True
    assert report_doc(run)["run"]["internal_errors"] == []


def prints(x):
    print("traced around")  # MARK print break
    return x + 1


@in_process
def test_a_graph_break_dynamo_resumes_after_is_not_marked_skipped(tmp_path, capsys):
    run = tmp_path / "x.run"
    with torch_counts() as tc:
        with graphdbg.capture(str(run)):
            torch.compile(prints, backend="eager")(torch.ones(2))
    doc = assert_counts_are_torchs(run, tc)
    (d,) = doc["diagnostics"]
    assert (d["kind"], d["severity"], d["file"], d["line"]) == (
        "graph_break", "warning", HERE, line_of(HERE, "print break"))
    assert d["detail"]["frame_skipped"] is False and "runs eagerly" not in d["message"]


def _small(x):
    return x.sin() + 1


def _larger(x):
    for _ in range(40):
        x = torch.cos(x) * 2 - x
    return x


@in_process
def test_compile_ids_repeated_after_a_reset_keep_each_graph_its_own_compile(tmp_path):
    # torch._dynamo.reset() starts compile ids again at 0/0: the second 0/0's
    # time and graphs are not the first's (it was charged to both)
    run = tmp_path / "x.run"
    with graphdbg.capture(str(run)):
        torch.compile(_larger, backend="eager")(torch.ones(3))
        torch._dynamo.reset()
        torch.compile(_small, backend="eager")(torch.ones(3))
    with Run(str(run)) as r:
        graphs = {g.function: g for g in r.graphs()}
        times = r.compile_times()
    assert [g.compile_id for g in graphs.values()] == ["0/0", "0/0"]
    assert [(t.compile_id, t.function, t.graph_ids) for t in times] == [
        ("0/0", "_larger", (graphs["_larger"].id,)), ("0/0", "_small", (graphs["_small"].id,))]
    assert graphs["_larger"].compile_time_s == pytest.approx(times[0].total_s, rel=1e-6)
    assert graphs["_small"].compile_time_s == pytest.approx(times[1].total_s, rel=1e-6)
