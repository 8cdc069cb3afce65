"""The observer rule on exported programs: graphdbg's check of an export
(its memory estimate reads the nodes' sizes) must never guard on a symbolic
size. `int()` of one specialises it in the ShapeEnv the user's exported
program shares: under graphdbg, `ep.module()` then refused a batch of 4
that it takes without graphdbg (seen with torch.onnx.export(ep) of a
Dim.AUTO batch)."""

from __future__ import annotations

from conftest import SUPPORT

PROGRAM = SUPPORT / "exports" / "dynamic_onnx_from_ep.py"


def test_a_dynamic_batch_stays_dynamic_under_graphdbg(runs):
    import subprocess
    import sys
    plain = subprocess.run([sys.executable, str(PROGRAM)], capture_output=True, text=True,
                           check=True).stdout
    r = runs.program(PROGRAM).ok()
    assert "ep batch 4 4" in r.stdout and "onnx batch 4 4" in r.stdout, r.stdout
    assert r.stdout == plain   # the range constraints too: nothing specialised
    assert r.doc["run"]["internal_errors"] == []
