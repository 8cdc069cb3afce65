"""`graphdbg run --py-spy`: real py-spy samples a real run; where ptrace is
refused, one line says so and the run goes on."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import ENV, line_of, report_doc

# The busy loop outlasts twice what ran before it (the compile: seconds on a
# loaded machine), so that its line tops the samples however slow the compile was.
BUSY = textwrap.dedent("""\
    import time
    start = time.perf_counter()
    import torch


    def slow_python(n):
        total = 0
        for i in range(n):
            total += i * i % 7  # MARK busy
        return total


    f = torch.compile(lambda x: torch.sin(x) * 2, backend="eager")
    f(torch.ones(4))
    t = time.perf_counter()
    while time.perf_counter() - t < max(1.0, 2 * (t - start)):
        slow_python(20000)
    print("done")
    """)


def test_py_spy_samples_are_counted_at_the_users_lines(workdir, runs):
    (workdir / "busy.py").write_text(BUSY)
    r = runs.spawn("-m", "graphdbg", "run", "-q", "--py-spy", "-o", "busy.run", "busy.py",
                   cwd=workdir)
    assert r.returncode == 0 and r.stdout == "done\n", r.stderr
    assert "py-spy" not in r.stderr
    # the speedscope file beside the run, as py-spy wrote it
    scope = json.loads((workdir / "busy.speedscope.json").read_text())
    assert scope["profiles"] and scope["shared"]["frames"]
    doc = report_doc(workdir / "busy.run")
    p = doc["py_spy"]
    assert p["rate"] == 100 and p["speedscope"] == str(workdir / "busy.speedscope.json")
    top = p["lines"][0]
    busy = workdir / "busy.py"
    assert (top["file"], top["line"], top["function"]) == (str(busy), line_of(busy, "busy"),
                                                           "slow_python")
    assert top["code"] == "total += i * i % 7  # MARK busy"
    # at least 1 s of the loop at 100 Hz, and two thirds of the program's time
    assert top["samples"] >= 40 and top["share"] > 0.3
    assert sum(ln["samples"] for ln in p["lines"]) <= p["samples"]
    # the line that called the compiled function has its compiled time beside its samples
    call = [ln for ln in p["lines"] if ln["code"] == "f(torch.ones(4))"]
    assert call and call[0]["eager_ns"] > 0


SITE = textwrap.dedent("""\
    # a hardened interpreter: not dumpable, so no process without CAP_SYS_PTRACE may trace it
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    """)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_py_spy_refused_is_one_line_and_the_run_goes_on(workdir):
    site = workdir / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE)
    (workdir / "p.py").write_text("import torch\nprint(torch.ones(2).sum().item())\n")
    # without CAP_SYS_PTRACE (dropped here even for root) py-spy cannot attach
    drop = ["setpriv", "--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace"]
    if subprocess.run([*drop, "true"], capture_output=True).returncode != 0:
        pytest.skip("setpriv cannot drop CAP_SYS_PTRACE here")
    proc = subprocess.run([*drop, sys.executable, "-m", "graphdbg", "run", "--py-spy", "-o",
                           "x.run", "p.py"], cwd=workdir, capture_output=True, text=True,
                          env={**ENV, "PYTHONPATH": str(site)}, timeout=300)
    assert proc.returncode == 0 and proc.stdout == "2.0\n", proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if "py-spy" in ln]
    assert said == ["graphdbg run: py-spy cannot sample this process: ptrace is not allowed "
                    "here (permission denied; needs CAP_SYS_PTRACE or kernel.yama.ptrace_scope "
                    "= 0); the run goes on without it"], proc.stderr
    assert "Traceback" not in proc.stderr
    doc = report_doc(workdir / "x.run")
    assert doc["run"]["status"] == "complete" and doc["py_spy"] is None
    assert not (workdir / "x.speedscope.json").exists()
