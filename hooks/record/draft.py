"""`torch.export.draft_export`, recorded; the runtime assertions an ONNX
program converted from an exported program dropped.

draft_export is what torch's error suggests for a branch on data (``if
x.mean() > 0.5:``): it traces the branch the example inputs take, assumes
the condition keeps that value, and keeps the assumption in the exported
program as a runtime assertion (``aten._assert_scalar`` on the condition).
Its report (``ep._report``, a ``DraftExportReport``) lists each assumption
with the user's stack where it was made. The exported program is recorded
as torch.export's are (a graph of kind ``export``, ``via`` draft_export),
each assumption a finding at its line.

The ONNX exporter translates no runtime assertion: an ONNX program made from
such an exported program (``torch.onnx.export(ep, ...)``, or
``torch.onnx.export(model, ...)`` when its draft-export strategy captured
the model) answers inputs that take the other branch with the traced
branch's result. `dropped` names the assertions the ONNX graph lacks, by
the line they guard; the ONNX program is checked against the model's eager
forward (hooks/record/exports.py keeps a weak reference from the exported
program to its model), on the exported program without its assertions
(`strip_asserts`), and a divergence there names the line whose assertion
failed (`failed`).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

import torch
import torch.fx

from graphdbg.core.sourcemap import Frame, code_line

from .. import compat
from ..placement.exports import report_frames
from ..placement.nodes import node_frames

_ASSERTS = {"_assert_scalar", "_assert_async", "sym_constrain_range",
            "sym_constrain_range_for_size"}
_EXPR = re.compile(r"Runtime assertion failed for expression (.+?) on node")


def install(recorder) -> Any | None:
    """Wraps ``torch.export.draft_export`` (the module attribute) for
    ``recorder`` (an `ExportRecorder`): the same result, the same exception.
    The original, or None where this torch has none."""
    orig = getattr(torch.export, "draft_export", None)
    if orig is None:
        return None

    @functools.wraps(orig)
    def export(*args, **kwargs):   # (named as torch.export.export's wrapper: the same mark)
        return recorder._export(orig, args, kwargs, via="torch.export.draft_export")

    export._graphdbg_hook = True
    torch.export.draft_export = export
    return orig


def uninstall(orig) -> None:
    if orig is not None:
        torch.export.draft_export = orig


def is_assert(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return False
    name = getattr(node.target, "__name__", "") or ""
    return name.split(".")[0] in _ASSERTS or getattr(
        getattr(node.target, "overloadpacket", None), "__name__", "") in _ASSERTS


def condition(frame: Frame | None) -> str | None:
    """The condition a branch line tests (`x.mean() > 0.5` of ``if x.mean() > 0.5:``)."""
    code = code_line(frame.file, frame.line) if frame is not None else None
    if not code:
        return None
    m = re.match(r"^\s*(?:el)?if\s+(.+?)\s*:\s*(#.*)?$", code) or \
        re.match(r"^\s*(?:while|assert)\s+(.+?)\s*:?\s*(#.*)?$", code)
    return m.group(1) if m else code.strip()


def assumptions(ep) -> list[dict]:
    """What draft_export assumed: {expr, result, frames, occurrences} for each
    data-dependent decision in its report (none when it has none)."""
    report = getattr(ep, "_report", None)
    interned = compat.interned_filenames()
    out = []
    for f in getattr(report, "failures", None) or ():
        kind = getattr(getattr(f, "failure_type", None), "name", str(getattr(f, "failure_type", "")))
        data = getattr(f, "data", None) or {}
        if "DATA_DEPENDENT" not in kind or not isinstance(data, dict):
            continue
        frames = report_frames(report, data, interned)
        out.append({"expr": str(data.get("expr")), "result": str(data.get("result")),
                    "frames": frames, "condition": condition(frames[-1] if frames else None),
                    "occurrences": data.get("occurrences")})
    return out


def _line_of(node: torch.fx.Node) -> list[Frame]:
    return node_frames(node)


def asserted(ep) -> list[dict]:
    """The exported program's runtime assertions, one per user line they
    guard: {frames, exprs, nodes}, in graph order."""
    by_line: dict[tuple, dict] = {}
    for n in ep.graph.nodes:
        if not is_assert(n):
            continue
        frames = _line_of(n)
        key = (frames[-1].file, frames[-1].line) if frames else None
        m = _EXPR.search(str(n.args[1])) if len(n.args) > 1 else None
        entry = by_line.setdefault(key, {"frames": frames, "exprs": [], "nodes": [],
                                         "condition": condition(frames[-1] if frames else None)})
        entry["nodes"].append(n.name)
        if m:
            entry["exprs"].append(m.group(1))
    return list(by_line.values())


def dropped(program, source=None) -> list[dict]:
    """The assertions of the exported program ``source`` (else ``program``'s
    own: the conversion's decompositions drop them already) that the ONNX
    graph has nothing from (the ONNX exporter translates none)."""
    from ..check import onnxcheck
    have = onnxcheck.onnx_ops(program)
    return [a for a in asserted(source if source is not None else program.exported_program)
            if not any(name in have for name in a["nodes"])]


def failing(source, args: tuple, kwargs: dict) -> list[dict]:
    """The runtime assertions of the exported program ``source`` that fail
    on ``args``/``kwargs`` (its module run without them, on clones, RNG and
    grad mode left as they were): the branches these inputs take otherwise
    than the trace. The caller makes ``source.module()`` its own work."""
    from ..check.exported import flat_inputs
    from ..check.interpreter import EagerReference
    from ..check.subgraphs import clone_inputs, preserved_rng
    gm = source.module()
    removed = strip_asserts(gm)
    if not removed:
        return []
    with preserved_rng(), torch.no_grad():
        ref = EagerReference(gm)
        ref.run(*clone_inputs(flat_inputs(source, args, kwargs)))
    return failed(removed, ref.values)


def strip_asserts(gm: torch.fx.GraphModule) -> list[dict]:
    """Removes the runtime assertions from ``gm`` (our own ``ep.module()``:
    the ONNX program has none, so it computes what this computes): each
    {name, cond (the node it asserts), frames}."""
    removed = []
    for n in reversed(list(gm.graph.nodes)):
        if is_assert(n) and not n.users:
            cond = n.args[0] if n.args and isinstance(n.args[0], torch.fx.Node) else None
            removed.append({"name": n.name, "cond": cond, "frames": _line_of(n)})
            gm.graph.erase_node(n)
    if removed:
        gm.recompile()
    return removed[::-1]


def failed(removed: list[dict], values: dict) -> list[dict]:
    """The removed assertions whose condition is false on the values a run
    of the stripped module gave: the branches these inputs take otherwise."""
    return [r for r in removed if r["cond"] is not None and r["frames"]
            and values.get(r["cond"].name) is False]


def _comparison(cond: torch.fx.Node, frames: list[Frame]) -> torch.fx.Node:
    """The aten op at the assertion's line that made the condition (``gt``
    of ``x.mean() > 0.5``: a bool from a non-bool), else the condition."""
    def is_bool(v):
        return isinstance(v, torch.Tensor) and v.dtype == torch.bool
    seen, stack = set(), [cond]
    while stack:
        n = stack.pop(0)
        if n in seen:
            continue
        seen.add(n)
        if isinstance(n.target, torch._ops.OpOverload) and is_bool(n.meta.get("val")) and \
                not any(is_bool(i.meta.get("val")) for i in n.all_input_nodes) and \
                node_frames(n)[-1:] == frames[-1:]:
            return n
        stack.extend(n.all_input_nodes)
    return cond


def at_branch(found, a: dict):
    """An `ExportCheck` placed at the line the failed assertion guards."""
    site = a["frames"][-1]
    return dataclasses.replace(found, line=(site.file, site.line), how="branch", eager_line=None,
                               node=_comparison(a["cond"], a["frames"]))
