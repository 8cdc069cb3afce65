"""Gradients of a graph's inputs for one upstream gradient, compiled against
eager against float64.

The upstream gradient comes from a private generator (the program's RNG is
never drawn from); inputs are cloned, so the program's tensors and their
``.grad`` are untouched.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.fx

from .interpreter import RecordingInterpreter
from .numerics import Tolerance, ValueDiff, finding, worst
from .subgraphs import clone, flat, preserved_rng, set_rng


def input_gradients(run: Callable, inputs: list, seed: int, float64: bool = False) -> list | None:
    """Gradients of the inputs that require grad (None when none does, or no
    output needs a gradient)."""
    args, leaves = [], []
    for a in inputs:
        if isinstance(a, torch.Tensor) and a.requires_grad and a.is_floating_point():
            leaf = clone(a)
            if float64:
                leaf = leaf.to(torch.float64)
            leaf.requires_grad_(True)
            leaves.append(leaf)
            args.append(leaf)
        else:
            args.append(clone(a) if isinstance(a, torch.Tensor) else a)
    if not leaves:
        return None
    with torch.enable_grad():
        out = run(*args)
    outs = [o for o in flat(out)
            if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()]
    if not outs:
        return None
    gen = torch.Generator().manual_seed(seed)
    ups = [torch.randn(tuple(o.shape), generator=gen, dtype=torch.float64).to(o.dtype) for o in outs]
    grads = torch.autograd.grad(outs, leaves, ups, allow_unused=True)
    return [g if g is not None else torch.zeros_like(l) for g, l in zip(grads, leaves)]


def gradients_diverge(compiled: Callable, gm: torch.fx.GraphModule, inputs: list, rng: tuple,
                      tol: Tolerance) -> ValueDiff | None:
    """The worst difference between the gradients of ``compiled`` and of
    ``gm`` run eagerly (judged in float64), if any is a finding."""
    with preserved_rng():
        set_rng(rng)
        g_c = input_gradients(compiled, inputs, 0)
        set_rng(rng)
        g_e = input_gradients(lambda *a: RecordingInterpreter(gm, health=False).run(*a), inputs, 0)
        set_rng(rng)
        try:
            g_j = input_gradients(lambda *a: RecordingInterpreter(gm, float64=True).run(*a),
                                  inputs, 0, float64=True)
        except Exception:
            g_j = None
    if g_c is None or g_e is None:
        return None
    found = worst((finding(c, e, g_j[i] if g_j is not None else None, tol), i)
                  for i, (c, e) in enumerate(zip(g_c, g_e)))
    return found[0] if found else None
