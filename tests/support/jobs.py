"""Real torchrun jobs for the distributed tests: 2 ranks on gloo (CPU), each
under `graphdbg run` (or plain, for the observer rule), their output and
job folder kept for every test that reads them.

A job that hangs is ended as a user or a scheduler would: once each rank's
run file says where it waits (its `meta.position`, written by graphdbg's
rank watcher), torchrun gets SIGTERM and passes it to the ranks."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "--monitor-interval", "0.2"]
PROGRAMS = Path(__file__).resolve().parent / "dist"


def _meta(run: Path, key: str):
    try:
        with sqlite3.connect(f"file:{run}?mode=ro", uri=True, timeout=1) as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    except sqlite3.Error:
        return None
    return json.loads(row[0]) if row else None


def run_job(folder: Path, program: str, *graphdbg_opts: str, plain: bool = False,
            env: dict, hang_until=None, timeout: float = 240) -> tuple[int, str, str]:
    """torchrun of tests/support/dist/PROGRAM in ``folder`` (under `graphdbg
    run -q -o job OPTS` unless ``plain``). ``hang_until(folder)``: the job is
    expected to hang; it is killed (SIGTERM to torchrun) once that returns
    true."""
    script = str(PROGRAMS / program)
    if plain:
        argv = [*TORCHRUN, script]
    else:
        argv = [*TORCHRUN, "--no-python", sys.executable, "-m", "graphdbg", "run", "-q",
                "-o", "job", *graphdbg_opts, script]
    proc = subprocess.Popen(argv, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    if hang_until is not None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None and not hang_until(folder):
            time.sleep(0.5)
        if proc.poll() is None:
            time.sleep(1.5)   # the watcher's next commit
            proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return proc.returncode, out, err


def parted_hangs(folder: Path) -> bool:
    """ranks_part.py's hang: rank 0 inside a compiled call, rank 1 past it."""
    p0 = _meta(folder / "job" / "rank0.run", "position") or {}
    p1 = _meta(folder / "job" / "rank1.run", "position") or {}
    return bool((p0.get("call") or {}).get("running")) and bool(p1.get("call"))
