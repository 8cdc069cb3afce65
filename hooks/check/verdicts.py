"""A divergence's verdict where more than numbers decide it: one rule for
every check (compiled graphs, exported programs, ONNX).

- ``random``: only where a draw happened. A node drew when the reference
  ran it and its generator moved (`subgraphs.DrawWatch`: an op aten tags
  ``nondeterministic_seeded`` that actually drew; dropout in eval mode, SDPA
  with ``dropout_p=0`` or a fully masked row draw nothing). Where nothing
  replays the draws (ONNX Runtime), a node fed by one that drew differs
  because of the draws too (``upstream``).
- ``nonfinite``: NaN/Inf on one side only (`numerics.compare_values`),
  placed at its origin: eager's NaN/Inf traced back to the node that first
  made them, also when a later node turned them finite again (fp16
  ``x.pow(2).mean()`` overflows, ``rsqrt`` makes it 0: the first node that
  differs is downstream of the overflow, and both sides' rounded values at
  the overflow may be Inf).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import torch
import torch.fx

from .interpreter import NAN, INF
from .numerics import ValueDiff
from .subgraphs import is_random


def drew(node: torch.fx.Node, drawn: set[str] | None = None) -> bool:
    """Whether ``node`` drew random numbers when the reference ran it:
    ``drawn`` (names of the nodes that did), else the node's mark
    (`subgraphs.mark_random`)."""
    return node.name in drawn if drawn is not None else is_random(node)


def _upstream_drew(node: torch.fx.Node, drawn: set[str] | None) -> bool:
    seen, stack = set(), list(node.all_input_nodes)
    while stack:
        cur = stack.pop()
        if cur in seen:
            continue
        seen.add(cur)
        if drew(cur, drawn):
            return True
        stack.extend(cur.all_input_nodes)
    return False


def kind(diff_kind: str, node: torch.fx.Node | None, drawn: set[str] | None = None,
         upstream: bool = False) -> str:
    """The verdict of a difference of ``diff_kind`` (`numerics`) at ``node``:
    ``random`` when the node drew (or, ``upstream``, a node feeding it drew:
    nothing replayed the draws); precision, nonfinite, shape and dtype stay
    what the numbers say."""
    if node is None or diff_kind not in ("miscompile", "random"):
        return diff_kind
    if drew(node, drawn) or (upstream and _upstream_drew(node, drawn)):
        return "random"
    return "miscompile" if diff_kind == "random" else diff_kind


def as_random(d: ValueDiff, node: torch.fx.Node | None, drawn: set[str] | None = None,
              upstream: bool = False) -> ValueDiff:
    k = kind(d.kind, node, drawn, upstream)
    return d if k == d.kind else dataclasses.replace(d, kind=k)


def _finite(value: Any) -> bool:
    return not isinstance(value, torch.Tensor) or not value.is_floating_point() \
        or bool(torch.isfinite(value).all())


def eager_origin(node: torch.fx.Node, flags: dict[str, int], bit: int) -> torch.fx.Node | None:
    """The node where eager's NaN/Inf (``bit``) that reach ``node`` first
    appear: up through the inputs that carry them, to a node none of whose
    inputs does. None when they arrive in the graph's inputs (not this graph's)."""
    cur, seen = node, set()
    while cur not in seen:
        seen.add(cur)
        src = next((i for i in cur.all_input_nodes if flags.get(i.name, 0) & bit), None)
        if src is None:
            return None if cur.op in ("placeholder", "get_attr") else cur
        cur = src
    return None


def nonfinite_origin(node: torch.fx.Node, d: ValueDiff, flags: dict[str, int],
                     judge_value: Callable[[str], Any]) -> tuple[torch.fx.Node, ValueDiff,
                                                                  torch.fx.Node | None] | None:
    """Eager NaN/Inf behind a divergence ``d`` first found at ``node``
    (``flags``: the reference's NaN/Inf bits per node as it ran):
    (the node where eager first made them, the divergence as said there,
    the node that turned them finite again or None). None when the
    divergence is not about NaN/Inf in eager."""
    if d.kind == "nonfinite":
        if d.side != "eager":
            return None
        bit = NAN if d.value == "NaN" else INF
        origin = eager_origin(node, flags, bit) or node
        consumed = None
    elif d.kind == "precision" and not flags.get(node.name, 0):
        # eager's value here is finite, and further from float64 than
        # compiled's, made from NaN/Inf eager fed it (rsqrt(inf) = 0): an
        # overflow float64 does not have (a causal mask's -inf, float64 has too)
        ins = [flags.get(i.name, 0) for i in node.all_input_nodes]
        if not any(ins):
            return None
        bit = INF if any(b & INF for b in ins) else NAN
        origin = eager_origin(node, flags, bit)
        if origin is None or judge_value(origin.name) is None \
                or not _finite(judge_value(origin.name)):
            return None
        consumed = node
    else:
        return None
    if origin is node:
        return node, d, None
    j = judge_value(origin.name)
    # the numbers of the node that differs belong to it, not to the origin
    said = dataclasses.replace(
        d, kind="nonfinite", side="eager", value="NaN" if bit == NAN else "Inf",
        fp64_finite=None if j is None else _finite(j), max_abs=math.inf, max_rel=math.inf,
        eager_vs_fp64=None, compiled_vs_fp64=None)
    return origin, said, consumed
