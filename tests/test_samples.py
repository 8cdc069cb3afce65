"""Every sample under `graphdbg run`: findings at the marked lines, and the
observer rule (same graphs, breaks, recompiles, bitwise the same outputs as a
plain run without graphdbg)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from conftest import ENV, PLAIN_RUN, SAMPLES, graphdbg, markers, report_json, sites

SAMPLE_NAMES = ["mlp_clean", "graph_breaks", "recompiles", "eager_only", "train_loop",
                "transformer", "showcase", "hf_gpt2", "divergence_faulty", "clean_compare"]


def library_markers(path) -> list[tuple[int, str, str, str]]:
    """`# graphdbg-expect-library: KIND path/suffix.py function` on a user line."""
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        m = re.search(r"#\s*graphdbg-expect-library:\s*(\w+)\s+(\S+)\s+(\w+)", line)
        if m:
            out.append((i, m[1], m[2], m[3]))
    return out


def plain_run(sample, args, cwd) -> dict:
    proc = subprocess.run([sys.executable, str(PLAIN_RUN), str(sample), *args], cwd=cwd,
                          capture_output=True, text=True, env=ENV, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_sample_findings_and_observer_rule(name, workdir):
    sample = SAMPLES / f"{name}.py"
    if not sample.exists():
        pytest.fail(f"missing sample {sample}")
    base = plain_run(sample, ["--backend", "aot_eager", "--save", "plain.safetensors"], workdir)
    proc = graphdbg("run", "-q", "-o", f"{name}.run", sample, "--backend", "aot_eager",
                    "--save", "observed.safetensors", cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = report_json(f"{name}.run", workdir)
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

    # observer rule: torch's own counts and the outputs are unchanged
    tc = doc["run"]["torch_counters"]
    assert tc["unique_graphs"] == base["unique_graphs"] == len(doc["graphs"])
    assert tc["graph_breaks"] == base["graph_breaks"]
    assert doc["run"]["counts"].get("recompiles", 0) == base["recompiles"]
    plain = load_file(workdir / "plain.safetensors")
    observed = load_file(workdir / "observed.safetensors")
    assert plain.keys() == observed.keys() and plain
    for key in plain:
        assert torch.equal(plain[key], observed[key]), key

    # every graph carries nodes tied to user lines
    for g in doc["graphs"]:
        assert g["status"] == "compiled" and g["calls"] >= 1
        ops = [n for n in g["nodes"] if n["op"].startswith("call_")]
        assert ops and all(n["file"] and n["line"] and n["code"] for n in ops)
        assert sum(bool(n["shapes"] and n["dtypes"]) for n in ops) >= len(ops) / 2
