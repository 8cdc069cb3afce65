"""A finding's detail, typed per kind (graphdbg/runfile/details.py): read
from the run file's JSON and given back as stored, and the one place its
text is made for the report, the pytest plugin and the TUI. No torch."""

import ast
import json
from dataclasses import fields
from pathlib import Path

import pytest

from golden import GOLDEN, SAMPLES
from graphdbg.core.format import num
from graphdbg.runfile import details
from graphdbg.runfile.details import (KINDS, DivergenceDetail, GraphBreakDetail, NanInfDetail,
                                      OtherDetail, RecompileDetail, parse)
from graphdbg.runfile.writer import RunWriter


def _golden_details():
    for name in SAMPLES:
        for d in json.loads((GOLDEN / f"{name}.json").read_text())["diagnostics"]:
            yield name, d["kind"], d["detail"]


def test_every_detail_in_the_goldens_is_typed_and_given_back_as_stored():
    kinds = set()
    for name, kind, raw in _golden_details():
        d = parse(kind, raw)
        if raw is None:
            assert d is None
            continue
        kinds.add(kind)
        assert isinstance(d, KINDS[kind]) and d.extra == {}, (name, kind, d.extra)
        # the same keys in the same order (`report --json` prints it byte for byte;
        # the goldens are stored with sorted keys, so this checks the values)
        assert json.dumps(d.as_dict()) == json.dumps(raw), (name, kind)
    assert kinds >= {"graph_break", "recompile", "compile_error", "malformed_graph",
                     "divergence"}


def test_an_older_or_newer_detail_still_reads():
    d = parse("recompile", {"guard": "x.size()[0] == 8", "from_a_newer_graphdbg": [1]})
    assert isinstance(d, RecompileDetail) and d.guard == "x.size()[0] == 8"
    assert d.frames is None and d.frame_recompiles is None           # missing: None
    assert d.extra == {"from_a_newer_graphdbg": [1]}                  # unknown: kept
    assert list(d.as_dict()) == ["guard", "from_a_newer_graphdbg"]
    # in the stored order, not the record's (the writer adds keys as it learns them)
    raw = {"call": 2, "exception": "E", "uncaught": True, "traceback": "T"}
    assert list(parse("runtime_error", raw).as_dict()) == list(raw)
    # a key named like a field of the record itself is data like any other
    assert parse("graph_break", {"extra": 1}).as_dict() == {"extra": 1}
    assert parse("a_kind_of_tomorrow", {"a": 1}) == OtherDetail(extra={"a": 1})
    assert parse("divergence", None) is None and parse("divergence", [1, 2]) is None


def test_a_detail_made_in_code_gives_every_field():
    d = GraphBreakDetail(gb_type="Data-dependent branching", extra={"x": 1})
    assert d.as_dict() == {"gb_id": None, "gb_type": "Data-dependent branching",
                           "explanation": None, "frame_skipped": None,
                           "skipped_function": None, "expected_in": None, "x": 1}
    assert d == parse("graph_break", d.as_dict())


def test_the_writer_stores_the_keys_it_gives_in_their_order():
    d = GraphBreakDetail.of(gb_type="t", gb_id=None, frame_skipped=False)
    assert json.dumps(d.as_dict()) == '{"gb_type": "t", "gb_id": null, "frame_skipped": false}'
    # changed as a dict update changes: a key stored keeps its place, a new one goes last
    u = d.updated(frame_skipped=True, skipped_function="f() at m.py:3")
    assert list(u.as_dict()) == ["gb_type", "gb_id", "frame_skipped", "skipped_function"]
    assert d.frame_skipped is False and u == parse("graph_break", u.as_dict())
    # a key the reader's record does not know is refused where it is written
    with pytest.raises(TypeError, match="no field frame_skiped"):
        GraphBreakDetail.of(frame_skiped=True)
    with pytest.raises(TypeError):
        u.updated(extra={"x": 1})


def test_a_finding_takes_only_its_own_kind_of_detail(tmp_path):
    w = RunWriter(str(tmp_path / "r.run"))
    w.diagnostic("b", kind="graph_break", severity="warning", message="m",
                 detail=GraphBreakDetail.of(gb_type="t"))
    with pytest.raises(TypeError):
        w.diagnostic("r", kind="recompile", severity="warning", message="m",
                     detail=GraphBreakDetail.of())
    with pytest.raises(TypeError):
        w.update_diagnostic("b", detail=RecompileDetail.of(guard="g"))
    w.close()


def test_every_detail_the_findings_writer_makes_names_fields_of_its_record():
    """Statically, so that a path no test runs cannot write a key the reader
    does not know (`of` refuses it only when it runs)."""
    made = 0
    for src in sorted((Path(__file__).resolve().parents[2] / "hooks" / "findings").glob("*.py")):
        for n in ast.walk(ast.parse(src.read_text())):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "of":
                cls = getattr(details, ast.unparse(n.func.value))
                names = {f.name for f in fields(cls)} - {"extra", "_keys"}
                assert {k.arg for k in n.keywords if k.arg} <= names, (src.name, n.lineno, cls.__name__)
                made += 1
    assert made >= 14


DIV = {"classification": "miscompile", "node": "sin", "target": "torch.sin",
       "module_path": "Net.act", "module_class": "Act", "stage": "inductor",
       "method": "bisection", "compiles": 3, "max_abs": 2, "max_rel": 0.123456,
       "eager_vs_fp64": 1e-7, "compiled_vs_fp64": 0.125,
       "isolated": {"decided": True, "diverges": True}, "undecided": []}


def test_a_divergence_reads_the_same_in_each_view():
    d = parse("divergence", DIV)
    assert isinstance(d, DivergenceDetail)
    # one line for the report and a test's failure alike
    assert d.summary() == ("miscompile · node sin (torch.sin) · module Net.act (Act) · "
                           "stage inductor · max abs 2, rel 0.123 · vs float64: eager 1e-07, "
                           "compiled 0.125 (compiled is further from float64) · "
                           "wrong on its own inputs · 3 compiles (bisection)")
    numbers = dict(d.numbers())
    assert numbers["max rel"] == "0.1235" and numbers["on its own inputs"] == "wrong"
    assert numbers["compiles"] == "3" and "undecided" not in numbers
    # an aliasing divergence has no numbers of a localisation: its line leaves them out
    alias = parse("divergence", {"classification": "aliasing", "call": 0, "output": 0})
    assert alias.summary() == "aliasing"


def test_nan_inf_shows_how_it_was_localised():
    d = parse("nan_inf", {"where": "eager", "direction": "backward", "method": "bisection",
                          "compiles": 0, "undecided": ["a backend failed"]})
    assert isinstance(d, NanInfDetail) and d.summary() is None
    assert d.numbers() == [("localised by", "bisection"), ("compiles", "0"),
                           ("undecided", "a backend failed")]


def test_graph_break_summary_is_its_explanation_cut_short():
    assert parse("graph_break", {"explanation": "x" * 400}).summary() == "x" * 300
    assert parse("graph_break", {"explanation": ""}).summary() is None


@pytest.mark.parametrize("x, kw, text", [
    (None, {}, "-"), (0.000123456, {}, "0.000123"), (12345, {}, "1.23e+04"),
    (2.0, {}, "2"),
    (float("nan"), {}, "nan"), (float("-inf"), {}, "-inf"), (0.123456, {"digits": 4}, "0.1235"),
    ("n/a", {}, "n/a")])
def test_num(x, kw, text):
    assert num(x, **kw) == text
