"""Notebook cells named as IPython names them (``Cell In[3], line 7``), with
their source in the run file: real IPython runs the cells (headless, in a
process of its own: IPython's shell takes over the process's hooks)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import report_doc, report_text
from graphdbg.runfile.query import Run
from graphdbg.tui.model import run as tui

pytest.importorskip("IPython")

DEFINE = '''def f(x):
    y = x.sin()
    print("not traceable", y.shape)
    return y.cos() @ y
'''

DRIVER = '''
import sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
cells = [
    "import torch, graphdbg",
    {define!r},
    "with graphdbg.capture(path={run!r}):\\n    torch.compile(f, backend='eager')(torch.randn(3, 3))\\n",
]
for cell in cells:
    r = shell.run_cell(cell, store_history=True)
    if not r.success:
        sys.exit(f"cell {{r.execution_count}} failed: {{r.error_in_exec!r}}")
'''


def _run_cells(tmp_path) -> str:
    run = str(tmp_path / "cells.run")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(DRIVER).format(
        define=DEFINE, run=run)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "IPYTHONDIR": str(tmp_path / "ipython")}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return run


def test_a_finding_in_a_cell_names_the_cell_and_keeps_its_source(tmp_path):
    run = _run_cells(tmp_path)
    doc = report_doc(run)
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "graph_break"]
    # In[1] imports, In[2] defines f, In[3] captures
    assert (d["cell"], d["line"], d["code"]) == ("Cell In[2]", 3, 'print("not traceable", y.shape)')
    assert d["file"].startswith("<ipython-input-2-")
    assert [(s["cell"], s["line"]) for s in d["stack"]] == [("Cell In[3]", 2), ("Cell In[2]", 3)]
    # IPython's own frames are its machinery, as runpy's are: not in the user's stack
    text = report_text(run)
    assert "graph_break Cell In[2], line 3 in f" in text
    assert "called from Cell In[3], line 2 <module>" in text and "interactiveshell" not in text
    with Run(run) as r:
        # the cell's source is in the run file: the file is on no disk
        assert r.source(d["file"]) == DEFINE
        assert r.cell_names()[d["file"]] == "Cell In[2]"
        (f,) = r.findings(kind="graph_break")
        detail = tui.finding_detail(f, r.source(f.file))
        assert detail[0].text.endswith("Cell In[2], line 3 in f")
        assert any(ln.style == "current" and "print(" in ln.text for ln in detail)
        src = tui.SourceModel(r, r.findings())
        files = src.choose_files()
        assert d["file"] in files and not any("IPython" in f for f in files)
        rows, total = src.load_window(d["file"], 3)
        src.show(d["file"], rows, 3, total)
        assert total == 4 and rows[2].text.strip() == 'print("not traceable", y.shape)'
        assert src.title().startswith("Cell In[2], line 3")


def test_cell_names_without_ipython():
    from graphdbg.hooks.placement import cells
    assert cells.cell_name("/tmp/user/model.py") is None
    # with no shell running: IPython < 8 counted in the name; a kernel's file is no name
    assert cells.cell_name("<ipython-input-7-0123456789ab>") == "Cell In[7]"
    assert cells.cell_name("/tmp/ipykernel_15068/1037305179.py") is None
    assert cells.source_of("/tmp/ipykernel_15068/1037305179.py") is None
