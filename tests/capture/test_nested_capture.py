"""A capture inside a capture (`graphdbg.capture` inside `graphdbg run`, or
nested in a notebook) records into both, and leaves the outer one working
when it ends."""

from __future__ import annotations

import copy
import inspect

import torch
import torch._dynamo

import graphdbg
from graphdbg.reporters.report import document
from graphdbg.hooks.placement import creation


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _swap_in_cos(gm, example_inputs):
    """A pass that makes a node before its input exists (use before definition)
    in the graph it was given, and runs a copy made before it (a graph whose
    code were generated from the broken graph would fail, with or without graphdbg)."""
    runnable = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    for n in list(gm.graph.nodes):
        if n.op == "call_function" and n.target is torch.sin:
            with gm.graph.inserting_before(n):
                gm.graph.call_function(torch.cos, (n,))  # marker: pass line
    return runnable.forward


def _breaks(x):
    y = x.sin()
    print("", end="")  # marker: graph break
    return y.cos()


def test_nested_capture_leaves_the_outer_one_working(tmp_path):
    torch._dynamo.reset()
    outer, inner = tmp_path / "outer.run", tmp_path / "inner.run"
    with graphdbg.capture(str(outer), compare=False):
        torch.ones(3).add(1)
        with graphdbg.capture(str(inner), compare=False):
            torch.compile(lambda t: t.tan() + 1, backend="eager")(torch.ones(3))
            torch.ones(2).mul(5)
        # after the inner capture: pass lines, graph breaks, eager ops, graphs
        torch.compile(lambda t: torch.sin(t) * 2, backend=_swap_in_cos)(torch.ones(3))
        torch.compile(_breaks, backend="eager")(torch.ones(3))
        torch.ones(4).sub(7)
        assert creation._orig_create_node is not None  # still tracking pass lines
    assert creation._orig_create_node is None  # put back by the outermost capture
    torch._dynamo.reset()

    doc = document(graphdbg.open_run(str(outer)))
    here = inspect.getsourcefile(_swap_in_cos)
    (bad,) = [d for d in doc["diagnostics"] if d["kind"] == "malformed_graph"]
    assert (bad["file"], bad["line"]) == (here, _line_of(_swap_in_cos, "marker: pass line"))
    (brk,) = [d for d in doc["diagnostics"] if d["kind"] == "graph_break"]
    assert (brk["file"], brk["line"]) == (here, _line_of(_breaks, "marker: graph break"))
    assert len(doc["graphs"]) == 1 + 1 + 2  # inner's, the pass's, two around the break
    ops = {r["op"] for r in graphdbg.open_run(str(outer)).query("SELECT op FROM ops")}
    assert {"aten.add.Tensor", "aten.mul.Tensor", "aten.sub.Tensor"} <= ops
    assert "aten.tan.default" not in ops  # compiled work is never eager work

    inner_doc = document(graphdbg.open_run(str(inner)))
    assert len(inner_doc["graphs"]) == 1 and inner_doc["diagnostics"] == []
    inner_ops = {r["op"] for r in graphdbg.open_run(str(inner)).query("SELECT op FROM ops")}
    assert "aten.mul.Tensor" in inner_ops and "aten.sub.Tensor" not in inner_ops


def test_check_graph_records_into_the_capture_that_is_running(tmp_path):
    gm = torch.fx.symbolic_trace(lambda x: torch.relu(x) + 1)
    relu = next(n for n in gm.graph.nodes if n.target is torch.relu)
    add = next(n for n in gm.graph.nodes if n.op == "call_function" and n is not relu)
    relu.prepend(add)  # add now runs before its input
    outer, inner = tmp_path / "outer.run", tmp_path / "inner.run"
    with graphdbg.capture(str(outer), eager=False):
        with graphdbg.capture(str(inner), eager=False):
            pass
        report = graphdbg.check_graph(gm, torch.ones(2))
    assert not report.ok
    kinds = [d["kind"] for d in document(graphdbg.open_run(str(outer)))["diagnostics"]]
    assert kinds == ["malformed_graph"]
    assert document(graphdbg.open_run(str(inner)))["diagnostics"] == []
