"""Every sample's `report --json` document equals the one made before the
query-layer refactor (tests/golden/, normalised by tests/support/golden.py)."""

from __future__ import annotations

import difflib
import json

import pytest

from conftest import ROOT, group, report_json
from golden import GOLDEN, SAMPLES, normalize, roots_for

# the program's own exit status: these samples die of the error they show
FAILING = {"compile_shape_error", "broken_fx_pass", "export_failure"}


def _text(doc: dict) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


@pytest.mark.parametrize("name", [pytest.param(n, marks=group(n)) for n in SAMPLES])
def test_report_document_matches_golden(name, runs):
    r = runs.golden(name)
    assert r.returncode == (1 if name in FAILING else 0), r.stderr[-3000:]
    # the other tests read documents built in-process: the CLI's are the same
    assert report_json(r.run, r.dir) == r.doc
    got = _text(normalize(r.doc, roots_for(ROOT)))
    want = (GOLDEN / f"{name}.json").read_text()
    if got != want:
        diff = list(difflib.unified_diff(want.splitlines(), got.splitlines(),
                                         f"golden/{name}.json", "this run", n=3, lineterm=""))
        pytest.fail(f"{name}: report differs from golden ({len(diff)} diff lines):\n"
                    + "\n".join(diff[:60]), pytrace=False)
