"""Shared helpers: run graphdbg and samples in subprocesses, as a user would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
PLAIN_RUN = ROOT / "tests" / "support" / "plain_run.py"
# Subprocesses keep torch single-threaded: these machines have 2 cores and
# pytest may run beside other work.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
       "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
ENV.pop("GRAPHDBG_DEBUG", None)


def graphdbg(*args: str, cwd: Path | str, timeout: int = 600, env: dict | None = None,
             check: bool = False) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "graphdbg", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env or ENV)
    if check and proc.returncode != 0:
        raise AssertionError(f"graphdbg {args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def report_json(run: Path | str, cwd: Path | str) -> dict:
    proc = graphdbg("report", "--json", run, cwd=cwd, check=True)
    return json.loads(proc.stdout)


def markers(path: Path, kind: str) -> set[tuple[str, int]]:
    """(file, line) of every `# graphdbg-expect: KIND [KIND...]` marker in a sample."""
    out = set()
    for i, line in enumerate(path.read_text().splitlines(), 1):
        m = re.search(r"#\s*graphdbg-expect:\s*([\w ]+)", line)
        if m and kind in m[1].split():
            out.add((str(path), i))
    return out


def sites(doc: dict, kind: str) -> set[tuple[str, int]]:
    return {(d["file"], d["line"]) for d in doc["diagnostics"] if d["kind"] == kind}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
