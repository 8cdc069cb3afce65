"""The default exporter (`torch.onnx.export(..., dynamo=True)`) writing the
ONNX file, with a path or by `ONNXProgram.save`, and the program's own ONNX
Runtime session on that file (issue 32): its runs are checked against the
model, and a run that differs is localised node by node, at the user's line
of the op whose translation departs (logaddexp overflowing for large |x|),
not at `session.run`. Real exports, real onnxruntime: the program
(tests/support/exports/dynamo_session.py) runs once under `graphdbg run` and
once without it, in a subprocess each, shared by the tests."""

from __future__ import annotations

import pytest

from conftest import SUPPORT, line_of, program_fixtures

PROGRAM = SUPPORT / "exports" / "dynamo_session.py"


def line(mark: str) -> int:
    return line_of(PROGRAM, mark)


traced, plain = program_fixtures(PROGRAM, "dynamo_session_plain")


def export_graph(doc: dict, mark: str) -> dict:
    (g,) = [g for g in doc["graphs"] if g["kind"] == "onnx" and g["line"] == line(mark)]
    return g


@pytest.mark.parametrize("mark,calls", [("EXPORT_PATH", 2), ("EXPORT_SAVE", 3)])
def test_the_sessions_overflow_is_found_at_the_logaddexp_line(traced, mark, calls):
    """Both files (written by the export, and by program.save; the saved one
    also opened from its bytes): the session's run on large inputs differs,
    found at the logaddexp line by the node-by-node check; the export's
    example inputs are clean, so no check of the export itself finds it."""
    doc = traced.doc
    assert doc["run"]["internal_errors"] == []
    g = export_graph(doc, mark)
    assert g["calls"] == calls   # every run of the program's sessions on this file
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "divergence" and d["graph"] == g["id"]]
    assert (d["file"], d["line"]) == (str(PROGRAM), line("LOGADDEXP_LINE"))
    assert d["severity"] == "error" and d["node"] == "logaddexp"
    assert d["message"].startswith("ONNX Runtime overflows to inf at torch.ops.aten.logaddexp")
    det = d["detail"]
    # the session's second run (the large inputs): call 0 is the export's example inputs
    assert det["call"] == 2 and det["classification"] == "nonfinite"
    assert det["stage"].startswith("onnxruntime ")
    assert d["count"] == calls - 1   # each large run: the bytes session's too
    lines = {f["line"] for f in d["stack"]}
    assert line("RUN_LARGE") not in lines and line("RUN_BYTES") not in lines


def test_the_checks_own_copies_of_the_sessions_inputs_are_not_the_programs_ops(traced):
    """The session's inputs, made tensors for the check, are graphdbg's ops:
    no eager op is recorded at a session.run line."""
    runs = {line(m) for m in ("RUN_SMALL", "RUN_LARGE", "RUN_BYTES", "MLP_RUN")}
    assert [o for o in traced.doc["eager"]["top_ops"] if o["line"] in runs] == []


def test_the_program_prints_and_writes_the_same_with_and_without_graphdbg(traced, plain):
    assert traced.stdout == plain.stdout
    assert traced.stdout.count("\n") >= 7
    assert "0000807f" in plain.stdout   # the ONNX model's inf, as the program got it
    for name in ("written.onnx", "saved.onnx", "mlp.onnx"):
        assert (traced.dir / name).read_bytes() == (plain.dir / name).read_bytes()


def test_a_clean_models_session_gives_no_finding(traced):
    doc = traced.doc
    g = export_graph(doc, "MLP_EXPORT")
    assert g["calls"] == 2   # both runs of its session recorded
    assert [d for d in doc["diagnostics"] if d["severity"] in ("warning", "error")
            and (d["graph"] == g["id"] or d["line"] in (line("MLP_EXPORT"), line("MLP_RUN")))] == []
    # the two divergences are the logaddexp files', nothing at the session.run lines
    assert {d["line"] for d in doc["diagnostics"] if d["severity"] in ("warning", "error")} == \
        {line("LOGADDEXP_LINE")}


def test_a_session_made_from_an_exported_buffers_bytes_is_checked(traced):
    """`torch.onnx.export(..., buffer, dynamo=True)`, then
    `InferenceSession(buffer.getvalue())`: the session is known by the bytes,
    its run checked (clean: no finding)."""
    g = export_graph(traced.doc, "MLP_BUFFER")
    assert g["calls"] == 1
    assert [d for d in traced.doc["diagnostics"] if d["graph"] == g["id"]] == []
