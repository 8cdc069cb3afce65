"""The findings writer: every finding of a capture is written here, from
plain data (graph id, FX node, user frames, exception, localisation), by the
recorders that observed it (trace.py, backend.py, divergence.py, exports.py)
and by the runner for the program's own uncaught error.

Each finding sits at the user's line: the deepest frame outside torch and
graphdbg (a library such as transformers keeps its own line, with the user's
call in the stack); for an FX node, its ``stack_trace``, or the line of the
user's pass that created it.

Every exception recorded here is remembered by id (with its type and first
line): when the program then dies of it, the finding gets the program's
stack instead of a second, `runtime_error`, finding.

`Findings` is this sink (`_add`, `_update`, what it wrote, the exceptions
it recorded) with one mixin per kind of finding: recompiles.py, failures.py,
checks.py and exported.py.
"""

from __future__ import annotations


from graphdbg.runfile.details import Detail
from graphdbg.runfile.writer import RunWriter
from graphdbg.core.sourcemap import Frame

from .. import compat
from ..context import CaptureContext
from .checks import Checks
from ..placement.guards import exception_chain
from ..placement.nodes import calls_into_torch
from .exported import ExportFindings
from .failures import Failures
from .recompiles import Recompiles


_MARK = "__graphdbg_finding__"  # a recorded exception's finding key


class Findings(Recompiles, Failures, Checks, ExportFindings):
    """The sink every mixin writes through; one per capture."""

    def __init__(self, ctx: CaptureContext) -> None:
        self.ctx = ctx
        self.writer: RunWriter = ctx.writer
        # exceptions already recorded that take no attribute, by id (with their
        # type and text, to rule out a reused id): not recorded again
        self._recorded_excs: dict[int, tuple[str, str, str]] = {}
        # stack, detail (its details.py record) and message of each finding written, by key
        # (the run file is write-only here)
        self._written: dict[str, dict] = {}
        super().__init__()

    # -- writing -------------------------------------------------------------------------
    def _add(self, key: str, *, detail: Detail, **fields) -> None:
        """A finding; a repeat of the same key only counts up."""
        self.writer.diagnostic(key, detail=detail, **fields)
        self._written.setdefault(key, {"stack": fields.get("stack"), "detail": detail,
                                       "message": fields.get("message")})

    def _update(self, key: str, **fields) -> None:
        self.writer.update_diagnostic(key, **fields)
        seen = self._written.get(key)
        if seen is not None:
            seen.update({k: fields[k] for k in ("stack", "detail", "message") if k in fields})

    def _remember(self, exc: BaseException | None, key: str) -> None:
        """Note that ``exc`` (and what wraps it) is recorded under ``key``: on
        the exception itself, since its id is reused once it is freed (and
        holding it would keep its frames alive); by id with its type and text
        for an exception that takes no attribute."""
        if exc is None:
            return
        try:
            # a dict: nested sessions (graphdbg.capture in graphdbg run) each mark it
            marks = getattr(exc, _MARK, None) or {}
            marks[id(self)] = key
            setattr(exc, _MARK, marks)
            return
        except (AttributeError, TypeError):
            pass
        if len(self._recorded_excs) > 200:
            self._recorded_excs.clear()
        self._recorded_excs[id(exc)] = (key, type(exc).__name__, _first_line(exc))

    def recorded_as(self, exc: BaseException) -> str | None:
        """The diagnostic key an exception (or one it wraps, or one that wraps
        it) was recorded under, if it already was."""
        for e in exception_chain(exc):
            key = (getattr(e, _MARK, None) or {}).get(id(self))
            if key is not None:
                return key
            hit = self._recorded_excs.get(id(e))
            # (Dynamo appends advice to messages on the way out: first line only)
            if hit is not None and hit[1:] == (type(e).__name__, _first_line(e)):
                return hit[0]
        return None

    def uncaught(self, exc: BaseException, key: str) -> None:
        """The program died of an error already recorded: add the program's
        stack to that finding instead of recording it twice."""
        w = self.writer
        row = self._written.get(key)
        if row is None:
            return
        outer = calls_into_torch(exc)  # the program's frames down to its call into torch
        inner = [Frame(*f) for f in w.stack_frames(row["stack"])] if row.get("stack") else []
        if outer and outer[-1] in inner:
            # the finding's stack already holds the program's call (the caller's
            # whole stack, when only torch's code was compiled): from the program's frame on
            merged = inner[inner.index(outer[0]):] if outer[0] in inner else inner
        else:
            merged = outer + [f for f in inner if f not in outer]
        stack = w.stack_id(merged) or row.get("stack")
        # the error the finding is about, not torch's error in cleaning up after it
        cause = compat.unwrap_cleanup_error(exc)
        detail = row["detail"].updated(uncaught=True, exception=type(cause).__name__)
        self._update(key, stack=stack, detail=detail)


def _first_line(exc: BaseException) -> str:
    return str(exc).split("\n", 1)[0][:200]
