"""Write a repro and check it before it is offered: the script runs in a
fresh ``python``; only one that reproduces (exit 1 with its marker) becomes
the repro, else it stays in ``attempt/`` and the reason is said."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, replace

from . import codegen, cutscript, script
from .base import Plan, Refused

FILES = ("repro.py", "inputs.safetensors", "README.md")
MARKERS = {"divergence": "DIVERGES", "compile_error": "REPRODUCED", "graph_break": "REPRODUCED",
           "recompile": "REPRODUCED"}


@dataclass
class Result:
    ok: bool
    folder: str          # the repro's folder, or the attempt's
    seconds: float
    output: str          # the script's stdout (and, when it failed, stderr), trimmed
    why: str | None      # what did not reproduce


def default_folder(run_path: str, p: Plan) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(run_path)), f"repro-{p.kind}-{p.number}")


def text_of(p: Plan, run_path: str) -> str:
    source = f"finding {p.number} of {os.path.basename(run_path)}"
    try:
        if p.kind in ("graph_break", "recompile"):
            return getattr(cutscript, p.kind)(p.spec, p.what, source)
        if p.kind == "divergence":
            return script.divergence(p.spec, p.what, source)
        return script.compile_error(p.spec, p.what, source)
    except codegen.Unrenderable as exc:
        raise Refused(f"finding {p.number} cannot be written as a standalone script: {exc}")


def readme(p: Plan) -> str:
    first = p.what + (f" Note: {p.note}." if p.note else "")
    return f"{first}\nRun it: `python repro.py` (exit 1 while the bug is there, 0 once it is gone).\n"


def write(folder: str, p: Plan, text: str) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "repro.py"), "w") as fh:
        fh.write(text)
    if p.blob:
        with open(os.path.join(folder, "inputs.safetensors"), "wb") as fh:
            fh.write(p.blob)
    with open(os.path.join(folder, "README.md"), "w") as fh:
        fh.write(readme(p))


def verify(folder: str, p: Plan, timeout: float = 60.0, python: str | None = None) -> Result:
    """Run repro.py in a fresh process (its own folder, a clean environment for graphdbg)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHDBG", "TORCH_LOGS"))}
    t0 = time.perf_counter()
    try:
        if python is None and os.environ.get("GRAPHDBG_TEST_REPRO_FORK") == "1":
            done = _forked(folder, env, timeout)
        else:
            done = subprocess.run([python or sys.executable, "repro.py"], cwd=folder, env=env,
                                  capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Result(False, folder, time.perf_counter() - t0, "",
                      f"the script ran past {timeout:.0f} s")
    seconds = time.perf_counter() - t0
    output = done.stdout.strip()
    marker = MARKERS[p.kind]
    if done.returncode == 1 and marker in done.stdout:
        return Result(True, folder, seconds, output, None)
    output = (done.stdout + done.stderr).strip()
    if done.returncode == 0 and p.kind in _GONE:
        why = _GONE[p.kind]
    elif done.returncode == 0:
        why = ("standalone, compiled matches eager: the divergence needs more than this subgraph "
               "(the rest of the graph, the backend's options, or state of the program)"
               if p.kind == "divergence" else
               "standalone, the graph compiled without error: the failure needs more than this "
               "graph (the backend's own code, its options, or state of the program)")
    else:
        last = output.splitlines()[-1] if output else "no output"
        why = f"the script failed another way (exit {done.returncode}): {last}"
    return Result(False, folder, seconds, output, why)


def _forked(folder: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """For graphdbg's own test suite only (GRAPHDBG_TEST_REPRO_FORK=1, set
    for the commands its tests run): `python repro.py` in a child forked from
    this process, which has torch imported, instead of a fresh interpreter
    (about 1.5 s of CPU a script). The script still runs as a program of its
    own: its folder, argv, path and environment, `__main__`, its exit status.
    Users' repros always run in a fresh python."""
    import runpy
    import signal
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:   # the child: never returns
            code = 1
            try:
                os.chdir(folder)
                os.environ.clear()
                os.environ.update(env)
                for fd, path in ((1, out), (2, err)):
                    f = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
                    os.dup2(f, fd)
                    os.close(f)
                # new stream objects: a thread of the parent's (rich's spinner)
                # may have held the old ones' locks when it forked
                sys.stdout = open(1, "w", closefd=False)
                sys.stderr = open(2, "w", closefd=False)
                signal.alarm(max(1, int(timeout)))
                sys.argv, sys.path[0] = ["repro.py"], folder
                try:
                    runpy.run_path("repro.py", run_name="__main__")
                    code = 0
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                except BaseException:
                    import traceback
                    traceback.print_exc()
                    code = 1
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        _, status = os.waitpid(pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        if rc == -signal.SIGALRM:
            raise subprocess.TimeoutExpired(["repro.py"], timeout)
        with open(out) as fo, open(err) as fe:
            return subprocess.CompletedProcess(["repro.py"], rc, fo.read(), fe.read())


def make(p: Plan, run_path: str, folder: str, timeout: float = 60.0) -> Result:
    """Write the attempt, verify it, and promote it to ``folder`` when it
    reproduces. A compile error is first tried on the graph cut down to its
    failing node, then, if that does not reproduce, on the whole graph."""
    from .plan import cut_to
    tries = [p]
    if p.kind == "compile_error" and p.cut:
        small = cut_to(p.spec, p.cut)
        if small is not None:
            tries.insert(0, replace(p, spec=small, what=_smaller(p, small)))
    attempt = os.path.join(folder, "attempt")
    for name in FILES:  # an earlier repro here is replaced, not mixed with this one
        if os.path.exists(os.path.join(folder, name)):
            os.remove(os.path.join(folder, name))
    for i, t in enumerate(tries):
        text = text_of(t, run_path)
        if os.path.isdir(attempt):
            shutil.rmtree(attempt)
        write(attempt, t, text)
        r = verify(attempt, t, timeout)
        if r.ok:
            break
    if not r.ok:
        return r
    p.spec, p.what = t.spec, t.what  # the one offered
    for name in FILES:
        src = os.path.join(attempt, name)
        if os.path.exists(src):
            os.replace(src, os.path.join(folder, name))
    shutil.rmtree(attempt, ignore_errors=True)
    r.folder = folder
    return r


_GONE = {
    "graph_break": "standalone, the function compiled without that graph break: the break needs "
                   "more than the function and arguments of these shapes (the values, the "
                   "caller, or state of the program)",
    "recompile": "standalone, the second call did not recompile on that guard: the recompile "
                 "needs more than these two calls (the calls before, or state of the program)",
}


def _smaller(p: Plan, small: dict) -> str:
    return (f"Graph {small['graph_id']} fails to compile: {small['exception']}: {small['message']} "
            f"(cut down to node {p.cut} and its inputs: {len(small['nodes'])} of the "
            f"{small['graph_nodes']} nodes; "
            + ("the inputs' values as the program passed them" if p.blob else
               "the inputs' values are random (normal), of the recorded shapes, dtypes and strides")
            + ").")
