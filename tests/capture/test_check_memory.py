"""The check's memory: values are compared in float64 a piece at a time
(hooks/check/streamed.py), with the same results as whole-tensor float64
comparisons; the gradient check lets the outputs go before its backward and
draws the upstream gradients it used to draw up front, bitwise the same."""

from __future__ import annotations

import math
import weakref

import pytest
import torch
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode

from graphdbg.hooks.check import gradients, streamed
from graphdbg.hooks.check.nodevalues import errors
from graphdbg.hooks.check.numerics import DEFAULT_TOLERANCES, Tolerance, compare_values, rmse


# -- the oracle: whole-tensor float64, as the check computed it before -----------------

def whole_rmse(a, b):
    d = a.to(torch.float64) - b.to(torch.float64)
    d = d[torch.isfinite(d)]
    return 0.0 if d.numel() == 0 else float(torch.sqrt(torch.mean(d * d)))


def whole_compare(c, e, j, atol):
    c64, e64 = c.to(torch.float64), e.to(torch.float64)
    nan_mismatch = bool((torch.isnan(c64) != torch.isnan(e64)).any())
    both = torch.isfinite(c64) & torch.isfinite(e64)
    err = (c64 - e64).abs()[both]
    max_abs = float(err.max()) if err.numel() else math.inf
    rel = err / e64.abs()[both].clamp_min(atol)
    max_rel = float(rel.max()) if rel.numel() else math.inf
    fin_c, fin_e = torch.isfinite(c64), torch.isfinite(e64)
    only_c, only_e = fin_c & ~fin_e, fin_e & ~fin_c
    in_e, in_c = bool(only_c.any()), bool(only_e.any())
    if nan_mismatch or in_e or in_c:
        max_abs = max_rel = math.inf
    bad = torch.where(only_c, e64, c64)[only_c | only_e]
    fp64 = bool(torch.isfinite(j.to(torch.float64)[only_c | only_e]).all())
    return dict(max_abs=max_abs, max_rel=max_rel, eager_err=whole_rmse(j, e64),
                compiled_err=whole_rmse(j, c64), in_e=in_e, in_c=in_c,
                nan=bool(torch.isnan(bad).any()), fp64_finite=fp64)


def cases():
    g = torch.Generator().manual_seed(0)
    e = torch.randn(6, 7, 5, generator=g)
    c = e + 1e-3 * torch.randn(6, 7, 5, generator=g)
    j = e.double() + 1e-6
    yield "close-ish", c, e, j
    c2 = c.clone()
    c2[1, 2, 3], c2[4, 0, 0] = float("nan"), float("inf")   # compiled only
    yield "nonfinite compiled", c2, e, j
    e2 = e.clone()
    e2[5, 6, 4] = float("-inf")                              # eager only
    yield "nonfinite eager", c, e2, j
    yield "non-contiguous", c.transpose(0, 2), e.transpose(0, 2), j.transpose(0, 2)
    yield "expanded", c[:1].expand(6, 7, 5), e, j
    both = torch.full((3, 4), float("nan"))
    yield "nothing finite in both", both, both.clone(), both.double()


@pytest.mark.parametrize("piece", [1, 7, 40, 1 << 20])
def test_piece_by_piece_is_the_whole_tensor_comparison(monkeypatch, piece):
    monkeypatch.setattr(streamed, "PIECE", piece)
    atol = DEFAULT_TOLERANCES[torch.float32][1]
    for name, c, e, j in cases():
        want = whole_compare(c, e, j, atol)
        d = compare_values(c, e, j, Tolerance())
        if d is None:  # close: the whole-tensor allclose agrees
            assert torch.allclose(c.double(), e.double(), rtol=1e-4, atol=atol, equal_nan=True), name
            continue
        assert (d.max_abs, d.max_rel) == (want["max_abs"], want["max_rel"]), name
        assert d.eager_vs_fp64 == pytest.approx(want["eager_err"], rel=1e-12), name
        assert d.compiled_vs_fp64 == pytest.approx(want["compiled_err"], rel=1e-12), name
        if d.kind == "nonfinite":
            assert (d.side, d.value, d.fp64_finite) == (
                "both" if want["in_e"] and want["in_c"] else "eager" if want["in_e"] else "compiled",
                "NaN" if want["nan"] else "Inf", want["fp64_finite"]), name
        assert rmse(j, c) == pytest.approx(whole_rmse(j, c), rel=1e-12), name


def test_errors_piece_by_piece(monkeypatch):
    monkeypatch.setattr(streamed, "PIECE", 16)
    e = torch.randn(9, 11)
    c = e * (1 + 1e-3)
    d = (c.double() - e.double()).abs()
    assert errors(c, e) == (float(d.max()), float((d / e.double().abs().clamp_min(1e-5)).max()))
    c2 = c.clone()
    c2[3, 3] = float("nan")
    assert errors(c2, e) == (math.inf, math.inf)
    nan = torch.full((4,), float("nan"))
    assert errors(nan, nan.clone()) == (0.0, 0.0)   # nothing finite in both: nothing off
    ints = torch.arange(10)
    assert compare_values(ints + (ints == 7), ints).max_abs == 1.0


class LargestTensor(TorchDispatchMode):
    """The largest tensor any op makes (no compile runs under it)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in given:
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


def test_no_float64_copy_of_a_whole_value_is_made():
    """A 4M-value float32 output (16 MiB): nothing the comparison makes is
    larger than one float64 piece (the whole-tensor comparison made 32 MiB
    copies and several temporaries of that size)."""
    e = torch.randn(4, 1024, 1024)
    c = e + 1e-2 * torch.randn_like(e)
    j = e.double()
    with LargestTensor() as seen:
        d = compare_values(c, e, j)
        errors(c, e)
    assert d is not None and d.kind == "miscompile"
    assert seen.largest <= streamed.PIECE * 8 < e.numel() * 8


# -- gradients: outputs let go before the backward, the same upstream draws ------------

def head_and_loss(x, w, b, y):
    """A language model's head: its logits returned, and a loss from them."""
    logits = torch.nn.functional.linear(x, w, b)
    return logits, torch.nn.functional.cross_entropy(logits.view(-1, 50), y.view(-1))


def upfront_gradients(gm, leaves, rest, seed, float64):
    """The upstream gradients drawn up front, in output order, and handed to
    autograd.grad with the outputs alive: how the check took gradients before."""
    leaves = [t.detach().clone().to(torch.float64 if float64 else t.dtype).requires_grad_(True)
              for t in leaves]
    with torch.enable_grad():
        outs = list(gradients.eager(gm, float64)(*leaves, *rest))
    gen = torch.Generator().manual_seed(seed)
    ups = [torch.randn(tuple(o.shape), generator=gen, dtype=torch.float64).to(o.dtype)
           for o in outs]
    return torch.autograd.grad(outs, leaves, ups)


@pytest.mark.parametrize("float64", [False, True])
def test_gradients_are_bitwise_those_of_upfront_draws(float64):
    torch.manual_seed(0)
    gm = torch.fx.symbolic_trace(head_and_loss)
    x, w, b = (torch.randn(*s, requires_grad=True) for s in ((3, 4, 8), (50, 8), (50,)))
    y = torch.randint(0, 50, (3, 4))
    got = gradients.input_gradients(gm, [x, w, b, y], seed=0, float64=float64)
    want = upfront_gradients(gm, [x, w, b], [y], seed=0, float64=float64)
    assert got[0].dtype == (torch.float64 if float64 else torch.float32)
    assert len(got) == 3 and all(torch.equal(g, r) for g, r in zip(got, want))


def test_the_outputs_are_freed_before_the_backward_reaches_the_inputs():
    """The logits (an output) are gone by the time the backward reaches the
    weights: with the outputs held through autograd.grad they were not."""
    alive = []

    def run(x, w):
        logits = x @ w
        ref = weakref.ref(logits)
        w_seen = w.register_hook(lambda g: alive.append(ref() is not None))
        run.hooks.append(w_seen)
        return logits, logits.logsumexp(-1).sum()

    run.hooks = []
    x, w = torch.randn(16, 8, requires_grad=True), torch.randn(8, 300, requires_grad=True)
    grads = gradients.input_gradients(run, [x, w], seed=0)
    assert grads is not None and alive == [False]
