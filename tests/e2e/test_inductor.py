"""End to end with real inductor (C++ compile on CPU: slow, so few samples,
each run once per session). The runs are forked from one server that has
imported inductor and done its once-per-process set-up (tests/support/
warm_forkserver.py: 3-5 s less per run, 8 runs), so the tests share one
xdist group: one worker, one server."""

import os
import re

import pytest
import torch
from safetensors.torch import load_file
from warm_forkserver import InductorRuns

from conftest import SAMPLES, graphdbg, group, markers, query, report_doc, report_text

pytestmark = [pytest.mark.inductor, group("inductor")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> InductorRuns:
    """conftest's `runs`, forked from an inductor-warm server (this module's
    runs only: no other module asks for the same ones)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    runs = InductorRuns(shared / "inductor-runs")
    yield runs
    runs.close()


def assert_same_outputs(plain, observed) -> None:
    a = load_file(plain.dir / "plain.safetensors")
    b = load_file(observed.dir / "observed.safetensors")
    assert a.keys() == b.keys() and a
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_mlp_under_inductor(runs, workdir):
    sample = SAMPLES / "mlp_clean.py"
    base = runs.plain("mlp_clean", "--save", "plain.safetensors").ok()
    r = runs.graphdbg("mlp_clean", "--save", "observed.safetensors", quiet=False).ok()
    assert "next: graphdbg report mlp_clean.run" in r.stderr
    doc = r.doc
    assert doc["diagnostics"] == []
    assert len(doc["graphs"]) == base.counts["unique_graphs"] >= 1
    for g in doc["graphs"]:
        assert g["backend"] == "inductor" and g["status"] == "compiled"
        assert g["compile_time_s"] > 0 and g["calls"] >= 1
        linears = [n for n in g["nodes"] if "linear" in n["target"]]
        assert linears and all(n["file"] == str(sample) and n["module_class"] == "Linear"
                               for n in linears)
    assert_same_outputs(base, r)
    # the graphs table (--full: with the compile id): graph 1, compiled from
    # forward in mlp_clean.py, by inductor (every graph's backend: in the title)
    text = report_text(r.run, "--full")
    assert re.search(r"^\s+1\s+0/0\s+forward\s+mlp_clean\.py:\d+\s", text, re.M)
    assert re.search(r"^Graphs \(1\), backend inductor ─", text, re.M)

    # where the compile time went: the phases add up to the compile's total
    (c,) = doc["compile_times"]
    assert c["graphs"] == [1] and c["function"] == "forward" and c["file"] == str(sample)
    assert c["total_s"] == pytest.approx(doc["graphs"][0]["compile_time_s"])
    assert sum(c["phases"].values()) == pytest.approx(c["total_s"], rel=0.05)
    p = c["phases"]
    assert p["dynamo"] > 0 and p["graphdbg"] > 0 and p["backend"] == 0
    if c["fx_cache"]["misses"]:     # a cold cache (CI): inductor lowered, generated, compiled C++
        assert p["lowering"] > 0 and p["codegen"] > 0 and p["cpp"] > 0
    else:                           # served from a cache (its C++ maybe built again)
        assert p["cache"] + p["cpp"] > 0 and p["lowering"] == 0
    assert re.search(r"^Compile time \([\d.]+ s in 1 compile\)", text, re.M)

    # compiled time per line, from inductor's kernels: every line of forward that
    # computes something has kernels, the hottest is named in the report
    lines = doc["compiled_lines"]
    fwd = {ln for ln, code in enumerate(sample.read_text().splitlines(), 1)
           if "self.fc" in code and "nn.Linear" not in code}
    assert {(c["file"], c["line"]) for c in lines} == {(str(sample), ln) for ln in fwd}
    assert all(c["total_ns"] > 0 and c["forward_ns"] > 0 and c["backward_ns"] == 0 for c in lines)
    assert all(c["steady"] for c in lines)   # 4 calls: timed after the first
    # 3 steady calls each: enough for a verdict against eager (fewer are marked ~)
    assert all(c["samples"] == 3 and c["compiled_slower"] is not None for c in lines)
    assert lines == sorted(lines, key=lambda c: -c["total_ns"])
    g = doc["graphs"][0]
    kernels = doc["kernels"]
    assert kernels and {k["part"] for k in kernels} == {"inference"}
    assert all(k["calls"] == g["calls"] and k["graph"] == 1 for k in kernels)
    assert any(k["name"].startswith("extern_kernels.") for k in kernels)
    # a call's kernels take less than the whole call
    assert sum(k["ns"] for k in kernels) < g["total_call_ns"] / g["calls"]
    top = lines[0]
    assert re.search(rf"^Compiled time per line \(inductor kernels\).*\n.*\n"
                     rf"mlp_clean\.py:{top['line']}\s+[\d.]+ [mµ]?s", text, re.M)
    # the TUI's hot spots: the line's kernels beside its compiled time
    from graphdbg.runfile.query import Run
    from graphdbg.tui.model.run import HotSpots
    with Run(str(r.run)) as run:
        rows = {row[2]: row for row in HotSpots.load(run).line_rows()}
    row = rows[f"mlp_clean.py:{top['line']}"]
    assert row[4] != "-" and any(k.removeprefix("extern_kernels.") in row[5] for k in top["kernels"])
    # the same program moved to another folder, two lines lower: inductor's FX
    # graph cache serves the compile, and the kernels' provenance comes from the
    # cache entry, written with the old paths and lines; graphdbg places the
    # kernels at this run's lines
    for f in ("sample_cli.py", "mlp_clean.py"):
        text = (SAMPLES / f).read_text()
        (workdir / f).write_text("# moved\n# and shifted\n" + text if f == "mlp_clean.py" else text)
    runs.spawn("-m", "graphdbg", "run", "-q", "--no-compare", "-o", "again.run", "mlp_clean.py",
               cwd=workdir).ok()
    again = report_doc(workdir / "again.run")
    (c2,) = again["compile_times"]
    assert c2["fx_cache"]["hits"] or c2["aot_cache"]["hits"]
    moved = str(workdir / "mlp_clean.py")
    assert [(k["name"], k["handle"], k["lines"]) for k in sorted(again["kernels"], key=lambda k: k["handle"])] \
        == [(k["name"], k["handle"], [{"file": moved, "line": ln["line"] + 2} for ln in k["lines"]])
            for k in sorted(kernels, key=lambda k: k["handle"])]


def test_training_loop_under_inductor_is_bitwise_unchanged(runs):
    """Forward and (lazily compiled) backward under inductor while the eager
    recorder is on the dispatch-mode stack: same graphs, same parameters."""
    base = runs.plain("train_loop", "--save", "plain.safetensors").ok()
    r = runs.graphdbg("train_loop", "--save", "observed.safetensors").ok()
    doc = r.doc
    assert doc["run"]["torch_counters"]["unique_graphs"] == base.counts["unique_graphs"]
    assert doc["diagnostics"] == []
    assert_same_outputs(base, r)
    # the optimizer and loss run eagerly; the compiled forward and backward never
    # show up as eager ops (they would carry the model's module paths)
    assert query(r.run, "SELECT COUNT(*) AS n FROM ops")[0]["n"] > 100
    assert query(r.run, "SELECT COUNT(*) AS n FROM ops WHERE module_path IS NOT NULL")[0]["n"] == 0
    # kernel times of the forward and the backward, each counted in the
    # program's 5 steps (the gradient check's own backward call not among them)
    ks = doc["kernels"]
    assert {k["part"] for k in ks} == {"forward", "backward"}
    assert {k["calls"] for k in ks} == {5}
    sample = str(SAMPLES / "train_loop.py")
    assert all(ln["file"] == sample for k in ks for ln in k["lines"])
    assert all(c["backward_ns"] > 0 for c in doc["compiled_lines"][:1])


def inductor_doc(runs, name: str) -> dict:
    doc = runs.graphdbg(name).ok().doc
    assert doc["run"]["internal_errors"] == []
    return doc


def test_clean_fp32_models_have_no_divergence_under_inductor(runs):
    doc = inductor_doc(runs, "clean_compare")
    assert doc["graphs"] and all(g["backend"] == "inductor" for g in doc["graphs"])
    assert [d for d in doc["diagnostics"] if d["kind"] in ("divergence", "nan_inf")] == []


def test_bf16_difference_is_classified_precision(runs):
    doc = inductor_doc(runs, "bf16_precision")
    divs = [d for d in doc["diagnostics"] if d["kind"] == "divergence"]
    assert divs and all(d["detail"]["classification"] == "precision" for d in divs)
    assert all(d["severity"] == "info" for d in divs)
    assert {(d["file"], d["line"]) for d in divs} == markers(SAMPLES / "bf16_precision.py", "precision")
    d = divs[0]
    assert d["detail"]["compiled_vs_fp64"] < d["detail"]["eager_vs_fp64"]
    assert "emulate_precision_casts" in d["hint"]


def test_faulty_inductor_backend_is_localized(runs):
    doc = inductor_doc(runs, "divergence_faulty")
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "divergence"]
    assert {(d["file"], d["line"])} == markers(SAMPLES / "divergence_faulty.py", "divergence")
    assert d["detail"]["classification"] == "miscompile" and d["severity"] == "error"
    # called once: its kernels' time is a cold first call, no verdict against eager
    lines = doc["compiled_lines"]
    assert lines and all(not c["steady"] and c["compiled_slower"] is None for c in lines)


def test_the_faulty_inductor_divergence_has_a_repro_compiled_by_inductor(runs, tmp_path):
    """graphdbg repro on the inductor run: FaultyBackend cannot be imported, so the
    script compiles the graph it handed to inductor with inductor, and reproduces."""
    run = runs.graphdbg("divergence_faulty").ok().run
    p = graphdbg("repro", run, "-o", "bug", cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    said = " ".join(p.stdout.split())
    assert "the script compiles the graph it handed to 'inductor' with 'inductor'" in said, said
    script = (tmp_path / "bug" / "repro.py").read_text()
    assert "torch.compile(handed, backend='inductor', fullgraph=True)" in script
    assert "DIVERGES" in p.stdout
