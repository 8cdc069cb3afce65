"""A capture that meets code Dynamo compiled before it started (a notebook
cell run again): it says so, `reset=True` recompiles under it, and the
precompiled graphs' ops (inductor's output code, AOTAutograd's runtime) are
never the user's eager ops. Also: `graphdbg.compare` on a model the program
compiled already, and how the API results show themselves."""

from __future__ import annotations

import glob
import os
import tempfile

import pytest
import torch

import graphdbg
from graphdbg.runfile.query import Run

pytestmark = pytest.mark.usefixtures("clean_torch")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.lin(x)
        print("h", h.shape)   # a graph break
        return torch.tanh(h).sum()


def _eager_ops(path) -> dict[str, int]:
    with Run(str(path)) as run:
        return {o.op: o.count for o in run.op_stats(100)}


def _kinds(path) -> list[str]:
    with Run(str(path)) as run:
        return sorted(f.kind for f in run.findings())


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_capture_after_the_compile_says_so_and_reset_recompiles(tmp_path, capsys, backend):
    torch.manual_seed(0)
    net, x = Net(), torch.randn(4, 8)
    compiled = torch.compile(net, backend=backend)
    compiled(x)                                  # compiled before any capture
    compiled(torch.randn(2, 8))                  # and recompiled
    with graphdbg.capture(str(tmp_path / "again.run")) as cap:
        out = compiled(x)
    with Run(cap.path) as run:
        assert run.graphs() == [] and run.findings() == []
        assert run.info.compiled_before == {"graphs": 4}
    # the compiled graphs' ops are no eager ops (inductor's output code calls
    # aten.addmm.out, aot_eager's graph aten.addmm through AOTAutograd's runtime)
    ops = _eager_ops(cap.path)
    assert not any(op.startswith(("aten.addmm", "aten.tanh", "aten.sum")) for op in ops), ops
    text = repr(cap)
    assert "0 graphs" in text and "4 graphs compiled before it" in text
    from graphdbg.display import report_text
    report = report_text(cap.path)
    assert "4 graphs were compiled before this capture: their breaks and recompiles are not " \
           "in it" in report
    assert "torchinductor" not in report and "eager ops" in report
    from conftest import report_doc
    assert report_doc(cap.path)["run"]["compiled_before"]["graphs"] == 4
    # reset=True: compiled again under the capture, break and recompile seen, same values
    with graphdbg.capture(str(tmp_path / "reset.run"), reset=True) as cap2:
        out2 = compiled(x)
        compiled(torch.randn(2, 8))
    assert torch.equal(out, out2)
    with Run(cap2.path) as run:
        # (the size that changed before is dynamic from the start now: Dynamo
        # remembers it past a reset, so the second call need not recompile)
        assert run.info.compiled_before is None and len(run.graphs()) >= 2
    assert "graph_break" in _kinds(cap2.path)
    # not under IPython: a capture prints nothing of its own (the program's print only)
    assert "graphdbg" not in capsys.readouterr().out


def test_compare_on_a_compiled_model_reports_no_recompile_and_leaves_no_file(
        tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    net, x = Net(), torch.randn(4, 8)
    torch.compile(net, backend="aot_eager")(x)   # the program compiled it already
    report = graphdbg.compare(net, x, backend="aot_eager")
    assert [d.kind for d in report.diagnostics] == ["graph_break"]
    assert report.run_file is None and glob.glob(str(tmp_path / "graphdbg-*")) == []
    # its document and display read a copy kept in memory, and leave nothing either
    assert [d["kind"] for d in report.document["diagnostics"]] == ["graph_break"]
    bundle = report._repr_mimebundle_()
    assert bundle["text/plain"].startswith("graphdbg.compare: compiled matches eager; 2 graph(s)")
    assert "<div" in bundle["text/html"] and "graph_break" in bundle["text/plain"]
    # the deleted file is named nowhere; its next commands name the one path= would keep
    assert "graphdbg-view-" not in bundle["text/plain"] and "path='c.run'" in bundle["text/plain"]
    assert "graphdbg tui c.run" in bundle["text/plain"]
    # its graphs are the first compiles this run saw: not named recompiles
    assert "(recompile" not in bundle["text/plain"] and "(recompile" not in bundle["text/html"]
    assert glob.glob(str(tmp_path / "graphdbg-*")) == []
    # path= keeps it
    kept = graphdbg.compare(net, x, backend="aot_eager", path=str(tmp_path / "kept.run"))
    assert kept.run_file == str(tmp_path / "kept.run") and os.path.isfile(kept.run_file)
    assert _kinds(kept.run_file) == ["graph_break"]


def test_results_show_a_line_in_a_terminal_and_html_in_jupyter(tmp_path):
    net, x = Net(), torch.randn(4, 8)
    cap = graphdbg.capture(str(tmp_path / "d.run"))
    assert repr(cap) == f"<graphdbg.capture {tmp_path / 'd.run'}: not started>"
    with cap:
        torch.compile(net, backend="eager")(x)
    line = repr(cap)
    assert line.startswith("graphdbg capture → ") and "d.run: 2 graphs, 1 problem" in line
    assert line.endswith("— graphdbg report " + line.split("→ ")[1].split(":")[0])
    bundle = cap._repr_mimebundle_()
    assert bundle["text/plain"].startswith(line) and "graph_break" in bundle["text/plain"]
    assert bundle["text/html"].lstrip().startswith("<div")
    ok = graphdbg.check_export(torch.nn.Linear(3, 3), (torch.randn(2, 3),))
    assert ok._repr_mimebundle_() == {"text/plain": "graphdbg.check_export(Linear): exported, "
                                                    "matches eager"}
