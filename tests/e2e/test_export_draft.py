"""torch.export.draft_export (issue 32): what it assumed, at the user's
line; an ONNX program converted from its exported program checked against
the model, not against the exported program it agrees with: the runtime
assertion the conversion dropped, said at the line it guarded, and the
inputs that take the other branch found at the `if` line. Real draft_export,
torch.onnx.export and ONNX Runtime (tests/support/exports/draft_branch.py),
one run shared by all."""

from __future__ import annotations

from pathlib import Path

import pytest

import graphdbg

from conftest import SUPPORT

DRAFT = SUPPORT / "exports" / "draft_branch.py"


def line(path: Path, mark: str) -> int:
    (found,) = [i for i, ln in enumerate(path.read_text().splitlines(), 1)
                if ln.rstrip().endswith(f"# {mark}")]
    return found


def at(doc: dict, kind: str, mark: str) -> list[dict]:
    return [d for d in doc["diagnostics"] if d["kind"] == kind
            and d["file"] == str(DRAFT) and d["line"] == line(DRAFT, mark)]


@pytest.fixture
def draft(runs):
    return runs.program(DRAFT).ok()


def graph(doc: dict, kind: str) -> dict:
    (g,) = [g for g in doc["graphs"] if g["kind"] == kind]
    return g


def test_draft_export_is_recorded_with_what_it_assumed_at_the_if_line(draft):
    doc = draft.doc
    assert doc["run"]["internal_errors"] == []
    g = graph(doc, "export")
    assert g["export"]["via"] == "torch.export.draft_export"
    assert g["line"] == line(DRAFT, "DRAFT_CALL")
    (d,) = [d for d in at(doc, "export_specialized", "BRANCH_LINE")
            if d["detail"]["exported"] == "export"]
    assert d["severity"] == "warning" and d["graph"] == g["id"]
    assert d["message"] == ("draft_export assumed x.mean() > 0.5 is True here (the trace's "
                            "branch); the exported program asserts it at run time")
    det = d["detail"]
    assert (det["declared"], det["value"], det["symbol"]) == ("draft_export", "True", "Eq(u0, 1)")
    assert "torch.cond" in d["hint"]


def test_the_assertion_the_onnx_conversion_dropped_is_said_at_the_line_it_guards(draft):
    doc = draft.doc
    onnx = graph(doc, "onnx")
    assert onnx["line"] == line(DRAFT, "ONNX_CALL")
    (d,) = [d for d in at(doc, "export_specialized", "BRANCH_LINE")
            if d["detail"]["exported"] == "onnx"]
    assert d["graph"] == onnx["id"] and d["severity"] == "warning"
    assert d["message"] == (f"the exported program asserts x.mean() > 0.5 (draft_branch.py:"
                            f"{line(DRAFT, 'BRANCH_LINE')}); the ONNX program dropped it: inputs "
                            "taking the other branch get the traced branch's result")
    assert "Eq(u0, 1)" in d["detail"]["symbol"]


def test_the_other_branchs_inputs_diverge_from_the_model_at_the_if_line(draft):
    """The ONNX program agrees with the exported program it was made from;
    checked against the model it does not, on the call whose inputs take the
    other branch (call 2), and only there."""
    doc = draft.doc
    onnx = graph(doc, "onnx")
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "divergence"]
    assert (d["file"], d["line"]) == (str(DRAFT), line(DRAFT, "BRANCH_LINE"))
    det = d["detail"]
    assert d["graph"] == onnx["id"] and d["severity"] == "error"
    assert (det["call"], det["method"], det["exported"]) == (2, "lines (branch)", "onnx")
    assert d["node"] == "gt" and det["target"].endswith("aten.gt.Scalar")
    assert det["output_max_abs"] > 0.05   # the linear branch's result for relu's inputs
    assert "takes the branch traced at export" in d["message"]
    assert onnx["calls"] == 2
    run = graphdbg.open_run(str(draft.run))
    try:   # call 1 (the traced branch's inputs) was checked node by node and matched
        values = run.node_values(onnx["id"], 1)
    finally:
        run.close()
    assert values and all(v.status in ("ok", "not compared") for v in values)


def test_the_programs_results_are_bitwise_those_of_a_plain_run(draft, runs, tmp_path):
    plain = runs.spawn(DRAFT, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr[-2000:]
    lines = [ln for ln in draft.stdout.splitlines() if ln.startswith(("onnx ", "eager "))]
    assert len(lines) == 3
    assert lines == [ln for ln in plain.stdout.splitlines() if ln.startswith(("onnx ", "eager "))]
    # and the ONNX program does answer the other branch wrongly: what graphdbg reported
    assert lines[1].split(" ", 2)[2] != lines[2].split(" ", 2)[2]


def test_an_assumption_after_an_earlier_compile_is_still_at_the_if_line(runs):
    # the report's own file table lacks files torch interned before the export
    # (by the compile): the assumption fell back to the draft_export call
    program = SUPPORT / "exports" / "draft_after_compile.py"
    doc = runs.program(program).ok().doc
    (a,) = [d for d in doc["diagnostics"] if d["kind"] == "export_specialized"]
    assert (a["file"], a["line"]) == (str(program), line(program, "BRANCH_LINE"))
    assert "x.mean() > 0.5" in a["message"]
