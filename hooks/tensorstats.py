"""Value summaries of tensors, by tier (like TensorFlow Debugger V2's debug modes).

- ``none``:   shape and dtype only
- ``health``: + NaN / Inf counts
- ``stats``:  + min, max, mean, std, L2 norm (over finite values)
- ``full``:   same summaries; the recorder also keeps selected tensors

Summaries are computed with a single device->host transfer and never keep the
tensor alive. Callers run this with graphdbg's own dispatch mode off (inside
``__torch_dispatch__`` or with the mode popped), so these ops are not recorded.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

TIERS = ("none", "health", "stats", "full")

_FLOAT_KINDS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def describe(t: torch.Tensor) -> tuple[list, str]:
    """Shape (symbolic sizes as their names) and dtype."""
    return [s if isinstance(s, int) else str(s) for s in t.shape], str(t.dtype).replace("torch.", "")


def _plain(t: Any) -> bool:
    # Only dense, real tensors: subclasses (FakeTensor, DTensor, functional
    # wrappers) and meta tensors have no values to read.
    return (type(t) is torch.Tensor or type(t) is torch.nn.Parameter) and \
        t.layout == torch.strided and t.device.type != "meta"


def summarize(t: torch.Tensor, tier: str) -> dict | None:
    """A JSON-ready dict of value statistics, or None when there is nothing to read."""
    if tier == "none" or not _plain(t) or t.numel() == 0:
        return None
    if t.device.type == "cpu" and t.numel() <= _NUMPY_MAX and t.dtype in _NUMPY_OK:
        return _summarize_numpy(t, tier)
    with torch.no_grad():
        x = t.detach()
        if x.is_complex():
            x = x.abs()
        if x.dtype == torch.bool:
            x = x.to(torch.uint8)
        is_float = x.dtype in _FLOAT_KINDS or x.is_floating_point()
        if tier == "health":
            if not is_float:
                return {"nan": 0, "inf": 0}
            nan, inf = torch.stack([x.isnan().sum(), x.isinf().sum()]).tolist()
            return {"nan": int(nan), "inf": int(inf)}
        # one pass in float64 keeps ints exact and avoids fp16 overflow in norm
        y = x.to(torch.float64) if x.dtype != torch.float64 else x
        if is_float:
            finite = y.isfinite()
            n_nan = x.isnan().sum()
            n_inf = (~finite).sum() - n_nan
            if not bool(finite.all()):
                y = y[finite]
                if y.numel() == 0:
                    return {"nan": int(n_nan), "inf": int(n_inf)}
        else:
            n_nan = n_inf = torch.zeros((), dtype=torch.int64, device=y.device)
        std = y.std() if y.numel() > 1 else torch.zeros((), dtype=y.dtype, device=y.device)
        vals = torch.stack([
            y.min(), y.max(), y.mean(), std, torch.linalg.vector_norm(y),
            n_nan.to(y.dtype), n_inf.to(y.dtype)]).tolist()
        return {"min": vals[0], "max": vals[1], "mean": vals[2], "std": vals[3],
                "norm": vals[4], "nan": int(vals[5]), "inf": int(vals[6])}


_NUMPY_MAX = 1 << 16
_NUMPY_OK = {torch.float32, torch.float64, torch.float16, torch.int64, torch.int32,
             torch.int16, torch.int8, torch.uint8, torch.bool}


def _summarize_numpy(t: torch.Tensor, tier: str) -> dict:
    """Small CPU tensors: numpy reductions cost about a microsecond each, a
    fraction of torch's per-op dispatch, which dominates at these sizes."""
    a = t.detach().numpy()
    is_float = a.dtype.kind == "f"
    if is_float:
        finite = np.isfinite(a)
        all_finite = bool(finite.all())
        n_nan = 0 if all_finite else int(np.isnan(a).sum())
        n_inf = 0 if all_finite else int(a.size - finite.sum() - n_nan)
    else:
        all_finite, n_nan, n_inf = True, 0, 0
    if tier == "health":
        return {"nan": n_nan, "inf": n_inf}
    v = a.astype(np.float64, copy=False).ravel()
    if not all_finite:
        v = v[finite.ravel()]
        if v.size == 0:
            return {"nan": n_nan, "inf": n_inf}
    mean = float(v.mean())
    std = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return {"min": float(v.min()), "max": float(v.max()), "mean": mean, "std": std,
            "norm": float(np.sqrt(np.dot(v, v))), "nan": n_nan, "inf": n_inf}


def flat_tensors(value: Any, limit: int = 16) -> list[torch.Tensor]:
    """Tensors in an op's or graph's output (tuples, lists, dicts), in order."""
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
