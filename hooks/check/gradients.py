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

from .interpreter import EagerRun, Float64Run, nonfinite_flags
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
        outs = [o for o in flat(run(*args))
                if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()]
        if not outs:
            return None
        # Each output's upstream gradient is drawn only when the backward
        # reaches that output, after the gradients of what was computed from
        # it (a loss from the logits) have arrived (`_late_upstream`), and the
        # outputs are let go before the backward: neither a language model's
        # logits nor random values of their size stay alive through the
        # backward of its loss. The draws are those of one generator seeded
        # once, in output order, as if drawn up front.
        gen = torch.Generator().manual_seed(seed)
        zeros = []
        for i, o in enumerate(outs):
            state = gen.get_state()
            if i < len(outs) - 1:  # advance past this output's draw
                torch.randn(tuple(o.shape), generator=gen, dtype=torch.float64)
            zeros.append(_Seed.apply(o))
            o.register_hook(_late_upstream(state, o.dtype))
        total = sum(zeros)
        del outs, zeros
    grads = torch.autograd.grad(total, leaves, allow_unused=True)
    return [g if g is not None else torch.zeros_like(l) for g, l in zip(grads, leaves)]


class _Seed(torch.autograd.Function):
    """A zero standing for output ``o`` (it keeps nothing of ``o``): the
    backward hands ``o`` zeros that cost no memory, and ``o``'s hook
    (`_late_upstream`) adds its upstream gradient."""

    @staticmethod
    def forward(ctx, o: torch.Tensor) -> torch.Tensor:
        ctx.meta = (tuple(o.shape), o.dtype, o.device)
        return o.new_zeros(())

    @staticmethod
    def backward(ctx, _one: torch.Tensor) -> torch.Tensor:
        shape, dtype, device = ctx.meta
        return torch.zeros((), dtype=dtype, device=device).expand(shape)


def _late_upstream(state: torch.Tensor, dtype: torch.dtype) -> Callable:
    """The hook that adds an output's upstream gradient to the gradient the
    rest of the graph gave it: standard normal values drawn in float64 from
    generator ``state``, in the output's dtype (up + g: as autograd sums them)."""
    def hook(grad: torch.Tensor) -> torch.Tensor:
        gen = torch.Generator()
        gen.set_state(state)
        up = torch.randn(tuple(grad.shape), generator=gen, dtype=torch.float64)
        up = up.to(device=grad.device, dtype=dtype)
        return up.add_(grad)
    return hook


def eager(gm: torch.fx.GraphModule, float64: bool = False) -> Callable:
    """``gm`` interpreted eagerly (in float64 for the judge). Only gradients
    are wanted: the eager run keeps no value, in graphs that write in place
    too (values as they ran are the reference's job, not this one's)."""
    if float64:
        return lambda *a: Float64Run(gm).run(*a)
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
