"""What the check records for `graphdbg repro` (hooks/check/reprorecord.py), in
process: the budget for recorded values, what cannot be encoded, and a named
backend whose subgraph does not diverge standalone (refused, attempt kept)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import torch.fx
from safetensors.torch import save

from graphdbg.hooks.check import reprorecord
from graphdbg.repro.make import make
from graphdbg.repro.plan import Plan, Refused, _divergence, spec_of


class Rows:
    def __init__(self):
        self.rows = []

    def add(self, row):
        self.rows.append(row)


def _graph(n: int):
    def f(x):
        return torch.tanh(x) * 2
    gm = torch.fx.symbolic_trace(f)
    x = torch.randn(n)
    values = {"x": x, "tanh": torch.tanh(x)}
    return gm, x, values


def _record(gm, x, values, backend="aot_eager"):
    loc = SimpleNamespace(node="tanh", target="torch.tanh", stage="user",
                          isolated={"decided": True, "diverges": True})
    ref = SimpleNamespace(values=values, seen={})
    rows = Rows()
    reprorecord.divergence(rows, 3, gm, loc, ref, [x], backend, None)
    (row,) = rows.rows
    return row, spec_of(row.safetensors)


def test_inputs_over_the_budget_are_not_kept_and_the_repro_is_refused_with_the_size():
    gm, x, values = _graph(reprorecord.BUDGET_BYTES // 4 + 1)   # float32: just over 4 MB
    row, spec = _record(gm, x, values)
    assert row.owner == "repro:divergence:3:tanh"
    assert len(row.safetensors) < 4096            # the spec only, no values
    assert "over the 4 MB that graphdbg keeps for a repro at check time" in spec["refused"]
    f = SimpleNamespace(graph_id=3, node="tanh", detail=None)
    run = SimpleNamespace(tensors=lambda owner: [SimpleNamespace(data=row.safetensors)])
    with pytest.raises(Refused, match=r"cannot be reproduced standalone: its inputs are 4\.0 MB"):
        _divergence(run, 1, f)


def test_a_small_cut_keeps_its_inputs_and_a_named_backend():
    gm, x, values = _graph(16)
    row, spec = _record(gm, x, values)
    assert spec["backend"] == {"name": "aot_eager", "named": True}
    assert [n["op"] for n in spec["nodes"]] == ["placeholder", "call_function", "output"]
    assert spec["nodes"][1]["target"] == "torch.tanh" and spec["input_bytes"] == 64


def test_an_op_the_program_registered_cannot_be_encoded():
    with pytest.raises(reprorecord.NotEncodable, match="defined outside torch"):
        reprorecord.qualname(lambda x: x)
    assert reprorecord.qualname(torch.ops.aten.add.Tensor) == "torch.ops.aten.add.Tensor"
    assert reprorecord.qualname(__import__("operator").add) == "operator.add"


def test_a_subgraph_that_agrees_standalone_is_not_offered(tmp_path):
    """Recorded as diverging, but compiled by name it matches eager: refused, kept."""
    gm, x, values = _graph(16)
    _, spec = _record(gm, x, values)
    blob = save({"x": x.contiguous()}, metadata={"graphdbg_repro": json.dumps(spec)})
    p = Plan(1, "divergence", spec, blob, "Graph 3's node tanh diverges (test).", None)
    r = make(p, str(tmp_path / "t.run"), str(tmp_path / "out"))
    assert not r.ok and "compiled matches eager" in r.why, r
    assert "agrees: compiled matches eager" in r.output
    assert (tmp_path / "out" / "attempt" / "inputs.safetensors").exists()
    assert not (tmp_path / "out" / "repro.py").exists()


@pytest.mark.parametrize("classification,said", [
    ("precision", "is a precision difference"), ("random", "different random draws")])
def test_a_divergence_that_is_no_bug_has_no_repro(classification, said):
    f = SimpleNamespace(graph_id=1, node="n", detail=SimpleNamespace(classification=classification))
    with pytest.raises(Refused, match=said):
        _divergence(SimpleNamespace(tensors=lambda owner: []), 1, f)


def test_a_gradient_divergence_reads_its_own_record():
    """A divergence of gradients reads ``repro:divergence:<graph>:<node>:backward``;
    a run without it (an older graphdbg) says so."""
    f = SimpleNamespace(graph_id=1, node="n", detail=SimpleNamespace(
        classification="miscompile", direction="backward"))
    asked = []

    def tensors(owner):
        asked.append(owner)
        return []
    with pytest.raises(Refused, match="divergence of gradients at n.* did not record gradient"):
        _divergence(SimpleNamespace(tensors=tensors), 1, f)
    assert asked == ["repro:divergence:1:n:backward"]


def test_the_programs_inductor_mode_and_options_reach_the_script():
    """torch.compile(mode=..., options=...) of a named inductor backend: the
    script compiles with the options inductor ran with (a mode becomes its
    options); a backend given by name takes none."""
    from graphdbg.hooks.record.backend import backend_options
    from graphdbg.repro import script
    wrapper = torch._TorchCompileInductorWrapper("max-autotune-no-cudagraphs",
                                                 {"epilogue_fusion": False}, False)
    opts = backend_options(wrapper)
    assert opts == {"max_autotune": True, "coordinate_descent_tuning": True,
                    "epilogue_fusion": False}
    assert backend_options(torch._TorchCompileInductorWrapper(None, None, False)) is None
    assert backend_options("aot_eager") is None

    gm, x, values = _graph(16)

    def compile_user(g, inputs):
        return g
    compile_user.backend_options = opts
    loc = SimpleNamespace(node="tanh", target="torch.tanh", stage="user",
                          isolated={"decided": True, "diverges": True})
    rows = Rows()
    reprorecord.divergence(rows, 3, gm, loc, SimpleNamespace(values=values, seen={}), [x],
                           "inductor", compile_user)
    spec = spec_of(rows.rows[0].safetensors)
    assert spec["backend"] == {"name": "inductor", "named": True, "options": opts}
    code = script.divergence(spec, "what", "source", (1e-4, 1e-5))
    compile(code, "repro.py", "exec")
    assert f"backend='inductor', options={opts!r}, fullgraph=True" in code

    # a compile error's graph, compiled by inductor under the same options
    rows = Rows()
    reprorecord.failure(rows, 4, gm, RuntimeError("boom"), "inductor", 3, opts)
    spec = spec_of(rows.rows[0].safetensors)
    spec["nodes"][0]["meta"] = {"shape": [16], "stride": [1], "dtype": "float32"}
    code = script.compile_error(spec, "what", "source")
    compile(code, "repro.py", "exec")
    assert f"with torch._inductor.config.patch({opts!r}):" in code


def _judge_of(spec: dict):
    """The script's ``judge`` (its text executed, main not run)."""
    from graphdbg.repro import script
    ns: dict = {"__name__": "repro_under_test", "__file__": "repro.py"}
    exec(compile(script.divergence(spec, "what", "source"), "repro.py", "exec"), ns)
    return ns


@pytest.mark.parametrize("rtol,atol", [(None, None), (1e-3, None), (1e-2, 1e-2)])
def test_the_scripts_verdict_is_the_checks_under_the_runs_tolerances(rtol, atol):
    """--rtol/--atol are recorded with the repro and the script's judge says
    what the check's `finding` says: close, precision (float32: not a bug;
    bfloat16: a finding), miscompile, NaN on one side."""
    from graphdbg.hooks.check.numerics import Tolerance, finding
    gm, x, values = _graph(16)
    loc = SimpleNamespace(node="tanh", target="torch.tanh", stage="user",
                          isolated={"decided": True, "diverges": True})
    rows = Rows()
    reprorecord.divergence(rows, 3, gm, loc, SimpleNamespace(values=values, seen={}), [x],
                           "aot_eager", None, Tolerance(rtol, atol))
    spec = spec_of(rows.rows[0].safetensors)
    assert spec["tolerance"] == {"rtol": rtol, "atol": atol}
    ns = _judge_of(spec)
    assert (ns["RTOL"], ns["ATOL"]) == (rtol, atol)
    g = torch.Generator().manual_seed(1)
    j = torch.randn(64, dtype=torch.float64, generator=g)
    e = j.float()
    noise = torch.randn(64, generator=g)
    cases = {"same": (e, e.clone()), "scaled 1%": (e, e * 1.01), "scaled 0.2%": (e, e * 1.002),
             "noise 1e-5": (e, e + 1e-5 * noise), "nan": (e, torch.where(e > 1, float("nan"), e)),
             "bf16 rounding": (j.bfloat16(), (j * (1 + 3e-3)).bfloat16())}
    for what, (eager, compiled) in cases.items():
        check = finding(compiled, eager, j, Tolerance(rtol, atol)) is not None
        script = ns["judge"](eager, compiled, j)[0]
        assert script == check, (what, script, check)


def test_dynamic_is_carried_as_given_or_as_the_dims_the_graph_had_symbolic():
    from graphdbg.repro import script
    phs = [{"name": "x", "op": "placeholder", "meta": {"shape": [6, 4], "dtype": "float32",
                                                       "stride": [4, 1], "dynamic": [0]}},
           {"name": "s0", "op": "placeholder", "meta": {"int": 6}}]
    assert script._dynamic({"dynamic": True}, phs) == (", dynamic=True", "")
    assert script._dynamic({"dynamic": False}, phs) == (", dynamic=False", "")
    # automatic dynamic (a recompile made the size symbolic): the dims marked
    assert script._dynamic({"scalars": {"s0": 6}}, phs) == (
        "", "    torch._dynamo.mark_dynamic(args[0], 0)\n")
    from graphdbg.hooks.record.backend import compile_dynamic
    seen = []

    def backend(gm, inputs):
        seen.append(compile_dynamic())
        return gm.forward
    for dynamic in (True, False, None):
        torch._dynamo.reset()
        torch.compile(lambda x: x * 2, backend=backend, dynamic=dynamic)(torch.ones(3))
    torch._dynamo.reset()
    assert seen == [True, False, None]


def test_a_compile_errors_real_inputs_are_kept_within_the_budget():
    gm, x, _ = _graph(16)
    rows = Rows()
    reprorecord.failure(rows, 4, gm, RuntimeError("boom"), "aot_eager", 3, None, [x])
    spec = spec_of(rows.rows[0].safetensors)
    assert spec["values"] == ["x"]
    from safetensors.torch import load
    assert torch.equal(load(rows.rows[0].safetensors)["x"], x)
    # over the budget, or fake: random values (the README says so)
    big = torch.zeros(reprorecord.BUDGET_BYTES // 4 + 1)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(x)
    for inputs in ([big], [fake], None):
        rows = Rows()
        reprorecord.failure(rows, 4, gm, RuntimeError("boom"), "aot_eager", 3, None, inputs)
        assert "values" not in spec_of(rows.rows[0].safetensors)
