"""The capture context: what every recorder shares, and nothing else.

Recorders get a `CaptureContext` and a `Findings` writer (hooks/findings/writer.py),
never the session that wires them:

- the options (`graphdbg.core.options.CaptureOptions`) and the run-file writer;
- ids, the clock and event counts;
- the graphs recorded so far (`GraphInfo`: what later events need to know
  of a graph: compile id, backend, function and line);
- two scopes that keep the capture an observer:
  `compiled_code()` while the program's compiled code runs (its aten ops are
  not eager work), and `own_work()` while graphdbg itself works (checks,
  reference runs, localisation compiles: neither eager ops nor compile
  events of the program);
- internal errors: graphdbg never breaks the program; what went wrong is kept
  in the run file.
"""

from __future__ import annotations

import collections
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from torch.utils._python_dispatch import _get_current_dispatch_mode, _pop_mode, _push_mode

from graphdbg.core.options import CaptureOptions
from graphdbg.runfile.writer import RunWriter

from .progress import BisectProgress, CompileProgress

MAX_INTERNAL_ERRORS = 50


@dataclass
class GraphInfo:
    """A recorded graph as later events see it (the run file holds the rest)."""
    id: int
    compile_id: str | None = None
    backend: str | None = None
    code_name: str | None = None
    code_file: str | None = None
    code_line: int | None = None
    backend_time_s: float | None = None  # the backend's own compile, without graphdbg's recording
    node_frames: dict = field(default_factory=dict)  # node name -> its user frame id (this run's)
    metrics_seen: bool = False  # its compile's compilation_metrics arrived (its compile ended)


class _EagerPause:
    """Pops the eager recorder off the dispatch-mode stack (when it is on top)
    and puts it back on exit; ``mute`` also silences compile events."""

    __slots__ = ("ctx", "mute", "popped")

    def __init__(self, ctx: "CaptureContext", mute: bool) -> None:
        self.ctx = ctx
        self.mute = mute
        self.popped = None

    def __enter__(self) -> None:
        ctx = self.ctx
        ctx.eager_paused += 1
        if self.mute:
            ctx.own_work_depth += 1
        mode = ctx.eager_mode
        if mode is not None:
            try:
                if _get_current_dispatch_mode() is mode:
                    _pop_mode()
                    self.popped = mode
            except Exception as exc:
                ctx.internal_error("pausing eager recorder", exc)

    def __exit__(self, *exc_info: Any) -> None:
        ctx = self.ctx
        ctx.eager_paused -= 1
        if self.mute:
            ctx.own_work_depth -= 1
        if self.popped is not None:
            _push_mode(self.popped)
            self.popped = None


class CaptureContext:
    def __init__(self, writer: RunWriter, options: CaptureOptions) -> None:
        self.writer = writer
        self.options = options
        self.active = False
        self.counts: collections.Counter = collections.Counter()
        self.ops_dropped = 0
        self.internal_errors: list[str] = []
        self.graphs: dict[int, GraphInfo] = {}
        # read on every eager op: plain ints, changed only by the scopes below
        self.eager_paused = 0
        self.own_work_depth = 0
        self.eager_mode = None  # the session's EagerRecorder, when eager ops are recorded
        # compiled code from before the capture ran in it (the eager recorder met it)
        self.compiled_before_ran = False
        # the caller compiles with a backend of its own (graphdbg.compare): the
        # recompile a different backend callable causes is its, not the program's
        self.own_backend = False
        self.call_listeners: list = []  # called with a graph id after each compiled call (steps)
        self.stats_queue = None  # the StatsQueue of value statistics (--values health and up)
        # where the program is (a rank's position, record/ranks.py): plain stores
        self.in_call: tuple | None = None    # (graph id, call index) of a running compiled call
        self.last_call: tuple | None = None  # the last one that ended: (graph id, call index, raised?)
        self.last_op: tuple | None = None    # (op, phase, user frame id) of the last eager op
        self.on_collective = None  # a rank's: called before it may wait in a collective
        self.localize_budget_s: float | None = None  # a rank's: the others wait meanwhile
        self.progress = CompileProgress(options.progress)
        self._seq = itertools.count(1)
        self._graph_ids = itertools.count(1)
        self._t0 = time.monotonic()

    # -- ids, clock, counts ------------------------------------------------------
    def next_seq(self) -> int:
        return next(self._seq)

    def new_graph(self) -> GraphInfo:
        info = GraphInfo(next(self._graph_ids))
        self.graphs[info.id] = info
        return info

    def graphs_for_compile(self, compile_id: str | None) -> list[GraphInfo]:
        """The graphs of the compile now ending under this id: compile ids
        start again at 0/0 after torch._dynamo.reset(), so graphs whose
        compile already ended are not this one's."""
        return [g for g in self.graphs.values()
                if g.compile_id == compile_id and not g.metrics_seen]

    def now(self) -> float:
        return time.monotonic() - self._t0

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def drop_op(self) -> None:
        """An eager op past --max-ops: only summarised."""
        self.ops_dropped += 1

    def internal_error(self, where: str, exc: BaseException) -> None:
        self.counts["internal_errors"] += 1
        if len(self.internal_errors) < MAX_INTERNAL_ERRORS:
            self.internal_errors.append(f"{where}: {type(exc).__name__}: {exc}")

    # -- scopes -------------------------------------------------------------------
    def compiled_code(self) -> _EagerPause:
        """The program's compiled code runs: its ops are not eager work."""
        return _EagerPause(self, mute=False)

    def own_work(self) -> _EagerPause:
        """graphdbg's own work: not the program's eager ops, and the compiles it
        makes are not the program's compile events."""
        return _EagerPause(self, mute=True)

    @property
    def in_own_work(self) -> bool:
        return self.own_work_depth > 0

    def bisect_progress(self, title: str) -> BisectProgress:
        return BisectProgress(self.progress.enabled, title)
