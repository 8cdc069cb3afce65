"""Self-check of hooks/record/tensorstats.py against a straightforward reference.

    python benchmarks/check_tensorstats.py [--seed 0] [--quick]

The reference widens every value to float64 on the CPU, drops non-finite
values and reduces with exactly rounded sums (math.fsum). Each case is
summarised by every path that can take it (Python numbers, numpy, torch),
whatever size thresholds say, and the JSON writers are compared with
json.dumps. Prints the worst relative errors seen and exits 1 on a failure.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import torch

from graphdbg.hooks.record import tensorstats as ts

J = dict(separators=(",", ":"))


def reference(t: torch.Tensor, tier: str) -> dict | None:
    if tier == "none" or t.numel() == 0:
        return None
    x = t.detach().cpu()
    if x.is_complex():
        x = x.abs()
    is_float = x.is_floating_point()
    v = x.to(torch.float64).reshape(-1).tolist()
    n_nan = sum(1 for a in v if a != a) if is_float else 0
    fin = [a for a in v if math.isfinite(a)]
    n_inf = len(v) - len(fin) - n_nan
    if tier == "health":
        return {"nan": n_nan, "inf": n_inf}
    if not fin:
        return {"nan": n_nan, "inf": n_inf}
    n = len(fin)
    scale = max(abs(a) for a in fin) or 1.0
    mean = math.fsum(a / scale for a in fin) / n * scale
    var = math.fsum(((a - mean) / scale) ** 2 for a in fin) / (n - 1) if n > 1 else 0.0
    return {"min": min(fin), "max": max(fin), "mean": mean, "std": math.sqrt(var) * scale,
            "norm": math.sqrt(math.fsum((a / scale) ** 2 for a in fin)) * scale,
            "nan": n_nan, "inf": n_inf, "_absmean": math.fsum(abs(a) for a in fin) / n}


def paths(t: torch.Tensor, tier: str):
    """Every implementation that can summarise t, forced past size limits."""
    yield "summarize", ts.summarize(t, tier)
    if tier == "none" or t.numel() == 0 or t.is_complex():
        return
    x = t.detach()
    if t.numel() <= 4096 and t.dtype in ts._LIST_OK:
        vals = x.reshape(-1).tolist()
        yield "list", ts._summarize_list(vals, tier, t.dtype.is_floating_point)
    if t.dtype in ts._NUMPY_STATS_MAX:
        try:
            a = x.numpy()
        except (RuntimeError, TypeError):
            a = None
        if a is not None:
            yield "numpy", ts._summarize_numpy(a, tier)
    elif t.dtype in ts._VIA_FLOAT32_MAX:
        yield "numpy", ts._summarize_numpy(x.float().numpy(), tier)
    yield "torch", ts._summarize_torch(x, tier, t.numel())


WORST: dict[str, float] = {}


def close(name: str, got: float, want: float, tol: float, scale: float) -> bool:
    if math.isnan(want):
        return math.isnan(got)
    if math.isinf(want):
        return got == want
    err = abs(got - want) / (scale or 1.0)
    WORST[name] = max(WORST.get(name, 0.0), err)
    return err <= tol


def check(label: str, t: torch.Tensor, failures: list) -> None:
    before = t.detach().clone() if t.numel() else None
    for tier in ("none", "health", "stats"):
        want = reference(t, tier)
        for path, got in paths(t, tier):
            where = f"{label} tier={tier} path={path}"
            if want is None or got is None:
                if (want is None) != (got is None):
                    failures.append(f"{where}: got {got}, want {want}")
                continue
            keys = [k for k in want if not k.startswith("_")]
            if list(got) != keys:
                failures.append(f"{where}: keys {list(got)} != {keys}")
                continue
            if (got["nan"], got["inf"]) != (want["nan"], want["inf"]):
                failures.append(f"{where}: nan/inf {got['nan']},{got['inf']} "
                                f"want {want['nan']},{want['inf']}")
            if not all(type(got[k]) is int for k in ("nan", "inf")):
                failures.append(f"{where}: nan/inf not ints")
            if "min" not in want:
                continue
            if not all(type(got[k]) is float for k in ("min", "max", "mean", "std", "norm")):
                failures.append(f"{where}: stats not floats: {got}")
            # min/max are values of the tensor: exact (ints beyond 2**53 round like float64)
            for k in ("min", "max"):
                if got[k] != want[k]:
                    failures.append(f"{where}: {k} {got[k]!r} != {want[k]!r}")
            ok = close("mean", got["mean"], want["mean"], 1e-6, want["_absmean"])
            ok &= close("std", got["std"], want["std"], 1e-5, want["std"] or want["_absmean"])
            ok &= close("norm", got["norm"], want["norm"], 1e-6, want["norm"])
            if not ok:
                failures.append(f"{where}: got {got}, want {want}")
            # the run file's JSON
            if ts.stats_json([got, None]) != json.dumps([got, None], **J):
                failures.append(f"{where}: stats_json differs from json.dumps")
        plain = [want and {k: v for k, v in want.items() if not k.startswith("_")}]
        if ts.stats_json(plain) != json.dumps(plain, **J):
            failures.append(f"{label}: stats_json differs from json.dumps on reference")
    s, d = (json.dumps(v, **J) for v in ts.describe(t))
    if ts.describe_json(t) != (s, d, f"[{s}]", f"[{d}]"):
        failures.append(f"{label}: describe_json {ts.describe_json(t)}")
    if before is not None and not torch.equal(before.nan_to_num(), t.detach().nan_to_num()):
        failures.append(f"{label}: the tensor was modified")


def cases(quick: bool):
    sizes = [(), (1,), (2,), (5,), (16,), (4, 8), (33,), (257,), (1000,), (3, 50, 40),
             (20000,), (70000,)] + ([] if quick else [(300, 700)])
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
              torch.int32, torch.int8, torch.uint8, torch.bool, torch.complex64]
    for shape in sizes:
        for dt in dtypes:
            if dt == torch.bool:
                base = torch.rand(shape) > 0.5
            elif dt.is_floating_point or dt.is_complex:
                base = torch.randn(shape, dtype=dt)
            elif dt == torch.uint8:
                base = torch.randint(0, 256, shape, dtype=dt)
            else:
                base = torch.randint(-100, 100, shape, dtype=dt)
            yield f"{dt} {shape}", base
            if base.dim() >= 2:
                yield f"{dt} {shape} transposed", base.transpose(0, -1)
            if base.numel() >= 4:
                yield f"{dt} {shape} strided", base.reshape(-1)[::3]
            if not (dt.is_floating_point or dt.is_complex):
                continue
            flat = base.clone().reshape(-1)
            if flat.numel() >= 3:
                w = flat.clone(); w[1] = float("nan"); yield f"{dt} {shape} nan", w.reshape(shape)
                w = flat.clone(); w[-1] = float("inf"); w[0] = float("-inf")
                yield f"{dt} {shape} inf", w.reshape(shape)
            yield f"{dt} {shape} all nan", torch.full(shape, float("nan"), dtype=dt)
            yield f"{dt} {shape} all inf", torch.full(shape, float("inf"), dtype=dt)
            if dt.is_complex:
                continue
            big = {torch.float16: 6e4, torch.bfloat16: 1e37, torch.float32: 1e37,
                   torch.float64: 1e300}[dt]
            yield f"{dt} {shape} huge", (base.double().clamp(-1, 1) * big).to(dt)
            tiny = {torch.float16: 1e-4, torch.bfloat16: 1e-30, torch.float32: 1e-30,
                    torch.float64: 1e-300}[dt]
            yield f"{dt} {shape} tiny", (base.double() * tiny).to(dt)
            yield f"{dt} {shape} offset", (1000 + 1e-2 * base.double()).to(dt)
            yield f"{dt} {shape} constant", torch.full(shape, 3.25, dtype=dt)
    yield "int64 beyond 2**53", torch.tensor([2**60 + 1, -(2**61) - 3, 5] * 7, dtype=torch.int64)
    yield "int64 beyond 2**53 large", torch.randint(-2**62, 2**62, (70000,), dtype=torch.int64)
    p = torch.nn.Parameter(torch.randn(40, 30))
    yield "parameter", p
    yield "requires_grad result", p * 2
    yield "neg view", torch.randn(20, dtype=torch.complex64).conj().imag
    yield "neg view large", torch.randn(20000, dtype=torch.complex64).conj().imag
    yield "empty", torch.empty(0, 3)
    if not quick:  # float32 accumulation over many values
        yield "float32 1M", torch.randn(1 << 20) * 3 + 1
        yield "float32 1M offset", 1000 + 1e-2 * torch.randn(1 << 20)
        yield "float16 1M", torch.randn(1 << 20, dtype=torch.float16)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    failures: list[str] = []
    count = 0
    inf, nan = float("inf"), float("nan")
    for odd in ([None], [], [{"nan": 3, "inf": 1}, None],
                [{"min": 1.5, "max": inf, "mean": -inf, "std": nan, "norm": 1e308 * 10,
                  "nan": 0, "inf": 2}],
                [{"min": -0.0, "max": 5e-324, "mean": 1e16, "std": 0.1, "norm": 123456789.0,
                  "nan": 0, "inf": 0}, {"nan": 0, "inf": 0}]):
        if ts.stats_json(odd) != json.dumps(odd, **J):
            failures.append(f"stats_json({odd}) = {ts.stats_json(odd)}")
    for label, t in cases(args.quick):
        check(label, t, failures)
        count += 1
    for line in failures[:40]:
        print("FAIL", line)
    print(f"{count} tensors, {len(failures)} failures; worst relative errors: " +
          ", ".join(f"{k} {v:.1e}" for k, v in sorted(WORST.items())))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
