"""Every sample under `graphdbg run`: findings at the marked lines, and the
observer rule (same graphs, breaks, recompiles, bitwise the same outputs as a
plain run without graphdbg). Each run is a process of its own, run once per
session (conftest.Runs)."""

from __future__ import annotations

import re

import pytest
import torch
from safetensors.torch import load_file

from conftest import AOT, SAMPLES, group, markers, sites

SAMPLE_NAMES = ["mlp_clean", "graph_breaks", "recompiles", "eager_only", "train_loop",
                "transformer", "showcase", "hf_gpt2", "divergence_faulty", "clean_compare",
                "demo"]
PARAMS = [pytest.param(n, marks=group(n)) for n in SAMPLE_NAMES]


def library_markers(path) -> list[tuple[int, str, str, str]]:
    """`# graphdbg-expect-library: KIND path/suffix.py function` on a user line."""
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        m = re.search(r"#\s*graphdbg-expect-library:\s*(\w+)\s+(\S+)\s+(\w+)", line)
        if m:
            out.append((i, m[1], m[2], m[3]))
    return out


@pytest.mark.parametrize("name", PARAMS)
def test_sample_findings_at_the_marked_lines(name, runs):
    # the run the golden test reads too
    sample = SAMPLES / f"{name}.py"
    doc = runs.golden(name).ok().doc
    assert doc["run"]["internal_errors"] == []

    # findings exactly at the marked lines, once per site; a break inside a
    # library is reported at the library's line, with the marked user call in
    # its stack
    library = library_markers(sample)
    for kind in ("graph_break", "recompile"):
        found = sites(doc, kind)
        for (user_line, lib_kind, suffix, function) in library:
            if lib_kind != kind:
                continue
            hits = [d for d in doc["diagnostics"] if d["kind"] == kind
                    and d["file"].endswith(suffix) and d["function"] == function]
            assert len(hits) == 1, (suffix, function, found)
            assert (str(sample), user_line) in {(f["file"], f["line"]) for f in hits[0]["stack"]}
            found.discard((hits[0]["file"], hits[0]["line"]))
        assert found == markers(sample, kind), kind
        found = [(d["file"], d["line"]) for d in doc["diagnostics"] if d["kind"] == kind]
        assert len(found) == len(set(found))
    miscompiles = {(d["file"], d["line"]) for d in doc["diagnostics"] if d["kind"] == "divergence"
                   and d["detail"]["classification"] == "miscompile"}
    assert miscompiles == markers(sample, "divergence")
    for d in doc["diagnostics"]:
        assert d["kind"] in ("graph_break", "recompile", "divergence"), d
        assert d["code"] and d["function"]
        if d["kind"] == "graph_break":
            assert "generic_jump" not in d["message"]
            assert d["reason"] and len(d["reason"]) > len(d["message"]) - 20
            assert d["stack"][-1]["line"] == d["line"]

    # every graph carries nodes tied to user lines
    for g in doc["graphs"]:
        assert g["status"] == "compiled" and g["calls"] >= 1
        ops = [n for n in g["nodes"] if n["op"].startswith("call_")]
        assert ops and all(n["file"] and n["line"] and n["code"] for n in ops)
        assert sum(bool(n["shapes"] and n["dtypes"]) for n in ops) >= len(ops) / 2


@pytest.mark.parametrize("name", PARAMS)
def test_sample_observer_rule(name, runs):
    # torch's own counts and the outputs are those of a plain run (the golden
    # run saves its outputs too: one run serves the findings and this check)
    base = runs.plain(name, *AOT, "--save", "plain.safetensors").ok()
    observed = runs.golden(name).ok()
    doc = observed.doc
    assert doc["run"]["internal_errors"] == []
    tc = doc["run"]["torch_counters"]
    assert tc["unique_graphs"] == base.counts["unique_graphs"] == len(doc["graphs"])
    assert tc["graph_breaks"] == base.counts["graph_breaks"]
    assert doc["run"]["counts"].get("recompiles", 0) == base.counts["recompiles"]
    plain = load_file(base.dir / "plain.safetensors")
    seen = load_file(observed.dir / "observed.safetensors")
    assert plain.keys() == seen.keys() and plain
    for key in plain:
        assert torch.equal(plain[key], seen[key]), key
