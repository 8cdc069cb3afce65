"""samples/frozen_branch.py, the design notes' program end to end (issue
32): every finding at its marked line, the frozen branch found twice (the
program's own InferenceSession, the ONNX program from draft_export), and
what the program computes and prints is a plain run's."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from conftest import AOT, SAMPLES, group, markers, report_text, sites

SAMPLE = SAMPLES / "frozen_branch.py"


@group("frozen-branch-sample")
def test_the_design_notes_program_is_answered_at_the_if_line(runs):
    r = runs.graphdbg("frozen_branch", *AOT, "--save", "observed.safetensors").ok()
    doc = r.doc
    assert doc["run"]["internal_errors"] == []
    for kind in ("graph_break", "divergence", "export_specialized", "compile_error"):
        assert sites(doc, kind) == markers(SAMPLE, kind), kind
    assert {d["kind"] for d in doc["diagnostics"]} == {
        "graph_break", "divergence", "export_specialized", "compile_error"}
    divergences = [d for d in doc["diagnostics"] if d["kind"] == "divergence"]
    assert len(divergences) == 2 and all(d["severity"] == "error" for d in divergences)
    text = report_text(r.run)
    assert "the trace took the False branch at frozen_branch.py:50; these inputs take True" in text
    assert "takes the branch traced at export at frozen_branch.py:50" in text
    # the program's own results, bitwise, and what it printed
    plain = runs.python("frozen_branch", *AOT, "--save", "plain.safetensors").ok()
    want, got = load_file(plain.dir / "plain.safetensors"), load_file(r.dir / "observed.safetensors")
    assert want.keys() == got.keys() and len(want) == 4
    for key in want:
        assert torch.equal(want[key], got[key]), key
    assert plain.stdout == r.stdout
    assert "if branch: max |ORT - eager| = 0.606" in r.stdout   # the user's own view of the bug
