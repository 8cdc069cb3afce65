"""A real notebook, executed as Jupyter executes it (nbclient, a kernel of
this venv's ipykernel): ``%load_ext graphdbg``, a ``%%graphdbg`` cell that
trains a compiled model with a graph break, a recompile and a miscompile,
the same cell run again, a capture that meets code compiled before it, a
failing cell, and `graphdbg.compare` on the model the notebook compiled.
One kernel runs it all once (module fixture); the tests read its outputs."""

from __future__ import annotations

import json
import os
import re
from html import unescape
import sys

import pytest

from conftest import report_doc

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

SETUP = """import sys
import torch, graphdbg
%load_ext graphdbg
print(sys.executable)"""

MODEL = '''from torch._dynamo.backends.registry import lookup_backend, register_backend

@register_backend
def faulty(gm, example_inputs):
    """aot_eager, with torch.tanh's output scaled by 1.01: a miscompile"""
    import copy
    graph = copy.deepcopy(gm.graph)
    for node in graph.nodes:
        if node.op == "call_function" and node.target is torch.tanh:
            with graph.inserting_after(node):
                scaled = graph.call_function(torch.mul, (node, 1.01))
            scaled.meta = copy.copy(node.meta)
            for user in list(node.users):
                if user is not scaled:
                    user.replace_input_with(node, scaled)
            gm = torch.fx.GraphModule(gm, graph)
            break
    return lookup_backend("aot_eager")(gm, example_inputs)

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        print("hidden", h.shape)
        return torch.tanh(h).sum()

torch.manual_seed(0)
net = Net()'''

TRAIN = """%%graphdbg --backend faulty --reset
model = torch.compile(net)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(2):
    loss = model(torch.randn(4, 8))
    loss.backward()
    opt.step(); opt.zero_grad()
with torch.no_grad():
    score = model(torch.randn(4, 8))"""

AGAIN = """with graphdbg.capture("again.run") as cap:
    model(torch.randn(4, 8))
cap"""

FAILS = """%%graphdbg -o fails.run
y = net.fc(torch.randn(3, 5))"""

COMPARE = """report = graphdbg.compare(net, torch.randn(4, 8), backend="aot_eager")
report"""

HELP = "%graphdbg --help"

CELLS = [SETUP, MODEL, TRAIN, TRAIN, AGAIN, FAILS, COMPARE, HELP]   # TRAIN run again as In[4]


def _line(cell: str, text: str) -> int:
    """The line of ``text`` in a cell (a magic cell: in its body, as IPython counts)."""
    lines = cell.splitlines()
    if lines[0].startswith("%%"):
        lines = lines[1:]
    (n,) = [i for i, ln in enumerate(lines, 1) if text in ln]
    return n


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    """The notebook executed once: (its cells after the run, its folder, the
    kernel's temporary folder)."""
    home = tmp_path_factory.mktemp("notebook")
    kernels = home / "jupyter" / "kernels" / "graphdbg-test"
    kernels.mkdir(parents=True)
    # this venv's python, whatever kernels the user has installed
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "graphdbg test", "language": "python"}))
    tmp = home / "tmp"
    tmp.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    env = {"JUPYTER_PATH": str(home / "jupyter"), "IPYTHONDIR": str(home / "ipython"),
           "TMPDIR": str(tmp), "JUPYTER_PLATFORM_DIRS": "1"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        client = nbclient.NotebookClient(nb, kernel_name="graphdbg-test", timeout=120,
                                         allow_errors=True,
                                         resources={"metadata": {"path": str(home)}})
        client.execute()
    return nb.cells, home, tmp


def _text(cell) -> str:
    out = []
    for o in cell.outputs:
        if o.output_type == "stream":
            out.append(o.text)
        elif o.output_type in ("display_data", "execute_result"):
            out.append(o.data.get("text/plain", ""))
        elif o.output_type == "error":
            out.append(f"{o.ename}: {o.evalue}")
    return "\n".join(out)


def _html(cell) -> str:
    """The HTML of graphdbg's own display in a cell's output."""
    (html,) = [o.data["text/html"] for o in cell.outputs
               if o.output_type in ("display_data", "execute_result")
               and o.data.get("text/plain", "").startswith("graphdbg ")]
    return html


def test_the_kernel_is_this_venvs_and_every_cell_but_one_ran(notebook):
    cells, _, _ = notebook
    errors = [(i, o.ename) for i, c in enumerate(cells) for o in c.outputs
              if o.output_type == "error"]
    assert errors == [(5, "RuntimeError")], [_text(c) for c in cells]
    assert [c.execution_count for c in cells] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert _text(cells[0]).strip() == sys.executable


@pytest.mark.parametrize("index", [2, 3])   # the first run and the re-run (In[3], In[4])
def test_the_magic_cell_shows_each_finding_at_its_cell_and_line(notebook, index):
    cells, home, _ = notebook
    n = index + 1
    text, html = _text(cells[index]), _html(cells[index])
    brk, tanh = _line(MODEL, 'print("hidden"'), _line(MODEL, "torch.tanh(h)")
    call = _line(TRAIN, "score = model(")
    assert f"graphdbg cell → graphdbg-cell{n}.run: " in text
    assert f"✖ divergence Cell In[2], line {tanh} in forward" in text
    assert f"▲ graph_break Cell In[2], line {brk} in forward" in text
    assert f"▲ recompile Cell In[{n}], line {call} in <module>" in text
    assert "ipykernel_" not in text and "torchinductor" not in text and ".py:" not in text
    assert "compiled before" not in text    # --reset: compiled again under the capture
    # the HTML shows the same places (as text, whatever its markup)
    shown = unescape(re.sub(r"<[^>]+>", "", html))
    assert html.lstrip().startswith("<div") and f"Cell In[{n}], line {call}" in shown
    assert f"Cell In[2], line {tanh}" in shown and "ipykernel_" not in shown
    # the run file says the same (JSON): each finding names its cell
    doc = report_doc(home / f"graphdbg-cell{n}.run")
    where = {(d["kind"], d["cell"], d["line"]) for d in doc["diagnostics"]}
    assert {("divergence", "Cell In[2]", tanh), ("graph_break", "Cell In[2]", brk),
            ("recompile", f"Cell In[{n}]", call)} <= where
    assert all(d["cell"] for d in doc["diagnostics"])


def test_a_capture_of_code_compiled_before_says_so(notebook):
    cells, _, _ = notebook
    text = _text(cells[4])
    # the line a capture prints when it ends in a notebook, then the object's own display
    assert text.count("graphdbg capture → again.run: 0 graphs, 0 problems; ") == 2
    assert "graphs were compiled before this capture: their breaks and recompiles are not in " \
           "it" in text and "reset=True" in text
    assert "aten.addmm" not in text and "<div" in _html(cells[4])


def test_a_failing_cell_shows_its_report_and_its_error(notebook):
    cells, _, _ = notebook
    kinds = [o.output_type for o in cells[5].outputs]
    assert kinds[-1] == "error" and "display_data" in kinds   # the report, then the error
    text = _text(cells[5])
    assert "✖ runtime_error Cell In[6], line 1 in <module>" in text
    assert "mat1 and mat2 shapes cannot be multiplied" in text
    tb = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(cells[5].outputs[-1].traceback))
    assert "Cell In[6], line 1" in tb
    # the magic's own frames are hidden, as IPython hides its own
    assert "graphdbg/notebook.py" not in tb and "skipping hidden" in tb


def test_compare_on_the_compiled_model_has_no_recompile_and_leaves_no_file(notebook):
    cells, _, tmp = notebook
    text = _text(cells[6])
    assert text.startswith("hidden") or "graphdbg.compare: " in text
    assert "graphdbg.compare: compiled matches eager; 2 graph(s), 1 graph break(s) (its run file" in text
    # (its graphs are the frame's third compile, "(recompile 2)" to Dynamo, but
    # no finding of the program's)
    assert "▲ recompile" not in text and "different backend" not in text
    assert [p for p in os.listdir(tmp) if p.startswith("graphdbg-")] == []


def test_the_magic_says_its_options(notebook):
    cells, _, _ = notebook
    text = _text(cells[7])
    assert text.startswith("usage: %%graphdbg [-o RUN] [--reset] [--backend NAME]")
    assert "--values {none,health,stats,full}" in text
