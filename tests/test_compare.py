"""Eager vs compiled: fault-injecting backends change exactly one node of a
50+ node graph; graphdbg must name that node's line, within ceil(log2 N)+2
compiles of the stage it bisects, and change nothing the program computes."""

from __future__ import annotations

import math
import textwrap

import pytest

from conftest import ROOT, ENV, graphdbg, report_json

SUPPORT = ROOT / "tests" / "support"

MODEL = '''\
import sys, torch
from faulty_backends import make_faulty_backend, by_line

class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, d)

    def forward(self, x):
        h = self.norm(x)                       # line 11
        h = self.fc(h)                         # line 12
        h = torch.nn.functional.gelu(h)        # line 13
        return x + h * 0.5                     # line 14

class Deep(torch.nn.Module):
    def __init__(self, d=32, n=10):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(n))
        self.head = torch.nn.Linear(d, 4)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        x = torch.sigmoid(x)                   # line 25
        return self.head(x)                    # line 26

torch.manual_seed(0)
model = Deep()
backend = make_faulty_backend(by_line(LINE, "prog.py"), "MUTATION", inner="aot_eager")
compiled = torch.compile(model, backend=backend)
x = torch.randn(8, 32)
out = compiled(x)
print("mutated", backend.mutated[:1])
'''


def _run_model(workdir, line: int, mutation: str, *opts: str) -> dict:
    (workdir / "prog.py").write_text(MODEL.replace("LINE", str(line)).replace("MUTATION", mutation))
    proc = graphdbg("run", "-q", "-o", "p.run", *opts, "prog.py", cwd=workdir,
                    env={**ENV, "PYTHONPATH": str(SUPPORT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "mutated [(" in proc.stdout
    return report_json("p.run", workdir)


@pytest.mark.parametrize("line,mutation", [(12, "scale"), (25, "swap_op"), (13, "offset")])
def test_single_node_fault_is_found_at_its_line(workdir, line, mutation):
    doc = _run_model(workdir, line, mutation)
    (g,) = doc["graphs"]
    n_ops = sum(1 for n in g["nodes"] if n["op"].startswith("call_"))
    assert n_ops >= 50
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "divergence"]
    assert d["severity"] == "error" and d["detail"]["classification"] == "miscompile"
    assert d["file"].endswith("prog.py") and d["line"] == line
    det = d["detail"]
    assert det["isolated"]["decided"] and det["isolated"]["diverges"]
    assert det["compiled_vs_fp64"] > 10 * (det["eager_vs_fp64"] or 0)
    assert det["stage_compiles"] <= math.ceil(math.log2(n_ops)) + 2
    assert d["node"] and d["op"]
    if line < 20:  # inside a Block: the module that ran it is named
        assert det["module_path"].startswith("blocks.0") and det["module_class"] in ("Block", "Linear")
    assert doc["run"]["internal_errors"] == []


def test_bisection_finds_the_node_when_intermediate_outputs_are_not_used(workdir):
    doc = _run_model(workdir, 14, "scale", "--localize", "bisect")
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "divergence"]
    assert d["line"] == 14 and d["detail"]["method"] == "bisection"
    n_ops = sum(1 for n in doc["graphs"][0]["nodes"] if n["op"].startswith("call_"))
    assert d["detail"]["stage_compiles"] <= math.ceil(math.log2(n_ops)) + 2


def test_clean_graph_has_no_divergence_and_timings_per_node(workdir):
    (workdir / "clean.py").write_text(textwrap.dedent('''\
        import torch
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        c = torch.compile(m, backend="aot_eager")
        for _ in range(4):
            c(torch.randn(5, 16))
        '''))
    proc = graphdbg("run", "-q", "-o", "c.run", "clean.py", cwd=workdir)
    assert proc.returncode == 0
    doc = report_json("c.run", workdir)
    assert doc["diagnostics"] == []
    timed = [n for n in doc["graphs"][0]["nodes"] if n["op"].startswith("call_")]
    assert timed and all(n["eager_ns"] and n["eager_ns"] > 0 for n in timed)
    assert doc["hot_nodes"] and doc["hot_nodes"][0]["eager_ns"] >= doc["hot_nodes"][-1]["eager_ns"]


def test_no_compare_turns_the_check_off(workdir):
    doc = _run_model(workdir, 12, "scale", "--no-compare")
    assert [d for d in doc["diagnostics"] if d["kind"] == "divergence"] == []


@pytest.mark.parametrize("line,aten", [(25, None), (13, None)])
def test_backward_fault_maps_to_the_forward_line(workdir, line, aten):
    select = f"by_line({line}, 'prog.py')"
    if aten:
        select = f"all_of(by_aten(torch.ops.aten.{aten}.default), {select})"
    script = (MODEL.replace("make_faulty_backend, by_line",
                            "make_backward_faulty_backend, by_line, by_aten, all_of")
              .replace('backend = make_faulty_backend(by_line(LINE, "prog.py"), "MUTATION", inner="aot_eager")',
                       f'backend = make_backward_faulty_backend({select}, "scale", inner="aot_eager")')
              .replace('out = compiled(x)\n', 'out = compiled(x)\nout.square().sum().backward()\n'))
    (workdir / "prog.py").write_text(script)
    proc = graphdbg("run", "-q", "-o", "p.run", "prog.py", cwd=workdir,
                    env={**ENV, "PYTHONPATH": str(SUPPORT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "mutated [(" in proc.stdout
    doc = report_json("p.run", workdir)
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "divergence"]
    assert d["detail"]["direction"] == "backward"
    assert d["line"] == line and d["file"].endswith("prog.py")
    n_ops = sum(1 for n in doc["graphs"][0]["nodes"] if n["op"].startswith("call_"))
    assert d["detail"]["stage_compiles"] <= math.ceil(math.log2(n_ops)) + 2


RANDOM_MODEL = '''\
import torch

def own_random_stream(gm, example_inputs):
    """Same graph, but draws from a shifted random stream (as inductor's own RNG
    does); with SWAP it also computes tanh as sigmoid."""
    from torch._dynamo.backends.registry import lookup_backend
    if SWAP:
        for n in gm.graph.nodes:
            if n.target is torch.tanh:
                n.target = torch.sigmoid
        gm.recompile()
    compiled = lookup_backend("aot_eager")(gm, example_inputs)

    def run(*args):
        torch.rand(1)
        return compiled(*args)
    return run

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        h = self.fc(x)
        h = self.drop(h)            # line 27
        return torch.tanh(h) * 2    # line 28

torch.manual_seed(0)
model = M()
c = torch.compile(model, backend=own_random_stream)
with torch.no_grad():
    out = c(torch.randn(4, 16))
print(float(out.sum()), float(torch.rand(1)))
'''


@pytest.mark.parametrize("swap", [False, True])
def test_random_ops_are_reported_as_random_and_the_rest_still_checked(workdir, swap):
    (workdir / "r.py").write_text(RANDOM_MODEL.replace("SWAP", str(swap)))
    proc = graphdbg("run", "-q", "-o", "r.run", "r.py", cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = report_json("r.run", workdir)
    found = {(d["detail"]["classification"], d["line"]) for d in doc["diagnostics"]
             if d["kind"] == "divergence"}
    expected = {("random", 27)} | ({("miscompile", 28)} if swap else set())
    assert found == expected
    rnd = next(d for d in doc["diagnostics"] if d["detail"]["classification"] == "random")
    assert rnd["severity"] == "warning" and "fallback_random" in rnd["hint"]
    # the program's own random stream is untouched by the checks
    plain = __import__("subprocess").run(
        [__import__("sys").executable, "r.py"], cwd=workdir, capture_output=True, text=True,
        env=ENV).stdout
    assert proc.stdout == plain


def test_first_nan_in_eager_is_reported_at_its_line(workdir):
    (workdir / "n.py").write_text(textwrap.dedent('''\
        import torch

        def f(x):
            y = x * 2
            z = torch.log(y - 1)
            return z.sum() + y.sum()

        torch.compile(f, backend="aot_eager")(torch.tensor([0.1, 2.0, 3.0]))
        '''))
    proc = graphdbg("run", "-q", "-o", "n.run", "n.py", cwd=workdir)
    assert proc.returncode == 0
    doc = report_json("n.run", workdir)
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "nan_inf"]
    assert d["line"] == 5 and d["op"] == "torch.log" and d["detail"]["where"] == "eager"
    assert [x for x in doc["diagnostics"] if x["kind"] == "divergence"] == []


def test_backend_failing_on_partial_graphs_is_coped_with(workdir):
    script = MODEL.replace(
        'backend = make_faulty_backend(by_line(LINE, "prog.py"), "MUTATION", inner="aot_eager")',
        'crash = make_crashing_on_partial_backend(40, inner="aot_eager")\n'
        'fault = make_faulty_backend(by_line(25, "prog.py"), "scale", inner=crash)\n'
        'backend = fault').replace("make_faulty_backend, by_line",
                                   "make_faulty_backend, make_crashing_on_partial_backend, by_line")
    (workdir / "prog.py").write_text(script)
    for mode, line_found in (("auto", True), ("bisect", False)):
        proc = graphdbg("run", "-q", "-o", "p.run", "--localize", mode, "prog.py", cwd=workdir,
                        env={**ENV, "PYTHONPATH": str(SUPPORT)})
        assert proc.returncode == 0, proc.stderr[-3000:]
        (d,) = [d for d in report_json("p.run", workdir)["diagnostics"] if d["kind"] == "divergence"]
        if line_found:  # the graph with every intermediate as an output is whole: it compiles
            assert d["line"] == 25
        else:  # prefixes crash: said, not hidden
            assert d["detail"]["undecided"]


def test_aliasing_difference_is_reported(workdir):
    (workdir / "a.py").write_text(textwrap.dedent('''\
        import torch

        def copying_backend(gm, example_inputs):
            def run(*args):
                return tuple(t.clone() for t in gm(*args))
            return run

        def f(x):
            return x.view(2, 2), x.sum()

        torch.compile(f, backend=copying_backend)(torch.arange(4.0))
        '''))
    proc = graphdbg("run", "-q", "-o", "a.run", "a.py", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    (d,) = [d for d in report_json("a.run", workdir)["diagnostics"] if d["kind"] == "divergence"]
    assert d["detail"]["classification"] == "aliasing" and d["detail"]["output"] == 0
    assert d["detail"]["eager_aliases_input"] == 0 and d["detail"]["compiled_aliases_input"] is None
    assert d["line"] == 8 and d["message"] == (
        "output 0 is a copy compiled but a view of input 0 in eager")


@pytest.mark.inductor
def test_gradient_check_keeps_input_strides_under_inductor(workdir):
    # a padded slice as input: inductor asserts its stride; the checks' clones keep it
    (workdir / "s.py").write_text(textwrap.dedent('''\
        import torch
        lin = torch.nn.Linear(24, 8)
        base = torch.randn(4, 25, requires_grad=True)
        x = base[:, :24]
        out = torch.compile(lambda t: lin(t).relu().sum(), backend="inductor")(x)
        out.backward()
        print(float(out))
        '''))
    proc = graphdbg("run", "-q", "-o", "s.run", "s.py", cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = report_json("s.run", workdir)
    assert doc["run"]["internal_errors"] == [] and doc["diagnostics"] == []
