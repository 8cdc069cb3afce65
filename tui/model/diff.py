"""The diff view's state, as plain classes: no textual here (the screen is
`diff_view.py`; tests/e2e/test_diff_model.py tests this without a terminal).

Two kinds of diff, one model:

- `DiffModel.for_graph(run, graph_id)`: one graph's nodes, eager (the
  reference interpreted on the first checked call) against compiled, side by
  side, from the run file's per-node values (`Run.node_values`): stats on both
  sides, max abs/rel error, the float64 judge's distance to each, a status;
  a filter to the nodes that differ; the first divergent node. For an ONNX
  graph (torch.onnx.export) the other side is ONNX Runtime's value and eager
  the exported program run eagerly (`other`; the columns say so).
- `DiffModel.for_runs(run_a, run_b)`: the eager ops of two runs paired as
  `graphdbg diff` pairs them (`graphdbg.analysis.align`: step, user call
  path, op, phase, occurrence; never by position), one row per (line, op,
  phase) with counts, time on each side, and the largest value difference
  over the paired occurrences.

Rows come a page at a time (`fetch`, for a worker thread; `extend`, on the
UI thread); `first_divergent` and `next_differing` answer with row indices.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import astuple, dataclass
from typing import Any

from graphdbg.analysis.align import StepAlignment
from graphdbg.analysis.diff import (ExportPair, GraphBoundary, compare_ops, export_pairs,
                                     graph_boundaries, read_side)
from graphdbg.analysis.values import full_stats, stats_text, value_errors
from graphdbg.core.format import brief, num
from graphdbg.runfile.query import NodeValue, Run

# status -> theme level (the view maps levels to $error / $warning / $success)
LEVELS = {"first divergent": "error", "differs": "warning", "ok": "success",
          "not compared": None, "same": "success", "values": "warning", "shape": "error",
          "only in A": None, "only in B": None, "count": None}
DIFFERING = ("first divergent", "differs", "values", "shape")

# most telling first: an 80-column terminal shows the node, its status, its
# line and the errors; wider ones both sides' values (`fit_columns`)
GRAPH_COLUMNS = ("#", "node", "status", "where", "max abs", "max rel", "eager", "compiled",
                 "eager↔f64", "comp↔f64", "float64", "target")
# an ONNX graph (torch.onnx.export): the other side is ONNX Runtime's value,
# and eager is the exported program run eagerly
ONNX_GRAPH_COLUMNS = tuple({"compiled": "ONNX Runtime", "comp↔f64": "ORT↔f64"}.get(c, c)
                           for c in GRAPH_COLUMNS)
RUNS_COLUMNS = ("where", "op", "status", "max rel", "n A", "n B", "time A", "time B", "Δ time",
                "phase", "first at")
# widest each column gets (longer cells are cut with …; the pane under the
# table shows the selected row whole)
COLUMN_CAPS = {"#": 5, "node": 24, "status": 28, "where": 24, "max abs": 9, "max rel": 9,
               "eager": 30, "compiled": 30, "ONNX Runtime": 30, "eager↔f64": 9, "comp↔f64": 9,
               "ORT↔f64": 9, "float64": 30, "target": 32, "op": 28, "n A": 6, "n B": 6,
               "time A": 9, "time B": 9, "Δ time": 9, "phase": 9, "first at": 8}
CELL_PADDING = 1   # the table's cell padding, each side (DataTable's default)


def fit_columns(columns: tuple[str, ...], rows: list[tuple[str, ...]], width: int,
                keep: int = 3) -> list[tuple[int, int]]:
    """The columns the table shows in ``width`` cells, as (index, width):
    each as wide as its label and its widest cell in ``rows``, at most its
    cap (`COLUMN_CAPS`); in order, up to the first that would not fit whole
    (no column is cut at the screen's edge), the first ``keep`` always:
    the widest of them narrowed (to 8 at least) until they fit."""
    out, used = [], 0
    for i, label in enumerate(columns):
        widest = max((len(r[i]) for r in rows if i < len(r)), default=0)
        w = min(COLUMN_CAPS.get(label, 24), max(len(label), widest, 1))
        if i >= keep and used + w + 2 * CELL_PADDING > width:
            break
        out.append((i, w))
        used += w + 2 * CELL_PADDING
    while used > width:
        j = max(range(len(out)), key=lambda k: out[k][1])
        if out[j][1] <= 8:
            break
        out[j] = (out[j][0], out[j][1] - 1)
        used -= 1
    return out


def ns_text(ns: int | None) -> str:
    if ns is None:
        return "-"
    if abs(ns) >= 1_000_000:
        return f"{ns / 1e6:.2f}ms"
    return f"{ns / 1e3:.1f}µs"


@dataclass(frozen=True)
class DiffRow:
    """One row of the diff table: its cells, status, level ("error",
    "warning", "success" or None: how the view colours the status), where
    it is in the source, and the record it came from (a `NodeValue`; for two
    runs an `OpGroup` or a `GraphBoundary`)."""
    key: str
    cells: tuple[str, ...]
    status: str
    file: str | None
    line: int | None
    item: Any = None

    @property
    def level(self) -> str | None:
        return LEVELS.get(self.status)

    @property
    def differs(self) -> bool:
        return self.status in DIFFERING


class DiffModel:
    """Rows of a diff, paged; the filter to differing rows; jumps."""

    def __init__(self, kind: str, title: str, columns: tuple[str, ...],
                 source: Callable[[bool, int, int], list[DiffRow]],
                 count: Callable[[bool], int], first: Callable[[bool], int | None],
                 page_size: int = 200, empty: str = "nothing to compare") -> None:
        self.kind = kind                    # "graph" | "runs"
        self.title = title
        self.columns = columns
        self.page_size = page_size
        self.empty_message = empty
        self.differing_only = False
        self._source, self._count, self._first = source, count, first
        self.rows: list[DiffRow] = []
        self.total = 0
        self.total_all = 0
        self.calls: list[int] = []          # for one graph: the calls with values
        self.other = "compiled"             # what eager is set against: ONNX Runtime for ONNX
        self._switch: Callable[[int], int | None] = lambda step: None
        self.reset()

    # -- construction (may query: call from a worker thread) --------------------------
    @classmethod
    def for_graph(cls, run: Run, graph_id: int | None, call_idx: int | None = None,
                  page_size: int = 200) -> DiffModel:
        if graph_id is None:
            ids = run.node_value_graphs()
            if not ids:
                raise ValueError("no graph in this run has per-node values")
            graph_id = ids[0]
        if call_idx is None:
            call_idx = run.node_value_call(graph_id)
        g = run.graph(graph_id)
        name = f"graph {graph_id}" + (f" ({g.function} at {brief(g.file)}:{g.line})"
                                      if g is not None and g.function else "")
        onnx = g is not None and g.kind == "onnx"
        other = "ONNX Runtime" if onnx else "compiled"
        state = {"call": call_idx, "first": {}}   # the call shown; first() per filter

        def source(differing: bool, offset: int, limit: int) -> list[DiffRow]:
            if state["call"] is None:
                return []
            return [graph_row(v) for v in run.node_values(
                graph_id, state["call"], offset=offset, limit=limit, differing_only=differing)]

        def count(differing: bool) -> int:
            call = state["call"]
            return 0 if call is None else run.node_value_count(graph_id, call, differing)

        def first(differing: bool) -> int | None:
            call, cache = state["call"], state["first"]
            if differing in cache or call is None:
                return cache.get(differing)
            target = run.first_divergent_node(graph_id)
            if target is None or target.call_idx != call:
                # another call was localised: this call's first differing node
                page = run.node_values(graph_id, call, limit=1, differing_only=True)
                target = page[0] if page else None
            at = None
            if target is not None and target.idx is not None:
                # its position among the rows shown: the rows before it, in graph order
                at = run.node_value_count(graph_id, call, differing, before_idx=target.idx)
            cache[differing] = at
            return at

        def title() -> str:
            call = state["call"]
            return f"Eager vs {other}: {name}" + (f", call {call}" if call is not None else "")

        empty = ("no per-node values for this graph: it was never checked against eager "
                 "(--no-compare, --values none), or the run file predates them (schema 1)")
        if g is not None and g.export is not None:
            if g.export.get("not_checked"):
                empty = ("no per-node values: the ONNX export was not checked against eager: "
                         + str(g.export["not_checked"]))
            elif not onnx:
                empty = ("no per-node values: an exported program (torch.export) is checked "
                         "against eager by its outputs and user lines, not node by node (its "
                         "findings say where it departs)")
        model = cls("graph", title(), ONNX_GRAPH_COLUMNS if onnx else GRAPH_COLUMNS, source,
                    count, first, page_size, empty)
        model.other = other
        model.calls = run.node_value_calls(graph_id)

        def switch(step: int) -> int | None:
            calls = model.calls
            if len(calls) < 2 or state["call"] not in calls:
                return None
            state["call"] = calls[(calls.index(state["call"]) + step) % len(calls)]
            state["first"] = {}
            model.title = title()
            return state["call"]
        model.use_call_switch(switch)
        return model

    @classmethod
    def for_runs(cls, run_a: Run, run_b: Run, *, rtol: float = 1e-3,
                 page_size: int = 200) -> DiffModel:
        rows = align_runs(run_a, run_b, rtol)
        differing = [r for r in rows if r.differs]

        def source(diff_only: bool, offset: int, limit: int) -> list[DiffRow]:
            src = differing if diff_only else rows
            return src[offset:offset + limit]

        def count(diff_only: bool) -> int:
            return len(differing if diff_only else rows)

        def first(diff_only: bool) -> int | None:
            # the group of the earliest differing op in A's order (graphdbg diff's
            # "first divergence")
            src = differing if diff_only else rows
            best = min(((r.item.first_seq, i) for i, r in enumerate(src)
                        if r.differs and isinstance(r.item, OpGroup)
                        and r.item.first_seq is not None), default=None)
            if best is None:  # only graph outputs differ
                return next((i for i, r in enumerate(src) if r.differs), None)
            return best[1]

        title = f"A {brief(run_a.path)}  vs  B {brief(run_b.path)}"
        return cls("runs", title, RUNS_COLUMNS, source, count, first, page_size,
                   "no eager ops recorded in either run")

    # -- paging --------------------------------------------------------------------
    def reset(self) -> None:
        """Forget the loaded rows (after the filter changed)."""
        self.rows = []
        self.total = self._count(self.differing_only)
        self.total_all = self.total if not self.differing_only else self._count(False)

    @property
    def complete(self) -> bool:
        return len(self.rows) >= self.total

    def fetch(self, offset: int | None = None, limit: int | None = None) -> list[DiffRow]:
        """The next page (worker thread)."""
        return self._source(self.differing_only, len(self.rows) if offset is None else offset,
                            limit or self.page_size)

    def extend(self, page: list[DiffRow]) -> list[DiffRow]:
        """Add a fetched page (UI thread); returns it."""
        self.rows.extend(page)
        return page

    def load_more(self) -> list[DiffRow]:
        """fetch + extend, for callers without threads (tests)."""
        return self.extend(self.fetch())

    def wants_more(self, cursor_row: int, margin: int | None = None) -> bool:
        """Whether the cursor is near the end of the loaded rows (within
        ``margin``, by default half a page, at most 40) and more exist."""
        if margin is None:
            margin = max(1, min(40, self.page_size // 2))
        return not self.complete and cursor_row >= len(self.rows) - margin

    def load_until(self, index: int, offset: int | None = None) -> list[DiffRow]:
        """The rows from ``offset`` (default: the end of the loaded rows)
        through row ``index``, at least a page (worker thread); for `extend`."""
        start = len(self.rows) if offset is None else offset
        need = index + 1 - start
        if need <= 0:
            return []
        return self.fetch(start, max(need, self.page_size))

    # -- filter and jumps ----------------------------------------------------------
    def toggle_differing(self, *, reload: bool = True) -> bool:
        """Show only rows that differ, or all again; the loaded rows are
        dropped (``reload=False``: `reset` is left to a worker thread)."""
        self.differing_only = not self.differing_only
        if reload:
            self.reset()
        else:
            self.rows = []
        return self.differing_only

    def first_divergent(self) -> int | None:
        """Index (among the rows the filter shows) of the first divergent
        node (localised; else the first that differs), None if none."""
        return self._first(self.differing_only)

    def use_call_switch(self, switch: Callable[[int], int | None]) -> None:
        """How `next_call` moves to another recorded call (graph diffs only)."""
        self._switch = switch

    def next_call(self, step: int = 1) -> int | None:
        """Show the graph's next (or previous) call with per-node values;
        its index, or None when there is no other (then nothing changes).
        The loaded rows are dropped: `reset` then `fetch` (a worker's job)."""
        call = self._switch(step)
        if call is not None:
            self.rows = []
        return call

    def next_differing(self, current: int, forward: bool = True) -> int | None:
        """The next (or previous) loaded row that differs, wrapping around."""
        n = len(self.rows)
        for step in range(1, n + 1):
            i = (current + step if forward else current - step) % n
            if self.rows[i].differs:
                return i
        return None

    def detail(self, row: DiffRow | None) -> list[str]:
        """The selected row in full (a few lines, for the pane under the table)."""
        if row is None:
            return []
        item = row.item
        if isinstance(item, NodeValue):
            where = f"{brief(item.file)}:{item.line}" if item.file else "no source line"
            onnx = self.other != "compiled"
            head = (f"{item.node} = {item.target or item.op} at {where}, call {item.call_idx}: "
                    f"{item.status}" + (f" ({item.kind})" if item.kind else ""))
            if onnx:
                head += (", ONNX Runtime's value" if item.compiled_from else
                         ", ONNX Runtime's value not known (not in the ONNX model)")
            else:
                head += (f", compiled value from {item.compiled_from}" if item.compiled_from
                         else ", compiled value not known")
            label = "ORT" if onnx else "compiled"
            return [head,
                    f"eager     {full_stats(item.eager_stats)}",
                    (f"{label:<9} {full_stats(item.compiled_stats)}   max abs {num(item.max_abs)}"
                     f"  max rel {num(item.max_rel)}"),
                    (f"float64   {full_stats(item.fp64_stats)}   rmse eager {num(item.eager_vs_fp64)}"
                     f"  {label} {num(item.compiled_vs_fp64)}")]
        if isinstance(item, ExportPair):
            return export_pair_lines(item)
        if isinstance(item, (OpGroup, GraphBoundary)):
            where = f"{brief(item.file)}:{item.line}" if item.file else "-"
            if isinstance(item, GraphBoundary):  # a compiled graph's output against the other run
                return [(f"graph {item.graph} output (compiled in run {item.compiled_in}, "
                         f"call {item.call}) at {where}: values differ"),
                        f"compiled  {full_stats(item.compiled)}",
                        f"eager     {full_stats(item.eager)}"]
            lines = [f"{item.op} ({item.phase or '-'}) at {where}: {row.cells[2]}",
                     (f"A: {item.n_a} ops, {ns_text(item.t_a)}   B: {item.n_b} ops, "
                      f"{ns_text(item.t_b)}   B-A {ns_text(item.t_b - item.t_a)}")]
            if item.first_k is not None:
                lines.append(f"first differing occurrence #{item.first_k}, largest relative "
                             f"difference {num(item.worst)}")
            return lines
        return [" ".join(row.cells)]

    def status_line(self) -> str:
        shown = f"{len(self.rows)}/{self.total}" if not self.complete else f"{self.total}"
        what = "differing rows" if self.differing_only else "rows"
        extra = f" of {self.total_all}" if self.differing_only else ""
        return f"{shown} {what}{extra}"


def export_pair_lines(e: ExportPair) -> list[str]:
    """An exported graph against its counterpart in the other run (the
    runs diff's detail pane)."""
    what = "ONNX" if e.kind == "onnx" else "torch.export"
    where = f"{brief(e.file)}:{e.line}" if e.file else "-"
    if e.a is None or e.b is None:
        return [f"{what} {e.function} at {where}: graph {e.a if e.b is None else e.b} only in run "
                f"{'A' if e.b is None else 'B'} (no {e.kind} graph of that function in the other)"]
    out = [f"{what} {e.function} at {where}: graph {e.a} in A, {e.b} in B; FX nodes "
           f"{e.nodes[0]} / {e.nodes[1]}"]
    if e.kind == "onnx":
        out.append(f"opset {e.opset[0]} / {e.opset[1]}, ONNX nodes {e.onnx_nodes[0]} / "
                   f"{e.onnx_nodes[1]}; diverges from eager at {e.first_divergent[0] or 'no node'}"
                   f" in A, {e.first_divergent[1] or 'no node'} in B")
        for c in e.ops_changed[:2]:
            a, b = (", ".join(c[side] or ["-"]) for side in ("a", "b"))
            out.append(f"{c['node']}: A {a}  B {b}")
        v = e.value
        if v is not None:
            out.append(f"ONNX Runtime values differ first at {v['node']} (call {v['call']}, rel "
                       f"{num(v['rel_diff'])}); eager there "
                       + ("differs too" if v["eager_differs"] else "agrees: the translation"))
    return out


def graph_row(v: NodeValue) -> DiffRow:
    where = f"{brief(v.file)}:{v.line}" if v.file else "-"
    status = v.status + (f" ({v.kind})" if v.kind and v.status != "ok" else "")
    errors = dict(value_errors(v))   # as the problem's detail writes them
    cells = (str(v.idx) if v.idx is not None else "-", v.node, status, where, errors["max abs"],
             errors["max rel"], stats_text(v.eager_stats), stats_text(v.compiled_stats),
             errors["eager vs float64"], errors["compiled vs float64"], stats_text(v.fp64_stats),
             v.target or "-")
    return DiffRow(v.node, cells, v.status, v.file, v.line, v)


# -- two runs ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class OpGroup:
    """A row of the runs diff: the eager ops of one (file, line, op, phase) in
    both runs."""
    file: str | None
    line: int | None
    op: str
    phase: str | None
    n_a: int                       # ops in each run
    n_b: int
    t_a: int                       # their time, ns
    t_b: int
    worst: float | None            # largest relative difference (inf: a shape)
    what: str | None               # "shape" if any aligned pair's shape differs, else "values"
    first_k: int | None            # the first differing occurrence
    first_seq: int | None          # its seq in A (for the first divergent row)


@dataclass(slots=True)
class _Tally:
    """An `OpGroup`'s counts while the ops are read (fields as there)."""
    n_a: int = 0
    n_b: int = 0
    t_a: int = 0
    t_b: int = 0
    worst: float | None = None
    what: str | None = None
    first_k: int | None = None
    first_seq: int | None = None


def align_runs(run_a: Run, run_b: Run, rtol: float = 1e-3) -> list[DiffRow]:
    """One row per (file, line, op, phase) of either run, in the order of A's
    first occurrence (then B's groups), with counts, time per side and the
    largest value difference over the paired occurrences (graphdbg diff's
    pairing and value rule: `StepAlignment`). Lines that ran compiled in one run are marked."""
    A, B = read_side(run_a), read_side(run_b)
    groups: OrderedDict[tuple, _Tally] = OrderedDict()
    for side, is_a in ((run_a, True), (run_b, False)):
        for o in side.iter_ops():
            g = (o.file, o.line, o.op, o.phase)
            d = groups.get(g)
            if d is None:
                d = groups[g] = _Tally()
            if is_a:
                d.n_a += 1
                d.t_a += o.time_ns or 0
            else:
                d.n_b += 1
                d.t_b += o.time_ns or 0
    al = StepAlignment(A, B)
    for (step, (path, op, phase), k), a, b in al:
        found = compare_ops(a, b, k, rtol, al.step_label(step))
        if found is None:
            continue
        d = groups[(a.file, a.line, op, phase)]
        if d.worst is None or found.rel_diff > d.worst:
            d.worst = found.rel_diff
        if d.first_k is None or k < d.first_k:
            d.first_k = k
        if d.first_seq is None or a.seq < d.first_seq:
            d.first_seq = a.seq
        if found.what == "shape" or d.what is None:
            d.what = found.what
    rows = []
    for (file, line, op, phase), d in groups.items():
        if d.what is not None:
            status = d.what
        elif d.n_a and d.n_b:
            status = "same" if d.n_a == d.n_b else "count"
        else:
            status = "only in A" if d.n_a else "only in B"
        if status in ("count", "only in A", "only in B") and d.n_a != d.n_b:
            fewer_b = d.n_a > d.n_b
            side = B if fewer_b else A
            graphs = side.covered.get((file, line))
            if graphs:  # the missing ops ran inside a compiled graph (or an ONNX program) there
                how = {"onnx": "ONNX", "export": "exported"}.get(side.kinds.get(min(graphs)),
                                                                "compiled")
                status += f" ({how} in {'B' if fewer_b else 'A'}: graph {min(graphs)})"
        where = f"{brief(file)}:{line}" if file else "-"
        first_at = f"#{d.first_k}" if d.first_k is not None else "-"
        cells = (where, op, status, num(d.worst), str(d.n_a), str(d.n_b),
                 ns_text(d.t_a), ns_text(d.t_b), ns_text(d.t_b - d.t_a),
                 phase or "-", first_at)
        item = OpGroup(file, line, op, phase, *astuple(d))
        rows.append(DiffRow(f"{file}:{line}:{op}:{phase}", cells,
                            status.split(" (")[0], file, line, item))
    # compiled graphs' outputs against the value the other run computed at
    # the graph's output line (graphdbg diff's "graph boundaries")
    for b in graph_boundaries(A, B, rtol, al):
        where = f"{brief(b.file)}:{b.line}" if b.file else "-"
        how = {"onnx": "ONNX", "export": "exported"}.get(b.kind, "compiled")
        cells = (where, f"graph {b.graph} output ({how} in {b.compiled_in})", "values",
                 num(b.rel_diff), "-", "-", "-", "-", "-", "forward", f"call {b.call}")
        rows.append(DiffRow(f"graph:{b.compiled_in}:{b.graph}", cells, "values",
                            b.file, b.line, b))
    # exported graphs against their counterparts (same kind and function)
    for e in export_pairs(A, B, rtol):
        where = f"{brief(e.file)}:{e.line}" if e.file else "-"
        status = ("only in A" if e.b is None else "only in B" if e.a is None else
                  "values" if e.differs else "same")
        ids = "/".join("-" if i is None else str(i) for i in (e.a, e.b))
        cells = (where, f"{'ONNX' if e.kind == 'onnx' else 'torch.export'} graph {ids}: "
                        f"{e.function or '?'}", status,
                 num(e.value["rel_diff"]) if e.value else "-",
                 *(str(n) if n is not None else "-" for n in e.onnx_nodes),
                 "-", "-", "-", "-", e.value["node"] if e.value else "-")
        rows.append(DiffRow(f"export:{e.kind}:{e.function}:{ids}", cells, status,
                            e.file, e.line, e))
    return rows
