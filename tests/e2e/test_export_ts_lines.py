"""The TorchScript exporter's numerics, at their lines (issue 32): when the
program's InferenceSession on a file `torch.onnx.export(dynamo=False)` wrote
returns other outputs than the model, the first line of the model whose ONNX
Runtime value departs is named (hooks/check/tsonnx.py), not `session.run`;
an op the exporter cannot translate fails at its own line. Real exports, real
onnxruntime: tests/support/exports/torchscript_numerics.py runs once under
`graphdbg run` and once without it, shared by the tests."""

from __future__ import annotations

from conftest import SUPPORT, line_of, program_fixtures

PROGRAM = SUPPORT / "exports" / "torchscript_numerics.py"


def line(mark: str) -> int:
    return line_of(PROGRAM, mark)


traced, plain = program_fixtures(PROGRAM, "torchscript_numerics_plain")


def divergences(doc: dict, mark: str) -> list[dict]:
    (g,) = [g for g in doc["graphs"] if g["kind"] == "onnx" and g["line"] == line(mark)]
    return [d for d in doc["diagnostics"] if d["kind"] == "divergence" and d["graph"] == g["id"]]


def test_an_overflow_after_a_loop_of_blocks_is_at_its_line(traced):
    """The session was made from the exported buffer's bytes; the run on
    large inputs overflows in log(sigmoid(x)). The blocks' line ran three
    times on both sides and agrees each time; the BCE line is the first that
    departs, not the run line nor a line after it."""
    doc = traced.doc
    assert doc["run"]["internal_errors"] == []
    (d,) = divergences(doc, "SCORER_EXPORT")
    assert (d["file"], d["line"]) == (str(PROGRAM), line("BCE_LINE"))
    assert d["severity"] == "error"
    assert d["message"].startswith("ONNX Runtime overflows to inf at torchscript_numerics.py:")
    det = d["detail"]
    assert det["method"] == "onnx lines" and det["classification"] == "nonfinite"
    assert det["call"] == 2 and det["fp64_finite"] is True
    assert {"Sigmoid", "Log"} <= set(det["onnx_ops"])
    lines = {f["line"] for f in d["stack"]}
    assert line("SCORER_EXPORT") in lines and line("RUN_LARGE") not in lines


def test_a_nan_that_reducemax_ignores_is_at_the_amax_line(traced):
    (d,) = divergences(traced.doc, "PEAK_EXPORT")
    assert (d["file"], d["line"]) == (str(PROGRAM), line("AMAX_LINE"))
    assert d["message"].startswith("ONNX Runtime ignores the NaN that eager and float64 carry")
    det = d["detail"]
    assert det["call"] == 2 and det["onnx_ops"] == ["ReduceMax"]
    assert det["nonfinite_side"] == "eager" and det["fp64_finite"] is False


def test_the_onnx_nodes_carry_the_lines_they_were_traced_at(traced):
    from conftest import query
    rows = query(traced.run, "SELECT n.target, f.file, f.line FROM nodes n JOIN frames f "
                             "ON f.id = n.user_frame JOIN graphs g ON g.id = n.graph_id "
                             "WHERE g.code_line = ?", (line("PEAK_EXPORT"),))
    at = {(r["target"], r["line"]) for r in rows if r["file"] == str(PROGRAM)}
    assert ("ReduceMax", line("AMAX_LINE")) in at and ("Log", line("AMAX_LINE") - 1) in at


def test_an_op_the_exporter_cannot_translate_fails_at_its_line(traced):
    (d,) = [d for d in traced.doc["diagnostics"] if d["kind"] == "compile_error"]
    assert (d["file"], d["line"]) == (str(PROGRAM), line("LOGADDEXP_LINE"))
    assert "aten::logaddexp" in d["message"]
    assert line("SOFT_EXPORT") in {f["line"] for f in d["stack"]}


def test_the_program_prints_and_writes_the_same_with_and_without_graphdbg(traced, plain):
    assert traced.stdout == plain.stdout
    assert "0000807f" in plain.stdout   # the session's inf, as the program got it
    assert (traced.dir / "amax.onnx").read_bytes() == (plain.dir / "amax.onnx").read_bytes()
