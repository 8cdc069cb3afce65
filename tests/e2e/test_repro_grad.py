"""`graphdbg repro` for what the forward-only repro left out (docs/repro.md):
divergences of gradients (a forward fault only the gradients show, a fault of a
compiler package's backward graph, one that needs a fusion), torch.compile's
``dynamic=``, the run's ``--rtol``/``--atol``, and a compile error's real input
values.

One program, one run (module-scoped): its compiled functions each meet one
fault. The faulty compilers are a package registered by entry point (as a
third-party compiler is), so the scripts compile with them by name; the
package lies beside the program and on PYTHONPATH for the scripts' fresh
pythons. The plans are made in process; the repros by a program forked from
the tests' warm server (tests/support/make_repros.py), each script's check
forked from that program (GRAPHDBG_TEST_REPRO_FORK)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import SUPPORT, graphdbg

FAULTY = '''
"""A compiler package with faults, registered by entry point (torch_dynamo_backends)."""
import torch


def _scale(g, target, factor=1.01):
    for n in g.graph.nodes:
        if n.op == "call_function" and n.target is target:
            with g.graph.inserting_after(n):
                wrong = g.graph.call_function(
                    torch.ops.aten.mul.Tensor if isinstance(target, torch._ops.OpOverload)
                    else torch.mul, (n, factor))
            for u in list(n.users):
                if u is not wrong:
                    u.replace_input_with(n, wrong)
            g.recompile()
            return g
    return g


def _aot(bw):
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def compiler(gm, example_inputs):
        with torch._functorch.config.patch(enable_autograd_cache=False):
            return aot_autograd(fw_compiler=lambda g, i: make_boxed_func(g.forward),
                                bw_compiler=lambda g, i: make_boxed_func(bw(g).forward)
                                )(gm, example_inputs)
    return compiler


# the first mm of every backward graph scaled: the forward is right
faulty_bw = _aot(lambda g: _scale(g, torch.ops.aten.mm.default))


def _fused(g):
    """The first mm scaled only in a backward graph that has tanh's backward too."""
    if any(n.target is torch.ops.aten.tanh_backward.default for n in g.graph.nodes):
        _scale(g, torch.ops.aten.mm.default)
    return g


faulty_bw_fused = _aot(_fused)


def faulty_dyn(gm, example_inputs):
    """tanh scaled only in a graph whose sizes are symbolic (dynamic shapes)."""
    from torch._dynamo.backends.registry import lookup_backend
    symbolic = any(isinstance(s, torch.SymInt)
                   for n in gm.graph.nodes if n.op == "placeholder"
                   for v in [n.meta.get("example_value")] if isinstance(v, torch.Tensor)
                   for s in v.shape)
    if symbolic:
        _scale(gm, torch.tanh)
    return lookup_backend("aot_eager")(gm, example_inputs)


def faulty_values(gm, example_inputs):
    """Fails on inputs that are all non-negative (a value-dependent compile error)."""
    from torch._dynamo.backends.registry import lookup_backend
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    if tensors and all(bool((t >= 0).all()) for t in tensors):
        raise RuntimeError("faulty_values: every input is non-negative")
    return lookup_backend("aot_eager")(gm, example_inputs)
'''

ENTRY_POINTS = "[torch_dynamo_backends]\n" + "".join(
    f"{n} = faultybw:{n}\n" for n in ("faulty_bw", "faulty_bw_fused", "faulty_dyn", "faulty_values"))

PROGRAM = '''
import copy
import torch


class ScaleTanh:
    """Defined here: scales the tanh by 1.01, then aot_eager."""
    def __call__(self, gm, example_inputs):
        from torch._dynamo.backends.registry import lookup_backend
        graph = copy.deepcopy(gm.graph)
        for n in graph.nodes:
            if n.op == "call_function" and n.target is torch.tanh:
                with graph.inserting_after(n):
                    wrong = graph.call_function(torch.mul, (n, 1.01))
                for u in list(n.users):
                    if u is not wrong:
                        u.replace_input_with(n, wrong)
                gm = torch.fx.GraphModule(gm, graph)
                break
        return lookup_backend("aot_eager")(gm, example_inputs)


def straight_through(x, w):
    h = torch.relu(x @ w)
    t = torch.tanh(h)
    y = h + (t - t.detach())   # the value is h's; the gradient goes through tanh
    return (y * 2).sum(0)


def mlp(x, w1, w2):
    h = torch.relu(x @ w1)
    return torch.tanh(h @ w2).sum(0)


def fused(x, w):
    return torch.tanh(x @ w).sum(0)


def dyn(x):
    return torch.tanh(x * 2) + 1


def auto(x):
    return torch.tanh(x * 3) - 1


def values(x):
    return torch.sqrt(x) + 1


torch.manual_seed(0)
for fn, backend, args in [
        (straight_through, ScaleTanh(), (torch.randn(4, 8, requires_grad=True),
                                         torch.randn(8, 8, requires_grad=True))),
        (mlp, "faulty_bw", (torch.randn(4, 8), torch.randn(8, 8, requires_grad=True),
                            torch.randn(8, 8, requires_grad=True))),
        (fused, "faulty_bw_fused", (torch.randn(4, 8), torch.randn(8, 8, requires_grad=True)))]:
    out = torch.compile(fn, backend=backend)(*args)
    out.sum().backward()
    print(fn.__name__, out.sum().item())
print("dyn", torch.compile(dyn, backend="faulty_dyn", dynamic=True)(torch.randn(6)).sum().item())
compiled = torch.compile(auto, backend="faulty_dyn")   # a new size: recompiled with it dynamic
print("auto", [compiled(torch.randn(n)).sum().item() for n in (6, 7)])
try:
    torch.compile(values, backend="faulty_values")(torch.rand(8))
except Exception as exc:
    print("values:", type(exc).__name__)
'''


def _finding(run, fn: str, kind: str = "divergence"):
    """The number of the finding of ``kind`` in function ``fn``."""
    for i, f in enumerate(run.findings()):
        if f.kind == kind and (f.function == fn or kind == "compile_error"):  # at the call
            return i + 1, f
    raise AssertionError(f"no {kind} in {fn}: {[(f.kind, f.function) for f in run.findings()]}")


@pytest.fixture(scope="module")
def made(tmp_path_factory, runs):
    """The program's run (with --rtol 1e-3) and a repro of each of its findings."""
    from graphdbg.repro.make import Result
    from graphdbg.repro.plan import Refused, plan
    from graphdbg.runfile.query import Run
    d = tmp_path_factory.mktemp("reprograd")
    (d / "faultybw.py").write_text(FAULTY)
    info = d / "faultybw-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: faultybw\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    (d / "prog.py").write_text(PROGRAM)
    # the package beside the program: on its sys.path (and its entry points found)
    r = graphdbg("run", "-q", "--rtol", "1e-3", "-o", "prog.run", "prog.py", cwd=d)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    names = {"straight_through": "divergence", "mlp": "divergence", "fused": "divergence",
             "dyn": "divergence", "auto": "divergence", "values": "compile_error"}
    plans, findings, numbers = {}, {}, []
    with Run(str(d / "prog.run")) as run:
        for fn, kind in names.items():
            number, f = _finding(run, fn, kind)
            findings[fn] = f
            numbers.append(f"{fn}={number}")
            try:
                plans[fn] = plan(run, number)
            except Refused as exc:
                plans[fn] = exc
    # made (plan and make again, the scripts checked) by a program forked from
    # the tests' warm server (tests/support/make_repros.py), whose checks fork
    # from it in turn: a fresh python each would cost 1.5 s of CPU more
    made = runs.spawn(SUPPORT / "make_repros.py", "prog.run", "made.json", *numbers, cwd=d)
    assert made.returncode == 0, made.stdout + made.stderr[-3000:]
    results = {fn: Refused(r["refused"]) if "refused" in r else Result(**r)
               for fn, r in json.loads((d / "made.json").read_text()).items()}
    return d, findings, plans, results


def _nodes(p) -> tuple[int, int]:
    m = re.search(r"(\d+) of the graph's (\d+) nodes", p.what)
    return int(m[1]), int(m[2])


def _script(d: Path, fn: str) -> str:
    return (d / f"repro-{fn}" / "repro.py").read_text()


@pytest.mark.parametrize("fn,cut", [
    ("straight_through", "the node alone, on the inputs it read, with their gradients"),
    ("mlp", "the node alone, on the inputs it read, with their gradients"),
    ("fused", "the graph up to the node, with the inputs' gradients (the node alone its "
              "gradients do not diverge: fusion)")])
def test_a_divergence_of_gradients_reproduces_standalone(made, fn, cut):
    d, findings, plans, results = made
    assert findings[fn].detail.direction == "backward"
    p, r = plans[fn], results[fn]
    assert not isinstance(p, Exception), p
    assert r.ok, (r.why, r.output)
    assert "DIVERGES: compiled gradients differ" in r.output and "gradient of" in r.output
    assert cut in p.what and "in the gradients of its inputs (the backward)" in p.what
    small, whole = _nodes(p)
    print(f"{fn}: repro of {small} nodes from a graph of {whole}, reproduced in {r.seconds:.1f} s")
    assert small < whole
    text = _script(d, fn)
    assert "torch.autograd.grad(" in text and "RTOL, ATOL = 0.001, None" in text
    if fn == "straight_through":   # the backend defined in the program: its stand-in, said
        assert "handed to 'aot_eager'" in p.note and "are not carried" in p.note
        assert "backend='aot_eager'" in text
    else:                          # the compiler package's backend, by name
        assert p.note is None and f"backend={'faulty_bw' if fn == 'mlp' else 'faulty_bw_fused'!r}" in text


def test_torch_compile_dynamic_is_carried(made):
    """dynamic=True in the program: the script compiles with dynamic=True (the
    fault shows only with symbolic sizes, so a static compile would agree)."""
    d, findings, plans, results = made
    p, r = plans["dyn"], results["dyn"]
    assert not isinstance(p, Exception), p
    assert p.spec["dynamic"] is True
    assert r.ok, (r.why, r.output)
    assert "backend='faulty_dyn', dynamic=True, fullgraph=True" in _script(d, "dyn")


def test_automatic_dynamic_sizes_are_marked_dynamic(made):
    """dynamic= left as default, the graph recompiled with a dynamic size: the
    script marks that dim dynamic (a static compile of it would agree)."""
    d, findings, plans, results = made
    p, r = plans["auto"], results["auto"]
    assert not isinstance(p, Exception), p
    assert "dynamic" not in p.spec
    assert r.ok, (r.why, r.output)
    text = _script(d, "auto")
    assert "torch._dynamo.mark_dynamic(args[0], 0)" in text
    assert "backend='faulty_dyn', fullgraph=True" in text


def test_a_compile_errors_real_input_values_are_used(made):
    """The backend fails only on non-negative inputs: random normal values would
    not reproduce it; the values the program passed (recorded) do."""
    d, findings, plans, results = made
    p, r = plans["values"], results["values"]
    assert not isinstance(p, Exception), p
    assert p.spec["values"] and p.blob
    assert "the inputs' values as the program passed them" in p.what
    assert r.ok, (r.why, r.output)
    assert "REPRODUCED" in r.output
    assert (d / "repro-values" / "inputs.safetensors").exists()
    readme = (d / "repro-values" / "README.md").read_text()
    assert "as the program passed them" in readme
