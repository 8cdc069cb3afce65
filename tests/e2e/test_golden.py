"""Every sample's `report --json` document equals the one made before the
query-layer refactor (tests/golden/, normalised by tests/support/golden.py),
floats within the tolerance of what each measures (golden.FLOAT_FIELDS)."""

from __future__ import annotations

import copy
import difflib
import json

import pytest

from conftest import ROOT, group, report_json
from golden import GOLDEN, SAMPLES, compare, normalize, roots_for

# the program's own exit status: these samples die of the error they show
FAILING = {"compile_shape_error", "broken_fx_pass", "export_failure"}


def _text(doc) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def differences(name: str, want: dict, got: dict) -> str | None:
    """None when `got` matches the golden `want`; else each differing field (its
    path and both values), then a text diff that leaves out tolerated floats."""
    problems, aligned = compare(want, got)
    if not problems:
        return None
    diff = list(difflib.unified_diff(_text(want).splitlines(), _text(aligned).splitlines(),
                                     f"golden/{name}.json", "this run", n=3, lineterm=""))
    return (f"{name}: report differs from golden in {len(problems)} field(s):\n"
            + "\n".join(f"  {p}" for p in problems[:30])
            + (f"\n  ... and {len(problems) - 30} more" if len(problems) > 30 else "")
            + f"\n{len(diff)} diff lines:\n" + "\n".join(diff[:60]))


@pytest.mark.parametrize("name", [pytest.param(n, marks=group(n)) for n in SAMPLES])
def test_report_document_matches_golden(name, runs):
    r = runs.golden(name)
    assert r.returncode == (1 if name in FAILING else 0), r.stderr[-3000:]
    # the other tests read documents built in-process: the CLI's are the same
    assert report_json(r.run, r.dir) == r.doc
    got = json.loads(_text(normalize(r.doc, roots_for(ROOT))))
    want = json.loads((GOLDEN / f"{name}.json").read_text())
    problem = differences(name, want, got)
    if problem:
        pytest.fail(problem, pytrace=False)


# -- the comparison itself: CPUs' rounding passes, a real change does not ---------------

def _divergence() -> tuple[dict, dict]:
    """The golden divergence_faulty document and its divergence finding."""
    doc = json.loads((GOLDEN / "divergence_faulty.json").read_text())
    found = next(d for d in doc["diagnostics"] if d["kind"] == "divergence")
    return doc, found


def _changed(**detail) -> tuple[dict, dict]:
    want, _ = _divergence()
    got = copy.deepcopy(want)
    found = next(d for d in got["diagnostics"] if d["kind"] == "divergence")
    found["detail"].update(detail)
    return want, got


def test_compare_accepts_float32_rounding_of_another_cpu():
    want, found = _divergence()
    assert found["detail"]["eager_vs_fp64"] == 6.009e-08
    assert found["detail"]["output_max_rel"] == 0.08752
    # what `make test` gave on another machine, twice
    want, got = _changed(eager_vs_fp64=5.761e-08, output_max_rel=0.08753)
    assert compare(want, got)[0] == []
    assert differences("divergence_faulty", want, got) is None
    # rounding noise against float64 counts by its size only; 0 is that size too
    for e in (3.1e-08, 1.2e-07, 0.0):
        assert compare(*_changed(eager_vs_fp64=e))[0] == [], e
    assert compare(*_changed(compiled_vs_fp64=0.005157, max_abs=0.009678))[0] == []


@pytest.mark.parametrize("change, path", [
    (dict(output_max_rel=0.09752), "detail.output_max_rel"),
    (dict(max_rel=0.0102), "detail.max_rel"),
    (dict(eager_vs_fp64=6.009e-05), "detail.eager_vs_fp64"),
    (dict(eager_vs_fp64=6.009e-07), "detail.eager_vs_fp64"),
    (dict(compiled_vs_fp64=0.0053), "detail.compiled_vs_fp64"),
    (dict(stage_compiles=3), "detail.stage_compiles"),
    (dict(target="torch.sigmoid"), "detail.target"),
    (dict(max_abs=None), "detail.max_abs"),
    (dict(max_abs=float("nan")), "detail.max_abs"),
])
def test_compare_rejects_a_real_change_of_the_detail(change, path):
    want, got = _changed(**change)
    problems, _ = compare(want, got)
    assert [p.path.split(".", 1)[1] for p in problems] == [path]
    assert problems[0].path.startswith("diagnostics[")
    key = path.rsplit(".", 1)[1]
    text = differences("divergence_faulty", want, got)
    # the message names the field and shows both values
    assert problems[0].path in text
    assert f"golden {json.dumps(problems[0].want)}" in text
    assert f"this run {json.dumps(problems[0].got)}" in text
    assert f'"{key}"' in text  # and the text diff shows the line


def test_compare_rejects_a_changed_line_kind_or_shape():
    want, found = _divergence()
    i = want["diagnostics"].index(found)
    for edit, field in [(lambda d: d.update(line=d["line"] + 1), "line"),
                        (lambda d: d.update(kind="nan_inf"), "kind"),
                        (lambda d: d["stack"][0].update(line=86), "stack[0].line"),
                        (lambda d: d.pop("hint"), "hint"),
                        (lambda d: d["stack"].append(dict(d["stack"][0])), "stack[1]")]:
        got = copy.deepcopy(want)
        edit(got["diagnostics"][i])
        problems, _ = compare(want, got)
        assert [p.path for p in problems] == [f"diagnostics[{i}].{field}"], field
        assert f"diagnostics[{i}].{field}" in differences("divergence_faulty", want, got)
    # a float in the golden where the run has an int, or a string: not the same document
    assert compare({"x": 1.0}, {"x": 1})[0][0].why == "float != int"
    assert compare({"x": "0.01"}, {"x": "0.010"})[0][0].why == "differs"


def test_compare_scales_a_statistic_by_its_tensor():
    stats = {"min": -3.0, "max": 2.5, "mean": 1.0e-3, "std": 1.2, "norm": 40.0}
    near = dict(stats, mean=1.002e-3)             # 2e-6 off: noise of values ~3
    assert compare(stats, near)[0] == []
    far = dict(stats, mean=1.1e-3)                # 1e-4 off: not noise
    assert [p.path for p in compare(stats, far)[0]] == ["mean"]
    assert [p.path for p in compare(stats, dict(stats, norm=40.1))[0]] == ["norm"]
    # a float outside the table: tight (the last kept digit, and rel 1e-4)
    assert compare({"ratio": 1.234}, {"ratio": 1.235})[0] == []
    assert [p.path for p in compare({"ratio": 1.234}, {"ratio": 1.237})[0]] == ["ratio"]
