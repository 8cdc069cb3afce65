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
    # the optimizer and loss run eagerly; the compiled forward and backward never
    # show up as eager ops (they would carry the model's module paths)
    from graphdbg.runfile import RunReader
    reader = RunReader(str(workdir / "train.run"))
    assert reader.count("ops") > 100
    assert reader.query("SELECT COUNT(*) AS n FROM ops WHERE module_path IS NOT NULL")[0]["n"] == 0


def _inductor_doc(workdir, name: str, *opts: str) -> dict:
    proc = graphdbg("run", "-q", "-o", f"{name}.run", *opts, SAMPLES / f"{name}.py", cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = report_json(f"{name}.run", workdir)
    assert doc["run"]["internal_errors"] == []
    return doc


@pytest.mark.inductor
def test_clean_fp32_models_have_no_divergence_under_inductor(workdir):
    doc = _inductor_doc(workdir, "clean_compare")
    assert doc["graphs"] and all(g["backend"] == "inductor" for g in doc["graphs"])
    assert [d for d in doc["diagnostics"] if d["kind"] in ("divergence", "nan_inf")] == []


@pytest.mark.inductor
def test_bf16_difference_is_classified_precision(workdir):
    from conftest import markers
    sample = SAMPLES / "bf16_precision.py"
    doc = _inductor_doc(workdir, "bf16_precision")
    divs = [d for d in doc["diagnostics"] if d["kind"] == "divergence"]
    assert divs and all(d["detail"]["classification"] == "precision" for d in divs)
    assert all(d["severity"] == "info" for d in divs)
    assert {(d["file"], d["line"]) for d in divs} == markers(sample, "precision")
    d = divs[0]
    assert d["detail"]["compiled_vs_fp64"] < d["detail"]["eager_vs_fp64"]
    assert "emulate_precision_casts" in d["hint"]


@pytest.mark.inductor
def test_faulty_inductor_backend_is_localized(workdir):
    from conftest import markers
    sample = SAMPLES / "divergence_faulty.py"
    doc = _inductor_doc(workdir, "divergence_faulty")
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "divergence"]
    assert {(d["file"], d["line"])} == markers(sample, "divergence")
    assert d["detail"]["classification"] == "miscompile" and d["severity"] == "error"
