"""gpu/check.py (`make gpu-check`), the parts that run without a GPU: it says
"no CUDA" and skips (or fails with --require-cuda), and its harness runs an
eager program plain and under `graphdbg run` on the CPU (--dry-run), reading
the run file and printing the table. The CUDA checks run on a GPU machine
(docs/development.md)."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from conftest import ROOT, python

CHECK = ROOT / "gpu" / "check.py"

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


def check(*args: str, cwd) -> subprocess.CompletedProcess:
    return python(CHECK, *args, cwd=cwd)


@no_cuda
def test_without_cuda_it_says_so_and_skips(tmp_path):
    p = check("--out", str(tmp_path / "out"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"gpu-check: no CUDA: torch {torch.__version__} sees no CUDA device")
    assert "skipped" in p.stdout and not (tmp_path / "out").exists()
    p = check("--require-cuda", cwd=tmp_path)
    assert p.returncode == 2 and "no CUDA" in p.stdout


def test_an_unknown_check_is_refused(tmp_path):
    p = check("--only", "eager,tpu", cwd=tmp_path)
    assert p.returncode == 2 and "unknown check 'tpu'" in p.stderr


@no_cuda
def test_a_dry_run_captures_the_eager_step_and_prints_the_table(tmp_path):
    out = tmp_path / "out"
    p = check("--dry-run", "--only", "eager", "--out", str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no CUDA: a dry run on the CPU" in p.stdout
    assert "1 of 1 passed" in p.stdout
    doc = json.loads((out / "gpu-check.json").read_text())
    (eager,) = doc["results"]
    assert eager["check"] == "eager" and eager["passed"], eager
    figs = eager["figures"]
    assert figs["ops"] > 0 and figs["ops with stats"] > 0
    assert figs["ratio"] > 0 and (out / "eager.run").exists()
