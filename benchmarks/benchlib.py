"""What `make bench`'s sections share (benchmarks/bench.py): the table's
row, number formatting, quiet profiling, and running a process to its end
with its wall time and peak RSS."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONUNBUFFERED": "1"}


# -- the table ---------------------------------------------------------------------

@dataclass
class Row:
    section: str
    what: str
    figure: str = ""
    ratio: str = ""
    target: str = ""
    ok: bool | None = None     # None: no target
    error: str | None = None
    raw: dict | None = None    # numbers behind the row, for results.json


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@contextmanager
def quiet_stderr():
    """File descriptor 2 to /dev/null: kineto prints profiler_start/stop lines
    there from C++ whenever a torch.profiler starts or stops."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


@contextmanager
def quiet_profile():
    """torch.profiler with shapes and stacks (CPU), without kineto's lines."""
    from torch.profiler import ProfilerActivity, profile
    prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True)
    with quiet_stderr():
        prof.__enter__()
    try:
        yield prof
    finally:
        with quiet_stderr():
            prof.__exit__(None, None, None)


def x(r: float) -> str:
    return f"x{r:.2f}"


def spread(values: list[float]) -> str:
    return f"{x(statistics.median(values))} ({min(values):.2f}-{max(values):.2f})" \
        if len(values) > 1 else x(values[0])


def ms(s: float) -> str:
    return f"{s * 1e3:.1f} ms"


def secs(s: float) -> str:
    return f"{s:.1f} s"


def gib(kib: float) -> str:
    return f"{kib / 2**20:.2f} GiB"


# -- processes ---------------------------------------------------------------------

@dataclass
class Proc:
    cmd: list
    rc: int
    wall_s: float
    maxrss_kib: int
    out: str
    err: str

    def last_json(self) -> dict:
        """The JSON object on the last stdout line (what workloads.py prints)."""
        self.check()
        for line in reversed(self.out.strip().splitlines()):
            line = line.strip()
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"no JSON line in the output of {' '.join(map(str, self.cmd))}: "
                           f"{self.out[-300:]!r}")

    def check(self) -> Proc:
        if self.rc != 0:
            tail = (self.err.strip() or self.out.strip()).splitlines()[-3:]
            raise RuntimeError(f"exit status {self.rc}: {' | '.join(tail)[-400:]}")
        return self


def run_proc(cmd: list, cwd: str, timeout: float = 900, env: dict | None = None) -> Proc:
    """Run `cmd` to its end: wall time, and peak RSS from wait4 (the process's
    own, or its largest waited-for child's, as /usr/bin/time -v reports).
    `env`: variables set on top of ENV."""
    cmd = [str(c) for c in cmd]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env={**ENV, **(env or {})}, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Proc(cmd, proc.returncode, wall, usage.ru_maxrss,
                    out.read().decode(errors="replace"), err.read().decode(errors="replace"))


def graphdbg_cmd() -> list:
    exe = Path(sys.executable).parent / "graphdbg"
    return [exe] if exe.exists() else [sys.executable, "-m", "graphdbg"]


def report_json(run: Path, cwd: str) -> dict:
    return json.loads(run_proc(graphdbg_cmd() + ["report", run, "--json"], cwd).check().out)
