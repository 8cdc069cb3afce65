"""`graphdbg diff A B`: compare two runs of the same program (say an eager run,
`graphdbg run --stance force_eager`, against a compiled one).

Eager ops are paired by what ran, never by position (`graphdbg.analysis.align`):
the k-th `aten.addmm` of the same step, user call path and phase in A meets
the k-th in B; lines that ran compiled in one run and eagerly in the other
in a step are not compared op by op, and ops without a user line are not
paired. Compiled graphs are compared at their outputs: each output of a
call meets the eager op of the other run that produced the same value
(`graphdbg.analysis.outputs`). Reported: the first place where shapes or
values part ways (in A's order), lines that ran compiled in one run and
eager in the other, and the lines whose time changed most. Reads run files
only (no torch), through graphdbg.runfile.query.

`diff_runs` returns what it found as frozen records (`RunDiff`, holding
`RunSide`, `OpDifference`, `GraphBoundary`, `CompiledInOneRun`, `LineTiming`);
`graphdbg.reporters.diff.render` draws them as text, `RunDiff.as_dict()` is
the `--json` document. No rich here: the analysis is shared by the report,
the TUI and the JSON.

Memory does not grow with the number of ops: occurrence counts come from
SQL a step at a time, and the two op streams are merged in execution order,
holding only the ops whose twin in the other run is not read yet.

`Side`, `read_side` and `AlignedOps` (by line, op and occurrence over the
whole run) serve `graphdbg diff DIR` (rank against rank, the same program
compiled alike).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from ..runfile.query import Op, Run
from .align import Merge, StepAlignment
from .lines import compiled_by_line
from .outputs import GraphOutputs
from .values import stats_close

JSON_SCHEMA = "graphdbg-diff/2"

Group = tuple  # (file, line, op, phase): where and what an eager op is


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None  # JSON has no inf: null


# -- what a diff finds: frozen records; `as_dict()` is the JSON as documented ----------

@dataclass(frozen=True, slots=True)
class RunSide:
    """One of the two runs, as the diff's heading names it."""
    file: str                      # the path as given
    argv: list | None
    stance: str | None
    graphs: int
    ops: int                       # eager ops recorded
    exit_status: int | None = None  # the program's (None: still running or killed)

    def as_dict(self) -> dict:
        return {"file": self.file, "argv": self.argv, "stance": self.stance,
                "graphs": self.graphs, "ops": self.ops, "exit_status": self.exit_status}


@dataclass(frozen=True, slots=True)
class OpDifference:
    """An aligned pair of eager ops (the `occurrence`-th of `op` at the line)
    whose shapes (`what` "shape": `a`, `b` the shapes) or values ("values":
    `a`, `b` the summaries of output `output`) differ."""
    what: str
    file: str | None
    line: int | None
    code: str | None
    op: str
    occurrence: int
    a: Any
    b: Any
    output: int | None = None      # "values" only
    rel_diff: float = math.inf     # relative difference; inf for a shape, NaN or Inf
    step: int | None = None        # the program's step (from 1); None: steps not counted alike
    phase: str | None = None

    def as_dict(self) -> dict:
        d = {"what": self.what, "file": self.file, "line": self.line, "code": self.code,
             "op": self.op, "occurrence": self.occurrence, "step": self.step,
             "phase": self.phase}
        if self.what == "values":
            d.update(output=self.output, rel_diff=_finite(self.rel_diff))
        d.update(a=self.a, b=self.b)
        return d


@dataclass(frozen=True, slots=True)
class GraphBoundary:
    """A compiled graph's output (output `output` of call `call`, run
    `compiled_in`) against the value the other run's eager op `eager_op`
    computed for it (`graphdbg.analysis.outputs`)."""
    file: str
    line: int | None
    code: str | None
    compiled_in: str               # "A" | "B"
    graph: int
    call: int
    rel_diff: float                # inf for NaN/Inf counts that differ
    compiled: dict | None          # value summaries
    eager: dict | None
    kind: str = "compile"          # onnx: an ONNX program's call, in ONNX Runtime; export:
    #                                an exported program's (its `ep.module()`)
    output: int = 0
    eager_op: str | None = None
    step: int | None = None
    # where the compiled run's own check placed the graph's divergence, if it
    # found one: {file, line, code, node, classification} (the output is
    # where it shows, this is where it starts)
    origin: dict | None = None

    def as_dict(self) -> dict:
        d = {"what": "graph output", "file": self.file, "line": self.line, "code": self.code,
             "compiled_in": self.compiled_in, "graph": self.graph, "call": self.call,
             "output": self.output, "eager_op": self.eager_op, "step": self.step,
             "rel_diff": _finite(self.rel_diff), "compiled": self.compiled, "eager": self.eager,
             "origin": self.origin}
        if self.kind != "compile":
            d["kind"] = self.kind
        return d


@dataclass(frozen=True, slots=True)
class CompiledInOneRun:
    """A line that ran inside a compiled graph in run `compiled_in` and as
    eager ops in the other."""
    compiled_in: str
    file: str
    line: int | None
    kind: str = "compile"          # onnx, export: the line ran in an ONNX or exported program

    def as_dict(self) -> dict:
        d = {"compiled_in": self.compiled_in, "file": self.file, "line": self.line}
        if self.kind != "compile":
            d["kind"] = self.kind
        return d


@dataclass(frozen=True, slots=True)
class ExportPair:
    """An exported graph (torch.export, torch.onnx.export) and its
    counterpart in the other run: the same kind and function, the k-th of
    them in each run (`a`, `b` their graph ids; None: only in the other).
    For ONNX graphs: the opsets, ONNX node counts, the nodes translated to
    other ONNX ops, the first node whose ONNX Runtime value differs between
    the runs on their first checked call (`value`), and where each run's
    ONNX Runtime first departs from its own eager (`first_divergent`)."""
    kind: str                      # export | onnx
    function: str | None
    file: str | None
    line: int | None
    a: int | None
    b: int | None
    nodes: tuple[int | None, int | None]
    opset: tuple[int | None, int | None] = (None, None)
    onnx_nodes: tuple[int | None, int | None] = (None, None)
    ops_changed: tuple[dict, ...] = ()        # {node, a, b}: the ONNX ops of each
    value: dict | None = None                 # {node, call, rel_diff, a, b, eager_differs}
    first_divergent: tuple[str | None, str | None] = (None, None)

    @property
    def differs(self) -> bool:
        """Whether the ONNX Runtime values differ between the runs."""
        return self.value is not None

    def as_dict(self) -> dict:
        d = {"kind": self.kind, "function": self.function, "file": self.file, "line": self.line,
             "a": self.a, "b": self.b, "nodes": list(self.nodes)}
        if self.kind == "onnx":
            d.update(opset=list(self.opset), onnx_nodes=list(self.onnx_nodes),
                     ops_changed=list(self.ops_changed),
                     value=None if self.value is None else
                     {**self.value, "rel_diff": _finite(self.value["rel_diff"])},
                     first_divergent=list(self.first_divergent))
        return d


@dataclass(frozen=True, slots=True)
class LineTiming:
    """Time at a source line in each run (eager ops + compiled calls)."""
    file: str | None
    line: int | None
    a_ns: int
    b_ns: int

    @property
    def delta_ns(self) -> int:
        return self.b_ns - self.a_ns

    def as_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "a_ns": self.a_ns, "b_ns": self.b_ns,
                "delta_ns": self.delta_ns}


@dataclass(frozen=True, slots=True)
class RunDiff:
    """What `graphdbg diff A B` found (`diff_runs`)."""
    a: RunSide
    b: RunSide
    aligned_ops: int
    only_in_a: int
    only_in_b: int
    first_divergence: OpDifference | None
    graph_boundaries: tuple[GraphBoundary, ...]
    compiled_in_one_run: tuple[CompiledInOneRun, ...]   # the first 50, by place
    timing: tuple[LineTiming, ...]                      # the 15 most changed
    exports: tuple[ExportPair, ...] = ()                # exported graphs, paired
    steps: int | None = None       # steps paired (None: the runs do not count steps alike)
    compared_outputs: int = 0      # compiled outputs compared with their eager twin
    unpaired_outputs: int = 0      # compiled outputs without one (not a difference)

    @property
    def differs(self) -> bool:
        """Whether values or shapes differ (`graphdbg diff` exits 1): eager
        ops, compiled outputs, or an ONNX graph's values in ONNX Runtime."""
        return bool(self.first_divergence or self.graph_boundaries
                    or any(e.differs for e in self.exports))

    def as_dict(self) -> dict:
        """The JSON document (docs/report-json.md, schema graphdbg-diff/2)."""
        return {
            "schema": JSON_SCHEMA, "a": self.a.as_dict(), "b": self.b.as_dict(),
            "aligned_ops": self.aligned_ops, "only_in_a": self.only_in_a,
            "only_in_b": self.only_in_b, "steps": self.steps,
            "compared_outputs": self.compared_outputs, "unpaired_outputs": self.unpaired_outputs,
            "first_divergence": (self.first_divergence.as_dict() if self.first_divergence
                                 else None),
            "graph_boundaries": [g.as_dict() for g in self.graph_boundaries],
            "compiled_in_one_run": [c.as_dict() for c in self.compiled_in_one_run],
            "timing": [t.as_dict() for t in self.timing],
            # only when either run exported (torch.export, torch.onnx.export)
            **({"exports": [e.as_dict() for e in self.exports]} if self.exports else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1, default=str)


@dataclass
class Side:
    """What a diff needs of one run (`read_side`), all bounded by lines and
    graphs, not ops."""
    run: Run
    counts: dict[Group, int]             # ops per group
    op_lines: set[tuple]                 # (file, line) where any op ran
    covered: dict[tuple, set[int]]       # (file, line) -> graphs with a call node there
    out_line: dict[int, tuple]           # graph -> (file, line, code) of its last call node
    time_by_line: dict[tuple, int]       # (file, line) -> ns (eager ops + compiled calls)
    graphs: int
    kinds: dict[int, str] = field(default_factory=dict)   # graph -> compile | export | onnx
    exports: list = field(default_factory=list)           # its exported graphs (`Graph`), by id


def read_side(run: Run) -> Side:
    counts = run.op_groups()
    graphs = run.graphs()
    kinds = {g.id: g.kind for g in graphs}
    # graphs that ran in place of the program's eager ops at their lines: compiled
    # graphs, and exports whose program the program called (an ONNX program, an
    # exported program's module); an export never called only traced its lines
    standing_in = {g.id for g in graphs if g.kind == "compile" or g.calls}
    covered: dict[tuple, set[int]] = defaultdict(set)
    out_line: dict[int, tuple] = {}
    for n in run.iter_nodes():
        if n.graph_id in standing_in and n.user_frame is not None and n.op.startswith("call_") \
                and n.file is not None:
            covered[(n.file, n.line)].add(n.graph_id)
            out_line[n.graph_id] = (n.file, n.line, n.code)  # the last one wins
    times = {(t.file, t.line): t.total_ns
             for t in run.hot_lines(None, recorded_ops_only=True,
                                    compiled=compiled_by_line(run))}
    return Side(run, counts, {(g[0], g[1]) for g in counts}, covered, out_line, times,
                 len(graphs), kinds, [g for g in graphs if g.export is not None])


_stats_close = stats_close   # the ONNX comparison's name for it


# Ops whose output is uninitialised memory: their values mean nothing.
_UNINITIALISED = ("aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty",
                  "aten.new_empty_strided", "aten.empty_permuted")


def compare_ops(a: Op, b: Op, k: int, rtol: float, step: int | None = None) -> OpDifference | None:
    """How the k-th ops of a group differ in two runs, if they do."""
    if a.op.startswith(_UNINITIALISED):
        return None
    # identical JSON text is always close (for rtol >= 0): no parsing on the common path
    if rtol >= 0 and a.shapes_json == b.shapes_json and a.stats_json == b.stats_json:
        return None
    if a.shapes != b.shapes:
        return OpDifference("shape", a.file, a.line, a.code, a.op, k, a.shapes, b.shapes,
                            step=step, phase=a.phase)
    for i, (sa, sb) in enumerate(zip(a.stats or [], b.stats or [])):
        close, rel = _stats_close(sa, sb, rtol)
        if not close:
            # a NaN difference counts as infinite, as the TUI sorts and JSON writes it (null)
            return OpDifference("values", a.file, a.line, a.code, a.op, k, sa, sb, i,
                                rel if math.isfinite(rel) else math.inf, step, a.phase)
    return None


def _twins(side: Side, other: Side):
    """(group, occurrence), op for the ops of `side` that have a twin in `other`."""
    seen: dict[Group, int] = defaultdict(int)
    for o in side.run.iter_ops():
        g = (o.file, o.line, o.op, o.phase)
        k = seen[g]
        seen[g] = k + 1
        if k < other.counts.get(g, 0):
            yield (g, k), o


class AlignedOps(Merge):
    """Every aligned pair of eager ops of two runs, as ``((group, k), a, b)``:
    the k-th op of a group (file, line, op, phase) in A meets the k-th in B.

    The two op streams are read in step, each holding only ops with a twin,
    so every op waiting for its twin is matched later and the waiting sets
    stay as small as the runs are out of step. Pairs come in the order the
    second of the two is read. Set `stop_after` to an A seq to stop once no
    op of A at or before it can still be paired (a search for the earliest
    difference in A's order needs nothing later)."""

    def __init__(self, A: Side, B: Side) -> None:
        self.A, self.B = A, B
        super().__init__(_twins(A, B), _twins(B, A))


def first_value_divergence(A: Side, B: Side, rtol: float,
                           al: StepAlignment | None = None) -> OpDifference | None:
    """The first paired op (`StepAlignment`), in A's order, whose shapes or
    values differ. Steps come in order: the search ends with the first step
    that has one."""
    al = al or StepAlignment(A, B)
    for step in range(al.n_steps):
        best: tuple[int, OpDifference] | None = None     # (A seq, divergence)
        pairs = al.pairs(step)
        for (_, _key, k), a, b in pairs:
            if best is None or a.seq < best[0]:
                found = compare_ops(a, b, k, rtol, al.step_label(step))
                if found is not None:
                    best = (a.seq, found)
                    pairs.stop_after = a.seq
        if best is not None:
            return best[1]
    return None


def graph_boundaries(A: Side, B: Side, rtol: float, al: StepAlignment | None = None,
                     outputs: GraphOutputs | None = None) -> list[GraphBoundary]:
    """Outputs of compiled graphs in one run against the eager ops of the
    other run that computed the same values (at most one per graph);
    `outputs` counts what was compared and what had no twin."""
    al = al or StepAlignment(A, B)
    outputs = outputs or GraphOutputs(al, rtol)
    found = []
    for src, other, name in ((B, A, "B"), (A, B, "A")):
        steps = al.steps_b if name == "B" else al.steps_a
        origins = None
        for w, twin, rel in outputs.compare(src, other, name):
            n = w.node
            if origins is None:
                origins = _divergence_origins(src.run)
            found.append(GraphBoundary(
                n.file, n.line, n.code, name, w.graph, w.call, rel, w.value.get("stats"),
                (twin.stats or [None])[0], src.kinds.get(w.graph, "compile"), w.output, twin.op,
                al.step_label(steps.of(w.call_seq)), origins.get(w.graph)))
    return found


def _divergence_origins(run: Run) -> dict[int, dict]:
    """Graph -> where the run's own check (compiled against eager on the
    same inputs) placed its first divergence: the first such finding."""
    out: dict[int, dict] = {}
    for f in run.findings(kind="divergence"):
        d = f.detail
        graphs = list(getattr(d, "graphs", None) or []) or [f.graph_id]
        for g in graphs:
            if g is not None and g not in out and f.line is not None:
                out[g] = {"file": f.file, "line": f.line, "code": f.code, "node": f.node,
                          "classification": getattr(d, "classification", None)}
    return out


def _export_key(g) -> tuple:
    return (g.kind, g.function)


def export_pairs(A: Side, B: Side, rtol: float) -> list[ExportPair]:
    """The exported graphs of two runs, each with its counterpart: the k-th
    graph of the same kind and function in the other run (never a compiled
    graph, nor an export of another kind), in A's order, then B's unpaired."""
    seen: dict[tuple, int] = defaultdict(int)
    in_b: dict[tuple, list] = defaultdict(list)
    for g in B.exports:
        in_b[_export_key(g)].append(g)
    out = []
    for ga in A.exports:
        key = _export_key(ga)
        k = seen[key]
        seen[key] += 1
        gb = in_b[key][k] if k < len(in_b[key]) else None
        out.append(_pair(A, B, ga, gb, rtol))
    for key, gs in in_b.items():
        out += [_pair(A, B, None, gb, rtol) for gb in gs[seen.get(key, 0):]]
    return out


def _pair(A: Side, B: Side, ga, gb, rtol: float) -> ExportPair:
    g = ga if ga is not None else gb
    ea, eb = (ga.export if ga is not None else {}), (gb.export if gb is not None else {})
    pair = ExportPair(g.kind, g.function, g.file, g.line, ga.id if ga is not None else None,
                      gb.id if gb is not None else None,
                      tuple(g.n_nodes if g is not None else None for g in (ga, gb)))
    if g.kind != "onnx":
        return pair
    pair = replace(pair, opset=(ea.get("opset"), eb.get("opset")),
                   onnx_nodes=(ea.get("onnx_nodes"), eb.get("onnx_nodes")))
    if ga is None or gb is None:
        return pair
    ops_a, ops_b = ea.get("onnx_ops") or {}, eb.get("onnx_ops") or {}
    changed = tuple({"node": n, "a": ops_a.get(n), "b": ops_b.get(n)}
                    for n in [*ops_a, *(n for n in ops_b if n not in ops_a)]
                    if ops_a.get(n) != ops_b.get(n))

    def first_divergent(side: Side, gid: int) -> str | None:
        v = side.run.first_divergent_node(gid)
        return v.node if v is not None else None

    return replace(pair, ops_changed=changed[:20],
                   value=_onnx_values(A.run, B.run, ga.id, gb.id, rtol),
                   first_divergent=(first_divergent(A, ga.id), first_divergent(B, gb.id)))


def _onnx_values(ra: Run, rb: Run, ga: int, gb: int, rtol: float) -> dict | None:
    """The first node, in graph order, whose ONNX Runtime value differs
    between the runs on the first call both checked node by node (0: the
    export's example inputs), with whether eager differs there too (then the
    inputs differ, not the translation)."""
    calls = [c for c in ra.node_value_calls(ga) if c in set(rb.node_value_calls(gb))]
    if not calls:
        return None
    call = calls[0]
    in_b = {v.node: v for v in rb.node_values(gb, call)}
    for va in ra.node_values(ga, call):
        vb = in_b.get(va.node)
        if vb is None or not va.compiled_stats or not vb.compiled_stats:
            continue
        close, rel = _stats_close(va.compiled_stats, vb.compiled_stats, rtol)
        if not close:
            eager_close, _ = _stats_close(va.eager_stats, vb.eager_stats, rtol)
            return {"node": va.node, "call": call, "rel_diff": rel,
                    "a": va.compiled_stats, "b": vb.compiled_stats,
                    "eager_differs": not eager_close}
    return None


def _covered_kind(side: Side, line: tuple) -> str:
    """What ran a line in place of its eager ops: compile when any compiled
    graph did, else onnx or export."""
    kinds = {side.kinds.get(g, "compile") for g in side.covered[line]}
    return "compile" if "compile" in kinds else "onnx" if "onnx" in kinds else "export"


# how each kind of graph ran a line, as the text says it
RAN = {"compile": "compiled", "onnx": "in an ONNX program", "export": "in an exported program"}


def diff_runs(path_a: str, path_b: str, *, rtol: float = 1e-3) -> RunDiff:
    with Run(path_a) as ra, Run(path_b) as rb:
        A, B = read_side(ra), read_side(rb)
        al = StepAlignment(A, B)
        first = first_value_divergence(A, B, rtol, al)
        outputs = GraphOutputs(al, rtol)
        boundaries = graph_boundaries(A, B, rtol, al, outputs)
        sides = [RunSide(path, r.meta.get("argv"), r.meta.get("stance"), s.graphs,
                         r.count("ops"), r.meta.get("exit_status"))
                 for path, r, s in ((path_a, ra, A), (path_b, rb, B))]
        exports = export_pairs(A, B, rtol)
        aligned, one_sided = al.totals()
    covering = {"A": A, "B": B}
    compiled_only = [CompiledInOneRun(name, *line, _covered_kind(covering[name], line))
                     for name, line in one_sided]
    timing = [LineTiming(*line, A.time_by_line.get(line, 0), B.time_by_line.get(line, 0))
              for line in set(A.time_by_line) | set(B.time_by_line)]
    # ties by place, so that the same runs always give the same list
    timing.sort(key=lambda t: (-abs(t.delta_ns), t.file, t.line if t.line is not None else -1))
    return RunDiff(
        *sides, aligned, sides[0].ops - aligned, sides[1].ops - aligned,
        first, tuple(boundaries),
        tuple(sorted(compiled_only, key=lambda c: (c.file, c.line))[:50]), tuple(timing[:15]),
        tuple(exports), len(al.steps_a.ends) if al.by_step else None, outputs.compared,
        outputs.unpaired)
