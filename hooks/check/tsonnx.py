"""The TorchScript exporter's ONNX file against its model, line by line.

The TorchScript exporter (``torch.onnx.export(..., dynamo=False)``) keeps no
FX graph to compare node by node, but each ONNX node it writes comes from a
traced op with the Python stack it ran at (hooks/record/tsexport.py keeps
them: `DocStrings`). When the program's InferenceSession on such a file
returns other outputs than the model (hooks/record/ortsession.py), this says
at which line of the model ONNX Runtime first computes otherwise:

- one ONNX Runtime session of our own on the file returns every node's
  value as an extra output (the program's session is not touched);
- the model runs eagerly on the same inputs under a dispatch mode that keeps,
  for each run of consecutive ops at one user line, the value of its last op;
- the ONNX nodes are cut into runs the same way (Constant nodes left out).
  The k-th run of a line in ONNX meets the k-th run of that line in eager,
  only when the line ran as many times on both sides; a run where eager drew
  random numbers is not compared (ONNX Runtime has its own streams);
- the first run, in the ONNX graph's order, whose last value departs
  (`compare_values`, judged by a float64 copy when the difference is not
  NaN/Inf) and whose floating-point inputs all come from runs that agree, is
  where the translation goes wrong. When an input comes from a run that could
  not be compared, nothing is said (the finding stays at the program's
  ``run`` line): a wrong line is worse than none.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from graphdbg.core.sourcemap import Frame

from ..placement.stack import user_frame
from .numerics import Tolerance, ValueDiff, compare_values, is_finding
from .onnxcheck import comparable

_MAX_PROTO = 2**31 - 1   # protobuf's limit for one serialised model
_LEFT_OUT = {"Constant"}


@dataclass
class Run:
    """Consecutive ops at one user line."""
    line: tuple[str, int]
    nodes: list[int] = field(default_factory=list)   # ONNX: the nodes' indices
    ops: list[str] = field(default_factory=list)
    value: Any = None                                 # the last op's (first) tensor
    random: bool = False                              # eager: an op that draws ran
    stack: list[Frame] | None = None


@dataclass
class LineCheck:
    """The line where ONNX Runtime first departs from the model."""
    stack: list[Frame]       # its user stack as traced, the line innermost
    diff: ValueDiff
    onnx_ops: list[str]
    occurrence: int          # which run of the line (0: the first)
    compared: int            # runs compared


def onnx_runs(stacks: list[list[Frame] | None], ops: list[str]) -> list[Run]:
    runs: list[Run] = []
    for i, (st, op) in enumerate(zip(stacks, ops)):
        if op in _LEFT_OUT or not st:
            continue
        line = (st[-1].file, st[-1].line)
        if not runs or runs[-1].line != line:
            runs.append(Run(line, stack=st))
        runs[-1].nodes.append(i)
        runs[-1].ops.append(op)
    return runs


class _LineValues(TorchDispatchMode):
    """Eager's runs of consecutive ops at one user line, each with a copy
    of its last op's first tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[Run] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        f = user_frame()
        if f is None:
            return out
        line = (f.file, f.line)
        if not self.runs or self.runs[-1].line != line:
            self.runs.append(Run(line))
        run = self.runs[-1]
        value = next((t for t in (out if isinstance(out, (tuple, list)) else (out,))
                      if isinstance(t, torch.Tensor)), None)
        run.value = value.detach().clone() if value is not None else None
        run.ops.append(str(func))
        run.random |= torch.Tag.nondeterministic_seeded in func.tags
        return out


def eager_runs(forward: Callable[[], Any]) -> list[Run]:
    with _LineValues() as mode:
        forward()
    return mode.runs


def _by_line(runs: list[Run]) -> dict[tuple[str, int], list[Run]]:
    out: dict[tuple[str, int], list[Run]] = {}
    for r in runs:
        out.setdefault(r.line, []).append(r)
    return out


def onnx_values(model_proto, feed: dict) -> dict[str, torch.Tensor]:
    """Every node output's value on ``feed``, from a session of our own."""
    import onnx
    import onnxruntime as ort
    graph = model_proto.graph
    have = {o.name for o in graph.output}
    for node in graph.node:
        for name in node.output:
            if name and name not in have:
                graph.output.append(onnx.ValueInfoProto(name=name))
                have.add(name)
    data = model_proto.SerializeToString()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.disable_prepacking", "1")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"],
                                   sess_options=options)
    del data
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}
    import numpy as np
    results = session.run(None, {k: v for k, v in feed.items() if k in wanted})
    return {n: torch.from_numpy(np.array(v, copy=True)) for n, v in zip(names, results)
            if isinstance(v, np.ndarray)}


def load(path: str | None, data: bytes | None):
    """The exported ONNX model (None: too large to run whole here, or gone)."""
    import onnx
    if data is not None:
        return onnx.load_from_string(data)
    if path is None or not os.path.exists(path):
        return None
    model = onnx.load(path)
    return model if model.ByteSize() < _MAX_PROTO else None


def check(model_proto, stacks: list[list[Frame] | None], feed: dict,
          forward: Callable[[], Any], judge: Callable[[], Callable[[], Any]] | None,
          tol: Tolerance) -> LineCheck | None:
    """Where ONNX Runtime first departs from ``forward`` (the model on the
    session's inputs) on ``feed``; ``judge``: makes the same forward in
    float64 (called outside the recording: its copies are not the model's ops)."""
    nodes = list(model_proto.graph.node)
    runs = onnx_runs(stacks, [n.op_type for n in nodes])
    if not runs:
        return None
    got = onnx_values(model_proto, feed)
    eager = _by_line(eager_runs(forward))
    theirs = _by_line(runs)
    status: dict[int, str] = {}     # id(ONNX run): ok | differs | (absent: not compared)
    pairs: dict[int, tuple[Run, Run, torch.Tensor, int]] = {}
    for line, mine in theirs.items():
        others = eager.get(line, [])
        if len(others) != len(mine):
            continue
        for k, (o, e) in enumerate(zip(mine, others)):
            onnx = comparable(got.get(nodes[o.nodes[-1]].output[0]), e.value)
            if onnx is None or e.random:
                continue
            pairs[id(o)] = (o, e, onnx, k)
    diffs: dict[int, ValueDiff] = {}
    for key, (o, e, onnx, _) in pairs.items():
        d = compare_values(onnx, e.value, None, tol)
        if is_finding(d):
            diffs[key] = d
        status[key] = "differs" if is_finding(d) else "ok"
    if any(d.kind in ("miscompile", "nonfinite") for d in diffs.values()) and judge is not None:
        try:
            judged = _by_line(eager_runs(judge()))
        except Exception:
            judged = {}
        for key, d in list(diffs.items()):
            o, e, onnx, k = pairs[key]
            twins = judged.get(o.line, [])
            if d.kind not in ("miscompile", "nonfinite") or len(twins) != len(theirs[o.line]):
                continue
            j = twins[k].value
            if not isinstance(j, torch.Tensor) or j.shape != e.value.shape:
                continue
            d = compare_values(onnx, e.value, j, tol)
            if is_finding(d):
                diffs[key] = d
            else:
                del diffs[key]
                status[key] = "ok"
    first = next((o for o in runs if status.get(id(o)) == "differs"), None)
    if first is None or not _own(first, runs, nodes, got, status):
        return None
    return LineCheck(first.stack or [], diffs[id(first)], first.ops, pairs[id(first)][3],
                     len(pairs))


def _own(first: Run, runs: list[Run], nodes: list, got: dict, status: dict) -> bool:
    """Every value ``first`` reads from outside it comes from a graph input,
    a weight, an integer computation, or a run that was compared and agrees
    (its last node): the departure is its own."""
    producer = {name: i for i, n in enumerate(nodes) for name in n.output if name}
    run_of = {i: r for r in runs for i in r.nodes}
    inside = set(first.nodes)
    memo: dict[str, bool] = {}

    def certain(name: str) -> bool:
        if name in memo:
            return memo[name]
        memo[name] = False   # a cycle is not certainty
        p = producer.get(name)
        r = run_of.get(p) if p is not None else None
        v = got.get(name)
        if p is None:
            ok = True
        elif r is not None and status.get(id(r)) == "differs":
            ok = False
        elif v is not None and not v.is_floating_point():
            ok = True
        elif r is not None:
            ok = status.get(id(r)) == "ok" and r.nodes[-1] == p
        else:   # a node at no user line (a Constant, an exporter's own): what it reads
            ok = all(certain(i) for i in nodes[p].input if i)
        memo[name] = ok
        return ok

    return all(certain(name) for i in first.nodes for name in nodes[i].input
               if name and producer.get(name) not in inside)
