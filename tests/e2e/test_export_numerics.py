"""Exporter numerics (issue 32): real mistranslations of torch 2.13's dynamo
ONNX exporter, found by graphdbg's node-by-node ONNX check against the
exported program in ONNX Runtime, each at its own line with its verdict,
all in one program and one export (tests/support/exports/onnx_numerics.py);
a clean CNN with a dynamic batch gives nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

import graphdbg

from conftest import SUPPORT

NUMERICS = SUPPORT / "exports" / "onnx_numerics.py"
CNN = SUPPORT / "exports" / "onnx_cnn_dynamic.py"


def line(path: Path, mark: str) -> int:
    (found,) = [i for i, ln in enumerate(path.read_text().splitlines(), 1)
                if ln.rstrip().endswith(f"# {mark}")]
    return found


@pytest.fixture
def numerics(runs):
    return runs.program(NUMERICS).ok()


# line mark: (node, verdict, severity, side NaN/Inf is on, NaN or Inf)
EXPECTED = {
    "LOGADDEXP_LINE": ("logaddexp", "nonfinite", "error", "compiled", "Inf"),
    "BCE_LINE": ("log_sigmoid", "nonfinite", "error", "compiled", "Inf"),
    "LOG_NDTR_LINE": ("special_erfcx", "nonfinite", "error", "compiled", "NaN"),
    "SMOOTHING_LINE": ("cross_entropy_loss", "miscompile", "error", None, None),
    "MAX_LINE": ("max_1", "nonfinite", "error", "eager", "NaN"),
    "AMAX_LINE": ("amax", "nonfinite", "error", "eager", "NaN"),
    "ARGMAX_LINE": ("argmax", "miscompile", "error", None, None),
}


@pytest.mark.parametrize("mark", list(EXPECTED))
def test_each_mistranslation_is_found_at_its_line(numerics, mark):
    node, verdict, severity, side, value = EXPECTED[mark]
    doc = numerics.doc
    (d,) = [d for d in doc["diagnostics"] if d["line"] == line(NUMERICS, mark)]
    det = d["detail"]
    assert (d["kind"], d["file"], d["node"]) == ("divergence", str(NUMERICS), node)
    assert (det["classification"], d["severity"]) == (verdict, severity)
    assert (det["exported"], det["method"], det["call"]) == ("onnx", "onnx intermediates", 0)
    assert det["onnx_ops"]
    if verdict == "nonfinite":
        assert (det["nonfinite_side"], det["nonfinite_value"]) == (side, value)
        # float64 is on eager's side: finite where ONNX overflows, NaN where ONNX drops the NaN
        assert det["fp64_finite"] is (side == "compiled")


def test_nothing_else_is_reported_and_each_departure_is_its_own_first(numerics):
    doc = numerics.doc
    assert doc["run"]["internal_errors"] == []
    assert sorted(d["line"] for d in doc["diagnostics"]) == \
        sorted(line(NUMERICS, m) for m in EXPECTED)
    (g,) = doc["graphs"]
    run = graphdbg.open_run(str(numerics.run))
    try:
        values = run.node_values(g["id"], 0)
    finally:
        run.close()
    firsts = {v.node for v in values if v.status == "first divergent"}
    assert firsts == {e[0] for e in EXPECTED.values()}
    # nodes downstream of a departure differ without being reported (erfcx's div, log, where)
    assert any(v.status == "differs" for v in values)


def test_the_max_ignoring_nan_message_says_what_onnx_runtime_did(numerics):
    (d,) = [d for d in numerics.doc["diagnostics"] if d["line"] == line(NUMERICS, "MAX_LINE")]
    assert d["message"].startswith("ONNX Runtime ignores the NaN that eager and float64 carry")
    assert "ReduceMax" in d["hint"]


def test_the_programs_results_are_bitwise_those_of_a_plain_run(numerics, runs, tmp_path):
    plain = runs.spawn(NUMERICS, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert numerics.stdout.splitlines()[-7:] == plain.stdout.splitlines()[-7:]
    assert len(plain.stdout.splitlines()) >= 7


def test_a_clean_cnn_with_a_dynamic_batch_gives_nothing(runs):
    r = runs.program(CNN).ok()
    doc = r.doc
    assert doc["run"]["internal_errors"] == []
    assert [d for d in doc["diagnostics"] if d["severity"] in ("warning", "error")] == []
    (g,) = doc["graphs"]
    assert g["kind"] == "onnx" and g["calls"] == 2
    run = graphdbg.open_run(str(r.run))
    try:   # checked on the example inputs and on the program's other batch sizes
        for call in (0, 1):
            compared = [v for v in run.node_values(g["id"], call) if v.status != "not compared"]
            assert len(compared) > 5 and all(v.status == "ok" for v in compared)
    finally:
        run.close()
