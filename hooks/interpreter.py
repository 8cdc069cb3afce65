"""A recording torch.fx Interpreter: runs a captured graph eagerly, node by
node, keeping every node's value and time, optionally in float64 (the judge).

    rec = RecordingInterpreter(gm)
    out = rec.run(*inputs)
    rec.values["linear_1"], rec.times_ns["linear_1"]

    judge = RecordingInterpreter(gm, float64=True)
    judge.run(*inputs)            # float inputs, params and casts lifted to float64
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.fx

_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_CAST_METHODS = {"half", "bfloat16", "float", "double"}


def _up(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype in _FLOATS:
        return value.to(torch.float64)
    if isinstance(value, torch.dtype) and value in _FLOATS:
        return torch.float64
    if isinstance(value, (list, tuple)):
        return type(value)(_up(v) for v in value)
    return value


class RecordingInterpreter(torch.fx.Interpreter):
    """Keeps each node's output in ``values`` and wall time in ``times_ns``.

    ``overrides`` maps node names to values used instead of running the node
    (to replay, say, a compiled graph's random numbers in the eager reference).
    With ``float64=True`` every floating tensor and dtype argument is lifted to
    float64, the way PyTorch's own accuracy checks build their reference.
    """

    def __init__(self, gm: torch.fx.GraphModule, *, float64: bool = False,
                 overrides: dict[str, Any] | None = None) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.float64 = float64
        self.overrides = overrides or {}
        self.values: dict[str, Any] = {}
        self.times_ns: dict[str, int] = {}
        self.first_nonfinite: str | None = None
        self.current: torch.fx.Node | None = None

    def run_node(self, n: torch.fx.Node) -> Any:
        self.current = n  # the node a failure happened in
        if n.name in self.overrides:
            out = self.overrides[n.name]
            self.values[n.name] = out
            return out
        t0 = time.perf_counter_ns()
        out = super().run_node(n)
        self.times_ns[n.name] = time.perf_counter_ns() - t0
        if self.float64 and n.op in ("placeholder", "get_attr"):
            out = _up(out)
        self.values[n.name] = out
        if self.first_nonfinite is None and n.op not in ("placeholder", "get_attr", "output"):
            if _has_nonfinite(out) and not any(
                    _has_nonfinite(self.values.get(a.name)) for a in n.all_input_nodes):
                self.first_nonfinite = n.name
        return out

    def call_function(self, target, args, kwargs):
        if self.float64:
            args, kwargs = _up(args), {k: _up(v) for k, v in kwargs.items()}
        return super().call_function(target, args, kwargs)

    def call_method(self, target, args, kwargs):
        if self.float64:
            if target in _CAST_METHODS:
                return _up(args[0]) if isinstance(args[0], torch.Tensor) else args[0]
            args, kwargs = _up(args), {k: _up(v) for k, v in kwargs.items()}
        return super().call_method(target, args, kwargs)

    def call_module(self, target, args, kwargs):
        if self.float64:
            args, kwargs = _up(args), {k: _up(v) for k, v in kwargs.items()}
            mod = self.fetch_attr(target)
            if any(p.dtype in _FLOATS for p in mod.parameters()):
                mod = _float64_copy(mod)
            return mod(*args, **kwargs)
        return super().call_module(target, args, kwargs)


def _float64_copy(mod: torch.nn.Module) -> torch.nn.Module:
    import copy
    dup = copy.deepcopy(mod)
    return dup.to(torch.float64)


_functorch_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def _has_nonfinite(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            if type(value) is not torch.Tensor and type(value) is not torch.nn.Parameter:
                return False
            if _functorch_wrapped(value):
                return False  # a vmap/grad level's tensor: reading its values is not allowed
            return not bool(torch.isfinite(value).all())
        return False
    if isinstance(value, (list, tuple)):
        return any(_has_nonfinite(v) for v in value)
    return False
