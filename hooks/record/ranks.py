"""One rank of a distributed job (torchrun, srun): what the run file says of
the rank, and where the rank is when the job hangs or is killed.

A rank that hangs sits in a collective (in an eager op's ``work.wait()``, or
inside a compiled graph) until the process group's timeout, or until the
launcher kills it: SIGTERM, then SIGKILL, and neither lets the program's
Python run again. So a thread commits on the program's behalf: once a
second, when the program has not, it writes what the writer holds and the
rank's position (the last compiled call, whether it is still running, and
the last eager op with its line) into ``meta.position``. The collective
itself releases the GIL while it waits, so the thread gets to run; on a
running rank the thread costs one check a second.

graphdbg never issues a collective: the process group's backend is read
(`torch.distributed.get_backend`, local), never asked of the other ranks.
"""

from __future__ import annotations

import threading
import time

import torch

from graphdbg.core.ranks import RankInfo

from ..context import CaptureContext

INTERVAL_S = 1.0
DRAIN_EVERY_S = 0.25
# A divergence's localisation on one rank, at most: well within the process
# group's timeout (NCCL's default 10 min, gloo's 30), while the others wait
LOCALIZE_BUDGET_S = 120.0


_COLLECTIVE_NAMESPACES = ("_c10d_functional", "c10d_functional", "c10d", "_c10d_functional_autograd")


def graph_collectives(gm: torch.fx.GraphModule) -> list[tuple[str, str]]:
    """The collectives a graph issues, in order, as (node name, op):
    functional collectives, c10d ops, torch.distributed functions, nested
    graphs included."""
    out = []
    for mod in gm.modules():
        graph = getattr(mod, "graph", None)
        if not isinstance(graph, torch.fx.Graph):
            continue
        for node in graph.nodes:
            if node.op != "call_function":
                continue
            t = node.target
            if isinstance(t, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
                name = str(t)   # "_c10d_functional.all_reduce[.default]"
                if name.split(".", 1)[0] in _COLLECTIVE_NAMESPACES and "wait" not in name:
                    out.append((node.name, name))
            elif (getattr(t, "__module__", None) or "").startswith("torch.distributed") \
                    and "wait" not in getattr(t, "__name__", ""):
                out.append((node.name, f"{t.__module__}.{getattr(t, '__name__', '?')}"))
    return out


def _backend() -> str | None:
    dist = torch.distributed
    try:
        if dist.is_available() and dist.is_initialized():
            return str(dist.get_backend())
    except Exception:  # noqa: BLE001 - a group being torn down: ask again later
        return None
    return None


class RankWatch:
    """Installed by the session when the process is a launcher's rank."""

    def __init__(self, ctx: CaptureContext, info: RankInfo, drain=None) -> None:
        """``drain()``: hands what the recorders hold to the writer, from the
        program's thread (the rows waiting for statistics, the eager rows)."""
        self.ctx = ctx
        self.info = info
        self._drain = drain
        self._drained = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._backend: str | None = None
        self._last: tuple | None = None
        self._since = time.time()

    def install(self) -> None:
        self.ctx.writer.set_meta(**self.info.meta())
        self.ctx.localize_budget_s = LOCALIZE_BUDGET_S
        if self._drain is not None:
            self.ctx.on_collective = self.before_collective
        self._thread = threading.Thread(target=self._loop, name="graphdbg-rank-watch", daemon=True)
        self._thread.start()

    def before_collective(self) -> None:
        """The program is about to wait in a collective (an eager c10d op, a
        compiled graph that issues one), where it may hang: what the
        recorders hold goes to the writer now, so that the watcher's next
        commit has it (with statistics waiting on a device, at most every
        DRAIN_EVERY_S: DDP's gradient hooks allreduce once per bucket)."""
        now = time.monotonic()
        queue = self.ctx.stats_queue
        # a drain that starts device reductions (DDP's buckets on a GPU) waits
        # DRAIN_EVERY_S; a host-only one is cheap and always runs: what ran
        # before a collective is written, however fast the program got there
        if now - self._drained < DRAIN_EVERY_S and queue is not None and queue.device_work:
            return
        self._drained = now
        with self.ctx.own_work():
            try:
                self._drain()
            except Exception as exc:  # noqa: BLE001 - never the program's problem
                self.ctx.internal_error("rank watch", exc)

    def uninstall(self) -> None:
        self.ctx.on_collective = None
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.tick(commit=False)   # the session's close commits it

    def _loop(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            try:
                self.tick(commit=True)
            except Exception as exc:  # noqa: BLE001 - never the program's problem
                self.ctx.internal_error("rank watch", exc)

    def tick(self, commit: bool) -> None:
        """Record the backend once it is known and the position when it moved;
        with ``commit``, commit what the program has not for a second."""
        writer = self.ctx.writer
        if self._backend is None:
            backend = _backend()
            if backend is not None:
                self._backend = backend
                writer.set_meta(dist_backend=backend)
        key = self.position()
        if key != self._last:
            self._last = key
            self._since = time.time()
            call, op = key
            position: dict = {"since": self._since}
            if call is not None:
                position["call"] = {"graph_id": call[0], "call_idx": call[1], "running": call[2],
                                    "raised": call[3]}
            if op is not None:
                position["op"] = {"op": op[0], "phase": op[1], "user_frame": op[2]}
            writer.set_meta(position=position)
        if commit and writer.stale(INTERVAL_S):
            writer.flush()

    def position(self) -> tuple:
        """Where the rank is: the last compiled call, (graph id, call index,
        still running?, raised?), and the last eager op recorded, (op, phase,
        user frame id); None for what it has not done."""
        ctx = self.ctx
        running, last = ctx.in_call, ctx.last_call
        if running is not None:
            call = (running[0], running[1], True, False)
        elif last is not None:
            call = (last[0], last[1], False, last[2])
        else:
            call = None
        return call, ctx.last_op
