"""Sizes an export was told are dynamic, the sizes it fixed to a number, and
the ranges it narrowed.

What the user declared: ``dynamic_shapes`` (``Dim("batch")``, ``Dim.AUTO``,
``Dim.DYNAMIC``; by input name or position) or the ONNX exporter's
``dynamic_axes``. What the export did: while it runs, ShapeEnv's
``_set_replacement`` is watched, and a size replaced by a number is kept with
torch's reason, the aten op torch was running and the user's stack there
(hooks/placement/exports.py: the live frames of a non-strict export, Dynamo's
traced stack of a strict one); the guards torch adds are kept with their
user's stack too (`ShapeSites`). hooks/record/exports.py joins the two: a
declared size fixed silently is a warning at that line, a named ``Dim`` fixed
to a number (torch's constraint error) or a ``dynamic_axes`` size fixed
(torch.onnx's "inferred a static shape") is placed there, a ``Dim`` range a
guard narrows at the guard's line (`narrowed`: the ONNX program keeps the
declared range, which ONNX Runtime does not check).
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any

import torch

from ..placement.exports import ShapeSites, current_op, shape_stack
from ..placement.guards import named_inputs
from ..placement.nodes import node_frames


class Specializations:
    """Sizes replaced by a number in any ShapeEnv while an export runs (the
    symbol, the number, torch's reason, the op, the user's stack and its
    innermost frame as ``site``), and the guards' sites (``sites``)."""

    def __init__(self, names: list[str] | None = None) -> None:
        self.seen: list[dict] = []
        self.sites = ShapeSites()
        self.names = list(names or ())   # the inputs' names (a strict export's sources are flat)
        self._orig = None

    def __enter__(self):
        from torch.fx.experimental import symbolic_shapes as ss
        orig = self._orig = ss.ShapeEnv._set_replacement
        seen, names = self.seen, self.names

        @functools.wraps(orig)
        def _set_replacement(env, a, tgt, msg):
            try:
                if getattr(tgt, "is_number", False) and not any(s["symbol"] == str(a) for s in seen):
                    stack = shape_stack()
                    seen.append({"symbol": str(a), "value": int(tgt), "reason": str(msg),
                                 "site": tuple(stack[-1]) if stack else None,
                                 "source": named_inputs(symbol_source(env, a) or "", names)
                                 or None, "op": current_op(),
                                 "stack": stack})
            except Exception:
                pass
            return orig(env, a, tgt, msg)

        ss.ShapeEnv._set_replacement = _set_replacement
        self.sites.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        from torch.fx.experimental import symbolic_shapes as ss
        self.sites.__exit__(*exc)
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


def _input_sizes(ep) -> list[tuple[str, Any, int | None]]:
    """(`x.size()[1]`, its symbol, its example's size) for each symbolic size
    of the exported program's user inputs."""
    out = []
    inputs = set(getattr(ep.graph_signature, "user_inputs", ()) or ())
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        if node.op != "placeholder" or node.name not in inputs or not isinstance(val, torch.Tensor):
            continue
        for i, d in enumerate(val.shape):
            if isinstance(d, torch.SymInt) and d.node.expr.is_Symbol:
                hint = d.node.hint if d.node.hint is not None else \
                    d.node.shape_env.var_to_val.get(d.node.expr)
                out.append((f"{node.name}.size()[{i}]", d.node.expr,
                            int(hint) if hint is not None else None))
    return out


def _largest(holds, low: int, high: int) -> int:
    """The largest size in [low, high) for which ``holds`` (true at low, false at high)."""
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if holds(mid) else (low, mid)
    return low


def _same_line(a, b) -> bool:
    return (os.path.abspath(a[0]), a[1]) == (os.path.abspath(b[0]), b[1])


def _made_at(ep, lengths: set[str]) -> list:
    """The user frames (a node's ``stack_trace``: a non-strict export names
    the forward's line) of the exported program's first node whose value has
    one of ``lengths`` in its shape: the op that made the short length."""
    if not lengths:
        return []
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and any(
                isinstance(d, torch.SymInt) and any(m in str(d.node.expr) for m in lengths)
                for d in val.shape):
            frames = node_frames(node)
            if frames:
                return frames
    return []


def narrowed(ep, sites: ShapeSites, declared: dict[str, str]) -> list[dict]:
    """Sizes declared dynamic up to a bound (``Dim("t", max=100)``) whose
    range a guard of the code narrows, while the exported program keeps the
    declared range (torch.onnx's capture turns such guards into conditions the
    ONNX program never checks): the size, its declared and its supported
    upper bound, the guard, and the user's stack
    where it was added (the first such line; the bound: the loosest guard
    there, as torch suggests it). A guard on a slice's length
    (``Min(32, s0)``: ``keys[:t]`` of 32 rows) is the slice's: ``stack`` is
    where the length was first guarded (the slicing line), ``used`` where the
    guard that narrows was added (the op that needs the lengths equal)."""
    import sympy
    out = []
    for size, sym, hint in _input_sizes(ep):
        how = declared.get(size)
        vr = ep.range_constraints.get(sym)
        if how is None or vr is None or hint is None:
            continue
        try:
            top = int(vr.upper)
        except (TypeError, ValueError, OverflowError):
            continue   # no bound declared: the code's own limit is the eager model's too
        parsed = []
        for text, stack in sites.guards.items():
            try:
                parsed.append((sympy.sympify(text, locals={str(sym): sym}), text, stack))
            except Exception:
                continue   # a guard sympy cannot read by itself
        found: dict[tuple, list] = {}   # innermost site -> [(bound, guard, stack)]
        for expr, text, stack in parsed:
            def holds(v: int, expr=expr) -> bool:
                return bool(expr.subs(sym, v))
            try:
                if expr.free_symbols != {sym} or not stack or not holds(hint) or holds(top):
                    continue
                found.setdefault(tuple(stack[-1])[:3], []).append(
                    (_largest(holds, hint, top), expr, stack))
            except Exception:
                continue   # not decidable by substitution (FloorDiv, Mod...)
        if not found:
            continue
        bound, expr, used = max(next(iter(found.values())), key=lambda b: b[0])
        lengths = {str(m) for m in expr.atoms(sympy.Min)}   # sympy's Min here, torch's in the graph
        before = parsed[:next(i for i, p in enumerate(parsed) if p[0] is expr)]
        origin = next((st for e, _, st in before
                       if st and {str(m) for m in e.atoms(sympy.Min)} & lengths), None) \
            or _made_at(ep, lengths) or used
        out.append({"size": size, "symbol": str(sym), "declared": how, "max": bound,
                    "declared_max": top,
                    "guard": f"{size} <= {bound}", "expr": str(expr), "stack": origin,
                    "used": None if _same_line(origin[-1], used[-1]) else used})
    return out
