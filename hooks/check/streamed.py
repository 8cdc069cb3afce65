"""Comparisons of same-shaped tensors in float64, a piece at a time.

The check judges float32 values in float64, and a whole-tensor float64 copy
of a large value (a language model's logits, 256 x 50,304) and its
temporaries cost several times the value itself: on nanoGPT that alone
doubled the program's peak memory. Here each comparison walks matching
pieces of about `PIECE` elements, lifts only the piece to float64 and folds
it into running results kept on the tensors' device (maxima, sums, counts,
flags), read back once at the end: exact maxima, flags and counts; sums of
squares added piece by piece (the last bits of an rmse may differ from a
one-shot sum). No host read per piece: a GPU check syncs once per comparison.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import torch

PIECE = 1 << 20  # elements: 8 MiB in float64


def _index(shape: tuple, size: int) -> Iterator[tuple]:
    """Index tuples cutting ``shape`` into pieces of at most ``size`` elements
    (whole rows along the first dimension where they fit, else recursing into
    one row): views of the same piece of every same-shaped tensor."""
    if math.prod(shape) <= size or not shape:
        yield ()
        return
    row = math.prod(shape[1:])
    if row <= size:
        step = size // row
        for s in range(0, shape[0], step):
            yield (slice(s, s + step),)
        return
    for i in range(shape[0]):
        for sub in _index(shape[1:], size):
            yield (i,) + sub


def pieces(*tensors: torch.Tensor, size: int | None = None) -> Iterator[tuple]:
    """Matching pieces of same-shaped ``tensors`` in float64 (``None`` stays
    None): never a whole copy of a large one."""
    shape = tuple(next(t for t in tensors if t is not None).shape)
    for idx in _index(shape, size or PIECE):
        yield tuple(None if t is None else t.detach()[idx].to(torch.float64) for t in tensors)


def allclose(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> bool:
    """``torch.allclose(a64, b64, rtol, atol, equal_nan=True)`` piece by piece."""
    far = torch.zeros((), dtype=torch.bool, device=a.device)
    for x, y in pieces(a, b):
        far |= ~torch.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True).all()
    return not bool(far)


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| in float64 (integer tensors)."""
    top = torch.zeros((), dtype=torch.float64, device=a.device)
    for x, y in pieces(a, b):
        if x.numel():
            top = torch.maximum(top, (x - y).abs().max())
    return float(top)


def rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    """Root mean square of the finite differences a - b (0.0 when none)."""
    total = torch.zeros((), dtype=torch.float64, device=a.device)
    count = torch.zeros((), dtype=torch.int64, device=a.device)
    for x, y in pieces(a, b):
        d = x - y
        fin = torch.isfinite(d)
        total += torch.where(fin, d * d, 0.0).sum()
        count += fin.sum()
    total, count = torch.stack([total, count.to(torch.float64)]).tolist()
    return 0.0 if count == 0 else math.sqrt(total / count)


@dataclass
class Apart:
    """How ``compiled`` and ``eager`` differ, over the whole tensors."""
    nan_mismatch: bool       # NaN in one where the other has none
    inf_mismatch: bool       # +-Inf in one where the other has none
    both: int                # how many values are finite in both
    max_abs: float           # over those (0.0 when there are none)
    max_rel: float           # against |eager| clamped at atol
    nonfinite_in_eager: bool     # eager NaN/Inf where compiled is finite
    nonfinite_in_compiled: bool  # compiled NaN/Inf where eager is finite
    bad_nan: bool            # a NaN among those one-sided non-finite values
    judge_finite: bool | None    # float64 finite at all of them (None: no judge)


def apart(compiled: torch.Tensor, eager: torch.Tensor, atol: float,
          judge: torch.Tensor | None = None) -> Apart:
    """One pass over the pieces for everything `numerics.compare_values` and
    `nodevalues.errors` ask of two tensors that are not close."""
    dev = eager.device
    z = torch.zeros((), dtype=torch.float64, device=dev)
    flags = torch.zeros(6, dtype=torch.bool, device=dev)
    top_abs, top_rel, n_both = z.clone(), z.clone(), torch.zeros((), dtype=torch.int64, device=dev)
    for c, e, j in pieces(compiled, eager, judge):
        fin_c, fin_e = torch.isfinite(c), torch.isfinite(e)
        both = fin_c & fin_e
        only_c, only_e = fin_c & ~fin_e, fin_e & ~fin_c
        one_sided = only_c | only_e
        err = torch.where(both, (c - e).abs(), 0.0)
        rel = err / e.abs().clamp_min(atol)
        if c.numel():
            top_abs = torch.maximum(top_abs, err.max())
            top_rel = torch.maximum(top_rel, torch.where(both, rel, 0.0).max())
        n_both += both.sum()
        bad = torch.where(only_c, e, c)
        flags |= torch.stack([
            (torch.isnan(c) != torch.isnan(e)).any(),
            (torch.isinf(c) != torch.isinf(e)).any(),
            only_c.any(), only_e.any(),
            (torch.isnan(bad) & one_sided).any(),
            (~torch.isfinite(j) & one_sided).any() if j is not None else flags[5]])
    f = flags.tolist()
    top_abs, top_rel, n = torch.stack([top_abs, top_rel, n_both.to(torch.float64)]).tolist()
    return Apart(f[0], f[1], int(n), top_abs, top_rel, f[2], f[3], f[4],
                 None if judge is None else not f[5])
