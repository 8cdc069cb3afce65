"""The one line the report and the TUI give an exported graph
(graphdbg.analysis.wording.export_text, model_name), for every way of
exporting: torch.export.export, draft_export, torch.onnx.export (dynamo) and
the TorchScript exporter, whose graph is the ONNX file it traced (no FX
graph) and which is checked only through the program's InferenceSession.
Runs written with RunWriter, as hooks/record/exports.py and
hooks/record/tsexport.py write them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphdbg.analysis.wording import export_text, model_name
from graphdbg.runfile.query import Run

RT = "onnxruntime 1.32.0"


def _write(folder: Path) -> Path:
    from graphdbg.runfile.records import CallRow, EventRow, NodeRow
    from graphdbg.runfile.writer import RunWriter
    src = folder / "m.py"
    src.write_text("import torch\n" * 20)
    s = str(src)
    w = RunWriter(str(folder / "w.run"))
    w.set_meta(argv=["m.py"], cwd=str(folder), module=False, values="stats", torch="2.13.0")
    graphs = [  # (id, code name, backend, line, n_nodes, n_ops, export event, calls)
        (1, "Net (torch.export)", "torch.export", 10, 5, 3,
         {"kind": "export", "via": "torch.export.export", "strict": False}, 0),
        (2, "Net (torch.export.draft_export)", "torch.export", 11, 5, 3,
         {"kind": "export", "via": "torch.export.draft_export", "strict": False}, 0),
        (3, "Net (torch.onnx.export)", "onnx", 12, 5, 3,
         {"kind": "onnx", "via": "torch.onnx.export", "strict": False, "opset": 20,
          "onnx_nodes": 4, "runtime": RT}, 1),
        (4, "Net (torch.onnx.export(dynamo=False))", "onnx", 13, 3, 3,
         {"kind": "onnx", "via": "torch.onnx.export(dynamo=False)", "strict": False,
          "opset": 17, "onnx_nodes": 3, "onnx_ops": None, "runtime": RT,
          "path": str(folder / "model.onnx")}, 2),
        (5, "Cnn (torch.onnx.export(dynamo=False))", "onnx", 14, 4, 4,
         {"kind": "onnx", "via": "torch.onnx.export(dynamo=False)", "strict": False,
          "opset": 17, "onnx_nodes": 4, "onnx_ops": None, "runtime": RT}, 0),
    ]
    seq = 0
    for gid, name, backend, line, n_nodes, n_ops, meta, calls in graphs:
        w.put_graph(gid, backend=backend, code_name=name, code_file=s, code_line=line,
                    n_nodes=n_nodes, n_ops=n_ops, status="exported", backend_time_s=0.5)
        for idx in range(n_nodes):
            w.add(NodeRow(gid, idx, f"n{idx}", "call_function", "aten.relu.default", None, None,
                          None, None, None, None, ""))
        seq += 1
        w.add(EventRow(seq, 0.0, "graphdbg_export", None,
                       json.dumps({"graphdbg_export": {"graph_id": gid, **meta}}), None))
        for c in range(calls):
            seq += 1
            w.add(CallRow(seq, gid, c + 1, 1000, "[]"))
    w.close(exit_status=0, status="complete")
    return folder / "w.run"


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    with Run(str(_write(tmp_path_factory.mktemp("wording")))) as run:
        yield {g.id: g for g in run.graphs()}


def test_the_model_is_named_without_the_export_function_whichever_made_it(graphs):
    assert [model_name(graphs[i]) for i in (1, 2, 3, 4, 5)] == ["Net"] * 4 + ["Cnn"]


def test_a_torch_export_and_a_draft_export(graphs):
    assert export_text(graphs[1]) == ("torch.export: graph 1 is Net exported by "
                                      "torch.export.export at m.py:10 (non-strict) in 0.50 s: "
                                      "5 FX nodes")
    assert export_text(graphs[2]).startswith("torch.export: graph 2 is Net exported by "
                                             "torch.export.draft_export at m.py:11 (non-strict)")


def test_a_dynamo_onnx_export_checked_node_by_node_and_its_calls(graphs):
    text = export_text(graphs[3], [0, 1], 1)
    assert text.startswith("ONNX: graph 3 is Net exported by torch.onnx.export at m.py:12 "
                           "in 0.50 s: opset 20, 4 ONNX nodes from 3 FX ops; checked against "
                           f"eager in {RT}, node by node on calls 0 (the example inputs) and 1; ")
    assert text.endswith("its calls ran in ONNX Runtime (the ONNX program's, or an "
                         "InferenceSession's on its file, whose first runs are checked against "
                         "the model by their outputs, node by node when they differ)")
    # a divergence without per-node values: checked by its outputs
    assert f"checked against eager in {RT}, by its outputs;" in export_text(graphs[3], [], 1)


def test_a_torchscript_export_said_once_its_file_nodes_and_its_sessions_runs(graphs):
    text = export_text(graphs[4], [], 0)
    assert text == ("ONNX: graph 4 is Net exported by torch.onnx.export(dynamo=False) at "
                    "m.py:13 in 0.50 s: opset 17, 3 ONNX nodes in the file the trace wrote "
                    f"(no FX graph); its 2 calls are the program's InferenceSession runs on its "
                    f"file in {RT}, checked against the model's eager forward output by output "
                    "(line by line where they differ)")
    assert text.count("torch.onnx.export") == 1 and "FX op" not in text


def test_a_torchscript_export_no_session_ran(graphs):
    assert export_text(graphs[5], [], 0) == (
        "ONNX: graph 5 is Cnn exported by torch.onnx.export(dynamo=False) at m.py:14 in 0.50 s: "
        "opset 17, 4 ONNX nodes in the file the trace wrote (no FX graph); "
        f"runs in {RT}; checked only through an InferenceSession the program opens on its file "
        "(none ran)")
