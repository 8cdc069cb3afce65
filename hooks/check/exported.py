"""An exported program against the eager model it was exported from.

`torch.export` traces the model once, on its example inputs: Python control
flow, Python numbers and attributes are fixed at that moment. On other
inputs (or after the program changed an attribute the forward reads) the
exported program may compute something else than the model, and nothing
says so. This runs both on the same inputs, the model eagerly under a
dispatch mode that keeps each op's output with the user's line that ran it,
the exported program node by node, and compares the outputs (the float64
judge of the exported program when they differ). When they differ, the two
runs are aligned by user line (an exported node carries its line in
``stack_trace``): the first line whose last value differs, or the first line
that one side ran and the other did not (a branch export fixed), is where
they part.

Runs the model's forward once more (no_grad, RNG rewound, buffers such as
BatchNorm's running statistics put back): a forward with side effects of its
own (a hook that counts calls) sees one more call, as under export itself.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils import _pytree


from ..placement.nodes import node_line
from ..placement.stack import user_frame
from .interpreter import EagerReference
from .numerics import Tolerance, ValueDiff, compare_values, is_finding, worst
from .subgraphs import clone, preserved_rng, set_rng


class _LineOps(TorchDispatchMode):
    """Every op's output with the user's line that ran it."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[tuple[str, int] | None, str, Any]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        user = user_frame()
        line = (user.file, user.line) if user is not None else None
        value = out.detach().clone() if isinstance(out, torch.Tensor) else None
        self.ops.append((line, str(func.overloadpacket.__name__), value))
        return out


@dataclass
class ExportCheck:
    output: ValueDiff                 # the worst output difference
    output_index: int
    line: tuple[str, int] | None      # where they part
    node: torch.fx.Node | None        # the exported node there (its last)
    how: str                          # "values" (the line's values differ) | "path" | "outputs"
    diff: ValueDiff | None            # at the line (how == "values")
    eager_ops: list[str]              # eager's ops at the line
    graph_ops: list[str]              # the exported program's ops at the line
    eager_line: tuple[str, int] | None = None  # "path": where eager went instead


def _float64_outputs(model: torch.nn.Module, args: tuple, kwargs: dict, rng) -> list:
    """The model's outputs in float64: a copy of it, its floating parameters,
    buffers and inputs lifted (PyTorch's accuracy checks' reference)."""
    import copy
    up = lambda v: v.detach().to(torch.float64) if isinstance(v, torch.Tensor) \
        and v.is_floating_point() else v  # noqa: E731
    twin = copy.deepcopy(model).to(torch.float64)
    try:
        with preserved_rng(), torch.no_grad():
            set_rng(rng)
            return _pytree.tree_leaves(twin(*_pytree.tree_map(up, args), **_pytree.tree_map(up, kwargs)))
    finally:
        del twin


def _buffers(*mods: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    seen, out = set(), []
    for m in mods:
        for b in m.buffers():
            if id(b) not in seen and not b.is_meta:
                seen.add(id(b))
                out.append((b, b.detach().clone()))
    return out


def _runs(items: list[tuple[Any, Any]]) -> list[tuple[Any, list]]:
    """Consecutive items with the same key, grouped: [(key, [values...])]."""
    out: list[tuple[Any, list]] = []
    for key, v in items:
        if out and out[-1][0] == key:
            out[-1][1].append(v)
        else:
            out.append((key, [v]))
    return out


def flat_inputs(ep, args: tuple, kwargs: dict) -> list:
    """The exported program's flat inputs for ``args``/``kwargs`` (checked
    against its input spec, as ``verify_onnx_program`` does; without ``ep``,
    the pytree leaves)."""
    if ep is not None:
        try:
            flat, _ = ep._get_flat_args_with_check(args, kwargs)
            return list(flat)
        except AttributeError:   # not in this torch: the pytree leaves
            pass
    return _pytree.tree_leaves((args, kwargs))


def check(model: torch.nn.Module, ep, gm: torch.fx.GraphModule, args: tuple, kwargs: dict,
          tol: Tolerance, rng: tuple | None = None,
          values: dict | None = None) -> ExportCheck | None:
    """None when the exported module ``gm`` (``ep.module()``) computes what
    the model does on these inputs; else where they part. ``values`` gets
    every node's value of ``gm`` on them (the ONNX check reuses them)."""
    cl = lambda v: clone(v) if isinstance(v, torch.Tensor) else v  # noqa: E731
    saved = _buffers(model, gm)
    try:
        with preserved_rng(), torch.no_grad():
            set_rng(rng)
            e_args, e_kwargs = _pytree.tree_map(cl, args), _pytree.tree_map(cl, kwargs)
            ops = _LineOps()
            with ops:
                eager_out = model(*e_args, **e_kwargs)
            del e_args, e_kwargs
            set_rng(rng)
            flat_in = [cl(v) for v in flat_inputs(ep, args, kwargs)]
            ref = EagerReference(gm)
            graph_out = ref.run(*flat_in)
    finally:
        with torch.no_grad():
            for b, copy in saved:
                b.copy_(copy)
    if values is not None:
        values.update(ref.values)
    eager = _pytree.tree_leaves(eager_out)
    graph = _pytree.tree_leaves(graph_out)
    found = worst((compare_values(g, e, None, tol), i) for i, (g, e) in enumerate(zip(graph, eager)))
    if found is not None and not is_finding(found[0]):
        found = None
    if found is None and len(graph) == len(eager):
        return None
    if found is None:  # a different number of outputs
        return ExportCheck(ValueDiff(float("inf"), float("inf"), None, None, "shape", "?"), 0,
                           None, None, "outputs", None, [], [])
    out_diff, index = found
    # the judge: the model itself in float64 (a copy), on the same inputs
    try:
        judge = _float64_outputs(model, args, kwargs, rng)
        if len(judge) == len(eager):
            out_diff = compare_values(graph[index], eager[index], judge[index], tol) or out_diff
    except Exception:
        pass
    # align the two runs by user line
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    g_runs = _runs([(node_line(n), n) for n in nodes if node_line(n) is not None])
    e_runs = _runs([(line, (name, value)) for line, name, value in ops.ops
                    if line is not None])
    matcher = difflib.SequenceMatcher(None, [k for k, _ in e_runs], [k for k, _ in g_runs],
                                      autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            e = e_runs[i1] if i1 < i2 else None
            g = g_runs[j1] if j1 < j2 else None
            line = (g or e)[0]
            return ExportCheck(out_diff, index, line, g[1][-1] if g else None, "path", None,
                               [n for n, _ in e[1]] if e else [],
                               [str(n.target) for n in g[1]] if g else [],
                               e[0] if e else None)
        for (line, e_vals), (_, g_nodes) in zip(e_runs[i1:i2], g_runs[j1:j2]):
            last = g_nodes[-1]
            value = ref.values.get(last.name)
            e_value = next((v for _, v in reversed(e_vals) if isinstance(v, torch.Tensor)
                            and isinstance(value, torch.Tensor) and v.shape == value.shape), None)
            d = compare_values(value, e_value, None, tol) if e_value is not None else None
            if is_finding(d):
                return ExportCheck(out_diff, index, line, last, "values", d,
                                   [n for n, _ in e_vals], [str(n.target) for n in g_nodes])
    return ExportCheck(out_diff, index, None, None, "outputs", None, [], [])
