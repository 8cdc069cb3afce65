"""What checking a compiled call against eager will cost in memory, known
before it runs, and the budget it must fit in.

The check keeps every node's value of the eager reference run (for the
per-node values and, when outputs differ, for localisation) and clones the
graph's inputs (the reference never touches the program's tensors; the
gradient check takes gradients of clones). Its size comes from the shapes
Dynamo recorded on the graph's nodes, so nothing has to run to know it.
The float64 judge and localisation run only when compiled and eager differ.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Any

import torch
import torch.fx

from .subgraphs import COMPUTE_OPS

BUDGET_SHARE = 0.5  # of the memory free when the check would start


def _numel(t: torch.Tensor) -> int:
    """Elements of ``t`` from its sizes' hints. Never ``int()`` of a symbolic
    size: that guards, and the guard specialises the size in the ShapeEnv the
    program's graph shares (an exported program then refuses other batch
    sizes, a dynamic compile loses its dynamism)."""
    n = 1
    for d in t.shape:
        if isinstance(d, torch.SymInt):
            d = d.node.hint   # None: unbacked, no hint
            if d is None:
                return 0
        n *= int(d)
    return n


def _bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        try:
            return _numel(value) * value.element_size()
        except Exception:  # sizes we cannot read
            return 0
    if isinstance(value, (list, tuple)):
        return sum(_bytes(v) for v in value)
    return 0


def value_bytes(gm: torch.fx.GraphModule) -> int:
    """Bytes of every compute node's value, from Dynamo's example values."""
    total = 0
    for n in gm.graph.nodes:
        if n.op in COMPUTE_OPS:
            total += _bytes(n.meta.get("example_value", n.meta.get("val")))
    return total


def estimate(gm: torch.fx.GraphModule, args: tuple) -> int:
    """The check's extra memory: the reference's values and two sets of
    input clones (reference run, gradients)."""
    return value_bytes(gm) + 2 * _bytes(list(args))


def free_memory(args: tuple) -> tuple[int | None, str]:
    """Free memory where the graph's tensors live: the GPU's when an input is
    on CUDA, else the machine's available memory."""
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_cuda:
            try:
                return torch.cuda.mem_get_info(a.device)[0], f"free memory of {a.device}"
            except Exception:
                break
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "available memory"
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "free memory"
    except (ValueError, OSError, AttributeError):
        return None, "free memory"


def budget(compare_memory_mib: float | None, args: tuple) -> tuple[int | None, str]:
    """The budget in bytes and what it is (None: no limit known)."""
    if compare_memory_mib is not None:
        return int(compare_memory_mib * 2**20), "--compare-memory"
    free, what = free_memory(args)
    if free is None:
        return None, what
    return int(free * BUDGET_SHARE), f"half the {what}"


def human(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def export_estimate(ep, onnx: bool) -> int:
    """An export's check (hooks/record/exports.py): the exported program's
    values kept node by node, the eager model's outputs per op (about as
    much again), and for ONNX the weights three times over (the serialized
    ONNX model, its bytes, ONNX Runtime's own copy) and ONNX Runtime's
    intermediate outputs."""
    values = value_bytes(ep.graph_module)
    weights = sum(_bytes(t) for t in ep.state_dict.values()) + \
        sum(_bytes(t) for t in getattr(ep, "constants", {}).values())
    return 2 * values + (3 * weights + values if onnx else 0)


def _malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to call
        return None


_TRIM = _malloc_trim()


def release_freed() -> None:
    """Give the memory the check has freed back to the system (glibc's
    ``malloc_trim``). The check's float64 values and temporaries are freed
    as soon as they are read, but glibc keeps freed heap pages mapped, so
    each phase of the check would otherwise start from the last one's high
    mark: on nanoGPT that was about 130 MB of the process's peak. Frees
    nothing that is still in use (the program's tensors are untouched);
    a no-op where the C library is not glibc. GPU memory is the caching
    allocator's and left to it."""
    if _TRIM is not None:
        _TRIM(0)
