"""A capture session: wiring and lifecycle. It makes the capture context and
the findings writer, hands them to the recorders, installs the recorders on
start and takes them off on stop.

    session = CaptureSession(RunWriter("x.run"), CaptureOptions(values="stats"))
    session.start()
    ...   # the program runs
    session.stop(exit_status=0)

Sessions nest (`graphdbg.capture` inside `graphdbg run`): each installs its
own recorders over the outer ones and takes only its own off.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from graphdbg.core.options import CaptureOptions
from graphdbg.runfile.writer import RunWriter

from . import compat
from .record import creation
from .record.backend import BackendRecorder
from .context import CaptureContext
from .record.eager import EagerRecorder
from .record.exports import ExportRecorder
from .findings.writer import Findings
from .record.tensors import TensorKeeper
from .record.kernels import KernelTimes
from .record.trace import TraceCapture

_active: list["CaptureSession"] = []  # innermost last


def _after_fork_in_child() -> None:
    # One callback for the process, registered once below, not one per session:
    # a callback holding a session (os.register_at_fork never lets one go) would
    # keep every session alive, and its writer, its graphs and its checkers with it
    # (a pytest run records one session per test). The sessions capturing at the
    # fork are the ones in `_active`; a stopped one has closed its file already.
    for session in list(_active):
        session._after_fork_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


def current() -> "CaptureSession | None":
    """The innermost session capturing this process, if any (`graphdbg.check_graph` records into it)."""
    return next((s for s in reversed(_active) if s.ctx.active), None)


class CaptureSession:
    def __init__(self, writer: RunWriter, options: CaptureOptions | None = None) -> None:
        self.writer = writer
        self.ctx = CaptureContext(writer, options or CaptureOptions())
        self.findings = Findings(self.ctx)
        self.keeper = TensorKeeper(self.ctx)
        self.backend = BackendRecorder(self.ctx, self.findings, self.keeper)
        self.kernels = KernelTimes(self.ctx)
        self.trace = TraceCapture(self.ctx, self.findings, self.kernels)
        self.exports = ExportRecorder(self.ctx, self.findings)
        self._pid = os.getpid()

    @property
    def active(self) -> bool:
        return self.ctx.active

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        compat.check_torch()
        self.writer.set_meta(
            torch=torch.__version__, python=sys.version.split()[0], values=self.ctx.options.values,
            device=_device_description(), pid=os.getpid(), host=socket.gethostname())
        self.kernels.install()
        self.trace.install()
        self.backend.install()
        creation.install()
        self.exports.install()
        self.ctx.active = True
        _active.append(self)
        if self.ctx.options.eager:
            mode = EagerRecorder(self.ctx, self.keeper)
            mode.__enter__()
            self.ctx.eager_mode = mode

    def stop(self, **final_meta: Any) -> None:
        ctx = self.ctx
        if not ctx.active:
            return
        if os.getpid() == self._pid:
            self.backend.finish_checks()
        ctx.active = False
        ctx.progress.end()
        mode, ctx.eager_mode = ctx.eager_mode, None
        if mode is not None:
            try:
                if _get_current_dispatch_mode() is mode:
                    mode.__exit__(None, None, None)
            except Exception as exc:
                ctx.internal_error("stopping eager recorder", exc)
        self.backend.uninstall()
        self.trace.uninstall()
        creation.uninstall()
        self.exports.uninstall()
        self.kernels.uninstall()
        if self in _active:
            _active.remove(self)
        if os.getpid() != self._pid:
            return
        from torch._dynamo.utils import counters
        torch_counters = {
            "unique_graphs": counters["stats"].get("unique_graphs", 0),
            "calls_captured": counters["stats"].get("calls_captured", 0),
            "graph_breaks": sum(counters["graph_break"].values()),
        }
        self.writer.close(
            torch_counters=torch_counters, counts=dict(ctx.counts),
            ops_dropped=ctx.ops_dropped, internal_errors=ctx.internal_errors,
            **final_meta)

    def _after_fork_child(self) -> None:
        # A forked child (DataLoader workers) must never write to the parent's file.
        if os.getpid() != self._pid:
            self.ctx.active = False
            self.writer.abandon()

    def runtime_error(self, exc: BaseException) -> None:
        """The program's own error ended the run (or the captured region)."""
        self.findings.runtime_error(exc)


def _device_description() -> str:
    if torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(0)}"
    return "cpu"
