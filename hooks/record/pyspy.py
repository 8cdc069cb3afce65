"""`graphdbg run --py-spy`: py-spy samples the program's Python stacks.

py-spy runs beside the program as a child process attached to it (`py-spy
record --pid`), writes a speedscope file next to the run file, and its
samples are counted per user source line (the deepest frame in the
program's own files, not torch's, graphdbg's, the standard library's or a
site-packages library's) into the run file, where the
report shows them beside the eager op time of the same lines. Where ptrace
is not allowed, py-spy cannot attach: one line says so and the run goes on.

Imports neither torch nor rich.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Callable

from graphdbg.runfile.records import EventRow
from graphdbg.runfile.writer import dumps

from ..placement.internal import in_library, is_internal

if TYPE_CHECKING:
    from ..context import CaptureContext

ATTACH_WAIT_S = 1.0    # a py-spy that cannot attach has ended by then (0.4 s here)


def find_py_spy() -> str | None:
    """The py-spy beside this interpreter (the profile extra installs it), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.access(here, os.X_OK) else shutil.which("py-spy")


def speedscope_path(run_file: str) -> str:
    base = run_file.removesuffix(".run")
    return base + ".speedscope.json"


class PySpy:
    """py-spy recording this process; `start` says why not in one line."""

    def __init__(self, out: str, rate: int = 100) -> None:
        self.out = out
        self.rate = rate
        self.proc: subprocess.Popen | None = None

    def start(self) -> str | None:
        exe = find_py_spy()
        if exe is None:
            return "py-spy is not installed (pip install 'graphdbg[profile]')"
        try:
            os.remove(self.out)
        except FileNotFoundError:
            pass
        # its own session: a Ctrl-C at the terminal is the program's, and
        # graphdbg stops py-spy itself once the run ends
        self.proc = subprocess.Popen(
            [exe, "record", "--pid", str(os.getpid()), "--format", "speedscope", "-o", self.out,
             "--rate", str(self.rate), "--nonblocking"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True)
        # py-spy says nothing on a pipe until it ends: one that fails to attach
        # (ptrace refused) ends within a fraction of a second; one still
        # running after ATTACH_WAIT_S is sampling
        deadline = time.monotonic() + ATTACH_WAIT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.02)
        if self.proc.poll() is None:
            return None
        proc, self.proc = self.proc, None
        err = proc.stderr.read() or b""
        return "py-spy cannot sample this process: " + _reason(err.decode(errors="replace"))

    def stop(self) -> tuple[str | None, str | None]:
        """Stop sampling; (speedscope file, None) or (None, why there is none)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None, None
        proc.send_signal(signal.SIGINT)      # py-spy writes its file on Ctrl-C
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if os.path.exists(self.out):
            return self.out, None
        return None, "py-spy wrote no samples: " + _reason((err or b"").decode(errors="replace"))



class PySpyRecorder:
    """py-spy beside the program, installed like the other recorders: its
    samples per user line go into the run file as an event row. Where it
    cannot sample, ``say`` tells why in one line and the run goes on."""

    def __init__(self, ctx: "CaptureContext", out: str, rate: int = 100,
                 say: Callable[[str], None] = print) -> None:
        self.ctx = ctx
        self.spy: PySpy | None = PySpy(out, rate)
        self.say = say

    def install(self) -> None:
        why = self.spy.start()
        if why is not None:
            self.say(f"{why}; the run goes on without it")
            self.ctx.writer.set_meta(py_spy_error=why)
            self.spy = None

    def uninstall(self) -> None:
        spy, self.spy = self.spy, None
        if spy is None:
            return
        path, why = spy.stop()
        if path is None:
            if why:
                self.say(why)
                self.ctx.writer.set_meta(py_spy_error=why)
            return
        try:
            total, lines = line_samples(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.say(f"cannot read py-spy's {path}: {exc}")
            return
        ctx = self.ctx
        ctx.writer.add(EventRow(
            seq=ctx.next_seq(), t=ctx.now(), name="py_spy_samples", compile_id=None,
            metadata=dumps({"py_spy_samples": {"samples": total, "rate": spy.rate, "file": path}}),
            payload=dumps([list(r) for r in lines[:5000]])))

def _reason(text: str) -> str:
    """py-spy's error in one line (its backtrace left out)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "Permission denied" in ln or "Operation not permitted" in ln:
            return ("ptrace is not allowed here (permission denied; needs CAP_SYS_PTRACE or "
                    "kernel.yama.ptrace_scope = 0)")
    errors = [ln for ln in lines if ln.lower().startswith("error")]
    return (errors or lines or ["it ended without a message"])[0][:300]


def line_samples(path: str) -> tuple[int, list[tuple[str, int, str, int]]]:
    """(samples, [(file, line, function, samples), ...] most sampled first):
    each sample counted at its deepest frame in the program's own files (in
    a library's, when it has none; samples with neither are in the total only)."""
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    frames = doc.get("shared", {}).get("frames", [])
    # the program's own files first; a library (site-packages) only where a
    # sample has no frame of the program's (torch calls jinja2, say)
    rank = [0 if is_internal(f.get("file") or "") or f.get("line") is None
            else 1 if in_library(f.get("file") or "") else 2 for f in frames]
    counts: dict[int, int] = {}
    total = 0
    for profile in doc.get("profiles", []):     # one per thread
        # (its weights are each sample's seconds, 1/rate: every sample counts one)
        for stack in profile.get("samples", []):
            w = 1
            total += w
            # a stack lists frames outermost first: the deepest of the best rank
            deepest, best = None, 0
            for f in reversed(stack):
                if 0 <= f < len(frames) and rank[f] > best:
                    deepest, best = f, rank[f]
                    if best == 2:
                        break
            if deepest is not None:
                counts[deepest] = counts.get(deepest, 0) + w
    by_line: dict[tuple, int] = {}
    for f, n in counts.items():
        fr = frames[f]
        key = (os.path.abspath(fr["file"]), int(fr["line"]), fr.get("name") or "?")
        by_line[key] = by_line.get(key, 0) + n
    rows = sorted(((*k, n) for k, n in by_line.items()), key=lambda r: (-r[3], r[0], r[1]))
    return total, rows
