"""`graphdbg.check_graph`: every kind of malformed FX graph, named at the node
and at the line of the pass that made it; no finding on well-formed graphs
(symbolic_trace and real Dynamo graphs)."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn as nn

import graphdbg
from conftest import line_of as _line_of, report_doc

HERE = __file__
SOURCE = open(HERE).read().splitlines()
pytestmark = pytest.mark.usefixtures("clean_torch")


def line_of(mark: str) -> int:
    return _line_of(HERE, mark.removeprefix("MARK "))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        y = self.fc(x)
        z = torch.relu(y)
        return z.sum(1) * 2


def traced() -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(Net())


def dynamo_graph(fn, *inputs) -> tuple[torch.fx.GraphModule, list]:
    """The graph Dynamo makes for `fn` (with its example_value meta), and its inputs."""
    seen = []

    def keep(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=keep, fullgraph=True)(*inputs)
    return seen[0]


def find(gm, target):
    return next(n for n in gm.graph.nodes if n.target is target)


X = torch.randn(2, 4)


# -- the passes under test: each makes exactly one kind of mistake -------------
def pass_use_before_def(gm):
    g = gm.graph
    relu = find(gm, torch.relu)
    with g.inserting_before(next(iter(g.nodes))):
        bad = g.call_function(torch.sigmoid, (relu,))  # MARK use_before_def
    next(iter(relu.users)).replace_input_with(relu, bad)


def pass_erased(gm):
    g = gm.graph
    relu = find(gm, torch.relu)
    user = next(iter(relu.users))
    with g.inserting_after(relu):
        new = g.call_function(torch.sigmoid, (relu.args[0],))  # MARK erased-replacement
    relu.replace_all_uses_with(new)
    g.erase_node(relu)
    user.update_arg(0, relu)  # uses the erased node again


def pass_foreign(gm):
    other = torch.fx.symbolic_trace(Net())
    foreign = find(other, torch.relu)
    user = next(iter(find(gm, torch.relu).users))
    user.update_arg(0, foreign)


def pass_no_output(gm):
    out = next(n for n in gm.graph.nodes if n.op == "output")
    gm.graph.erase_node(out)


def pass_missing_attr(gm):
    g = gm.graph
    relu = find(gm, torch.relu)
    with g.inserting_after(relu):
        w = g.get_attr("scale_table")  # MARK missing_attr
    with g.inserting_after(w):
        scaled = g.call_function(torch.mul, (relu, w))
    for u in list(relu.users):
        if u is not scaled:
            u.replace_input_with(relu, scaled)


def after_relu(gm, make):
    """Insert `make(graph, relu)` after the relu and reroute the relu's users to it."""
    g = gm.graph
    relu = find(gm, torch.relu)
    with g.inserting_after(relu):
        new = make(g, relu)
    for u in list(relu.users):
        if u is not new:
            u.replace_input_with(relu, new)


def pass_arity(gm):
    after_relu(gm, lambda g, r: g.call_function(operator.add, (r, r, r)))  # MARK arity


def pass_arg_types(gm):
    after_relu(gm, lambda g, r: g.call_function(torch.mul, (r, "2")))  # MARK arg_types


def pass_shape(gm):
    after_relu(gm, lambda g, r: g.call_function(torch.matmul, (r, r)))  # MARK shape


def pass_dangling(gm):
    g = gm.graph
    relu = find(gm, torch.relu)
    with g.inserting_after(relu):
        g.call_function(torch.exp, (relu,))  # MARK dangling


CASES = [
    (pass_use_before_def, "use_before_def", "sigmoid", "MARK use_before_def"),
    (pass_erased, "erased_node", "sum_1", None),
    (pass_foreign, "foreign_node", "sum_1", None),
    (pass_no_output, "output", None, None),
    (pass_missing_attr, "missing_attr", "scale_table", "MARK missing_attr"),
    (pass_arity, "arity", "add", "MARK arity"),
    (pass_arg_types, "arg_types", "mul_1", "MARK arg_types"),
    (pass_shape, "shape", "matmul", "MARK shape"),
    (pass_dangling, "dangling", "exp", "MARK dangling"),
]


@pytest.mark.filterwarnings("ignore:Attempted to insert a get_attr Node")  # FX's own warning
@pytest.mark.parametrize("bad_pass, check, node, mark", CASES,
                         ids=[c[1] for c in CASES])
def test_each_malformation_is_named_at_its_node_and_pass_line(tmp_path, bad_pass, check, node, mark):
    from graphdbg.hooks.placement.creation import created_at
    hooked = (torch.fx.Graph.create_node, torch.export.export)
    with graphdbg.capture(str(tmp_path / "c.run"), eager=False):
        assert torch.fx.Graph.create_node is not hooked[0] and torch.export.export is not hooked[1]
        gm = traced()
        # nodes made by tracing the model stand for its lines: no pass made them
        assert [n.name for n in gm.graph.nodes if created_at(n)] == []
        bad_pass(gm)
        report = graphdbg.check_graph(gm, X)
    # the session put torch's functions back as they were
    assert (torch.fx.Graph.create_node, torch.export.export) == hooked
    problems = [p for p in report.problems if p["check"] == check]
    assert len(problems) == 1, report.problems
    (p,) = problems
    assert p["node"] == node
    assert report.ok is (check == "dangling")  # a dangling node is a warning, not an error
    if mark is not None:
        assert (p["file"], p["line"], p["created_by_pass"]) == (HERE, line_of(mark), True)
        assert p["code"].strip().startswith(SOURCE[line_of(mark) - 1].strip()[:20])
    # nothing else is reported: nodes downstream of a broken one are not blamed
    assert [q for q in report.problems if q["severity"] == "error" and q is not p] == []
    # the capture recorded the same findings in its run file
    doc = report_doc(tmp_path / "c.run")
    assert [(d["kind"], d["node"]) for d in doc["diagnostics"]
            if d["severity"] == p["severity"]] == [("malformed_graph", node)]


def test_meta_mismatch_on_a_dynamo_graph_names_the_model_line():
    def f(x):
        y = torch.relu(x)
        s = y.sum(1)  # MARK sum
        return torch.tanh(s)  # MARK tanh

    gm, inputs = dynamo_graph(f, torch.randn(3, 5))
    assert graphdbg.check_graph(gm, *inputs).problems == []
    # a "pass" that changes what nodes compute but keeps their recorded meta
    find(gm, torch.tanh).target = torch.argmax          # int64, meta says float32
    s = next(n for n in gm.graph.nodes if n.op == "call_method" and n.target == "sum")
    s.args = (s.args[0], 0)                               # shape [5], meta says [3]
    report = graphdbg.check_graph(gm, *inputs)
    got = {(p["check"], p["node"], p["line"]) for p in report.problems}
    assert got == {("shape", s.name, line_of("MARK sum"))}, report.problems
    # the dtype change is downstream of the broken shape: fixed shape reveals it
    s.args = (s.args[0], 1)
    report = graphdbg.check_graph(gm, *inputs)
    assert [(p["check"], p["line"], p["file"]) for p in report.problems] == [
        ("dtype", line_of("MARK tanh"), HERE)]
    assert "int64" in report.problems[0]["message"] and not report.ok
    with pytest.raises(AssertionError, match="dtype"):
        report.assert_ok()


def test_dead_code_in_the_users_model_is_not_a_malformed_graph():
    def f(x):
        torch.arange(x.shape[0])  # dead code: Dynamo keeps it in the graph
        return x.relu()

    gm, inputs = dynamo_graph(f, torch.randn(3))
    assert any(n.target is torch.arange for n in gm.graph.nodes)
    assert graphdbg.check_graph(gm, *inputs).problems == []


def test_a_pass_that_copies_meta_is_still_named_at_its_own_line(tmp_path):
    def f(x):
        return torch.relu(x) + 1

    with graphdbg.capture(str(tmp_path / "c.run"), eager=False):
        gm, inputs = dynamo_graph(f, torch.randn(3))
        relu = find(gm, torch.relu)
        with gm.graph.inserting_after(relu):
            bad = gm.graph.call_function(operator.add, (relu, relu, relu))  # MARK copies-meta
        bad.meta = dict(relu.meta)  # the usual idiom: same stack_trace as the node it replaces
        report = graphdbg.check_graph(gm, *inputs)
    (p,) = report.problems
    assert (p["check"], p["line"], p["created_by_pass"]) == ("arity", line_of("MARK copies-meta"), True)
    doc = report_doc(tmp_path / "c.run")
    (d,) = doc["diagnostics"]
    assert d["line"] == p["line"] and "It stands for" in d["hint"]


def test_nodes_made_outside_a_capture_have_no_pass_line():
    gm = traced()
    pass_arity(gm)
    (p,) = graphdbg.check_graph(gm, X).problems
    assert p["check"] == "arity" and p["file"] is None and not p["created_by_pass"]


class Block(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.conv = nn.Conv1d(d, d, 3, padding=1)
        self.bn = nn.BatchNorm1d(d)

    def forward(self, x):
        h = self.ln(x)
        a, _ = self.attn(h, h, h, need_weights=False)
        x = x + a
        c = self.bn(self.conv(x.transpose(1, 2))).transpose(1, 2)
        idx = x.argmax(-1)
        return x + torch.nn.functional.gelu(c), idx.float().mean()


@pytest.mark.parametrize("dynamic", [False, True])
def test_well_formed_graphs_have_no_findings(dynamic):
    torch.manual_seed(0)
    model = Block().train()
    x = torch.randn(2, 5, 16)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch._dynamo.reset()
    seen = []

    def keep(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    torch.compile(model, backend=keep, dynamic=dynamic)(x)
    after_compile = {k: v.clone() for k, v in model.state_dict().items()}
    assert seen
    checked = 0
    for gm, inputs in seen:
        report = graphdbg.check_graph(gm, *inputs)
        assert report.problems == [] and report.ok, report
        assert report.unchecked == [] and report.nodes_checked >= 1
        checked += report.nodes_checked
    assert checked >= 15
    # the check runs on fake tensors: the model's buffers are untouched
    for k, v in model.state_dict().items():
        assert torch.equal(v, after_compile[k]), k
    assert any(not torch.equal(before[k], after_compile[k]) for k in before)  # BN did update
    traced_report = graphdbg.check_graph(torch.fx.symbolic_trace(Net()), X)
    assert traced_report.problems == []


def test_check_graph_inside_a_capture_is_recorded(tmp_path):
    with graphdbg.capture(str(tmp_path / "p.run")):
        gm = torch.fx.symbolic_trace(lambda x: torch.relu(x) + 1)
        relu = next(n for n in gm.graph.nodes if n.target is torch.relu)
        with gm.graph.inserting_after(relu):
            gm.graph.call_function(operator.add, (relu, relu, relu))  # MARK recorded
        ok = graphdbg.check_graph(gm, torch.randn(3)).ok
    assert ok is False
    (d,) = [d for d in report_doc(tmp_path / "p.run")["diagnostics"] if d["kind"] == "malformed_graph"]
    assert (d["line"], d["node"], d["detail"]["check"]) == (line_of("MARK recorded"), "add_1", "arity")
    assert d["detail"]["created_by_pass"] and d["graph"] is None


def leaky_backend(gm, example_inputs):
    relu = next(n for n in gm.graph.nodes if n.target is torch.relu)
    with gm.graph.inserting_after(relu):
        gm.graph.call_function(torch.exp, (relu,))  # MARK leaky pass
    gm.recompile()
    return gm.forward


def test_a_pass_that_leaves_a_dangling_node_is_reported_after_the_backend(tmp_path):
    # the backend works (the program runs), but its pass left a node behind
    with graphdbg.capture(str(tmp_path / "p.run")):
        out = torch.compile(lambda x: torch.relu(x) * 2, backend=leaky_backend)(torch.ones(3))
    assert out.tolist() == [2.0, 2.0, 2.0]
    (d,) = report_doc(tmp_path / "p.run")["diagnostics"]
    assert (d["kind"], d["severity"], d["line"], d["detail"]["check"]) == (
        "malformed_graph", "warning", line_of("MARK leaky pass"), "dangling")
    assert d["detail"]["stage"] == "after backend passes" and d["graph"] == 1
