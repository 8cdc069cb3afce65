"""A clean TorchScript export of a library's model (a tiny transformers
BERT) gives nothing at warning or error level (issue 32): the conversions
transformers makes while the trace runs are notes (info) at its lines, and
the program's own InferenceSession runs are checked against the model."""

from __future__ import annotations

from conftest import SUPPORT

PROGRAM = SUPPORT / "exports" / "torchscript_bert.py"


def test_a_clean_library_model_exported_with_torchscript_gives_no_warning(runs):
    r = runs.program(PROGRAM).ok()
    assert r.stdout.split() == ["16", "True", "8", "True"]
    doc = r.doc
    assert doc["run"]["internal_errors"] == []
    assert [d for d in doc["diagnostics"] if d["severity"] in ("warning", "error")] == []
    traced = [d for d in doc["diagnostics"] if d["kind"] == "export_specialized"]
    assert traced and all(d["severity"] == "info" and "site-packages/transformers/" in d["file"]
                          for d in traced)
    (g,) = [g for g in doc["graphs"] if g["kind"] == "onnx"]
    assert g["calls"] == 2   # both session runs recorded (and checked: no divergence)
