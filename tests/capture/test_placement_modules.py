"""Every finding and node has a line, where a user would look (issue 9, section 5):

- malformed graphs checked with `graphdbg.check_graph` on `symbolic_trace`
  graphs (no `stack_trace`): at the traced line of the model, else at the
  user's `check_graph` call;
- a module compiled whole whose forward lives in torch
  (`torch.compile(nn.Sequential(...))`): the graph is named after its class at
  the user's `torch.compile(...)` line, its nodes sit at the line that made
  their layer (hooks/placement/creation.py records where each module is made).

In-process, cheap backends."""

from __future__ import annotations


import pytest
import torch
import torch.nn as nn

import graphdbg
from conftest import at, line_of, report_doc

HERE = __file__
pytestmark = pytest.mark.usefixtures("clean_torch")
X = torch.randn(2, 4)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        y = self.fc(x)
        z = torch.relu(y)  # MARK traced relu
        return z.sum(1) * 2  # MARK traced sum


def find(gm, target):
    return next(n for n in gm.graph.nodes if n.target is target)


def pass_erased(gm):
    g = gm.graph
    relu = find(gm, torch.relu)
    user = next(iter(relu.users))
    with g.inserting_after(relu):
        new = g.call_function(torch.sigmoid, (relu.args[0],))
    relu.replace_all_uses_with(new)
    g.erase_node(relu)
    user.update_arg(0, relu)  # uses the erased node again


def pass_foreign(gm):
    other = torch.fx.symbolic_trace(Net())
    user = next(iter(find(gm, torch.relu).users))
    user.update_arg(0, find(other, torch.relu))


def pass_no_output(gm):
    gm.graph.erase_node(next(n for n in gm.graph.nodes if n.op == "output"))


def findings(run) -> dict[tuple[str, str | None], dict]:
    doc = report_doc(run)  # checks that every finding has a file and a line
    return {(d["detail"]["check"], d["node"]): d for d in doc["diagnostics"]}


# -- check_graph on symbolic_trace graphs ---------------------------------------------

@pytest.mark.parametrize("bad_pass, check", [(pass_erased, "erased_node"),
                                             (pass_foreign, "foreign_node")])
def test_a_traced_node_without_stack_trace_sits_at_its_traced_line(tmp_path, bad_pass, check):
    with graphdbg.capture(str(tmp_path / "c.run"), eager=False):
        gm = torch.fx.symbolic_trace(Net())
        bad_pass(gm)
        report = graphdbg.check_graph(gm, X)
    (p,) = [p for p in report.problems if p["check"] == check]
    assert (p["node"], p["file"], p["line"]) == ("sum_1", HERE, line_of(HERE, "traced sum"))
    got = findings(tmp_path / "c.run")
    d = got[(check, "sum_1")]
    assert (d["file"], (d["line"], d["code"])) == (HERE, at(HERE, "traced sum"))
    assert not d["detail"]["created_by_pass"]
    if check == "foreign_node":  # the relu the pass unhooked is left unused, at its own line
        assert got[("dangling", "relu")]["line"] == line_of(HERE, "traced relu")


def test_a_graph_without_output_sits_at_the_check_graph_call(tmp_path):
    with graphdbg.capture(str(tmp_path / "c.run"), eager=False):
        gm = torch.fx.symbolic_trace(Net())
        pass_no_output(gm)
        graphdbg.check_graph(gm, X)  # MARK check no output
    d = findings(tmp_path / "c.run")[("output", None)]
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, "check no output"))
    assert "no source line of its own" in d["hint"] and d["stack"][-1]["line"] == d["line"]


def test_a_node_traced_before_the_capture_sits_at_the_check_graph_call(tmp_path):
    gm = torch.fx.symbolic_trace(Net())  # no session: nothing records its lines
    pass_erased(gm)
    with graphdbg.capture(str(tmp_path / "c.run"), eager=False):
        report = graphdbg.check_graph(gm, X)  # MARK check early graph
    (p,) = [p for p in report.problems if p["check"] == "erased_node"]
    assert p["file"] is None  # the API says so; the run file needs a line
    d = findings(tmp_path / "c.run")[("erased_node", "sum_1")]
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, "check early graph"))
    assert d["hint"].startswith("sum_1 has no source line of its own")


# -- modules compiled whole -----------------------------------------------------------

class Parent(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)  # MARK parent fc
        self.head = nn.Sequential(  # MARK parent head
            nn.ReLU(),  # MARK parent relu
        )

    def forward(self, x):
        return self.head(self.fc(x))


def make_parent():
    return Parent()  # MARK make parent


def build_mlp():
    return nn.Sequential(
        nn.Linear(4, 8),  # MARK layer 0
        nn.ReLU(),  # MARK layer 1
        nn.Linear(8, 2),  # MARK layer 2
    )


def test_modules_remember_the_line_that_made_them(tmp_path):
    from graphdbg.hooks.placement.creation import module_site
    outside = nn.Linear(2, 2)
    with graphdbg.capture(str(tmp_path / "c.run"), eager=False):
        p = make_parent()
        compiled = torch.compile(p, backend="eager")  # MARK compile parent
        inside = nn.Linear(2, 2)
    lines = {name: module_site(m)[1] for name, m in
             [("p", p), ("fc", p.fc), ("head", p.head), ("relu", p.head[0]),
              ("compiled", compiled)]}
    # a subclass's own __init__ (super().__init__()) is not where it was made
    assert lines == {"p": line_of(HERE, "make parent"), "fc": line_of(HERE, "parent fc"),
                     "head": line_of(HERE, "parent head"), "relu": line_of(HERE, "parent relu"),
                     "compiled": line_of(HERE, "compile parent")}
    assert module_site(p)[0] == HERE and module_site(p)[2] == "make_parent"
    assert module_site(outside) is None  # made before the session
    assert module_site(inside) is not None


def layer_lines(graph: dict) -> dict[str, int | None]:
    return {n["name"]: n["line"] for n in graph["nodes"] if n["op"] == "call_function"}


def test_nodes_of_a_sequential_compiled_whole_sit_where_its_layers_were_made(tmp_path):
    with graphdbg.capture(str(tmp_path / "s.run")):
        model = build_mlp()
        compiled = torch.compile(model, backend="aot_eager")  # MARK compile mlp
        compiled(X)
    (g,) = report_doc(tmp_path / "s.run")["graphs"]
    by_module = {n["module_path"]: (n["file"], n["line"], n["code"]) for n in g["nodes"]
                 if n["op"] == "call_function"}
    assert by_module == {f"Sequential.{i}": (HERE, *at(HERE, f"layer {i}")) for i in range(3)}
    # parameters and the input sit at the layer that uses them
    for n in g["nodes"]:
        if n["op"] == "placeholder":
            assert n["file"] == HERE and n["line"] in {line_of(HERE, f"layer {i}") for i in range(3)}


def test_a_sequential_compiled_whole_is_named_after_its_class_at_torch_compile(tmp_path):
    # needs hooks/record/trace.py's compile metrics to keep the name backend.py gave
    with graphdbg.capture(str(tmp_path / "s.run")):
        compiled = torch.compile(build_mlp(), backend="eager")  # MARK compile named
        compiled(X)
    (g,) = report_doc(tmp_path / "s.run")["graphs"]
    assert (g["function"], g["file"], g["line"]) == (
        "Sequential (torch.compile)", HERE, line_of(HERE, "compile named"))


def test_modules_made_before_the_capture_sit_at_the_users_call(tmp_path):
    # graphdbg.capture() opened after the model was built: no line made it;
    # the graph and its nodes sit at the call that compiled it
    compiled = torch.compile(build_mlp(), backend="eager")
    with graphdbg.capture(str(tmp_path / "s.run")):
        compiled(X)  # MARK late call
    (g,) = report_doc(tmp_path / "s.run")["graphs"]
    assert set(layer_lines(g).values()) == {line_of(HERE, "late call")}
    assert (g["function"], g["file"], g["line"]) == (
        "Sequential (called)", HERE, line_of(HERE, "late call"))


def test_a_divergence_in_a_sequential_compiled_whole_is_at_its_layer(tmp_path):
    from faulty_backends import by_target, make_faulty_backend
    backend = make_faulty_backend(by_target(torch.nn.functional.relu), "scale", inner="eager",
                                  factor=1.5)
    with graphdbg.capture(str(tmp_path / "d.run"), eager=False):
        compiled = torch.compile(build_mlp(), backend=backend)
        compiled(torch.randn(3, 4))
    doc = report_doc(tmp_path / "d.run")
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "divergence"]
    assert (d["file"], d["line"], d["node"]) == (HERE, line_of(HERE, "layer 1"), "input_2")


def test_the_module_hook_is_an_observer(tmp_path):
    def fn(x):
        scale = nn.Linear(2, 2)  # a module made inside compiled code
        with torch.no_grad():
            scale.weight.fill_(1.0)
            scale.bias.zero_()
        return scale(x).relu()

    from torch._dynamo.utils import counters
    torch.compile(lambda t: t + 1, backend="eager")(torch.ones(1))  # Dynamo's own __init__ hook
    init = nn.Module.__init__
    x = torch.randn(3, 2)

    def counts():
        torch._dynamo.reset()
        counters.clear()
        out = torch.compile(fn, backend="eager")(x)
        return out, dict(counters["stats"]), sum(counters["graph_break"].values())

    plain = counts()
    with graphdbg.capture(str(tmp_path / "o.run"), eager=False):
        assert nn.Module.__init__ is not init
        captured = counts()
    assert nn.Module.__init__ is init
    assert torch.equal(plain[0], captured[0]) and plain[1:] == captured[1:]


LIBRARY = """
import functools
import torch


def can_return_tuple(fn):  # as transformers wraps every model's forward
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        return fn(self, *args, **kwargs)
    return wrapper


class LibModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    @can_return_tuple
    def forward(self, x):
        return torch.relu(self.fc(x))


def scale(x):
    return x * 3
"""


def test_a_library_model_compiled_whole_is_named_after_its_class_not_its_wrapper(tmp_path,
                                                                                site_package):
    lib = site_package("graphdbg_testlib", LIBRARY)
    with graphdbg.capture(str(tmp_path / "l.run")):
        compiled = torch.compile(lib.LibModel(), backend="eager")  # MARK compile library model
        compiled(X)
        torch.compile(lib.scale, backend="eager")(X)
    g, f = report_doc(tmp_path / "l.run")["graphs"]
    assert (g["function"], g["file"], g["line"]) == (
        "LibModel (torch.compile)", HERE, line_of(HERE, "compile library model"))
    # a library function the program compiles keeps its own name and line
    assert (f["function"], f["file"].endswith("graphdbg_testlib/__init__.py")) == ("scale", True)
