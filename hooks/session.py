"""The capture session: the one lifecycle behind `graphdbg run`,
`graphdbg.capture`, `graphdbg.compare` and the pytest plugin's recorder.

    with Session("x.run", CaptureOptions(values="stats"), argv=["train.py"]) as session:
        ...   # the program runs; an exception it raises is recorded, then goes on

Starting checks torch (once), opens the run file, writes what the run is
(meta), and installs the recorders, each given the capture context and the
findings writer: py-spy first (it samples beside the program), torch.profiler
last. Stopping takes them off, and closes the file with how the program ended.

Sessions nest (`graphdbg.capture` inside `graphdbg run`): each installs its
own recorders over the outer ones and takes only its own off.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Callable

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from graphdbg.core import ranks
from graphdbg.core.options import CaptureOptions
from graphdbg.core.version import __version__
from graphdbg.runfile.writer import RunWriter

from . import compat
from .placement import cells, creation
from .placement.internal import is_internal
from .record.backend import BackendRecorder
from .context import CaptureContext
from .record.eager import EagerRecorder
from .record.statsqueue import StatsQueue
from .record.steps import EagerSchedule
from .record.exports import ExportRecorder
from .record.ortsession import SessionWatch
from .findings.writer import Findings
from .record.tensors import TensorKeeper
from .record.kernels import KernelTimes
from .record.ranks import RankWatch
from .record.trace import TraceCapture

_active: list["Session"] = []  # innermost last


def _after_fork_in_child() -> None:
    # One callback for the process, registered once below, not one per session:
    # a callback holding a session (os.register_at_fork never lets one go) would
    # keep every session alive, and its writer, its graphs and its checkers with it
    # (a pytest run records one session per test). The sessions capturing at the
    # fork are the ones in `_active`; a stopped one has closed its file already.
    for session in list(_active):
        session._after_fork_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


def current() -> "Session | None":
    """The innermost session capturing this process, if any (`graphdbg.check_graph` records into it)."""
    return next((s for s in reversed(_active) if s.active), None)


def _stderr(text: str) -> None:
    print(f"graphdbg: {text}", file=sys.stderr)


class Session:
    """One capture into the run file at ``path``. ``argv``, ``module``,
    ``target`` and ``cwd`` say what ran (as the caller names it);
    ``warn`` receives the warning of a torch newer than supported (a
    RuntimeWarning without it), ``say`` the one-line notes of py-spy and
    torch.profiler. ``durable=False``: no fsync (runs that are mostly deleted).
    ``own_backend``: the caller compiles with a backend of its own
    (`graphdbg.compare`), and the recompile it causes is not the program's."""

    def __init__(self, path: str, options: CaptureOptions | None = None, *,
                 argv: Sequence[str] | None = None, module: bool = False,
                 target: str | None = None, cwd: str | None = None, durable: bool = True,
                 warn: Callable[[str], None] | None = None,
                 say: Callable[[str], None] = _stderr, own_backend: bool = False) -> None:
        self.path = path
        self.options = options or CaptureOptions()
        self._what = {"argv": None if argv is None else list(argv), "module": module,
                      "target": target, "cwd": cwd}
        self._durable = durable
        self._own_backend = own_backend
        self._graphs_before = 0
        self._warn, self._say = warn, say
        self._writer: RunWriter | None = None
        self._ctx: CaptureContext | None = None
        self._findings: Findings | None = None
        self._backend: BackendRecorder | None = None
        self._core: list = []        # the recorders every session has
        self._installed: list = []   # recorders with install/uninstall, in install order
        self._stance = None
        self._schedule = None
        self._t0 = 0.0
        self._exit = (0, "complete")
        self._pid = os.getpid()

    @property
    def active(self) -> bool:
        return self._ctx is not None and self._ctx.active

    # -- lifecycle -------------------------------------------------------------
    def __enter__(self) -> "Session":
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None:
            self.runtime_error(exc)
        self.stop()

    def start(self) -> None:
        compat.check_torch(self._warn)
        # nothing half made is left behind: no open file, no run that says "running"
        self._writer = writer = RunWriter(self.path, durable=self._durable, is_internal=is_internal,
                                          source_of=cells.source_of)
        try:
            self._start(writer)
        except BaseException:
            self._abort()
            raise

    def _start(self, writer: RunWriter) -> None:
        options = self.options
        # a writer that fails (a full disk) stops the capture, never the program
        writer.on_failure = _stderr
        writer.set_meta(
            **{k: v for k, v in self._what.items() if v is not None}, graphdbg=__version__,
            torch=torch.__version__, python=sys.version.split()[0], values=options.values,
            device=_device_description(), pid=os.getpid(), host=socket.gethostname(),
            **({"stance": options.stance} if options.stance else {}))
        self._ctx = ctx = CaptureContext(writer, options)
        ctx.own_backend = self._own_backend
        # graphs Dynamo compiled in this process before the capture (since a reset)
        self._graphs_before = compat.compiled_graphs()
        if options.values != "none":
            ctx.stats_queue = StatsQueue(options.values)
        owner = threading.get_ident()

        def join_commit() -> None:
            # rows held for their statistics, or in the recorder, join the writer's
            # timed commit (from the recording thread: the statistics are its tensors)
            if threading.get_ident() == owner and ctx.active:
                with ctx.own_work():
                    _drain(ctx, ctx.eager_mode, wait=False)
        writer.before_timed_commit = join_commit
        self._findings = findings = Findings(ctx)
        keeper = TensorKeeper(ctx)
        self._backend = BackendRecorder(ctx, findings, keeper)
        kernels = KernelTimes(ctx)
        self._core = [kernels, TraceCapture(ctx, findings, kernels), self._backend, creation,
                      ExportRecorder(ctx, findings), SessionWatch(ctx, findings)]
        if options.py_spy:   # before the rest: it samples the program, not graphdbg's start
            from .record.pyspy import PySpyRecorder, speedscope_path
            self._install(PySpyRecorder(ctx, speedscope_path(os.path.abspath(self.path)),
                                        options.py_spy_rate, self._say))
        self._t0 = time.time()
        for recorder in self._core:
            self._install(recorder)
        rank = ranks.from_env()
        if rank is not None:   # a launcher's rank: which, and where it is if it hangs
            self._install(RankWatch(ctx, rank, lambda: _drain(ctx, ctx.eager_mode, wait=False)))
        ctx.active = True
        _active.append(self)
        if options.eager:
            mode = EagerRecorder(ctx, keeper)
            mode.__enter__()
            ctx.eager_mode = mode
            self._schedule = EagerSchedule(ctx, *options.eager_steps)
            self._schedule.install()
        if options.profile:
            from .record.profiler import ProfileRecorder, profile_dir
            self._install(ProfileRecorder(ctx, profile_dir(os.path.abspath(self.path)),
                                          options.profile_steps, self._say))
        if options.stance:
            self._stance = torch.compiler.set_stance(options.stance)

    def _install(self, recorder) -> None:
        recorder.install()
        self._installed.append(recorder)

    def _abort(self) -> None:
        """A start that failed: what it installed is taken off, the file removed."""
        ctx = self._ctx
        if ctx is not None:
            ctx.active = False
            if ctx.eager_mode is not None and _get_current_dispatch_mode() is ctx.eager_mode:
                ctx.eager_mode.__exit__(None, None, None)
        if self in _active:
            _active.remove(self)
        for recorder in reversed(self._installed):
            try:
                recorder.uninstall()
            except Exception:  # noqa: BLE001, S110 - the first error is the one to tell
                pass
        self._installed = []
        try:
            self._writer.close(status="failed")
        except Exception:  # noqa: BLE001, S110 - the first error is the one to tell
            pass
        for suffix in ("", "-journal"):
            try:
                os.remove(self.path + suffix)
            except OSError:
                pass

    def stop(self) -> None:
        """Take the recorders off and close the run file with how the program
        ended (`runtime_error`, `set_exit`)."""
        ctx = self._ctx
        if ctx is None or not ctx.active:
            return
        # the profiler, then py-spy, while the capture still runs (as they started
        # around it); one that fails to stop must not keep the run file open
        for recorder in reversed([r for r in self._installed if r not in self._core]):
            try:
                recorder.uninstall()
            except Exception as exc:
                ctx.internal_error(f"stopping {type(recorder).__name__}", exc)
        if os.getpid() == self._pid:
            self._backend.finish_checks()
        ctx.active = False
        ctx.progress.end()
        schedule, self._schedule = self._schedule, None
        if schedule is not None:  # the recorder back on (to be taken off), the steps in meta
            try:
                schedule.uninstall()
            except Exception as exc:
                ctx.internal_error("stopping eager schedule", exc)
        mode, ctx.eager_mode = ctx.eager_mode, None
        if mode is not None:
            try:
                if _get_current_dispatch_mode() is mode:
                    mode.__exit__(None, None, None)
            except Exception as exc:
                ctx.internal_error("stopping eager recorder", exc)
        self._writer.before_timed_commit = None
        try:  # every row waiting for its statistics, or held in the recorder
            _drain(ctx, mode, wait=True)
        except Exception as exc:
            ctx.internal_error("value statistics", exc)
        for recorder in reversed(self._core):
            recorder.uninstall()
        self._installed = []
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
        exit_status, status = self._exit
        if ctx.compiled_before_ran:   # the report says what the capture did not see
            self._writer.set_meta(compiled_before={"graphs": self._graphs_before})
        self._writer.close(
            torch_counters=torch_counters, counts=dict(ctx.counts),
            ops_dropped=ctx.ops_dropped, internal_errors=ctx.internal_errors,
            exit_status=exit_status, status=status, wall_s=time.time() - self._t0)
        stance, self._stance = self._stance, None
        if stance is not None:   # the compiler's stance as it was before
            stance.__exit__(None, None, None)

    def _after_fork_child(self) -> None:
        # A forked child (DataLoader workers) must never write to the parent's file.
        if os.getpid() != self._pid:
            self._ctx.active = False
            self._writer.abandon()

    # -- what callers tell it, and ask of it -------------------------------------
    def set_exit(self, exit_status: int, status: str = "complete") -> None:
        """How the program ended (`sys.exit(n)`: n, complete), written when the session stops."""
        self._exit = (exit_status, status)

    def runtime_error(self, exc: BaseException, exit_status: int = 1,
                      status: str = "failed") -> None:
        """The program's own error ended the run (or the captured region)."""
        self._findings.runtime_error(exc)
        self.set_exit(exit_status, status)

    def finish_checks(self) -> None:
        """Run the gradient checks still waiting for a graph's next call, so
        that what is read next sees them."""
        self._backend.finish_checks()

    def flush(self) -> None:
        """Commit what was recorded so far (a reader sees it)."""
        ctx = self._ctx
        if ctx is not None and ctx.active:
            with ctx.own_work():
                _drain(ctx, ctx.eager_mode, wait=True)
        self._writer.flush()

    def record_graph_check(self, check) -> None:
        """What `graphdbg.check_graph` found (`lint.lint_graph`), as findings
        of this run (graphdbg's own work, not the program's)."""
        with self._ctx.own_work():
            self._findings.malformed_graph(None, check, "check_graph")


def _drain(ctx: CaptureContext, mode: EagerRecorder | None, wait: bool) -> None:
    """Rows held back (for their statistics, or by the eager recorder) to the
    writer; with ``wait``, after every statistic has been read back."""
    if mode is not None:
        mode.drain(wait)
    elif ctx.stats_queue is not None:
        ctx.stats_queue.drain(wait)


def _device_description() -> str:
    if torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(0)}"
    return "cpu"
