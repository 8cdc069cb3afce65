"""How far a compiled value is from eager, judged against float64.

Pure numerics: no compiling, no graphs. A difference beyond per-dtype
tolerances is ``nonfinite`` when one side is NaN/Inf where the other is
finite (which side, and whether float64 is finite there: rmse ignores
non-finite values, so without this an overflow in eager would pass for
eager's rounding); else a ``miscompile`` when the compiled error against the
float64 judge is clearly larger than eager's own (the rule of PyTorch's
accuracy checks, torch._dynamo.utils.same: rmse(judge, compiled) > 2 *
rmse(judge, eager) + tol/10, with tol the larger of the dtype's rtol and
atol, as torch uses one tol for both: 1e-4 in float32; with atol alone,
1e-6, a clean inductor backward's reordered float32 sums read as a
miscompile),
and ``precision`` otherwise; a precision difference is a finding only in a
low-precision dtype (benign float32 reordering is not).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import torch

from . import streamed

# (rtol, atol) per dtype: loose enough for reordered reductions, tight enough
# for a changed op.
DEFAULT_TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}
LOW_PRECISION = ("float16", "bfloat16")
MULTIPLIER = 2.0


@dataclass(frozen=True)
class Tolerance:
    """User tolerances; None takes the dtype's default."""
    rtol: float | None = None
    atol: float | None = None


@dataclass
class ValueDiff:
    """How far compiled is from eager for one tensor, judged against float64."""
    max_abs: float
    max_rel: float
    eager_vs_fp64: float | None
    compiled_vs_fp64: float | None
    kind: str            # miscompile | precision | shape | dtype | nonfinite (| random)
    dtype: str
    # nonfinite: the side NaN/Inf where the other is finite (eager | compiled |
    # both), what it is (NaN | Inf), and whether float64 is finite there
    side: str | None = None
    value: str | None = None
    fp64_finite: bool | None = None


def rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    """Root mean square of the finite differences, in float64 piece by piece."""
    return streamed.rmse(a, b)


def compare_values(compiled: Any, eager: Any, judge: Any = None,
                   tol: Tolerance = Tolerance()) -> ValueDiff | None:
    """None when close; else how they differ. Non-tensors compare by equality."""
    if not isinstance(compiled, torch.Tensor) or not isinstance(eager, torch.Tensor):
        if isinstance(compiled, torch.Tensor) != isinstance(eager, torch.Tensor):
            return ValueDiff(math.inf, math.inf, None, None, "shape", "?")
        return None
    dtype = str(eager.dtype).replace("torch.", "")
    if compiled.shape != eager.shape:
        return ValueDiff(math.inf, math.inf, None, None, "shape", dtype)
    if compiled.dtype != eager.dtype:
        return ValueDiff(math.inf, math.inf, None, None, "dtype", dtype)
    if not (eager.is_floating_point() or eager.is_complex()):
        if torch.equal(compiled, eager):
            return None
        return ValueDiff(streamed.max_abs_diff(compiled, eager), math.inf, None, None,
                         "miscompile", dtype)
    d_rtol, d_atol = DEFAULT_TOLERANCES.get(eager.dtype, (1e-4, 1e-5))
    rtol = d_rtol if tol.rtol is None else tol.rtol
    atol = d_atol if tol.atol is None else tol.atol
    # float64 a piece at a time (streamed.py): a whole copy of a large value
    # and its temporaries cost several times the value
    if streamed.allclose(compiled, eager, rtol, atol):
        return None
    judged = isinstance(judge, torch.Tensor) and judge.shape == eager.shape
    a = streamed.apart(compiled, eager, atol, judge if judged else None)
    nan_mismatch = a.nan_mismatch
    max_abs, max_rel = (a.max_abs, a.max_rel) if a.both else (math.inf, math.inf)
    in_e, in_c = a.nonfinite_in_eager, a.nonfinite_in_compiled  # NaN/Inf in eager, compiled
    if nan_mismatch or in_e or in_c:
        max_abs = max_rel = math.inf
    eager_err = compiled_err = None
    kind = "miscompile"
    if judged:
        eager_err, compiled_err = rmse(judge, eager), rmse(judge, compiled)
        if not nan_mismatch and compiled_err <= MULTIPLIER * eager_err + max(rtol, atol) / 10:
            kind = "precision"
    if in_e or in_c:
        return ValueDiff(max_abs, max_rel, eager_err, compiled_err, "nonfinite", dtype,
                         side="both" if in_e and in_c else "eager" if in_e else "compiled",
                         value="NaN" if a.bad_nan else "Inf", fp64_finite=a.judge_finite)
    return ValueDiff(max_abs, max_rel, eager_err, compiled_err, kind, dtype)


def is_finding(d: ValueDiff | None) -> bool:
    """A miscompile (or NaN/Inf on one side) always; a precision difference
    only in a low-precision dtype."""
    if d is None:
        return False
    if d.kind == "precision":
        return d.dtype in LOW_PRECISION
    return True


def finding(compiled: Any, eager: Any, judge: Any = None,
            tol: Tolerance = Tolerance()) -> ValueDiff | None:
    """`compare_values`, keeping only differences that are findings."""
    d = compare_values(compiled, eager, judge, tol)
    return d if is_finding(d) else None


def rank(d: ValueDiff) -> tuple:
    """Miscompiles (and NaN/Inf on one side) first, then by relative error."""
    return (d.kind in ("miscompile", "nonfinite"), d.max_rel if math.isfinite(d.max_rel) else 1e300)


def worst(diffs: Iterable[tuple[ValueDiff | None, Any]]) -> tuple[ValueDiff, Any] | None:
    """The worst finding among (difference, what it is about) pairs; the
    first of equals wins."""
    best = None
    for d, what in diffs:
        if d is not None and (best is None or rank(d) > rank(best[0])):
            best = (d, what)
    return best


def finite_or_none(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None
