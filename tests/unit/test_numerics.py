"""The eager-vs-compiled judgement and the first-divergence search, without
compiling anything."""

from __future__ import annotations

import math

import torch

from graphdbg.hooks.check.localize import first_divergent
from graphdbg.hooks.check.numerics import (Tolerance, ValueDiff, compare_values, finding,
                                           is_finding, worst)
from graphdbg.hooks.progress import BisectProgress


def test_close_values_are_not_a_difference():
    x = torch.linspace(-1, 1, 100)
    assert compare_values(x * (1 + 1e-6), x) is None
    assert compare_values(3, 3) is None


def test_a_changed_op_is_a_miscompile_and_reordering_is_not_a_finding():
    x = torch.linspace(-1, 1, 100, dtype=torch.float64)
    eager = torch.tanh(x.float())
    judge = torch.tanh(x)
    d = compare_values(eager * 1.01, eager, judge)
    assert d.kind == "miscompile" and math.isclose(d.max_rel, 0.01, rel_tol=1e-3)
    assert d.compiled_vs_fp64 > 2 * d.eager_vs_fp64 and is_finding(d)
    # compiled closer to float64 than eager, in float32: precision, and no finding
    noisy = (judge + 1e-3 * torch.sign(judge)).float()
    d = compare_values(judge.float(), noisy, judge)
    assert d.kind == "precision" and not is_finding(d)


def test_float32_sums_reordered_a_little_further_from_float64_are_not_a_miscompile():
    """A clean inductor backward (a GPT block's gradients, found by the GPU
    check's CPU dry run): compiled rmse to float64 8.6e-6 against eager's
    3.1e-6, beyond allclose on small elements. torch's own rule (tol/10 with
    tol = 1e-4 in float32) calls it precision; a 10x stricter slack called it
    a miscompile. A real change of the same size relative to the values
    (1e-3) stays a miscompile."""
    g = torch.Generator().manual_seed(0)
    judge = torch.randn(4096, generator=g, dtype=torch.float64) * 1e-3
    eager = (judge + torch.randn(4096, generator=g, dtype=torch.float64) * 3e-6).float()
    compiled = (judge + torch.randn(4096, generator=g, dtype=torch.float64) * 8.6e-6).float()
    d = compare_values(compiled, eager, judge)
    assert d is not None and d.kind == "precision", d
    assert d.compiled_vs_fp64 > 2 * d.eager_vs_fp64
    assert finding(compiled, eager, judge) is None
    wrong = (judge * 1.01 + 1e-3).float()
    assert compare_values(wrong, eager, judge).kind == "miscompile"


def test_low_precision_difference_closer_to_float64_is_a_precision_finding():
    judge = torch.linspace(0.1, 4, 64, dtype=torch.float64).exp()
    eager = judge.to(torch.bfloat16) * (1 + 2 ** -6)  # eager rounded badly
    compiled = judge.to(torch.bfloat16)
    d = compare_values(compiled, eager, judge)
    assert d.kind == "precision" and d.dtype == "bfloat16" and is_finding(d)


def test_shape_dtype_integer_and_nan_differences():
    a = torch.zeros(3)
    assert compare_values(torch.zeros(4), a).kind == "shape"
    assert compare_values(a.double(), a).kind == "dtype"
    assert compare_values(a, 1).kind == "shape"
    d = compare_values(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4]))
    assert d.kind == "miscompile" and d.max_abs == 1
    d = compare_values(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0]))
    assert d.max_abs == math.inf and (d.kind, d.side) == ("nonfinite", "compiled")


def test_user_tolerances_override_the_dtype_defaults():
    x = torch.ones(10)
    assert finding(x * 1.001, x) is not None
    assert finding(x * 1.001, x, tol=Tolerance(rtol=1e-2)) is None


def test_worst_prefers_miscompiles_then_larger_relative_error():
    small = ValueDiff(1e-3, 1e-3, None, None, "miscompile", "float32")
    large = ValueDiff(1.0, 0.5, None, None, "miscompile", "float32")
    prec = ValueDiff(9.0, 9.0, None, None, "precision", "bfloat16")
    assert worst([(small, "a"), (None, "b"), (prec, "c"), (large, "d")]) == (large, "d")
    assert worst([(prec, "c"), (small, "a")]) == (small, "a")
    assert worst([(None, "x")]) is None


def _search(names, first_bad, raising=()):
    calls = []
    bad = ValueDiff(1, 1, None, None, "miscompile", "float32")

    def probe(name):
        calls.append(name)
        if name in raising:
            raise RuntimeError("backend failed")
        return bad if names.index(name) >= first_bad else None

    undecided: list[str] = []
    i, found = first_divergent(names, probe, undecided, BisectProgress(False, "t"), "label",
                               lambda n, e: f"{n}: {type(e).__name__}")
    return i, found, calls, undecided


def test_first_divergent_bisects_in_log2_probes():
    names = [f"n{i}" for i in range(64)]
    for first in (0, 1, 17, 63):
        i, found, calls, undecided = _search(names, first)
        assert i == first and len(calls) <= 6 and undecided == []
        assert (found is not None) == (first < 63)  # the last prefix is never probed


def test_first_divergent_says_what_it_could_not_decide():
    # n3 cannot be compiled: the search looks later than it and says so
    names = [f"n{i}" for i in range(8)]
    i, found, calls, undecided = _search(names, 2, raising={"n3"})
    assert calls[0] == "n3" and i == 4 and found is not None
    assert undecided == ["n3: RuntimeError"]
