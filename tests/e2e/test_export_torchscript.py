"""The TorchScript ONNX exporter (`torch.onnx.export(..., dynamo=False)`) and
the program's own ONNX Runtime session on the file it wrote (issue 32):
the design note's model, whose `if x.mean() > 0.5:` the trace freezes, run by
the program's InferenceSession on inputs of both branches, and a clean CNN
with a dynamic batch. Real exports, real onnxruntime: the program
(tests/support/exports/torchscript_branch.py) runs once under `graphdbg run`
and once without it, in a subprocess each, shared by the tests."""

from __future__ import annotations

from conftest import SUPPORT, line_of, program_fixtures

PROGRAM = SUPPORT / "exports" / "torchscript_branch.py"


def line(mark: str) -> int:
    return line_of(PROGRAM, mark)


traced, plain = program_fixtures(PROGRAM, "torchscript_plain")


def at(doc: dict, kind: str, mark: str) -> list[dict]:
    return [d for d in doc["diagnostics"] if d["kind"] == kind and d["file"] == str(PROGRAM)
            and d["line"] == line(mark)]


def export_graph(doc: dict, mark: str) -> dict:
    (g,) = [g for g in doc["graphs"] if g["kind"] == "onnx" and g["line"] == line(mark)]
    return g


def test_the_sessions_wrong_outputs_are_found_at_the_if_line_the_trace_froze(traced):
    doc = traced.doc
    assert doc["run"]["internal_errors"] == []
    (d,) = at(doc, "divergence", "IF_LINE")
    det = d["detail"]
    assert d["severity"] == "error"
    assert d["message"].startswith("the trace took the False branch at torchscript_branch.py:")
    assert "these inputs take True: the ONNX model computes the other branch" in d["message"]
    assert det["method"] == "frozen branch" and det["exported"] == "onnx"
    assert det["branch"]["traced"] is False and det["branch"]["now"] is True
    assert det["branch"]["converted"] == "bool" and det["branch"]["code"].startswith("if x.mean()")
    # the program's second run (the other branch's inputs); its first matches
    assert det["call"] == 2 and det["stage"].startswith("onnxruntime ")
    assert det["max_abs"] > 0.1 and det["compiled_vs_fp64"] > 100 * det["eager_vs_fp64"]
    # called from the program's session.run line
    frames = [(f["file"], f["line"]) for f in d["stack"]]
    assert (str(PROGRAM), line("RUN_HIGH")) in frames
    assert d["graph"] == export_graph(doc, "EXPORT_CALL")["id"]
    # nothing else diverges: not the run on the traced branch's inputs, not the CNN
    assert [x for x in doc["diagnostics"] if x["kind"] == "divergence"] == [d]


def test_the_tracer_warning_is_a_warning_at_the_if_line(traced):
    doc = traced.doc
    (d,) = at(doc, "export_specialized", "IF_LINE")
    assert d["severity"] == "warning"
    assert d["message"] == ("torch.onnx.export(dynamo=False): the trace took the False branch "
                            "here; an exported model will always take it")
    assert d["detail"]["branch"]["value"] is False
    assert "Converting a tensor to a Python boolean" in d["reason"]
    frames = [(f["file"], f["line"]) for f in d["stack"]]
    assert (str(PROGRAM), line("EXPORT_CALL")) in frames
    g = export_graph(doc, "EXPORT_CALL")
    e = g["export"]
    assert e["via"] == "torch.onnx.export(dynamo=False)"
    assert e["path"] == str(traced.dir / "model.onnx")
    assert e["input_shapes"] == [[1, 10]] and e["inputs"] == ["input"]
    assert [(w["line"], w["converted"], w["value"]) for w in e["tracer_warnings"]] == \
        [(line("IF_LINE"), "bool", False)]
    # the ONNX file's nodes: the traced branch only (Gemm, Relu, Gemm)
    assert g["n_nodes"] == 3


def _warnings(stderr: str) -> list[str]:
    """The program's stderr without what a CUDA build's triton prints at exit
    (nanobind's leak report: object addresses, differing run to run)."""
    return stderr.split("nanobind: leaked", 1)[0].splitlines()   # it comes last, at exit


def test_the_program_prints_and_writes_the_same_with_and_without_graphdbg(traced, plain):
    assert traced.stdout == plain.stdout
    assert traced.stdout.count("\n") >= 8
    # torch's warnings (the TracerWarning at the if line, the exporter's
    # deprecation at the export calls) as the program gives them without graphdbg
    assert _warnings(traced.stderr) == _warnings(plain.stderr)
    assert "TracerWarning: Converting a tensor to a Python boolean" in plain.stderr
    for name in ("model.onnx", "cnn.onnx"):
        assert (traced.dir / name).read_bytes() == (plain.dir / name).read_bytes()


def test_a_clean_torchscript_export_and_its_session_give_no_finding(traced):
    doc = traced.doc
    g = export_graph(doc, "CNN_EXPORT")
    assert g["export"]["via"] == "torch.onnx.export(dynamo=False)"
    assert g["export"]["tracer_warnings"] is None
    # both runs of the program's session (batch 1 and 5) recorded, and checked
    assert g["calls"] == 2
    assert [d for d in doc["diagnostics"] if d["severity"] in ("warning", "error")
            and (d["graph"] == g["id"] or d["line"] in (line("CNN_EXPORT"), line("CNN_RUN")))] == []
