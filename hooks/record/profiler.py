"""`graphdbg run --profile`: torch.profiler traces of the program.

The traces are written with TensorBoard's trace handler layout into
`<run>.profile/` (`<host>_<pid>.<time>.pt.trace.json`): open them in
Perfetto (ui.perfetto.dev) or in TensorBoard with torch-tb-profiler
(`graphdbg[tensorboard]`). A schedule keeps long runs bounded: a step is an
optimizer step, or, in a program that steps no optimizer, a call of its
first compiled graph (one iteration of a compiled loop). A program with
neither is recorded whole when the schedule records from its first step
(`--profile-steps 0,0,N,1`); with the default schedule it yields no trace,
and graphdbg says so.
"""

from __future__ import annotations

import json
import os
import re
import socket
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

from ..context import CaptureContext
from .steps import StepClock

DEFAULT_STEPS = (1, 1, 3, 1)   # wait, warmup, active, repeat (torch.profiler.schedule)


def profile_dir(run_file: str) -> str:
    return run_file.removesuffix(".run") + ".profile"


class ProfileRecorder:
    """torch.profiler around the program, stepped by its optimizer or its
    first compiled graph. Where it cannot start, or records nothing, ``say``
    tells why in one line; the run goes on."""

    def __init__(self, ctx: CaptureContext, out_dir: str,
                 steps: tuple[int, int, int, int] = DEFAULT_STEPS,
                 say: Callable[[str], None] = print) -> None:
        self.ctx = ctx
        self.out_dir = out_dir
        self.steps = steps
        self.say = say
        self.taken = 0
        self._prof = None
        self._clock = StepClock(ctx, self._step)

    def install(self) -> None:
        try:
            self._start()
        except Exception as exc:  # noqa: BLE001 - the program runs with or without traces
            self.say(f"torch.profiler did not start ({type(exc).__name__}: {exc}); "
                     f"the run goes on without --profile")
            try:
                self._stop()
            except Exception:  # noqa: BLE001, S110 - it never started
                pass
            self._prof = None

    def uninstall(self) -> None:
        """Stop profiling; the traces' paths go into the run's meta."""
        if self._prof is None:   # it never started
            return
        traces = self._stop()
        self.ctx.writer.set_meta(profile={"dir": self.out_dir, "traces": traces,
                                          "steps": self.taken, "schedule": list(self.steps)})
        if not traces:
            self.say(f"--profile wrote no trace: the program took {self.taken} step(s) "
                     f"(optimizer steps, or calls of its first compiled graph) and the schedule "
                     f"{','.join(map(str, self.steps))} records none of them; "
                     f"--profile-steps 0,0,1,1 records a program without steps whole")

    def _start(self) -> None:
        wait, warmup, active, repeat = self.steps
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._prof = profile(
            activities=activities,
            schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=repeat),
            on_trace_ready=self._trace_ready,
            record_shapes=True, with_stack=True)
        self._prof.start()
        self._clock.install()

    def _trace_ready(self, prof) -> None:
        before = set(os.listdir(self.out_dir)) if os.path.isdir(self.out_dir) else set()
        tensorboard_trace_handler(
            self.out_dir, worker_name=f"{socket.gethostname()}_{os.getpid()}")(prof)
        for f in sorted(set(os.listdir(self.out_dir)) - before):
            if f.endswith(".pt.trace.json"):
                repair_trace(os.path.join(self.out_dir, f))

    def _step(self, restart: bool = False, compiled: bool = False) -> None:
        if self._prof is not None:
            self.taken += 1
            self._prof.step()

    def _stop(self) -> list[str]:
        """Stop profiling; the trace files written (none: nothing was recorded)."""
        self._clock.uninstall()
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.stop()   # a cycle still recording is written now
        if not os.path.isdir(self.out_dir):
            return []
        return sorted(os.path.join(self.out_dir, f) for f in os.listdir(self.out_dir)
                      if f.endswith(".pt.trace.json"))


_STRING_FIELD = re.compile(r'^(\s*"[^"]+": ")(.*)("(?:,)?)$')
_UNESCAPED_QUOTE = re.compile(r'(?<!\\)"')


def repair_trace(path: str) -> bool:
    """Make a trace that torch wrote as invalid JSON readable: torch 2.13's
    kineto writes some Python tracer names unescaped (``"name":
    "torch/profiler/_cupti_monitor.py(0): "float32"",`` seen here), which
    TensorBoard, Perfetto and json.load refuse. Each string field that is not
    valid JSON has its bare quotes escaped. True when the file is (now) valid."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    try:
        json.loads(text)
        return True
    except ValueError:
        pass
    lines = text.split("\n")
    for i, line in enumerate(lines):
        m = _STRING_FIELD.match(line)
        if m is None:
            continue
        try:
            json.loads(f'"{m[2]}"')
        except ValueError:
            lines[i] = m[1] + _UNESCAPED_QUOTE.sub(r'\\"', m[2]) + m[3]
    fixed = "\n".join(lines)
    try:
        json.loads(fixed)
    except ValueError:
        return False
    with open(path, "w", encoding="utf-8") as f:
        f.write(fixed)
    return True
