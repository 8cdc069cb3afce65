"""Exports that narrow or fix a size declared dynamic, and torch.onnx.export's
retries of a failed capture (issue 30): each is ONE finding, at the line the
user must change, with the call chain down from the export call, under
`graphdbg run` and in `graphdbg report --json`. One program
(tests/support/exports/placement_exports.py) holds every case, each in a
model of its own shape, each export call in a `try`."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import SUPPORT, code_at, group, line_of, report_text

PROGRAM = SUPPORT / "exports" / "placement_exports.py"
FILE = str(PROGRAM)

pytest.importorskip("onnxscript")


@pytest.fixture
def doc(runs) -> dict:
    return runs.program(PROGRAM).ok().doc


def line(mark: str) -> int:
    return line_of(PROGRAM, mark)


def of_call(doc: dict, call: str) -> list[dict]:
    """The findings of one export call: those whose stack passes its line."""
    at = line(f"{call} call")
    return [d for d in doc["diagnostics"]
            if any(f["file"] == FILE and f["line"] == at for f in d["stack"])]


# what the caret underlines at each marked line: the expression to change
CARET = {"slice export": "self.table[:, :n]", "slice helper": "self.keys[:t]",
         "slice onnx": "self.pe[:, : x.size(1)]", "view fixes": "h.view(2, 32)",
         "table fixes": "tok + self.pos", "reshape fixes": "img.reshape(3, 16)",
         "branch onnx": "x.mean() > 0.5", "branch export": "(y > 3).any()"}


def the_finding(doc: dict, call: str, mark: str, kind: str = "compile_error") -> dict:
    """The one finding of an export call: at ``mark``, of ``kind``, the caret
    under the expression to change, its stack from the program's call of the
    export down to that line."""
    (d,) = of_call(doc, call)
    assert (d["kind"], d["file"], d["line"]) == (kind, FILE, line(mark)), \
        (d["kind"], d["line"], d["message"])
    assert d["code"] == code_at(PROGRAM, line(mark))
    assert d["col"] is not None and d["code"][d["col"]:d["end_col"]] == CARET[mark]
    lines = [f["line"] for f in d["stack"] if f["file"] == FILE]
    assert lines[-1] == line(mark) and line(f"{call} call") in lines[:-1]
    return d


# -- 1. a Dim range that slicing narrows --------------------------------------------------

@group("placement-exports")
def test_a_dim_range_a_slice_narrows_is_at_the_slicing_line(doc):
    """`self.table[:, :n]` of a 64-column table with `Dim("n", max=512)`: torch
    adds `n <= 64` inside its fake slice (ShapeEnv names torch's file); the
    error comes after tracing. At the slicing line, not the forward's last."""
    d = the_finding(doc, "slice export", "slice export")
    assert d["detail"]["export"] and not d["detail"]["data_dependent"]
    assert d["detail"]["guards"][0] == {"file": FILE, "line": line("slice export"),
                                        "function": "forward", "guard": "x.size()[1] <= 64"}
    assert "x.size()[1] <= 64" in d["hint"] and "torch suggests n = Dim('n', max=64)" in d["hint"]
    assert not [x for x in doc["diagnostics"] if x["line"] == line("slice export") + 2]


@group("placement-exports")
def test_a_strict_export_narrowed_by_a_slice_is_at_the_same_line(doc):
    """strict=True: Dynamo traces the forward (not live frames); its own
    compile error and the export's are one finding."""
    d = the_finding(doc, "slice strict", "slice export")
    assert d["message"].startswith("torch.export failed:")
    assert d["detail"]["strict"] is True and "fail_type" not in d["detail"]
    assert d["detail"]["guards"][0] == {"file": FILE, "line": line("slice export"),
                                        "function": "forward", "guard": "x.size()[1] <= 64"}


@group("placement-exports")
def test_a_slice_in_a_helper_method_is_at_the_helpers_line_with_its_caller(doc):
    d = the_finding(doc, "slice helper", "slice helper")
    assert d["function"] == "recent"
    assert [f["function"] for f in d["stack"]][-2:] == ["forward", "recent"]
    assert "q.size()[0] <= 32" in d["hint"] and "max=32" in d["hint"]


@group("placement-exports")
def test_onnx_keeps_the_declared_range_a_slice_narrows_and_says_so_at_the_slice(doc):
    """torch.onnx.export does not fail: its capture turns the guard into a
    condition the ONNX program drops, and ONNX Runtime breaks past 32. One
    warning, at the slice, inside the submodule the model calls."""
    d = the_finding(doc, "slice onnx", "slice onnx", kind="export_specialized")
    assert d["severity"] == "warning"
    assert d["message"] == ("torch.onnx.export keeps x.size()[1] dynamic (up to 100), "
                            "but the code works only up to 32")
    assert (d["detail"]["size"], d["detail"]["value"], d["detail"]["exported"]) == \
        ("x.size()[1]", 32, "onnx")
    assert "max=32" in d["hint"]
    assert d["graph"] is not None


# -- 2. a batch declared dynamic that the code fixes ---------------------------------------

def fixed_to(d: dict, size: str, value: int) -> None:
    assert [(s["size"], s["value"], s["line"]) for s in d["detail"]["specialized"]] == \
        [(size, value, d["line"])]


@group("placement-exports")
def test_dynamic_axes_fixed_by_view_is_at_the_view_with_a_hint(doc):
    """dynamic_axes, `h.view(2, 32)`: torch.onnx's conflict error ("tracing
    inferred a static shape") came after tracing; it was placed at the last
    traced node (the next line), with no hint."""
    d = the_finding(doc, "view onnx", "view fixes")
    fixed_to(d, "x.size()[0]", 2)
    assert "fixes x.size()[0] to 2, which you declared dynamic (dynamic_axes)" in d["message"]
    assert "pass -1 or x.shape[0]" in d["hint"] and "leave it out of dynamic_axes" in d["hint"]


@group("placement-exports")
def test_dim_dynamic_fixed_by_view_under_torch_export_is_at_the_view(doc):
    d = the_finding(doc, "view export", "view fixes")
    fixed_to(d, "x.size()[0]", 2)
    assert "(Dim.DYNAMIC)" in d["message"] and "pass -1 or x.shape[0]" in d["hint"]
    assert "Dim.STATIC" in d["hint"]


@group("placement-exports")
def test_a_fixed_size_table_added_to_the_input_is_at_the_addition(doc):
    """`tok + self.pos` with a 16-row table: under dynamic_axes the export
    fails, under Dim.AUTO it fixes the size silently (a warning); both at
    the addition, saying to slice the table to the input."""
    d = the_finding(doc, "table onnx", "table fixes")
    fixed_to(d, "tok.size()[0]", 16)
    assert "table[:tok.shape[0]]" in d["hint"]
    w = the_finding(doc, "table export", "table fixes", kind="export_specialized")
    assert (w["severity"], w["detail"]["declared"]) == ("warning", "Dim.AUTO")
    assert "table[:tok.shape[0]]" in w["hint"]


@group("placement-exports")
def test_dim_dynamic_fixed_by_reshape_is_at_the_reshape_named_as_written(doc):
    d = the_finding(doc, "reshape onnx", "reshape fixes")
    fixed_to(d, "img.size()[0]", 3)
    assert d["hint"].startswith("reshape(...) is given img.size()[0] as the number 3")


# -- 3. torch.onnx.export's retries --------------------------------------------------------

@group("placement-exports")
def test_the_onnx_exporters_retries_are_one_export_finding_at_the_if(doc):
    """`if x.mean() > 0.5:` fails torch.export (non-strict), then the
    exporter's strict retry fails in Dynamo: one finding, the export's, at the
    `if` inside the helper, with the call chain from the program's call of
    torch.onnx.export; it names both strategies and why each failed."""
    d = the_finding(doc, "branch onnx", "branch onnx")
    det = d["detail"]
    assert det["export"] and det["via"] == "torch.onnx.export" and det["data_dependent"]
    assert "fail_type" not in det
    assert d["message"].startswith("torch.onnx.export failed: strict=False: "
                                   "GuardOnDataDependentSymNode")
    assert "strict=True: Unsupported: Data-dependent branching" in d["message"]
    assert "torch.export.export(strict=False): GuardOnDataDependentSymNode" in det["explanation"]
    assert "torch.export.export(strict=True): Unsupported" in det["explanation"]
    assert [(t["strategy"], t["exception"]) for t in det["strategies"]] == [
        ("torch.export.export(strict=False)", "GuardOnDataDependentSymNode"),
        ("torch.export.export(strict=True)", "Unsupported")]
    assert all(t["message"] for t in det["strategies"])
    # the unbacked value is made at the `if` (the node names only the forward's line)
    assert [(u["line"], u["op"]) for u in det["unbacked"]] == \
        [(line("branch onnx"), "torch.ops.aten.item.default")]
    assert [f["function"] for f in d["stack"]][-3:] == ["export_gate", "forward", "gate"]
    # no compile_error of torch.compile's anywhere in the run
    assert not [x for x in doc["diagnostics"] if "fail_type" in (x["detail"] or {})]


@group("placement-exports")
def test_a_data_dependent_branch_under_torch_export_is_one_finding_at_the_if(doc):
    d = the_finding(doc, "branch export", "branch export")
    assert d["detail"]["data_dependent"] and "via" not in d["detail"]
    assert d["message"].startswith("torch.export failed: GuardOnDataDependentSymNode")


@group("placement-exports")
def test_every_finding_is_at_a_marked_line_and_the_report_shows_each_once(doc, runs):
    marks = {line(m) for m in ("slice export", "slice helper", "slice onnx", "view fixes",
                               "table fixes", "reshape fixes", "branch onnx", "branch export")}
    assert {d["line"] for d in doc["diagnostics"]} == marks
    assert len(doc["diagnostics"]) == 11
    assert doc["run"]["internal_errors"] == []
    text = report_text(runs.program(PROGRAM).run)
    assert text.count("Unsupported: Data-dependent branching") == 1
    assert f"{Path(FILE).name}:{line('branch onnx')}" in text
