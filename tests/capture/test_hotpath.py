"""A compiled call's steady state (issue 34): after the sampled, checked and
recorded calls, a call costs graphdbg a counter and a clock; its graph's
counts and times stay whole, the kernels' module globals are inductor's
own again, and the program computes what it computes without graphdbg.
In-process on real torch.compile (inductor and a user's backend)."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import graphdbg
from graphdbg.hooks.record import backend as backend_mod
from graphdbg.runfile.query import Run
from conftest import query

in_process = pytest.mark.usefixtures("clean_torch")

CALLS = 150   # past STATS_FIRST_CALLS and two STATS_EVERY samples


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                               torch.nn.Linear(32, 32), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 8)).eval()


def call_many(compiled, x, n: int = CALLS) -> list[torch.Tensor]:
    with torch.no_grad():
        return [compiled(x) for _ in range(n)]


@in_process
def test_steady_calls_are_counted_and_timed_without_a_row_each(tmp_path):
    x = torch.randn(4, 16)
    model = mlp()
    plain = call_many(torch.compile(model, backend="inductor"), x)
    torch._dynamo.reset()
    path = tmp_path / "x.run"
    with graphdbg.capture(str(path)):
        observed = call_many(torch.compile(model, backend="inductor"), x)
    # the observer rule: bitwise the same results
    assert all(torch.equal(a, b) for a, b in zip(plain, observed))
    with Run(str(path)) as run:
        (g,) = run.graphs()
        rows = query(path, "SELECT call_idx, wall_ns FROM calls ORDER BY seq")
        totals = run.call_totals()[g.id]
    # every call counted, though most have no row
    assert g.calls == CALLS
    assert len(rows) < CALLS / 2 and [r["call_idx"] for r in rows[:8]] == list(range(8))
    assert totals["calls"] == CALLS - len(rows)
    assert {r["call_idx"] for r in rows} >= {0, 64, 128}   # the sampled ones
    # their time too: the rows' and the totals' together
    assert g.total_call_ns == sum(r["wall_ns"] for r in rows) + totals["total_ns"]
    assert g.min_call_ns <= totals["min_ns"] <= totals["max_ns"] <= g.max_call_ns
    assert g.min_call_ns == min(min(r["wall_ns"] for r in rows), totals["min_ns"])
    # each call is a step (no optimizer): every step's end is known, but the
    # steps that wrote nothing share their event, so steady calls write none
    with Run(str(path)) as run:
        ends, by = run.step_ends()
    events = query(path, "SELECT seq, payload FROM events WHERE name = 'graphdbg_step'")
    assert by == "compiled call" and len(ends) == CALLS
    assert len(events) <= len(rows) + 2 < CALLS / 2
    assert ends == sorted(ends)


@in_process
def test_inductors_kernel_globals_are_its_own_after_timing(tmp_path):
    x = torch.randn(4, 16)
    with graphdbg.capture(str(tmp_path / "x.run")) as cap:
        kernels = cap._session._core[0]
        call_many(torch.compile(mlp(), backend="inductor"), x, 20)
        mods = [m for m in kernels.modules if m.module is not None and m.patched]
        assert mods, "no inductor module was instrumented"
        for m in mods:   # an inference module: nothing of graphdbg's stays in it
            assert m.part == "inference"
            g = m.module.__dict__
            assert all(g[base] is orig for base, orig in m.patched.items())
    doc_calls = {k.calls for k in Run(str(tmp_path / "x.run")).kernel_times()}
    assert doc_calls == {20}


@in_process
def test_a_backward_module_keeps_counting_through_a_namespace_copy(tmp_path):
    """A backward whose first kernel is reached through ``extern_kernels``:
    its calls are counted by a copy of the namespace, every other attribute
    the original's."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16)
    f = torch.compile(lambda t: lin(t).relu().sum(), backend="inductor")
    x = torch.randn(8, 16)
    with graphdbg.capture(str(tmp_path / "x.run")) as cap:
        kernels = cap._session._core[0]
        for _ in range(12):
            f(x).backward()
        back = [m for m in kernels.modules if m.part == "backward" and m.module is not None]
        assert back
        for m in back:
            base, _, attr = m.order[0][0].partition(".")
            shim = m.module.__dict__[base]
            if attr:   # no __getattr__ on the way to the other kernels
                assert type(shim).__name__ == "_CountingNamespace"
                assert getattr(shim, attr) is not getattr(m.patched[base], attr)
                others = [k for k in vars(m.patched[base]) if k != attr]
                assert all(getattr(shim, k) is getattr(m.patched[base], k) for k in others)
    ks = Run(str(tmp_path / "x.run")).kernel_times()
    assert {k.part for k in ks} == {"forward", "backward"}
    assert {k.calls for k in ks} == {12}


@in_process
def test_calls_in_recorded_eager_steps_keep_their_rows(tmp_path):
    """With every step's eager ops recorded, every call has its row (graphdbg
    diff pairs them with the step's ops)."""
    x = torch.randn(4, 16)
    path = tmp_path / "x.run"
    with graphdbg.capture(str(path), eager_steps=(1, 1)):
        call_many(torch.compile(mlp(), backend="inductor"), x, 80)
    with Run(str(path)) as run:
        (g,) = run.graphs()
        assert g.calls == 80 and run.call_totals() == {}
    assert query(path, "SELECT COUNT(*) AS n FROM calls")[0]["n"] == 80


@in_process
def test_a_steady_call_that_raises_leaves_the_recorder_as_it_was(tmp_path):
    """The program's exception from a steady call goes on; the eager recorder
    is back where it was, and recording goes on after it."""
    state = {"fail": False}

    def flaky(gm, example_inputs):
        def run(*args):
            if state["fail"]:
                raise RuntimeError("the backend's own failure")
            return gm(*args)
        return run

    f = torch.compile(lambda t: (t * 2).sin(), backend=flaky)
    x = torch.randn(4)
    path = tmp_path / "x.run"
    with graphdbg.capture(str(path), compare=False) as cap:
        ctx = cap._session._ctx
        for _ in range(30):
            f(x)
        before = (ctx.eager_paused, _get_current_dispatch_mode_stack())
        state["fail"] = True
        with pytest.raises(RuntimeError, match="the backend's own failure"):
            f(x)
        state["fail"] = False
        assert (ctx.eager_paused, _get_current_dispatch_mode_stack()) == before
        assert ctx.last_call[2] is True and ctx.in_call is None
        f(x)
    with Run(str(path)) as run:
        (g,) = run.graphs()
        assert g.calls == 31   # the one that raised has neither row nor time


def test_the_steady_path_starts_after_the_sampled_calls():
    assert backend_mod.summarized_call(0) and backend_mod.summarized_call(64)
    assert not backend_mod.summarized_call(backend_mod.STATS_FIRST_CALLS)


@in_process
def test_a_disabled_result_runs_in_dynamos_one_disable_wrapper(tmp_path):
    """A backend that returns a `torch._dynamo.disable`d function (inductor
    does): Dynamo's own wrapper unwraps it, so a plain run has one wrapper;
    graphdbg's stands between the two and calls the innermost function too
    (a second wrapper cost 1-2 µs a call)."""
    def disabling(gm, example_inputs):
        return torch._dynamo.disable(gm.forward)

    x = torch.randn(4, 16)
    model = mlp()
    plain = call_many(torch.compile(model, backend=disabling), x, 12)
    torch._dynamo.reset()
    with graphdbg.capture(str(tmp_path / "x.run")):
        observed = call_many(torch.compile(model, backend=disabling), x, 12)
        import sys
        ours = [v for m in list(sys.modules.values()) for k, v in list(vars(m).items())
                if k.startswith("__compiled_fn") and hasattr(v, "_graphdbg_inner")]
    assert all(torch.equal(a, b) for a, b in zip(plain, observed))
    assert ours and all(not getattr(w._graphdbg_inner, "_torchdynamo_disable", False)
                        for w in ours)
