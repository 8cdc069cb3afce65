"""Every sample's findings at the same file:line on every supported torch.

Each torch leg (`make test` on the oldest, `make test-torch-latest` on the
newest; CI runs both, one after the other, in one checkout) writes what its
golden sample runs found to `.sample-findings/torch-VERSION.json`. The test
compares this leg's findings with the goldens' (tests/golden/, made on the
oldest torch) and with every other leg's file written from the same code, so
the last leg to run names any sample whose findings moved between releases.
No run of its own: it reads the golden tests' runs (conftest `runs.golden`).
"""

from __future__ import annotations

import hashlib
import json

import pytest

from conftest import ROOT
from golden import GOLDEN, SAMPLES, normalize, roots_for

FOLDER = ROOT / ".sample-findings"


def code_key() -> str:
    """What the findings are made from: graphdbg's code and the samples."""
    h = hashlib.sha1()
    for d in ("graphdbg", "hooks", "samples"):
        for p in sorted((ROOT / d).rglob("*.py")):
            h.update(str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def findings(doc: dict) -> list[str]:
    """A normalised report document's findings: kind, severity, node and where."""
    return sorted(f"{d['kind']} {d['severity']} {d['where']} node={d.get('node')}"
                  for d in doc["diagnostics"])


def test_every_sample_finds_the_same_at_the_same_lines_on_every_torch(runs):
    import torch
    here = {name: findings(normalize(runs.golden(name).doc, roots_for(ROOT))) for name in SAMPLES}
    FOLDER.mkdir(exist_ok=True)
    key = code_key()
    (FOLDER / f"torch-{torch.__version__}.json").write_text(json.dumps(
        {"torch": torch.__version__, "code": key, "samples": here}, indent=1) + "\n")

    legs = {"goldens (tests/golden/)": {
        name: findings(json.loads((GOLDEN / f"{name}.json").read_text())) for name in SAMPLES}}
    for p in sorted(FOLDER.glob("torch-*.json")):
        other = json.loads(p.read_text())
        if other["torch"] != torch.__version__ and other["code"] == key:
            legs[f"torch {other['torch']}"] = other["samples"]
    problems = []
    for leg, theirs in legs.items():
        for name in SAMPLES:
            if theirs.get(name) != here[name]:
                mine, other = set(here[name]), set(theirs.get(name) or [])
                problems.append(f"{name}: torch {torch.__version__} against {leg}:\n"
                                + "".join(f"  only here:  {f}\n" for f in sorted(mine - other))
                                + "".join(f"  only there: {f}\n" for f in sorted(other - mine)))
    if problems:
        pytest.fail("findings differ between torch versions:\n" + "\n".join(problems),
                    pytrace=False)
