"""Sizes an export was told are dynamic, and the sizes it fixed to a number.

What the user declared: ``dynamic_shapes`` (``Dim("batch")``, ``Dim.AUTO``,
``Dim.DYNAMIC``; by input name or position) or the ONNX exporter's
``dynamic_axes``. What the export did: while it runs, ShapeEnv's
``_set_replacement`` is watched, and a size replaced by a number is kept with
torch's reason and the user's line on the stack (a non-strict export runs the
forward as Python, so the line that fixed it is there). hooks/record/exports.py
joins the two: a declared size fixed silently is a warning at that line, a
named ``Dim`` fixed to a number (torch's constraint error) is placed there.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any

import torch

from graphdbg.core.sourcemap import is_internal


class Specializations:
    """Sizes replaced by a number in any ShapeEnv while an export runs: the
    symbol, the number, torch's reason and the user's line on the stack (a
    non-strict export runs the forward as Python: the line is there)."""

    def __init__(self) -> None:
        self.seen: list[dict] = []
        self._orig = None

    def __enter__(self):
        from torch.fx.experimental import symbolic_shapes as ss
        orig = self._orig = ss.ShapeEnv._set_replacement
        seen = self.seen

        @functools.wraps(orig)
        def _set_replacement(env, a, tgt, msg):
            try:
                if getattr(tgt, "is_number", False) and not any(s["symbol"] == str(a) for s in seen):
                    f = sys._getframe(1)
                    while f is not None and is_internal(f.f_code.co_filename):
                        f = f.f_back
                    seen.append({"symbol": str(a), "value": int(tgt), "reason": str(msg),
                                 "site": (f.f_code.co_filename, f.f_lineno, f.f_code.co_name)
                                 if f is not None else None,
                                 "source": symbol_source(env, a)})
            except Exception:
                pass
            return orig(env, a, tgt, msg)

        ss.ShapeEnv._set_replacement = _set_replacement
        return self

    def __exit__(self, *exc) -> None:
        from torch.fx.experimental import symbolic_shapes as ss
        ss.ShapeEnv._set_replacement = self._orig


def symbol_source(env, sym) -> str | None:
    """`L['x'].size()[0]` for the input size a symbol stands for."""
    try:
        sources = env.var_to_sources.get(sym) or []
        if not sources:
            return None
        name = sources[0].name   # a method in some torch versions, a property in others
        return str(name() if callable(name) else name)
    except Exception:
        return None


def declared_dynamic(dynamic_shapes: Any, dynamic_axes: Any, names: list[str]) -> dict[str, str]:
    """{`L['x'].size()[0]`-like source suffix `x.size()[0]`: how it was declared} for each
    size the user declared dynamic."""
    out: dict[str, str] = {}
    if isinstance(dynamic_axes, dict):
        for name, axes in dynamic_axes.items():
            for ax in (axes if isinstance(axes, (list, tuple)) else list(axes or {})):
                out[f"{name}.size()[{ax}]"] = "dynamic_axes"
    spec = dynamic_shapes
    if isinstance(spec, (list, tuple)):
        spec = dict(zip(names, spec))
    if isinstance(spec, dict):
        for name, dims in spec.items():
            items = dims.items() if isinstance(dims, dict) else \
                enumerate(dims) if isinstance(dims, (list, tuple)) else ()
            for ax, d in items:
                if d is None:
                    continue
                text = repr(d)
                if "STATIC" in text:
                    continue
                out[f"{name}.size()[{ax}]"] = "Dim.AUTO" if "AUTO" in text else \
                    "Dim.DYNAMIC" if "DYNAMIC" in text else f"Dim({getattr(d, '__name__', '?')!r})"
    return out


def input_names(model: Any, args: tuple) -> list[str]:
    try:
        fn = model.forward if isinstance(model, torch.nn.Module) else model
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return params[:max(len(args), len(params))]
    except (TypeError, ValueError):
        return []
