"""Where a compile or a compiled call failed, in the user's code.

Errors from backends (BackendCompilerFailed, InductorError, a custom pass)
name no user line. The FX node that was being processed when the error was
raised is still reachable from the traceback's frames (a backend's loop
variable, inductor's ``GraphLowering.current_node``, an Interpreter's
``run_node(n)``), and nodes carry the user's ``stack_trace``.
"""

from __future__ import annotations

import torch
import torch.fx

_NODE_LOCALS = ("n", "node", "current_node", "fx_node", "origin_node")


def exception_chain(exc: BaseException) -> list[BaseException]:
    """exc, then what it wraps (inner_exception, __cause__, __context__)."""
    chain, seen = [], set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = getattr(e, "inner_exception", None) or e.__cause__ or e.__context__
    return chain


def failing_node(exc: BaseException) -> torch.fx.Node | None:
    """The FX node being processed where the innermost error was raised."""
    for e in reversed(exception_chain(exc)):
        frames = []
        tb = e.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        for f in reversed(frames):
            local = f.f_locals
            for name in _NODE_LOCALS:
                v = local.get(name)
                if isinstance(v, torch.fx.Node) and v.op not in ("output", "placeholder"):
                    return v
            owner = local.get("self")
            v = getattr(owner, "current_node", None) if owner is not None else None
            if isinstance(v, torch.fx.Node) and v.op not in ("output", "placeholder"):
                return v
    return None


def headline(exc: BaseException) -> str:
    """`Type: first line` of the innermost error, under the wrapper's name."""
    inner = exception_chain(exc)[-1]
    first = next((ln.strip() for ln in str(inner).splitlines() if ln.strip()), "")
    text = f"{type(inner).__name__}: {first}" if first else type(inner).__name__
    if inner is not exc:
        text = f"{type(exc).__name__} ({text})"
    return text[:500]
