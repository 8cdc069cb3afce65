"""Gradients of a graph's inputs for one upstream gradient, compiled against
eager against float64, and whether they are finite.

The upstream gradient comes from a private generator (the program's RNG is
never drawn from); inputs are cloned and gradients taken with
``torch.autograd.grad``, so the program's tensors and their ``.grad`` are
untouched.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.fx

from .interpreter import EagerRun, Float64Judge, nonfinite_flags
from .numerics import Tolerance, ValueDiff, finding, worst
from .subgraphs import clone, flat, preserved_rng, set_rng


def grad_inputs(inputs: list) -> list[int]:
    """Positions of the inputs whose gradients are taken (floating, requiring grad)."""
    return [i for i, a in enumerate(inputs)
            if isinstance(a, torch.Tensor) and a.requires_grad and a.is_floating_point()]


def input_gradients(run: Callable, inputs: list, seed: int, float64: bool = False) -> list | None:
    """Gradients of the inputs that require grad (None when none does, or no
    output needs a gradient), in the order of `grad_inputs`."""
    wanted = set(grad_inputs(inputs))
    args, leaves = [], []
    for i, a in enumerate(inputs):
        if i in wanted:
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


def eager(gm: torch.fx.GraphModule, float64: bool = False) -> Callable:
    """``gm`` interpreted eagerly (in float64 for the judge). Only gradients
    are wanted: the eager run keeps no value, in graphs that write in place
    too (values as they ran are the reference's job, not this one's)."""
    if float64:
        return lambda *a: Float64Judge(gm).run(*a)
    return lambda *a: EagerRun(gm).run(*a)


def gradients_of(run: Callable, inputs: list, rng: tuple, float64: bool = False) -> list | None:
    """`input_gradients` with the RNG rewound to ``rng`` and restored after."""
    with preserved_rng():
        set_rng(rng)
        return input_gradients(run, inputs, 0, float64=float64)


def judge_gradients(gm: torch.fx.GraphModule, inputs: list, rng: tuple) -> list | None:
    try:
        return gradients_of(eager(gm, float64=True), inputs, rng, float64=True)
    except Exception:
        return None  # some graphs have no float64 meaning


def compare_gradients(g_c: list | None, g_e: list | None, g_j: list | None,
                      tol: Tolerance) -> ValueDiff | None:
    """The worst difference between compiled and eager gradients that is a finding."""
    if g_c is None or g_e is None:
        return None
    found = worst((finding(c, e, g_j[i] if g_j is not None else None, tol), i)
                  for i, (c, e) in enumerate(zip(g_c, g_e)))
    return found[0] if found else None


def nonfinite_gradients(grads: list | None) -> tuple[int, list[int]]:
    """NAN | INF bits over ``grads``, and which of them (indices into
    ``grads``) hold NaN or Inf; (0, []) when all are finite."""
    flags = [nonfinite_flags(g) for g in grads or ()]
    bits = 0
    for f in flags:
        bits |= f
    return bits, [i for i, f in enumerate(flags) if f]
