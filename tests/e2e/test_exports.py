"""Exports (torch.export, torch.onnx.export) recorded as graphs and checked
against eager, each finding at the user's line (issue 23): real exports, real
ONNX Runtime, programs written for them under tests/support/exports/. Each
program runs once under `graphdbg run` (shared through `runs.program`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import graphdbg
from safetensors.torch import load_file

from conftest import SAMPLES, SUPPORT, group, markers, report_doc, report_text, sites

EXPORTS = SUPPORT / "exports"
TRANSLATION = EXPORTS / "onnx_translation.py"
CASES = EXPORTS / "export_cases.py"
TRANSFORMERS = EXPORTS / "onnx_transformers.py"


def line(path: Path, mark: str) -> int:
    """The line that ends with `# MARK` (exactly one)."""
    (found,) = [i for i, ln in enumerate(path.read_text().splitlines(), 1)
                if ln.rstrip().endswith(f"# {mark}")]
    return found


def findings(doc: dict, kind: str, path: Path, mark: str) -> list[dict]:
    at = line(path, mark)
    return [d for d in doc["diagnostics"] if d["kind"] == kind
            and d["file"] == str(path) and d["line"] == at]


def graph_of(doc: dict, graph_id: int) -> dict:
    return next(g for g in doc["graphs"] if g["id"] == graph_id)


@pytest.fixture
def translation(runs):
    return runs.program(TRANSLATION).ok()


@pytest.fixture
def cases(runs):
    return runs.program(CASES).ok()


@group("export-translation")
def test_a_wrong_custom_translation_is_found_at_its_node_and_line(translation):
    doc = translation.doc
    assert doc["run"]["internal_errors"] == []
    (d,) = [d for d in findings(doc, "divergence", TRANSLATION, "GELU_LINE")]
    det = d["detail"]
    assert (d["severity"], det["classification"], det["exported"]) == ("error", "miscompile", "onnx")
    assert d["node"] == "gelu" and det["target"].endswith("aten.gelu.default")
    assert "Tanh" in det["onnx_ops"] and det["opset"] >= 18
    assert det["stage"].startswith("onnxruntime ")
    # eager is float64's, ONNX is not: the judge says it is not precision
    assert det["compiled_vs_fp64"] > 100 * det["eager_vs_fp64"]
    assert d["count"] == 2   # the example inputs, and the program's first run of the same inputs
    g = graph_of(doc, d["graph"])
    assert g["kind"] == "onnx" and g["export"]["via"] == "torch.onnx.export"
    assert g["export"]["onnx_ops"]["gelu"] == det["onnx_ops"]
    assert g["function"] == "Block (torch.onnx.export)" and g["line"] == line(TRANSLATION, "EXPORT_CALL")
    # node by node: the nodes before gelu match, gelu is the first to depart
    run = graphdbg.open_run(str(translation.run))
    try:
        values = {v.node: v for v in run.node_values(d["graph"], 0)}
    finally:
        run.close()
    assert values["linear"].status == "ok" and values["gelu"].status == "first divergent"
    assert values["gelu"].compiled_from == "onnxruntime"


@group("export-translation")
def test_an_attribute_changed_after_export_is_found_on_a_later_run(translation):
    """The program runs the ONNX program after changing `model.scale`: the
    exported program kept the old value; found on that call, at that line."""
    (d,) = findings(translation.doc, "divergence", TRANSLATION, "SCALE_LINE")
    det = d["detail"]
    assert (det["exported"], det["classification"], det["call"]) == ("onnx", "miscompile", 2)
    assert det["stage"] == "torch.onnx.export" and det["method"] == "lines (values)"
    assert d["node"] == "mul"
    assert "fixed at export time" in d["hint"]


@group("export-cases")
def test_an_op_without_onnx_translation_is_reported_at_the_line_that_calls_it(cases):
    both = findings(cases.doc, "compile_error", CASES, "NO_TRANSLATION")
    (d,) = [d for d in both if not d["detail"]["legacy_exporter"]]
    assert "no ONNX translation for aten.special_airy_ai.default" in d["message"]
    det = d["detail"]
    assert det["onnx"] and det["onnx_op"] == "aten.special_airy_ai.default"
    assert any("custom_translation_table" in f for f in det["fixes"])
    assert "custom_translation_table" in d["hint"]
    # the TorchScript exporter's failure: at the line of the op it was
    # translating too, called from the program's export call
    (legacy,) = [d for d in both if d["detail"]["legacy_exporter"]]
    assert "special_airy_ai" in legacy["message"]
    assert line(CASES, "LEGACY_CALL") in {f["line"] for f in legacy["stack"]}
    assert findings(cases.doc, "compile_error", CASES, "LEGACY_CALL") == []


@group("export-cases")
def test_dim_ranges_the_code_violates(cases):
    # a range the code does not support: at the guard's line, with torch's fix
    (d,) = findings(cases.doc, "compile_error", CASES, "RANGE_GUARD")
    assert d["detail"]["export"] and d["detail"]["guards"]
    assert "torch suggests batch = 16" in d["hint"]
    # a named Dim the code fixes to a number: at the line that fixed it
    (d,) = findings(cases.doc, "compile_error", CASES, "FIXES_BATCH")
    assert d["detail"]["specialized"][0]["value"] == 4
    assert "torch suggests rows = 4" in d["hint"]
    # Dim.AUTO fixed silently: the export succeeds, a warning at that line
    (w,) = findings(cases.doc, "export_specialized", CASES, "FIXES_BATCH")
    assert w["severity"] == "warning"
    assert (w["detail"]["size"], w["detail"]["value"], w["detail"]["declared"]) == \
        ("x.size()[0]", 4, "Dim.AUTO")
    g = graph_of(cases.doc, w["graph"])
    assert g["kind"] == "export" and g["line"] == line(CASES, "AUTO_CALL")
    assert g["export"]["specialized"][0]["line"] == line(CASES, "FIXES_BATCH")


@group("export-cases")
def test_a_branch_fixed_at_export_is_found_when_the_program_calls_the_module(cases):
    """`gate.use_relu = False` after export: eager takes the tanh branch, the
    exported module still the relu one; found on that call, at the relu line,
    naming where eager went instead."""
    (d,) = findings(cases.doc, "divergence", CASES, "GATE_RELU")
    det = d["detail"]
    assert (det["exported"], det["classification"], det["call"], det["method"]) == \
        ("export", "miscompile", 2, "lines (path)")
    assert det["eager_ops"] == ["tanh", "add"]
    assert f"export_cases.py:{line(CASES, 'GATE_TANH')}" in d["hint"]
    g = graph_of(cases.doc, d["graph"])
    assert (g["kind"], g["calls"], g["line"]) == ("export", 2, line(CASES, "GATE_CALL"))
    # the clean calls of the other exported module: checked, nothing found
    rows = next(g for g in cases.doc["graphs"] if g["function"] == "Rows (torch.export)")
    assert rows["calls"] == 1
    assert not [x for x in cases.doc["diagnostics"]
                if x["graph"] == rows["id"] and x["kind"] == "divergence"]


@group("export-cases")
def test_a_float16_export_is_precision_not_error(cases):
    (d,) = findings(cases.doc, "divergence", CASES, "HALF_SIN")
    assert (d["severity"], d["detail"]["classification"], d["detail"]["dtype"]) == \
        ("info", "precision", "float16")
    assert d["node"] == "sin" and d["detail"]["onnx_ops"] == ["Sin"]
    assert not [x for x in cases.doc["diagnostics"]
                if x["graph"] == d["graph"] and x["severity"] != "info"]


@group("export-cases")
def test_dropout_exported_in_training_mode_is_random_not_a_wrong_translation(cases):
    (d,) = findings(cases.doc, "divergence", CASES, "DROPOUT_LINE")
    assert (d["severity"], d["detail"]["classification"]) == ("warning", "random")
    assert "native_dropout" in d["op"] and "Dropout" in d["detail"]["onnx_ops"]
    assert "model.eval()" in d["hint"]


@group("export-transformers")
def test_a_clean_transformers_model_exports_to_onnx_without_false_alarm(runs):
    r = runs.program(TRANSFORMERS).ok()
    doc = r.doc
    assert doc["diagnostics"] == [] and doc["run"]["internal_errors"] == []
    (g,) = doc["graphs"]
    assert g["kind"] == "onnx" and g["export"]["runtime"].startswith("onnxruntime")
    assert g["function"] == "GPT2LMHeadModel (torch.onnx.export)"
    run = graphdbg.open_run(str(r.run))
    try:
        values = run.node_values(g["id"], 0)
    finally:
        run.close()
    compared = [v for v in values if v.status != "not compared"]
    assert len(compared) > 30 and all(v.status == "ok" for v in compared)
    assert g["calls"] == 1   # the program's own run of the ONNX program


class Tiny(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2


@pytest.mark.usefixtures("clean_torch")
def test_exports_under_capture_compute_the_same_and_are_freed_when_the_program_drops_them(
        tmp_path):
    import gc
    import weakref

    def program() -> tuple[list, list]:
        torch.manual_seed(0)
        model, x = Tiny(), torch.randn(5)
        ep = torch.export.export(model, (x,))
        onnx = torch.onnx.export(model, (x,), dynamo=True, verbose=False)
        out = (ep.module()(x).tolist(), onnx(x)[0].tolist())
        refs = [weakref.ref(o) for o in (ep, onnx, model)]
        return out, refs

    plain, _ = program()
    with graphdbg.capture(str(tmp_path / "x.run")):
        seen, refs = program()
        gc.collect()
        assert [r() for r in refs] == [None] * 3   # nothing of graphdbg's keeps them
    assert seen == plain
    doc = report_doc(tmp_path / "x.run")
    assert [g["kind"] for g in doc["graphs"]] == ["export", "onnx"]
    assert doc["diagnostics"] == [] and doc["run"]["internal_errors"] == []
    assert [g["calls"] for g in doc["graphs"]] == [1, 1]


@pytest.mark.usefixtures("clean_torch")
def test_without_onnxruntime_the_export_is_recorded_and_the_check_says_what_to_install(
        tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)   # import onnxruntime fails
    path = tmp_path / "x.run"
    with graphdbg.capture(str(path)):
        program = torch.onnx.export(Tiny(), (torch.randn(3),), dynamo=True, verbose=False)
    assert program is not None
    doc = report_doc(path)
    (g,) = doc["graphs"]
    assert g["kind"] == "onnx" and g["export"]["runtime"] is None
    (d,) = doc["diagnostics"]
    assert d["kind"] == "check_skipped" and d["severity"] == "info"
    assert "pip install 'graphdbg[onnx]'" in d["message"] and "onnxruntime" in d["message"]
    assert d["file"] == __file__


@group("onnx-export-sample")
def test_the_sample_finds_both_bugs_at_their_lines_and_computes_what_a_plain_run_does(runs):
    sample = SAMPLES / "onnx_export.py"
    r = runs.graphdbg("onnx_export", "--save", "observed.safetensors").ok()
    doc = r.doc
    assert doc["run"]["internal_errors"] == []
    assert sites(doc, "divergence") == markers(sample, "divergence")
    assert sites(doc, "export_specialized") == markers(sample, "export_specialized")
    assert {d["kind"] for d in doc["diagnostics"]} == {"divergence", "export_specialized"}
    assert [g["kind"] for g in doc["graphs"]] == ["export", "onnx"]
    # no compiled graph: the header counts the exports apart, as torch would
    assert "0 graphs, 2 exports, 1 divergence, 1 export-fixed value" in report_text(r.run)
    plain = runs.python("onnx_export", "--save", "plain.safetensors").ok()
    expected, seen = load_file(plain.dir / "plain.safetensors"), load_file(r.dir / "observed.safetensors")
    assert expected.keys() == seen.keys() == {"eager", "exported", "onnx"}
    for key in expected:
        assert torch.equal(expected[key], seen[key]), key
    assert plain.stdout == r.stdout


@pytest.mark.usefixtures("clean_torch")
def test_an_export_whose_check_is_over_its_memory_budget_is_recorded_not_checked(tmp_path):
    path = tmp_path / "x.run"
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU())
    with graphdbg.capture(str(path), compare_memory=1 / 1024):   # 1 KiB
        ep = torch.export.export(model, (torch.randn(4, 64),))   # MARK over budget
    assert torch.equal(ep.module()(torch.ones(4, 64)), model(torch.ones(4, 64)))
    doc = report_doc(path)
    (d,) = doc["diagnostics"]
    assert (d["kind"], d["severity"], d["file"]) == ("check_skipped", "info", __file__)
    assert d["line"] == line(Path(__file__), "MARK over budget")
    assert "over its budget of 1.0 KiB (--compare-memory)" in d["message"]
    assert "graphdbg.check_export(submodule" in d["hint"]
    assert doc["graphs"][0]["kind"] == "export"
