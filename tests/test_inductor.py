"""End to end with real inductor (C++ compile on CPU: slow, so one sample)."""

import pytest
import torch
from safetensors.torch import load_file

from conftest import SAMPLES, graphdbg, report_json
from test_samples import plain_run


@pytest.mark.inductor
def test_mlp_under_inductor(workdir):
    sample = SAMPLES / "mlp_clean.py"
    base = plain_run(sample, ["--save", "plain.safetensors"], workdir)
    proc = graphdbg("run", "-o", "mlp.run", sample, "--save", "observed.safetensors",
                    cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "next: graphdbg report mlp.run" in proc.stderr
    doc = report_json("mlp.run", workdir)
    assert doc["diagnostics"] == []
    assert len(doc["graphs"]) == base["unique_graphs"] >= 1
    for g in doc["graphs"]:
        assert g["backend"] == "inductor" and g["status"] == "compiled"
        assert g["compile_time_s"] > 0 and g["calls"] >= 1
        linears = [n for n in g["nodes"] if "linear" in n["target"]]
        assert linears and all(n["file"] == str(sample) and n["module_class"] == "Linear"
                               for n in linears)
    plain = load_file(workdir / "plain.safetensors")
    observed = load_file(workdir / "observed.safetensors")
    assert plain.keys() == observed.keys()
    for k in plain:
        assert torch.equal(plain[k], observed[k]), k
    report = graphdbg("report", "mlp.run", cwd=workdir, check=True).stdout
    assert "inductor" in report and "mlp_clean.py" in report


@pytest.mark.inductor
def test_training_loop_under_inductor_is_bitwise_unchanged(workdir):
    """Forward and (lazily compiled) backward under inductor while the eager
    recorder is on the dispatch-mode stack: same graphs, same parameters."""
    sample = SAMPLES / "train_loop.py"
    base = plain_run(sample, ["--save", "plain.safetensors"], workdir)
    proc = graphdbg("run", "-q", "-o", "train.run", sample, "--save", "observed.safetensors",
                    cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = report_json("train.run", workdir)
    assert doc["run"]["torch_counters"]["unique_graphs"] == base["unique_graphs"]
    assert doc["diagnostics"] == []
    plain = load_file(workdir / "plain.safetensors")
    observed = load_file(workdir / "observed.safetensors")
    assert plain.keys() == observed.keys()
    for k in plain:
        assert torch.equal(plain[k], observed[k]), k
    # the optimizer runs eagerly; the compiled forward/backward never show up as eager ops
    phases = {o["phase"] for o in doc["eager"]["top_ops"]}
    assert "forward" in phases
