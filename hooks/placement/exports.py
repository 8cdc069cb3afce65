"""Where an export's shape decisions were made in the user's code.

While an export traces the program, torch's shape environment narrows,
fixes and guards sizes at no line of the program's own: a guard's ``sloc``
names torch's file (the fake slice's ``_compute_slice_index``, a contiguity
check in prims), its user location is empty in a non-strict export, and a
size fixed to a number is seen at the end of tracing. The program's line is
on the stack only at that moment: a non-strict export runs the forward as
Python (its frames are live), a strict one (Dynamo) keeps the user's stack
in its ``TracingContext``. `ShapeSites` listens to torch's structured trace
(a ``logging.Handler`` on ``torch.__trace``, as the capture's trace handler)
while an export runs and keeps that stack for each guard, runtime assertion
and unbacked symbol; `shape_stack` is the stack, `current_op` the aten op
torch was running.

`strategies` reads which capture strategies ``torch.onnx.export`` tried
(``_capture_strategies``: non-strict, strict, draft export) and how each
failed, from its traceback.
"""

from __future__ import annotations

import logging
import os

import torch

from graphdbg.core.sourcemap import Frame

from .internal import is_internal
from .nodes import user_frames
from .stack import outward, user_stack


def shape_stack() -> list[Frame]:
    """The user's stack where the export is tracing now, outermost first: the
    live user frames (a non-strict export runs the forward: the line being
    traced is the innermost), then under Dynamo the user frames of the code
    it is tracing (a strict export: not live, in its ``TracingContext``)."""
    live = user_stack(1)
    try:
        from torch._guards import TracingContext
        traced = [f if f.file.startswith("<") else f._replace(file=os.path.abspath(f.file))
                  for f in user_frames(TracingContext.extract_stack() or [])]
    except Exception:
        traced = []
    return live + [f for f in traced if f not in live]


def current_op() -> str | None:
    """The aten op torch is running now for the program's line
    (`aten.view.default`): the innermost frame outwards, short of the user's
    own, whose ``func`` is an op overload (the fake tensor's dispatch, a meta
    function, a decomposition); None when the line itself decides (``if
    x.shape[0] == 4``)."""
    for f in outward():
        if not is_internal(f.f_code.co_filename):
            return None
        func = f.f_locals.get("func")
        if isinstance(func, torch._ops.OpOverload):
            return str(func)
    return None


class ShapeSites(logging.Handler):
    """While an export runs: the user's stack (`shape_stack`) when torch adds
    each shape guard or runtime assertion (by its expression's text, as the
    shape environment keeps it: ``s27 <= 64``) and when it makes each unbacked
    symbol (``u0``). A context manager; the first site of a text is kept."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.guards: dict[str, list[Frame]] = {}
        self.unbacked: dict[str, list[Frame]] = {}

    def __enter__(self) -> ShapeSites:
        from torch._logging._internal import trace_log
        trace_log.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        from torch._logging._internal import trace_log
        trace_log.removeHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        md = getattr(record, "metadata", None)
        if not isinstance(md, dict):
            return
        try:
            for event, table, field in (("guard_added_fast", self.guards, "expr"),
                                        ("create_unbacked_symbol", self.unbacked, "symbol")):
                if event in md:
                    key = str(md[event].get(field))
                    if key not in table:
                        table[key] = shape_stack()
        except Exception:
            pass   # an observer: never the export's error

    def guard_stack(self, expr) -> list[Frame]:
        """The user's stack where the guard (a sympy expression or its text) was added."""
        return self.guards.get(str(expr)) or []


def strategies(exc: BaseException) -> list[tuple[str, BaseException | None]]:
    """The capture strategies ``torch.onnx.export`` tried before it gave up,
    in order, each with its exception: its exporter keeps the results
    (``failed_results``) in the frame that raised ``TorchExportError``."""
    tb = exc.__traceback__
    found: list = []
    while tb is not None:
        results = tb.tb_frame.f_locals.get("failed_results")
        if isinstance(results, list) and all(hasattr(r, "strategy") for r in results):
            found = results
        tb = tb.tb_next
    return [(str(r.strategy), getattr(r, "exception", None)) for r in found]


def report_frames(report, data: dict, interned: dict | None = None) -> list[Frame]:
    """The user's frames, outermost first, of a `torch.export.draft_export`
    report entry (a failure's ``data``): its ``user_stack`` names files by
    their index in the report's ``str_to_filename``, or, for files interned
    before the export began, in torch's intern table (``interned``)."""
    names = {**(interned or {}), **(getattr(report, "str_to_filename", None) or {})}
    frames = []
    for f in data.get("user_stack") or ():
        file = names.get(f.get("filename"), f.get("filename"))
        if not isinstance(file, str) or not f.get("line"):
            continue
        file = file if file.startswith("<") else os.path.abspath(file)
        frames.append(Frame(file, int(f["line"]), str(f.get("name") or "?")))
    return user_frames(frames)
