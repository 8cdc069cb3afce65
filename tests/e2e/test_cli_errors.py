"""Bad input: one clear line and a non-zero exit, never our traceback; the
program's own exit status and errors are preserved, and nothing is lost.

Runs that import torch go through the session's fork server (`runs.spawn`:
`python ARGV` in a child of a warm interpreter); those whose point is the
process itself (signals from outside, the interpreter's own startup) are
fresh processes."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from graphdbg.runfile.writer import RunWriter

from conftest import ENV, graphdbg, marked, markers, python, report_doc


def _script(dir: Path, name: str, body: str) -> Path:
    p = dir / name
    p.write_text(textwrap.dedent(body))
    return p


def test_missing_script_is_one_line_exit_2(workdir):
    proc = graphdbg("run", "nope.py", cwd=workdir)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "graphdbg run: no such file: nope.py"
    assert "Traceback" not in proc.stderr
    assert not list(workdir.glob("*.run"))


@pytest.mark.parametrize("flag,value,line", [
    ("--compare-memory", "0", "--compare-memory: needs a positive number of MiB, not 0 "
                              "(no check: compare off)"),
    ("--keep", "attn(", "--keep: not a regular expression: missing ), unterminated subpattern "
                        "at position 4")])
def test_an_option_its_own_checks_refuse_is_a_usage_error(workdir, flag, value, line):
    (workdir / "p.py").write_text("print('ran')\n")
    proc = graphdbg("run", flag, value, "p.py", cwd=workdir)
    assert proc.returncode == 2 and "ran" not in proc.stdout and "Traceback" not in proc.stderr
    usage, error = proc.stderr.strip().splitlines()
    assert usage.startswith("usage: graphdbg run ") and error == f"graphdbg run: error: {line}"
    assert not list(workdir.glob("*.run"))


def test_the_api_refuses_the_same_options_by_name():
    from graphdbg import capture
    from graphdbg.core.options import OptionError
    with pytest.raises(OptionError, match="compare_memory: needs a positive number"):
        capture("x.run", compare_memory=0)
    with pytest.raises(OptionError, match="keep: not a regular expression"):
        capture("x.run", keep="attn(")


def test_no_script_given(workdir):
    proc = graphdbg("run", cwd=workdir)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert re.fullmatch(r"graphdbg run: .*\bscript\b.*", proc.stderr.strip())


def test_script_that_raises_keeps_traceback_exit_1_and_run_file(workdir, runs):
    _script(workdir, "boom.py", """\
        import torch

        def step(x):
            return x.sum() / 0

        def fail():
            raise ValueError("bad shape from the data loader")  # graphdbg-expect: runtime_error

        step(torch.ones(3))
        fail()  # graphdbg-expect: call
        """)
    proc = runs.spawn("-m", "graphdbg", "run", "-o", "boom.run", "boom.py", cwd=workdir)
    assert proc.returncode == 1
    # traceback printed as Python would: the program's frames, not ours
    assert "Traceback (most recent call last)" in proc.stderr
    boom = workdir / "boom.py"
    assert f'File "boom.py", line {marked(boom, "call")}, in <module>' in proc.stderr
    assert "ValueError: bad shape from the data loader" in proc.stderr
    assert "graphdbg/runner.py" not in proc.stderr and "runpy" not in proc.stderr
    doc = report_doc(workdir / "boom.run")
    assert doc["run"]["exit_status"] == 1 and doc["run"]["status"] == "failed"
    errs = [d for d in doc["diagnostics"] if d["kind"] == "runtime_error"]
    assert len(errs) == 1
    assert {(errs[0]["file"], errs[0]["line"])} == markers(boom, "runtime_error")
    assert errs[0]["function"] == "fail"
    assert "ValueError" in errs[0]["message"]
    # eager ops before the error were kept
    assert doc["eager"]["ops"] >= 2


def test_argv_sys_path_and_exit_status_as_python_sets_them(workdir, runs):
    sub = workdir / "pkgdir"
    sub.mkdir()
    _script(sub, "helper_mod.py", "VALUE = 42\n")
    _script(sub, "main.py", """\
        import sys, helper_mod
        print(__name__, sys.argv, helper_mod.VALUE)
        sys.exit(3)
        """)
    proc = runs.spawn("-m", "graphdbg", "run", "-q", "-o", "a.run", "pkgdir/main.py",
                      "--epochs", "1", "x", cwd=workdir)
    assert proc.returncode == 3, proc.stderr
    # -q: nothing but the program's own output
    assert proc.stdout == "__main__ ['pkgdir/main.py', '--epochs', '1', 'x'] 42\n"
    assert report_doc(workdir / "a.run")["run"]["exit_status"] == 3


def test_module_mode(workdir, runs):
    pkg = workdir / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    _script(pkg, "train.py", """\
        import sys, torch
        print(__name__, sys.argv[1:], torch.ones(2).sum().item())
        """)
    proc = runs.spawn("-m", "graphdbg", "run", "-o", "m.run", "-m", "mypkg.train", "--lr", "0.1",
                      cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "__main__ ['--lr', '0.1'] 2.0"
    assert "next: graphdbg report m.run" in proc.stderr
    doc = report_doc(workdir / "m.run")
    assert doc["run"]["argv"][:2] == ["-m", "mypkg.train"]
    assert doc["eager"]["ops"] >= 2


def test_missing_module(workdir):
    proc = graphdbg("run", "-m", "no_such_mod_xyz", cwd=workdir)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "graphdbg run: no module named 'no_such_mod_xyz'"


def test_sigint_mid_run_leaves_readable_run_file(workdir):
    _script(workdir, "loop.py", """\
        import time, torch
        f = torch.compile(lambda x: x.sin() + 1, backend="eager")
        f(torch.ones(4))
        print("ready", flush=True)
        while True:
            torch.ones(8).cos()
            time.sleep(0.01)
        """)
    # faulthandler: a run that does not end gets its stacks dumped by SIGABRT.
    # SIGINT back to its default in the child, as in a terminal: under a shell
    # that runs the tests in the background, SIGINT is ignored and Python (with
    # or without graphdbg) keeps ignoring it.
    proc = subprocess.Popen([sys.executable, "-m", "graphdbg", "run", "-o", "loop.run", "loop.py"],
                            cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**ENV, "PYTHONFAULTHANDLER": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"graphdbg run did not end after Ctrl-C; its stacks:\n{err[-6000:]}")
    assert proc.returncode == 130
    assert "KeyboardInterrupt" in err
    doc = report_doc(workdir / "loop.run")
    assert doc["run"]["status"] == "interrupted" and doc["run"]["exit_status"] == 130
    assert len(doc["graphs"]) == 1 and doc["graphs"][0]["calls"] == 1
    assert doc["eager"]["ops"] > 10
    errs = [d for d in doc["diagnostics"] if d["kind"] == "runtime_error"]
    assert errs and errs[0]["file"] == str(workdir / "loop.py")
    # the user's own stop: where it was, not an error of the program
    assert errs[0]["severity"] == "info" and errs[0]["message"].startswith("interrupted here")
    # ...and said so in the counts of the summary and the report, not as an error
    summary = next(line for line in (out + err).splitlines()
                   if line.startswith("graphdbg:") and "eager ops" in line)
    assert "runtime error" not in summary and "interrupted" in summary
    text = graphdbg("report", "loop.run", cwd=workdir).stdout
    counts = next(line for line in text.splitlines() if "eager ops" in line)
    assert "runtime error" not in counts and counts.rstrip().endswith("interrupted")


def test_report_refuses_foreign_and_corrupt_files(workdir):
    (workdir / "notes.txt").write_text("hello\n")
    proc = graphdbg("report", "notes.txt", cwd=workdir)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "graphdbg: notes.txt is not a graphdbg run file"

    db = sqlite3.connect(workdir / "other.db")
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    proc = graphdbg("report", "other.db", cwd=workdir)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert re.fullmatch(r"graphdbg: other\.db is not a .*graphdbg run file.*", proc.stderr.strip())

    (workdir / "broken.run").write_bytes(b"SQLite format 3\x00" + b"\x13" * 3000)
    proc = graphdbg("report", "broken.run", cwd=workdir)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert re.fullmatch(r"graphdbg: broken\.run is not a .*graphdbg run file.*", proc.stderr.strip())

    proc = graphdbg("report", "missing.run", cwd=workdir)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "graphdbg: no such run file: missing.run"


def test_report_without_runs_in_directory(workdir):
    proc = graphdbg("report", cwd=workdir)
    assert proc.returncode == 2
    assert proc.stderr.startswith("graphdbg: no run file in ")


def test_report_defaults_to_newest_run(workdir):
    # two run files written in-process; the newer one says exit 4
    for name, status in (("a.run", 0), ("b.run", 4)):
        w = RunWriter(str(workdir / name))
        w.set_meta(argv=[name], module=False)
        w.close(exit_status=status, status="complete")
        time.sleep(0.05)
    proc = graphdbg("report", "--json", cwd=workdir, check=True)
    assert json.loads(proc.stdout)["run"]["exit_status"] == 4
    os.utime(workdir / "a.run")  # now a.run is the newest
    proc = graphdbg("report", "--json", cwd=workdir, check=True)
    assert json.loads(proc.stdout)["run"]["exit_status"] == 0


def test_forked_child_does_not_touch_the_run_file(workdir, runs):
    _script(workdir, "forker.py", """\
        import os, torch
        a = torch.ones(4) * 2
        pid = os.fork()
        if pid == 0:
            for _ in range(2000):
                torch.ones(16).exp()
            os._exit(0)
        os.waitpid(pid, 0)
        b = a + 1
        print(b.sum().item())
        """)
    proc = runs.spawn("-m", "graphdbg", "run", "-q", "-o", "f.run", "forker.py", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    doc = report_doc(workdir / "f.run")
    assert doc["run"]["status"] == "complete"
    ops = {o["op"] for o in doc["eager"]["top_ops"]}
    assert "aten.add.Tensor" in ops and "aten.exp.default" not in ops


CLAIMING = """\
import os, runpy, sys
import torch
torch.__version__ = {version!r}
{extra}
os.environ.pop("GRAPHDBG_ALLOW_ANY_TORCH", None)
os.environ.update({env!r})
sys.argv = ["graphdbg", *sys.argv[1:]]
runpy.run_module("graphdbg", run_name="__main__", alter_sys=True)
"""


def _claiming_torch(workdir, version: str, *args: str, extra: str = "", env: dict | None = None):
    """`graphdbg ARGS` in a python whose torch claims ``version`` (its
    `__version__` set, and ``extra`` run, before graphdbg is imported)."""
    (workdir / "claim.py").write_text(CLAIMING.format(version=version, extra=extra, env=env or {}))
    return python("claim.py", *args, cwd=workdir)


def test_unsupported_torch_version_is_refused(workdir):
    _script(workdir, "p.py", "print('ran')\n")
    proc = _claiming_torch(workdir, "2.10.2", "run", "p.py")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("graphdbg: torch 2.10.2 is not supported: graphdbg needs "
                                   "torch>=2.11,<2.16")
    assert proc.stdout == "" and not list(workdir.glob("*.run"))


def test_newer_torch_is_refused_unless_the_user_allows_it(workdir):
    _script(workdir, "p.py", "print('ran')\n")
    proc = _claiming_torch(workdir, "2.16.0a0+gitabc", "run", "p.py")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "graphdbg: torch 2.16.0a0+gitabc is not supported: graphdbg needs torch>=2.11,<2.16 "
        "(set GRAPHDBG_ALLOW_ANY_TORCH=1 to try it at your own risk)")
    assert not list(workdir.glob("*.run"))
    # at the user's own risk: one warning line, and the run is made as usual
    proc = _claiming_torch(workdir, "2.16.0a0+gitabc", "run", "-o", "p.run", "p.py",
                           env={"GRAPHDBG_ALLOW_ANY_TORCH": "1"})
    assert proc.returncode == 0 and proc.stdout == "ran\n", proc.stderr
    warned = [ln for ln in proc.stderr.splitlines() if "GRAPHDBG_ALLOW_ANY_TORCH" in ln]
    assert warned == ["graphdbg: warning: torch 2.16.0a0+gitabc is newer than graphdbg supports "
                      "(torch>=2.11,<2.16); running because GRAPHDBG_ALLOW_ANY_TORCH=1: findings "
                      "may be missing or misplaced"]
    assert report_doc(workdir / "p.run")["run"]["versions"]["torch"] == "2.16.0a0+gitabc"


def test_a_torch_without_what_graphdbg_needs_is_refused_by_feature(workdir):
    # a supported version number, but the dispatch-mode feature is gone
    _script(workdir, "p.py", "print('ran')\n")
    proc = _claiming_torch(workdir, "2.14.0", "run", "p.py", extra=(
        "from torch.utils._python_dispatch import TorchDispatchMode\n"
        "del TorchDispatchMode.ignore_compile_internals"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "graphdbg: torch 2.14.0 is not supported: it lacks "
        "TorchDispatchMode.ignore_compile_internals, which graphdbg needs (torch>=2.11,<2.16)")


def test_sigkill_leaves_a_run_that_ended_without_closing(workdir, runs):
    _script(workdir, "killed.py", """\
        import os, signal, time, torch
        f = torch.compile(lambda x: x.sin() + 1, backend="eager")
        f(torch.ones(4))
        time.sleep(1.5)  # past the writer's one-second commit
        torch.ones(8).cos()
        os.kill(os.getpid(), signal.SIGKILL)
        """)
    proc = runs.spawn("-m", "graphdbg", "run", "-q", "-o", "k.run", "killed.py", cwd=workdir)
    assert proc.returncode == -signal.SIGKILL
    raw = sqlite3.connect(workdir / "k.run").execute(
        "SELECT value FROM meta WHERE key = 'status'").fetchone()[0]
    assert json.loads(raw) == "running"  # as the killed process left it
    doc = report_doc(workdir / "k.run")
    assert doc["run"]["status"] == "ended without closing" and doc["run"]["pid"] > 0
    assert len(doc["graphs"]) == 1  # what was committed before the kill is there
    text = graphdbg("report", "k.run", cwd=workdir).stdout
    assert "ended without closing" in text and f"pid {doc['run']['pid']}" in text
