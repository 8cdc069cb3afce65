"""Capture details on real torch.compile: eager ops, compiled calls, source
mapping, libraries, value tiers. In-process under `graphdbg.capture`, except
the sample (a shared run) and an observer check (plain python vs graphdbg run)."""

from __future__ import annotations

import logging
import sys
import time

import pytest
import torch
import torch._dynamo
import graphdbg
from conftest import SAMPLES, at, group, line_of, query, report_doc, state_changes, torch_state

HERE = __file__
in_process = pytest.mark.usefixtures("clean_torch")


def sin_cos(t):
    return t.sin().cos() * 3  # MARK sin_cos body


@in_process
def test_compiled_work_is_never_recorded_as_eager(tmp_path):
    run = tmp_path / "x.run"
    with graphdbg.capture(str(run)):
        x = torch.randn(8, requires_grad=True)
        f = torch.compile(sin_cos, backend="aot_eager", fullgraph=True)
        y = f(x)
        y.sum().backward()
    assert x.grad.shape == (8,)
    ops = {r["op"] for r in query(run, "SELECT op FROM ops")}
    assert "aten.randn.default" in ops and "aten.sum.default" in ops
    assert not ops & {"aten.sin.default", "aten.cos.default", "aten.mul.Tensor"}
    (g,) = report_doc(run)["graphs"]
    assert g["calls"] == 1 and g["backend"] == "aot_eager"
    targets = [n["target"] for n in g["nodes"] if n["op"] == "call_method"]
    assert targets == ["sin", "cos"]
    sin = next(n for n in g["nodes"] if n["target"] == "sin")
    assert (sin["line"], sin["code"]) == at(HERE, "sin_cos body")
    assert sin["shapes"] == [[8]] and sin["dtypes"] == ["float32"]


@in_process
def test_a_test_failing_inside_a_capture_leaves_no_hook_behind(tmp_path):
    before = torch_state()
    with pytest.raises(AssertionError, match="the test's own failure"):
        with graphdbg.capture(str(tmp_path / "x.run")):
            torch.compile(sin_cos, backend="eager")(torch.ones(2))
            assert state_changes(before, torch_state())  # the hooks are in while it runs
            raise AssertionError("the test's own failure")  # MARK failing test
    assert state_changes(before, torch_state()) == []
    doc = report_doc(tmp_path / "x.run")
    assert (doc["run"]["status"], doc["run"]["exit_status"]) == ("failed", 1)
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "runtime_error"]
    assert d["line"] == line_of(HERE, "failing test") and "AssertionError" in d["message"]


@group("eager_only")
def test_eager_ops_forward_backward_lines_and_modules(runs):
    r = runs.golden("eager_only").ok()  # no compile in it: --backend is unused
    rows = query(r.run, "SELECT * FROM ops")
    frames = {f["id"]: f for f in query(r.run, "SELECT * FROM frames")}
    phases = {r["phase"] for r in rows}
    assert phases == {"init", "forward", "backward", "optimizer"}
    # init: the model's construction (its layers' reset_parameters), not its forward
    init = [r for r in rows if r["phase"] == "init"]
    assert {r["op"] for r in init} >= {"aten.uniform_.default"}
    assert not any(r["op"] == "aten.convolution.default" for r in init)
    # the optimizer's ops are at its step() and zero_grad() lines, and only there
    step = {frames[r["user_frame"]]["line"] for r in rows if r["phase"] == "optimizer"}
    assert step == {i for i, ln in enumerate((SAMPLES / "eager_only.py").read_text().splitlines(), 1)
                    if "optimizer.step()" in ln or "optimizer.zero_grad()" in ln}
    convs = [r for r in rows if r["op"] == "aten.convolution.default"]
    assert convs and all(r["module_class"] == "Conv2d" for r in convs)
    assert all(r["module_path"].count(".") >= 1 for r in convs)
    assert frames[convs[0]["user_frame"]]["file"] == str(SAMPLES / "eager_only.py")
    # backward ops map to the forward line that created their autograd node
    bw = [r for r in rows if r["phase"] == "backward" and r["op"] == "aten.convolution_backward.default"]
    assert bw and all(r["user_frame"] for r in bw)
    assert {frames[r["user_frame"]]["line"] for r in bw} <= {
        frames[r["user_frame"]]["line"] for r in convs}
    stats = [r["stats"] for r in rows if r["op"] == "aten.convolution.default"]
    assert all('"mean"' in s and '"norm"' in s for s in stats)


def double_with_nan():
    x = torch.tensor([1.0, float("nan"), 3.0])
    return x * 2


@in_process
def test_value_tiers(tmp_path):
    run = str(tmp_path / "x.run")
    with graphdbg.capture(run, values="none"):
        double_with_nan()
    assert all(r["stats"] is None for r in query(run, "SELECT stats FROM ops"))
    assert report_doc(run)["run"]["values"] == "none"
    with graphdbg.capture(run, values="health"):
        double_with_nan()
    (mul,) = query(run, "SELECT stats FROM ops WHERE op='aten.mul.Tensor'")
    assert mul["stats"] == '[{"nan":1,"inf":0}]'
    with graphdbg.capture(run, values="full"):
        double_with_nan()
    assert len(query(run, "SELECT id FROM tensors")) >= 2
    with graphdbg.capture(run, values="full", keep=r"aten\.mul"):
        double_with_nan()
    kept = query(run, "SELECT ops.op, tensors.safetensors FROM tensors "
                      "JOIN ops ON tensors.owner = 'op:' || ops.seq")
    assert [r["op"] for r in kept] == ["aten.mul.Tensor"]
    from safetensors.torch import load
    value = load(kept[0]["safetensors"])["value"]
    assert value[0] == 2 and value[2] == 6 and value[1].isnan()


FANCYLIB = '''\
import torch

def noisy_gelu(x):
    print("gelu on", tuple(x.shape))  # MARK lib print
    return torch.nn.functional.gelu(x)
'''


@in_process
def test_break_inside_a_library_is_reported_at_the_library_line(tmp_path, monkeypatch):
    lib = tmp_path / "vendor" / "fancylib"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text("")
    (lib / "layers.py").write_text(FANCYLIB)
    monkeypatch.syspath_prepend(str(tmp_path / "vendor"))
    monkeypatch.delitem(sys.modules, "fancylib", raising=False)
    monkeypatch.delitem(sys.modules, "fancylib.layers", raising=False)
    from fancylib.layers import noisy_gelu

    def block(x):
        h = x * 2
        return noisy_gelu(h) + 1  # MARK lib call

    run = tmp_path / "x.run"
    with graphdbg.capture(str(run)):
        torch.compile(block, backend="eager")(torch.randn(4))  # MARK lib compile
    (brk,) = [d for d in report_doc(run)["diagnostics"] if d["kind"] == "graph_break"]
    assert (brk["file"], brk["line"]) == (str(lib / "layers.py"), line_of(lib / "layers.py", "lib print"))
    assert brk["function"] == "noisy_gelu"
    chain = [(f["file"], f["line"]) for f in brk["stack"]]
    assert (HERE, line_of(HERE, "lib call")) in chain and (HERE, line_of(HERE, "lib compile")) in chain
    assert "print" in brk["reason"]
    monkeypatch.delitem(sys.modules, "fancylib")
    monkeypatch.delitem(sys.modules, "fancylib.layers")


def matmul_relu_sum(x, y):
    return (x @ y).relu().sum(dim=0)  # MARK matmul


@in_process
def test_backend_variants_callable_fullgraph_dynamic(tmp_path):
    seen = []

    def my_backend(gm, example_inputs):
        seen.append(len(gm.graph.nodes))
        return gm.forward

    run = tmp_path / "x.run"
    with graphdbg.capture(str(run)):
        a = torch.compile(matmul_relu_sum, backend=my_backend)
        b = torch.compile(matmul_relu_sum, backend="aot_eager", fullgraph=True, dynamic=True)
        for n in (3, 5):
            a(torch.randn(n, 4), torch.randn(4, 2))
            b(torch.randn(n, 4), torch.randn(4, 2))
    assert seen
    doc = report_doc(run)
    backends = [g["backend"] for g in doc["graphs"]]
    assert backends.count("my_backend") >= 1 and backends.count("aot_eager") == 1
    dyn = next(g for g in doc["graphs"] if g["backend"] == "aot_eager")
    assert dyn["calls"] == 2
    matmul = next(n for n in dyn["nodes"] if n["target"] == "_operator.matmul")
    assert all(isinstance(s, str) and s.startswith("s") for s in matmul["shapes"][0])
    assert (matmul["line"], matmul["code"]) == at(HERE, "matmul")
    assert matmul["code"].startswith("return (x @ y).relu().sum(dim=0)")
    outs = [r["outputs"] for r in query(run, "SELECT outputs FROM calls WHERE graph_id=?",
                                        (dyn["id"],))]
    assert len(outs) == 2 and all('"shape":[2]' in o and '"mean"' in o for o in outs)


def prints_then_adds(x):
    print("side effect")  # MARK side effect
    return x + 1


@in_process
def test_set_logs_does_not_remove_our_handler(tmp_path):
    run = tmp_path / "x.run"
    try:
        with graphdbg.capture(str(run)):
            torch._logging.set_logs(dynamo=logging.WARNING)  # clears torch's trace handlers
            torch.compile(prints_then_adds, backend="eager")(torch.ones(2))
    finally:
        torch._logging.set_logs()  # torch's defaults, as the other tests expect
    assert [(d["kind"], d["line"]) for d in report_doc(run)["diagnostics"]] == [
        ("graph_break", line_of(HERE, "side effect"))]


HIGHER_ORDER = '''\
import torch
from torch.utils.checkpoint import checkpoint

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def block(self, x):
        return torch.relu(self.a(x))

    def forward(self, x):
        h = checkpoint(self.block, x, use_reentrant=False)
        h = torch.cond(h.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (h,))
        y = torch.func.vmap(lambda r: r * 2)(h)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = self.b(y)
        return z.float().sum()

torch.manual_seed(0)
m = M()
x = torch.randn(4, 8, requires_grad=True)
eager = m(x)                                   # higher-order ops in eager, too
out = torch.compile(m, backend="aot_eager")(x)
out.backward()                                 # a compiled backward with a cond in it
print(eager.item(), out.item(), x.grad.sum().item())
'''


def test_higher_order_ops_run_unchanged_under_graphdbg(workdir, runs):
    # torch.cond, checkpoint, vmap and autocast, eager and compiled, forward and
    # backward: same numbers as plain python (the observer rule: two
    # processes), no findings, no internal errors
    (workdir / "hop.py").write_text(HIGHER_ORDER)
    plain = runs.spawn("hop.py", cwd=workdir).ok()
    observed = runs.spawn("-m", "graphdbg", "run", "-q", "-o", "x.run", "hop.py", cwd=workdir).ok()
    assert observed.stdout == plain.stdout
    doc = report_doc(workdir / "x.run")
    assert doc["diagnostics"] == [] and doc["run"]["internal_errors"] == []
    assert doc["graphs"] and all(g["status"] == "compiled" for g in doc["graphs"])


class PassThroughBackend:
    def __call__(self, gm, example_inputs):
        return gm.forward


@in_process
def test_a_callable_object_backend_is_named_by_its_class(tmp_path):
    # torch names such a backend by its repr, memory address included
    run = tmp_path / "x.run"
    with graphdbg.capture(str(run)):
        torch.compile(sin_cos, backend=PassThroughBackend())(torch.randn(4))
    (g,) = report_doc(run)["graphs"]
    assert g["backend"] == "PassThroughBackend"


def scaled_tanh(x):
    return torch.tanh(x @ x.T) * 2  # MARK scaled tanh


@in_process
def test_compile_time_by_phase_adds_up_to_what_the_program_waited(tmp_path):
    # aot_eager: the breakdown's total is torch's own timer of the compile, which
    # runs inside the program's first call (an order of events, not a speed)
    with graphdbg.capture(str(tmp_path / "x.run"), eager=False, compare=False):
        f = torch.compile(scaled_tanh, backend="aot_eager")
        t0 = time.perf_counter()
        f(torch.ones(4, 4))
        waited = time.perf_counter() - t0
        f(torch.ones(4, 4))           # a cached call compiles nothing
    with graphdbg.open_run(str(tmp_path / "x.run")) as run:
        (c,) = run.compile_times()
        (g,) = run.graphs()
    assert (c.compile_id, c.graph_ids, c.function) == ("0/0", (g.id,), "scaled_tanh")
    assert (c.file, c.line) == (HERE, line_of(HERE, "scaled tanh") - 1)
    assert c.total_s == pytest.approx(g.compile_time_s)
    assert sum(c.phases.values()) == pytest.approx(c.total_s, rel=0.05)
    assert 0 < c.total_s <= waited
    p = c.phases
    assert p["dynamo"] > 0 and p["backend"] > 0 and p["graphdbg"] > 0
    assert p["lowering"] == p["codegen"] == p["cpp"] == 0   # no inductor
    assert not c.recompile and not c.failed
    doc = report_doc(tmp_path / "x.run")
    assert doc["compile_times"][0]["phases"] == p


def breaks_at_once(x):  # MARK breaks at once
    torch._dynamo.graph_break()
    return x.sin()


@in_process
def test_a_compile_that_made_no_graph_is_named_by_its_code(tmp_path):
    with graphdbg.capture(str(tmp_path / "b.run"), eager=False, compare=False):
        torch.compile(breaks_at_once, backend="eager")(torch.ones(3))
    with graphdbg.open_run(str(tmp_path / "b.run")) as run:
        times = run.compile_times()
    empty = [c for c in times if not c.graph_ids]
    assert empty and all((c.function, c.file, c.line) == (
        "breaks_at_once", HERE, line_of(HERE, "breaks at once")) for c in empty)


def test_eager_ops_of_an_optimizer_step_are_phase_optimizer(tmp_path):
    import graphdbg as api
    from conftest import line_of, query
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters())
    with api.capture(str(tmp_path / "o.run")):
        model(torch.randn(2, 4)).sum().backward()  # MARK train forward
        opt.step()  # MARK optimizer step
    rows = query(tmp_path / "o.run", "SELECT o.phase, f.line FROM ops o JOIN frames f "
                 "ON f.id = o.user_frame")
    phases = {}
    for r in rows:
        phases.setdefault(r["line"], set()).add(r["phase"])
    assert phases[line_of(__file__, "optimizer step")] == {"optimizer"}
    assert phases[line_of(__file__, "train forward")] == {"forward", "backward"}
