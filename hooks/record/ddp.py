"""DistributedDataParallel as torch.compile users meet it.

DDPOptimizer (``torch/_dynamo/backends/distributed.py``) splits the graph of
a DDP-wrapped module at the gradient buckets' boundaries, so that each
bucket's allreduce can start while backward still runs, and hands each piece
to the backend: one compiled function arrives as N graphs of one compile id.
They are one function split into buckets, not N compiles and not graph
breaks. The backend is called from DDPOptimizer's ``SubmodCompiler``, whose
frames hold the node being compiled (``submod_<i>``) and the DDPOptimizer
with its buckets: read there, no private state of torch is changed.
"""

from __future__ import annotations

import os
import re

from ..placement.internal import is_stdlib
from ..placement.stack import outward

_DDP_FILE = os.path.join("torch", "_dynamo", "backends", "distributed.py")


_SOURCE_PART = re.compile(r"(?:^|_)(?:modules|parameters|buffers)_")


def param_name(graph_name: str) -> str:
    """A parameter's name as the model has it, from Dynamo's placeholder name:
    ``L_self_modules_h_modules_0_parameters_weight_`` -> ``h.0.weight``."""
    name = re.sub(r"^L_(?:self_)?", "", graph_name).rstrip("_")
    parts = [p for p in _SOURCE_PART.split(name) if p]
    return ".".join(parts) if len(parts) > 1 or name != graph_name else graph_name


def current_bucket() -> dict | None:
    """The bucket DDPOptimizer is compiling now, or None: ``{index, count,
    size_bytes, params, cap_bytes, first_cap_bytes}``, ``params`` in forward
    order (the parameters' names as the graph has them)."""
    target = optimizer = None
    for f in outward():
        code = f.f_code
        if code.co_filename.endswith(_DDP_FILE):
            if code.co_name == "run_node" and target is None:
                node = f.f_locals.get("n")
                target = str(getattr(node, "target", "") or "")
            elif code.co_name == "compile_fn":
                optimizer = f.f_locals.get("self")
                break
    buckets = getattr(optimizer, "buckets", None)
    if not buckets or not target or not target.startswith("submod_"):
        return None
    try:
        index = int(target[len("submod_"):])
        bucket = buckets[index]
    except (ValueError, IndexError):
        return None
    return {"index": index, "count": len(buckets), "size_bytes": int(bucket.size),
            "params": [param_name(p) for p in reversed(bucket.params)],
            "cap_bytes": getattr(optimizer, "bucket_bytes_cap", None),
            "first_cap_bytes": getattr(optimizer, "first_bucket_cap", None)}


_DDP_WRAPPER = os.path.join("torch", "nn", "parallel", "distributed.py")
_POLYFILLS = os.path.join("torch", "_dynamo", "polyfills") + os.sep

DDP_HINT = (
    "Nothing to change: DDP's own forward runs eagerly by design. Dynamo compiles the wrapped "
    "module's forward as its own frame, which DDPOptimizer splits at the gradient buckets so "
    "that allreduce overlaps backward. Cost: DDP's Python wrapper each step, as without "
    "torch.compile.")


FSDP_HINT = (
    "Nothing to change: FSDP2's hooks (all-gather before a module's forward, reshard after) run "
    "eagerly by default (torch._dynamo.config.skip_fsdp_hooks); Dynamo compiles each module's "
    "forward between them. Cost: the hooks' Python each call, as without torch.compile.")

_FSDP = os.path.join("torch", "distributed", "fsdp") + os.sep


def expected_break(frames: list) -> str | None:
    """"ddp" or "fsdp" when a graph break (its frames outermost first) is in
    DistributedDataParallel's own forward or FSDP2's hooks: its innermost
    frame there, or in the standard library or Dynamo's polyfills that their
    code called (the ``contextlib`` of ``with self._inside_ddp_forward()``)."""
    for f in reversed(frames):
        if f.file.endswith(_DDP_WRAPPER):
            return "ddp"
        if _FSDP in f.file:
            return "fsdp"
        if not (is_stdlib(f.file) or _POLYFILLS in f.file):
            return None
    return None
