"""The stats tier's fast paths on large CPU tensors (hooks/record/tensorstats.py):
the one-pass sum of squares (`_sum_squares`), as exact as float64 and not used
where a matmul would not be exact float32; and float32 tensors whose float32
sums overflow (a causal mask's finfo.min) summarised in float64 directly."""

import math

import pytest
import torch

from graphdbg.hooks.record import tensorstats as ts


def _reference_norm(t: torch.Tensor) -> float:
    return math.sqrt(math.fsum(v * v for v in t.double().reshape(-1).tolist()))


@pytest.mark.parametrize("n", [1 << 16, 3 * (1 << 17) + 7])
def test_large_tensors_norm_and_std_agree_with_float64(n):
    g = torch.Generator().manual_seed(n)
    t = torch.randn(n, generator=g) * 3 + 1
    assert ts._sum_squares(t) is not None      # the one-pass path is taken
    s = ts.summarize(t, "stats")
    d = t.double()
    assert s["norm"] == pytest.approx(_reference_norm(t), rel=1e-7)
    assert s["std"] == pytest.approx(d.std().item(), rel=1e-7)
    assert s["mean"] == pytest.approx(d.mean().item(), rel=1e-7)


def test_not_taken_where_a_matmul_is_not_exact_float32():
    t = torch.randn(1 << 17)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("medium")   # oneDNN may use bf16
        assert ts._sum_squares(t) is None
        s = ts.summarize(t, "stats")
        assert s["norm"] == pytest.approx(t.double().norm().item(), rel=1e-7)
    finally:
        torch.set_float32_matmul_precision(before)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert ts._sum_squares(t) is None
        s = ts.summarize(t, "stats")
    assert s["norm"] == pytest.approx(t.double().norm().item(), rel=1e-7)


def test_not_taken_for_views_and_small_tensors():
    t = torch.randn(512, 512)
    assert ts._sum_squares(t.t()) is None
    assert ts._sum_squares(torch.randn(1000)) is None
    s = ts.summarize(t.t(), "stats")
    assert s["norm"] == pytest.approx(t.double().norm().item(), rel=1e-7)


def test_a_causal_mask_of_float32_min_is_summarised_exactly():
    """Finite values whose float32 sum overflows: min, max, mean, std and norm
    as float64 has them, no NaN or Inf counted."""
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(4, 4, 128, 128, generator=g)
    mask = torch.ones(128, 128, dtype=torch.bool).tril()
    t = scores.masked_fill(~mask, torch.finfo(torch.float32).min)
    s = ts.summarize(t, "stats")
    d = t.double()
    assert s["nan"] == s["inf"] == 0
    assert s["min"] == torch.finfo(torch.float32).min and s["max"] == t.max().item()
    assert s["mean"] == pytest.approx(d.mean().item(), rel=1e-10)
    assert s["std"] == pytest.approx(d.std().item(), rel=1e-10)
    assert s["norm"] == pytest.approx(d.norm().item(), rel=1e-10)
