"""A compiled graph's outputs against the values the other run computed eagerly.

Each output of each compiled call is the value of one FX node (the `output`
node's args). Its twin in the other run is the eager op that produced the
same value: in the same step, at the node's line (and call path, as far as
the node knows it), in the invocation of that line that matches the call
(the k-th call in the step meets the k-th run of consecutive ops at the
line), with the same shape and dtype, and the aten op the node's target
becomes (else the invocation's last op). When the calls and invocations do
not match one to one, or no op fits, no pairing exists: counted, never a
difference. Outputs that are graph inputs passed through, bools, or values
whose statistics were not recorded are not compared.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass

from ..runfile.query import Node, Op
from .align import Path, Paths, StepAlignment, ends_with
from .values import numel, stats_close

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def target_name(target: str | None) -> str | None:
    """The function a node calls, as aten names it: ``torch.relu`` ->
    relu, ``_operator.mul`` -> mul, ``<built-in method add of ...>`` -> add."""
    if not target:
        return None
    m = re.match(r"<built-in (?:method|function) (\w+)", target)
    name = m.group(1) if m else target.rsplit(".", 1)[-1]
    return name.strip("_") or None


def aten_name(op: str) -> str:
    """``aten.relu.default`` -> relu; ``aten.add_.Tensor`` -> add."""
    parts = op.split(".")
    return (parts[1] if len(parts) > 1 else op).strip("_")


@dataclass(frozen=True, slots=True, eq=False)   # by identity: a node holds lists
class _Want:
    """One output of one call to pair."""
    call_seq: int
    graph: int
    call: int
    output: int
    node: Node
    value: dict                   # {shape, dtype, stats}


def _output_nodes(run, graph_id: int) -> list[Node | None] | None:
    """The node of each tensor output of a graph, in the order its calls'
    outputs are recorded (None: an input passed through, not compared);
    None when that order cannot be known."""
    nodes = run.nodes(graph_id)
    by_name = {n.name: n for n in nodes}
    out = next((n for n in reversed(nodes) if n.op == "output"), None)
    if out is None or out.args is None:
        return None
    result: list[Node | None] = []
    for name in _NAME.findall(out.args):
        n = by_name.get(name)
        if n is None or n.op == "output":
            continue            # None, a constant
        if not n.dtypes or n.dtypes[0] is None:
            continue            # not a tensor: not among the recorded outputs
        result.append(None if n.op == "placeholder" else n)
    return result


class GraphOutputs:
    """Pairs and compares compiled outputs (`compare`): the differences
    found (at most one per graph) and how many outputs had no twin."""

    def __init__(self, al: StepAlignment, rtol: float) -> None:
        self.al, self.rtol = al, rtol
        self.compared = 0
        self.unpaired = 0

    def compare(self, src, other, src_name: str) -> list[tuple[_Want, Op, float]]:
        al = self.al
        steps = al.steps_b if src_name == "B" else al.steps_a
        other_steps = al.steps_a if src_name == "B" else al.steps_b
        src_paths = al.paths_b if src_name == "B" else al.paths_a
        other_paths = al.paths_a if src_name == "B" else al.paths_b
        specs: dict[int, list | None] = {}
        found: dict[int, tuple] = {}
        wants: list[_Want] = []       # the outputs of the step being read
        at = None
        for c in src.run.iter_calls():
            step = steps.of(c.seq)
            if step != at and wants:    # calls come in seq order: that step is complete
                self._step(at, wants, src, steps, src_paths, other, other_steps, other_paths,
                           found)
                wants = []
            at = step
            if not c.outputs:
                continue
            if c.graph_id not in specs:
                specs[c.graph_id] = _output_nodes(src.run, c.graph_id)
            spec = specs[c.graph_id]
            for i, v in enumerate(c.outputs):
                if not isinstance(v, dict) or not v.get("stats") or v.get("dtype") == "bool" \
                        or v.get("shape") is None:
                    continue
                if spec is None or len(spec) != len(c.outputs):
                    self.unpaired += 1
                    continue
                node = spec[i]
                if node is None:
                    continue        # a graph input passed through
                if node.file is None or node.line is None:
                    self.unpaired += 1
                    continue
                wants.append(_Want(c.seq, c.graph_id, c.call_idx, i, node, v))
        if wants:
            self._step(at, wants, src, steps, src_paths, other, other_steps, other_paths,
                           found)
        return [found[g] for g in sorted(found, key=lambda g: found[g][0].call_seq)]

    def _step(self, step, ws, src, src_steps, src_paths, other, other_steps, other_paths,
              found) -> None:
        # the node's call path as far as it knows it (its stack: the compiled function's frames)
        suffix: dict[_Want, Path] = {}
        for w in ws:
            p = (src_paths.full(w.node.stack_id, w.node.user_frame)
                 or ((w.node.file, w.node.line),))
            suffix[w] = p
        by_line: dict[tuple, set] = defaultdict(set)
        for p in suffix.values():
            by_line[p[-1]].add(p)
        invs = _invocations(other.run, other_steps.bounds(step), other_paths, by_line)
        # a path the compiled run also ran eagerly in this step is not where its
        # compiled calls ran (e.g. `ref = model(x)` beside `out = compiled(x)`)
        eager_too = {path for runs in _invocations(
            src.run, src_steps.bounds(step), src_paths, by_line).values() for path, _ in runs}
        invs = {s: [ops for path, ops in runs if path not in eager_too]
                for s, runs in invs.items()}
        calls: dict[Path, list[int]] = defaultdict(list)
        for w in ws:
            cs = calls[suffix[w]]
            if not cs or cs[-1] != w.call_seq:
                cs.append(w.call_seq)
        for w in ws:
            s = suffix[w]
            cs, iv = calls[s], invs.get(s, [])
            if len(cs) != len(iv):
                self.unpaired += 1      # calls and invocations not one to one
                continue
            twin = _twin(iv[cs.index(w.call_seq)], w)
            if twin is None or not twin.stats:
                self.unpaired += 1
                continue
            self.compared += 1
            close, rel = stats_close(w.value["stats"], twin.stats[0], self.rtol,
                                     numel(w.value.get("shape")))
            if not close and w.graph not in found:
                found[w.graph] = (w, twin, rel if math.isfinite(rel) else math.inf)


def _invocations(run, bounds: tuple, paths: Paths,
                 by_line: dict[tuple, set]) -> dict[Path, list[tuple[Path, list[Op]]]]:
    """For each wanted suffix: the runs of consecutive forward ops of a step
    at a path ending with it, with their path, in order."""
    invs: dict[Path, list[tuple[Path, list[Op]]]] = defaultdict(list)
    last: dict[Path, tuple[int, Path]] = {}
    for idx, o in enumerate(run.iter_ops_between(*bounds)):
        if o.phase != "forward" or o.file is None or (o.file, o.line) not in by_line:
            continue        # a backward op at the line breaks the run, never starts one
        path = paths.of_op(o, full=True)   # the node's stack knows inner frames only
        if path is None:
            continue
        for s in by_line[path[-1]]:
            if not ends_with(path, s):
                continue
            if last.get(s) == (idx - 1, path):
                invs[s][-1][1].append(o)
            else:
                invs[s].append((path, [o]))
            last[s] = (idx, path)
    return invs


def _twin(inv: list[Op], w: _Want) -> Op | None:
    """The op of an invocation that produced the output: same shape and
    dtype, the node's target as an aten op (the last such), else the
    invocation's last op when it fits."""
    shape, dtype = w.value.get("shape"), w.value.get("dtype")

    def fits(o: Op) -> bool:
        return (o.phase == "forward" and bool(o.shapes) and list(o.shapes[0] or []) == list(shape)
                and bool(o.dtypes) and o.dtypes[0] == dtype)

    name = target_name(w.node.target)
    named = [o for o in inv if aten_name(o.op) == name and fits(o)] if name else []
    if named:
        return named[-1]
    return inv[-1] if fits(inv[-1]) else None
