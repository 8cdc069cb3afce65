"""Value summaries of tensors, by tier (like TensorFlow Debugger V2's debug modes).

- ``none``:   shape and dtype only
- ``health``: + NaN / Inf counts
- ``stats``:  + min, max, mean, std, L2 norm (over finite values)
- ``full``:   same summaries; the recorder also keeps selected tensors

Summaries never keep the tensor alive. Callers run this with graphdbg's own
dispatch mode off (inside ``__torch_dispatch__`` or with the mode popped), so
these ops are not recorded.

How (this runs once per recorded op, so it is tuned; see
benchmarks/check_tensorstats.py for the reference it is checked against):

- Tiny CPU tensors (up to 32 values) are read as Python numbers: ``fsum``
  (exactly rounded) and ``hypot`` (scaled, no overflow) beat any array call.
- Small CPU tensors go through numpy, widened to float64, with ufunc
  reductions only: never ``np.dot`` and friends, whose BLAS threads fight
  torch's threads for the cores (a 32k-element ``np.dot`` after a torch
  matmul took milliseconds).
- Other tensors stay on their device with one device->host transfer in the
  common case: min/max (NaN and Inf propagate into them) tell whether the
  NaN/Inf counting and finite-subset pass are needed at all. Float32 (and
  fp16/bf16, widened to float32) is reduced in float32 with a corrected
  two-pass variance (exact for any shift, so the rounded mean costs nothing)
  and cascade sums; magnitudes that could overflow or underflow float32
  squares are redone in float64, and float64 extremes are scaled by a power
  of two. Results agree with a float64 reference to about 1e-7 (relative; the
  mean relative to the mean absolute value).
- ``health`` needs one reduction when all is well (a sum is finite iff every
  value is; fp16/bf16 use min/max, which cannot overflow).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import torch


_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_strided = torch.strided
_isfinite = math.isfinite
_sqrt = math.sqrt


# -- shapes and dtypes -----------------------------------------------------------

_DTYPE_NAMES: dict[torch.dtype, str] = {}


def dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


def describe(t: torch.Tensor) -> tuple[list, str]:
    """Shape (symbolic sizes as their names) and dtype."""
    return [s if isinstance(s, int) else str(s) for s in t.shape], dtype_name(t.dtype)


_DESC_JSON: dict[tuple, tuple[str, str, str, str]] = {}


def describe_json(t: torch.Tensor) -> tuple[str, str, str, str]:
    """``describe`` as the JSON texts ``json.dumps`` would give: shape list,
    quoted dtype, and both again wrapped in a one-element list (an op's
    ``shapes``/``dtypes`` columns when it has one output). Cached by
    (shape, dtype)."""
    shape = t.shape
    dtype = t.dtype
    try:
        hit = _DESC_JSON.get((shape, dtype))
    except TypeError:  # symbolic sizes that refuse hashing
        hit = None
    if hit is None:
        s, d = describe(t)
        s = json.dumps(s, separators=(",", ":"), default=str)
        d = json.dumps(d)
        hit = (s, d, f"[{s}]", f"[{d}]")
        if all(type(v) is int for v in shape):
            if len(_DESC_JSON) > 100_000:
                _DESC_JSON.clear()
            _DESC_JSON[(tuple(shape), dtype)] = hit
    return hit


# -- value summaries ---------------------------------------------------------------

def is_plain(t: Any) -> bool:
    # Only dense, real tensors: subclasses (FakeTensor, DTensor, functional
    # wrappers) and meta tensors have no values to read.
    return (type(t) is torch.Tensor or type(t) is torch.nn.Parameter) and \
        t.layout == torch.strided and t.device.type != "meta"


# Largest CPU tensors summarised with numpy, per dtype and tier (measured
# crossovers against the torch path, one thread; numpy's float16 is emulated).
_NUMPY_STATS_MAX = {torch.float32: 1 << 13, torch.float64: 1 << 13, torch.float16: 1 << 12,
                    torch.int64: 1 << 16, torch.int32: 1 << 16, torch.int16: 1 << 16,
                    torch.int8: 1 << 16, torch.uint8: 1 << 16, torch.bool: 1 << 16}
_NUMPY_HEALTH_MAX = {torch.float32: 1 << 13, torch.float64: 1 << 13, torch.float16: 1 << 12}
_VIA_FLOAT32_MAX = {torch.bfloat16: 1 << 13}  # small CPU bf16: one cast, then numpy
_NO_VALUES = {"nan": 0, "inf": 0}
# Tiny CPU tensors: their values as Python numbers beat any array library
_LIST_MAX = 32
_LIST_OK = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
            torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool}


def readable_values(t: Any) -> int:
    """How many values ``t`` has to summarise; 0 when none can be read (a
    subclass such as FakeTensor or DTensor, a sparse or meta tensor, no values)."""
    tt = type(t)
    if (tt is not _Tensor and tt is not _Parameter) or t.layout != _strided or t.is_meta:
        return 0
    return t.numel()


def summarize(t: torch.Tensor, tier: str) -> dict | None:
    """A JSON-ready dict of value statistics, or None when there is nothing to read."""
    if tier == "none":
        return None
    n = readable_values(t)
    if n == 0:
        return None
    dt = t.dtype
    if tier == "health":
        if not (dt.is_floating_point or dt.is_complex):
            return _NO_VALUES.copy()
        limits = _NUMPY_HEALTH_MAX
    else:
        limits = _NUMPY_STATS_MAX
    if t.is_cpu:
        if n <= _LIST_MAX and dt in _LIST_OK:
            vals = t.tolist()
            if type(vals) is not list:
                vals = [vals]
            else:
                while type(vals[0]) is list:
                    vals = [v for sub in vals for v in sub]
            return _summarize_list(vals, tier, dt.is_floating_point)
        if n <= limits.get(dt, -1):
            try:
                # a copy: numpy() on the program's tensor would make its storage
                # non-resizable for good (FSDP2 resizes parameters' storage)
                a = t.detach().clone().numpy()
            except (RuntimeError, TypeError):  # conj/neg views and the like
                pass
            else:
                return _summarize_numpy(a, tier)
        elif tier != "health" and n <= _VIA_FLOAT32_MAX.get(dt, -1):
            return _summarize_numpy(t.detach().float().numpy(), tier)
    # detached: nothing below records autograd history
    return _summarize_torch(t.detach(), tier, n)


# Python numbers ---------------------------------------------------------------------

_fsum = math.fsum
_hypot = math.hypot


def _summarize_list(vals: list, tier: str, is_float: bool) -> dict:
    """At most ``_LIST_MAX`` values (floats, ints or bools). ``fsum`` is
    exactly rounded and ``hypot`` scales internally: no over- or underflow."""
    n = len(vals)
    n_nan = n_inf = 0
    total = None
    if is_float:
        if tier == "health":
            if _isfinite(sum(vals)):
                return _NO_VALUES.copy()
        else:
            try:
                total = _fsum(vals)
            except (ValueError, OverflowError):  # inf - inf; a float64 overflow
                total = None
        if total is None or not _isfinite(total):  # NaN/Inf anywhere, or overflow
            fin = [v for v in vals if _isfinite(v)]
            n_nan = sum(1 for v in vals if v != v)
            n_inf = n - len(fin) - n_nan
            if tier == "health" or not fin:
                return {"nan": n_nan, "inf": n_inf}
            vals = fin
            n = len(fin)
            try:
                total = _fsum(vals)
            except OverflowError:
                total = None
    elif tier == "health":
        return _NO_VALUES.copy()
    else:
        total = _fsum(vals)
    mean = total / n if total is not None and _isfinite(total) else _fsum([v / n for v in vals])
    std = _hypot(*[v - mean for v in vals]) / _sqrt(n - 1) if n > 1 else 0.0
    return {"min": float(min(vals)), "max": float(max(vals)), "mean": mean, "std": std,
            "norm": float(_hypot(*vals)), "nan": n_nan, "inf": n_inf}


# Float64 values beyond this range (either way) are scaled by a power of two
# before squaring, which is exact and keeps squares in range.
_F64_SAFE = (1e-150, 1e150)


def _pow2_scale(amax: float) -> int:
    """Exponent e such that amax * 2**-e is in [0.5, 1)."""
    return math.frexp(amax)[1]


def _moments(sum_d: float, ss_d: float, m1: float, n: int) -> tuple[float, float, float]:
    """Mean, unbiased std and L2 norm from a shifted pass: ``d = v - m1``,
    ``sum_d = sum(d)``, ``ss_d = sum(d**2)`` (corrected two-pass: exact for any
    shift, so a rounded ``m1`` costs nothing)."""
    mean = m1 + sum_d / n
    std = _sqrt(max(ss_d - sum_d * sum_d / n, 0.0) / (n - 1)) if n > 1 else 0.0
    # sum(v^2) = sum(d^2) + 2*m1*sum(d) + n*m1^2
    norm = _sqrt(max(ss_d + 2.0 * m1 * sum_d + n * m1 * m1, 0.0))
    return mean, std, norm


# numpy ----------------------------------------------------------------------------

_F64 = np.float64
_np_min = np.minimum.reduce
_np_max = np.maximum.reduce
_np_add = np.add.reduce
_np_sub = np.subtract
_np_mul = np.multiply
_np_isfinite = np.isfinite
_np_isnan = np.isnan
_np_count = np.count_nonzero
_np_all = np.logical_and.reduce


def _summarize_numpy(a: np.ndarray, tier: str) -> dict:
    """Small CPU tensors (``a`` may be a view of the tensor's memory: never
    written). Floating-point warnings (e.g. a signalling NaN in uninitialised
    memory) are the program's business, not ours: keep them off its stderr."""
    with np.errstate(all="ignore"):
        return _summarize_numpy_quiet(a, tier)


def _summarize_numpy_quiet(a: np.ndarray, tier: str) -> dict:
    if not a.ndim:
        a = a.reshape(1)  # ufuncs on 0-d arrays return scalars
    n = a.size
    n_nan = n_inf = 0
    if a.dtype.kind == "f":
        if tier == "health":
            if _np_all(_np_isfinite(a), None):
                return _NO_VALUES.copy()
            n_nan = int(_np_count(_np_isnan(a)))
            return {"nan": n_nan, "inf": n - int(_np_count(_np_isfinite(a))) - n_nan}
        v = a if a.dtype == _F64 else a.astype(_F64)
        mn = float(_np_min(v, None))
        mx = float(_np_max(v, None))
        if not (_isfinite(mn) and _isfinite(mx)):  # NaN propagates, Inf is the min or max
            fin = _np_isfinite(v)
            n_fin = int(_np_count(fin))
            n_nan = int(_np_count(_np_isnan(v)))
            n_inf = n - n_fin - n_nan
            if n_fin == 0:
                return {"nan": n_nan, "inf": n_inf}
            v = v[fin]
            n = n_fin
            mn = float(_np_min(v, None))
            mx = float(_np_max(v, None))
    else:
        if tier == "health":
            return _NO_VALUES.copy()
        v = a.astype(_F64)
        mn = float(_np_min(v, None))
        mx = float(_np_max(v, None))
    amax = max(-mn, mx)
    e = 0
    if amax != 0.0 and not _F64_SAFE[0] <= amax <= _F64_SAFE[1]:
        e = _pow2_scale(amax)
        v = _np_mul(v, math.ldexp(1.0, -e))
    m1 = float(_np_add(v, None)) / n
    d = _np_sub(v, m1)                  # a new array: safe to square in place
    sum_d = float(_np_add(d, None))
    ss_d = float(_np_add(_np_mul(d, d, out=d), None))
    mean, std, norm = _moments(sum_d, ss_d, m1, n)
    if e:
        mean, std, norm = math.ldexp(mean, e), math.ldexp(std, e), math.ldexp(norm, e)
    return {"min": mn, "max": mx, "mean": mean, "std": std, "norm": norm,
            "nan": n_nan, "inf": n_inf}


# torch ----------------------------------------------------------------------------

_F32_SAFE = (1e-10, 1e12)  # |values| range where float32 squares neither over- nor underflow
_float32, _float64 = torch.float32, torch.float64
_NATIVE_HEALTH = {torch.float16, torch.bfloat16, torch.float32, torch.float64}


def _summarize_torch(x: torch.Tensor, tier: str, n: int) -> dict:
    if x.is_complex():
        x = x.abs()
    dt = x.dtype
    if not dt.is_floating_point:
        if tier == "health":
            return _NO_VALUES.copy()
        return _torch_stats(x.to(_float64), n, 0, 0)
    if tier == "health":
        if dt is _float32 or dt is _float64:
            # a sum is finite iff every value is (barring overflow, which
            # only sends us to the exact count); one pass, the cheapest op
            if _isfinite(x.sum().item()):
                return _NO_VALUES.copy()
        else:
            if dt not in _NATIVE_HEALTH:
                x = x.float()
            # fp16/bf16 sums overflow easily: min and max cannot
            mn, mx = torch.stack(torch.aminmax(x)).tolist()
            if _isfinite(mn) and _isfinite(mx):
                return _NO_VALUES.copy()
        n_nan, n_fin = torch.stack([x.isnan().sum(), x.isfinite().sum()]).tolist()
        return {"nan": int(n_nan), "inf": n - int(n_fin) - int(n_nan)}
    y = x if dt is _float32 or dt is _float64 else x.float()
    return _fast_stats(y, n) or _torch_stats(y, n, None, None)




_ROW = 1024           # values per row of the batched dot product below
_SQUARES_MIN = 1 << 16


def _sum_squares(y: torch.Tensor) -> torch.Tensor | None:
    """The sum of ``y``'s squares in one pass with no temporary, as a float64
    0-d tensor, or None where that is not safe (then the caller squares into a
    temporary and sums: on a 25M-value tensor 40-130 ms, nearly all of it the
    temporary's page faults, against 3 ms here).

    A batched dot product of 1024-value rows (BLAS keeps several float32
    accumulators a row: 1e-9 relative on 25M normal values, against 1e-8 for
    the cascade sum), the rows' sums added in float64. Only on CPU, for a
    contiguous tensor, and where matmuls are exact float32: with
    ``set_float32_matmul_precision("medium"|"high")`` oneDNN may compute them
    in bf16 or TF32, and under CPU autocast ``bmm`` runs in bf16."""
    n = y.numel()
    if (n < _SQUARES_MIN or not y.is_cpu or not y.is_contiguous()
            or torch.get_float32_matmul_precision() != "highest"
            or torch.is_autocast_enabled("cpu")):
        return None
    k = n // _ROW
    flat = y.reshape(-1)
    rows = flat[:k * _ROW].view(k, 1, _ROW)
    ss = torch.bmm(rows, rows.transpose(1, 2)).sum(dtype=_float64)
    if n > k * _ROW:
        tail = flat[k * _ROW:]
        ss = ss + torch.dot(tail, tail).to(_float64)
    return ss


def _fast_stats(y: torch.Tensor, n: int) -> dict | None:
    """The common case in four passes: min/max, sum, squares and their sum;
    the variance from the sum of squares. Exact enough only when every
    value is finite, squares stay in range and the mean does not dominate the
    spread (|mean| <= std: then the cancellation in sum(v^2) - n*mean^2 costs
    at most a factor two of rounding); otherwise None, and the corrected
    two-pass in `_torch_stats` decides."""
    mn_t, mx_t = torch.aminmax(y)
    ss_t = _sum_squares(y)
    if ss_t is None:
        # squares summed by the cascade sum (float32 vector_norm accumulates
        # without it: 1e-5 off on a million values)
        mn, mx, total, ss = torch.stack([mn_t, mx_t, y.sum(), y.square().sum()]).tolist()
    else:
        mn, mx, total, ss = torch.cat([torch.stack([mn_t, mx_t, y.sum()]).to(_float64),
                                       ss_t.reshape(1)]).tolist()
    if not (_isfinite(mn) and _isfinite(mx)) or n < 2:
        return None
    amax = max(-mn, mx)
    sums_ok = _isfinite(total) and _isfinite(ss)
    if y.dtype is _float32:
        if not sums_ok or (amax != 0.0 and not _F32_SAFE[0] <= amax <= _F32_SAFE[1]):
            # finite, but float32 sums overflow or squares leave its range:
            # every float32 value squares in range in float64, so straight to
            # the two-pass there (a causal mask's -3.4e38 would otherwise take
            # it in float32, find the sums out of range, and start again)
            return _torch_stats(y.to(_float64), n, 0, 0, (mn, mx))
    elif not sums_ok or (amax != 0.0 and not _F64_SAFE[0] <= amax <= _F64_SAFE[1]):
        return None
    norm = _sqrt(ss)
    mean = total / n
    var = (ss - total * mean) / (n - 1)
    if var <= 0.0 or mean * mean > var:
        # finite and in range: the two-pass needs no range checks nor min/max again
        return _torch_stats(y, n, 0, 0, (mn, mx))
    return {"min": mn, "max": mx, "mean": mean, "std": _sqrt(var), "norm": norm,
            "nan": 0, "inf": 0}


def _torch_stats(y: torch.Tensor, n: int, n_nan: int | None, n_inf: int | None,
                 minmax: tuple[float, float] | None = None, e: int = 0) -> dict:
    """Stats of float32/float64 ``y`` with one device->host transfer. NaN/Inf
    counts given, or None to find out (and then drop non-finite values);
    ``minmax`` and ``e`` when ``y`` is the original scaled by 2**-e.

    A corrected two-pass in ``y``'s dtype (vectorised cascade sums; squares in
    place in the one temporary): faster than ``torch.std``'s scalar double
    loop and ``var_mean``'s Welford, and unlike float32 ``vector_norm`` it
    keeps its digits on large tensors."""
    m1 = y.mean()
    d = y - m1
    sum_d = d.sum()
    ss_t = _sum_squares(d)          # d is new and contiguous: one pass, no write
    ss_d = d.square_().sum() if ss_t is None else ss_t.to(y.dtype)
    if minmax is None:
        parts = [*torch.aminmax(y), m1, sum_d, ss_d]
    else:   # known (`_fast_stats`, or before scaling): not read again
        parts = [m1, sum_d, ss_d]
    vals = torch.stack(parts).tolist()
    if ss_t is not None:
        vals[-1] = ss_t.item()      # in float64, not rounded to y's dtype
    if minmax is None:
        mn, mx, m1, sum_d, ss_d = vals
    else:
        mn, mx = minmax
        m1, sum_d, ss_d = vals
    del d
    if n_nan is None:
        if _isfinite(mn) and _isfinite(mx):
            n_nan = n_inf = 0
        else:
            fin = y.isfinite()
            n_fin, n_nan = torch.stack([fin.sum(), y.isnan().sum()]).tolist()
            n_fin, n_nan = int(n_fin), int(n_nan)
            n_inf = n - n_fin - n_nan
            if n_fin == 0:
                return {"nan": n_nan, "inf": n_inf}
            return _torch_stats(y[fin], n_fin, n_nan, n_inf)
    if minmax is None:
        amax = max(-mn, mx)
        if y.dtype is _float32:
            # redo in float64 when float32 sums may have overflowed or squares
            # may have underflowed
            if not (_isfinite(m1) and _isfinite(sum_d) and _isfinite(ss_d)) or (
                    amax != 0.0 and not _F32_SAFE[0] <= amax <= _F32_SAFE[1]) or (
                    0.0 < ss_d < n * 1e-30):
                return _torch_stats(y.to(_float64), n, n_nan, n_inf)
        elif amax != 0.0 and not _F64_SAFE[0] <= amax <= _F64_SAFE[1]:
            e = _pow2_scale(amax)
            return _torch_stats(y * math.ldexp(1.0, -e), n, n_nan, n_inf, (mn, mx), e)
    else:
        mn, mx = minmax
    mean, std, norm = _moments(sum_d, ss_d, m1, n)
    if abs(m1) <= std:
        # y - m1 is exact only where y and m1 are close (the usual case when
        # the mean dominates the spread, and then the shift corrects m1's
        # rounding); here it is not, and the rounding of the differences
        # biases sum(d) by more than m1's own error
        mean = m1
    if e:
        mean, std, norm = math.ldexp(mean, e), math.ldexp(std, e), math.ldexp(norm, e)
    return {"min": mn, "max": mx, "mean": mean, "std": std, "norm": norm,
            "nan": n_nan, "inf": n_inf}


# -- JSON ------------------------------------------------------------------------

_frepr = float.__repr__


def _num(v: float) -> str:
    # what json.dumps writes for a float
    if v != v:
        return "NaN"
    if v == math.inf:
        return "Infinity"
    if v == -math.inf:
        return "-Infinity"
    return _frepr(v)


_STATS_FMT = '{"min":%r,"max":%r,"mean":%r,"std":%r,"norm":%r,"nan":%d,"inf":%d}'


def _stats_text(s: dict | None) -> str:
    if s is None:
        return "null"
    if len(s) == 7:
        mn, mx, mean, std, norm = s["min"], s["max"], s["mean"], s["std"], s["norm"]
        if _isfinite(mn + mx + mean + std + norm):  # floats: %r is what json writes
            return _STATS_FMT % (mn, mx, mean, std, norm, s["nan"], s["inf"])
        return (f'{{"min":{_num(mn)},"max":{_num(mx)},"mean":{_num(mean)},"std":{_num(std)},'
                f'"norm":{_num(norm)},"nan":{s["nan"]},"inf":{s["inf"]}}}')
    if len(s) == 2:
        return f'{{"nan":{s["nan"]},"inf":{s["inf"]}}}'
    return json.dumps(s, separators=(",", ":"), default=str)


def stats_json(stats: list) -> str:
    """``json.dumps(stats, separators=(",", ":"))`` for a list of ``summarize``
    results, without the encoder's per-call setup."""
    if len(stats) == 1:
        return f"[{_stats_text(stats[0])}]"
    return "[" + ",".join([_stats_text(s) for s in stats]) + "]"


def flat_tensors(value: Any, limit: int = 16) -> list[torch.Tensor]:
    """Tensors in an op's or graph's output (tuples, lists, dicts), in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    out: list[torch.Tensor] = []
    stack = [value]
    while stack and len(out) < limit:
        v = stack.pop(0)
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            stack[0:0] = list(v)
        elif isinstance(v, dict):
            stack[0:0] = list(v.values())
    return out
