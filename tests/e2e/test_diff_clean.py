"""`graphdbg diff eager.run compiled.run` on clean programs says nothing
differs (issue 31): ops are paired by step, call path, op and occurrence,
never across a line that ran compiled in one run, and a compiled graph's
outputs meet the eager op that computed the same value. A fault injected
by a backend is still found, at its line."""

from __future__ import annotations

import json
import textwrap

import pytest

from conftest import AOT, ENV, GOLDEN_SAVE, graphdbg, group, line_of

EAGER = ("--stance", "force_eager")
STEPS = 4

# a graph break (print) and a torch.where on a reduction, trained STEPS steps
PRINT_WHERE = textwrap.dedent(f'''
    import torch
    import torch.nn as nn

    torch.manual_seed(0)


    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(16, 32)
            self.fc2 = nn.Linear(32, 1)

        def forward(self, x):
            h = torch.relu(self.fc1(x))  # MARK relu
            print("hidden", h.shape)
            h = torch.where(x.mean() > 0.5, h * 2, h)
            return self.fc2(h)  # MARK head


    class Faulty:
        """Scales torch.relu's output by 1.01 (`program.py faulty`), then aot_eager."""

        def __call__(self, gm, example_inputs):
            import copy
            import sys
            from torch._dynamo.backends.registry import lookup_backend
            if sys.argv[1:] == ["faulty"]:
                graph = copy.deepcopy(gm.graph)  # the caller's graph as it was
                for node in graph.nodes:
                    if node.target is torch.relu:
                        users = list(node.users)
                        with graph.inserting_after(node):
                            scaled = graph.call_function(torch.mul, (node, 1.01))
                        scaled.meta = copy.copy(node.meta)
                        for user in users:
                            user.replace_input_with(node, scaled)
                        gm = torch.fx.GraphModule(gm, graph)
                        break
            return lookup_backend("aot_eager")(gm, example_inputs)


    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cmodel = torch.compile(model, backend=Faulty())
    x = torch.randn(4, 16)
    y = torch.randn(4, 1)
    for step in range({STEPS}):
        opt.zero_grad()
        loss = ((cmodel(x) - y) ** 2).mean()  # MARK loss
        loss.backward()
        opt.step()
        print(step, loss.item())
''')

# a Python `if` on a tensor (a graph break on the condition), Adam
BRANCH = textwrap.dedent(f'''
    import torch
    import torch.nn as nn

    torch.manual_seed(0)


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)
            self.b = nn.Linear(8, 1)

        def forward(self, x):
            if x.mean() > 0.0:
                x = self.a(x)
            else:
                x = torch.relu(self.a(x))
            return self.b(x)


    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    f = torch.compile(net, backend="aot_eager")
    for step in range({STEPS}):
        x = torch.randn(6, 8)
        loss = f(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(step, loss.item())
''')

# no optimizer: the compiled run counts calls as steps, the eager run none
INFER = textwrap.dedent('''
    import torch

    torch.manual_seed(0)


    def f(x):
        h = torch.tanh(x @ x.T)
        print("h", h.shape)
        return torch.where(h.sum() > 0, h * 3, h - 1).mean(0)


    g = torch.compile(f, backend="aot_eager")
    for i in range(3):
        print(g(torch.randn(5, 5)).sum().item())
''')

PROGRAMS = {"print_where": PRINT_WHERE, "branch": BRANCH, "infer": INFER}


@pytest.fixture(scope="module")
def pairs(runs, tmp_path_factory):
    """Each program run with --stance force_eager and compiled: (eager, compiled, path)."""
    folder = tmp_path_factory.mktemp("diff-clean")
    out = {}
    for name, source in PROGRAMS.items():
        path = folder / f"{name}.py"
        path.write_text(source)
        eager = runs.program(path, *EAGER).ok()
        compiled = runs.program(path).ok()
        out[name] = (eager.run, compiled.run, path)
    return out


def _diff(a, b, cwd):
    proc = graphdbg("diff", "--json", a, b, cwd=cwd)
    text = graphdbg("diff", a, b, cwd=cwd, env={**ENV, "COLUMNS": "400"})  # no wrapping
    return proc.returncode, json.loads(proc.stdout), text.stdout


@group("diff-clean")
@pytest.mark.parametrize("name", ["print_where", "branch"])
def test_a_clean_training_program_diffs_clean(pairs, workdir, name):
    """A graph break and a branch on a reduction, trained STEPS steps: no
    ✖, exit 0 (was: the k-th ops of a line paired across compiled and eager
    lines and steps; a compiled relu met an eager addmm, a bool a mean)."""
    eager, compiled, path = pairs[name]
    rc, doc, text = _diff(eager, compiled, workdir)
    assert rc == 0, text
    assert "✖" not in text
    assert doc["schema"] == "graphdbg-diff/2"
    assert doc["first_divergence"] is None and doc["graph_boundaries"] == []
    assert doc["steps"] == STEPS  # paired within steps: both runs count optimizer steps
    assert doc["aligned_ops"] > 20
    # every compiled call's tensor outputs met their eager twin
    assert doc["compared_outputs"] >= STEPS and doc["unpaired_outputs"] == 0
    assert {c["compiled_in"] for c in doc["compiled_in_one_run"]} == {"B"}
    assert all(c["file"] == str(path) for c in doc["compiled_in_one_run"])


@group("diff-clean")
def test_without_an_optimizer_the_runs_pair_over_the_whole_run(pairs, workdir):
    eager, compiled, _ = pairs["infer"]
    rc, doc, text = _diff(eager, compiled, workdir)
    assert rc == 0 and "✖" not in text, text
    assert doc["steps"] is None   # the compiled run counts calls, the eager run nothing
    assert doc["compared_outputs"] >= 3 and doc["first_divergence"] is None


@group("diff-clean")
def test_a_faulty_backend_is_found_at_its_line(pairs, runs, workdir):
    """The same training program, its backend scaling relu by 1.01: the
    compiled relu's output differs from the eager relu at its line, and the
    first eager op that differs is the loss, in step 1."""
    import os
    eager, _, faulty = pairs["print_where"]
    bad = workdir / "faulty.run"
    graphdbg("run", "-q", "-o", bad, faulty, "faulty", cwd=workdir, check=True)
    rc, doc, text = _diff(eager, bad, workdir)
    assert rc == 1, text
    (b,) = [g for g in doc["graph_boundaries"] if g["graph"] == 1]
    assert (b["file"], b["line"]) == (str(faulty), line_of(faulty, "relu"))
    assert b["compiled_in"] == "B" and b["eager_op"] == "aten.relu.default" and b["step"] == 1
    assert b["code"].startswith("h = torch.relu(self.fc1(x))")
    assert b["compiled"]["mean"] == pytest.approx(1.01 * b["eager"]["mean"], rel=1e-5)
    # where it starts, from the compiled run's own check: the relu's line too
    assert (b["origin"]["file"], b["origin"]["line"]) == (str(faulty), line_of(faulty, "relu"))
    assert "own check places it at" in text
    first = doc["first_divergence"]
    assert (first["line"], first["step"], first["phase"]) == (line_of(faulty, "loss"), 1,
                                                            "forward")
    # the text: every ✖ names its file:line and shows the code, values as summaries
    marks = [i for i, ln in enumerate(text.splitlines()) if "✖" in ln]
    lines = text.splitlines()
    assert len(marks) >= 2
    for i in marks:
        # the item's head may wrap (a long temporary path): up to its code line
        code = next(j for j in range(i + 1, len(lines)) if "│" in lines[j])
        assert code - i <= 3 and f"{os.path.basename(faulty)}:" in " ".join(lines[i:code])
    assert "{" not in text and "±" in text


@group("diff-clean")
def test_the_tui_runs_model_finds_no_divergence_in_a_clean_program(pairs):
    from graphdbg.runfile.query import Run
    from graphdbg.tui.model.diff import DiffModel
    eager, compiled, _ = pairs["print_where"]
    with Run(str(eager)) as a, Run(str(compiled)) as b:
        model = DiffModel.for_runs(a, b)
        model.load_more()
        assert model.first_divergent() is None
        assert not [r.key for r in model.rows if r.differs]


@group("train_loop")
def test_the_train_loop_sample_diffs_clean(runs, workdir):
    eager = runs.graphdbg("train_loop", *AOT, *GOLDEN_SAVE, opts=EAGER).ok()
    compiled = runs.golden("train_loop").ok()
    rc, doc, text = _diff(eager.run, compiled.run, workdir)
    assert rc == 0 and "✖" not in text, text
    assert doc["steps"] == 5 and doc["compared_outputs"] >= 5
