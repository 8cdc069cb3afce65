"""The graphs view and a graph's nodes: columns, sort, cells, the node
detail, and `NodePager` (nodes paged from SQLite). No textual."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from graphdbg.core.format import ms, num, short
from graphdbg.analysis.compiletime import cache_text
from graphdbg.analysis.wording import PHASE_LABELS, backend_label, export_text, model_name
from graphdbg.runfile.query import CompileTime, Finding, Graph, Node, NodeValue, Run
from .common import FindState, Line, SortState, heat, source_excerpt, where
from graphdbg.analysis.values import stats_text
from .problems import ProblemsModel

GRAPH_COLUMNS = (("id", "graph"), ("compile_id", "compile"), ("function", "function"),
                 ("where", "where"), ("nodes", "nodes"), ("compile_time", "compile time"),
                 ("calls", "calls"), ("mean_call", "mean call"), ("eager_ref", "eager ref"),
                 ("backend", "backend"))
# a run with exports (torch.export, torch.onnx.export) says each graph's kind
# next to its id: compile, export or onnx
EXPORT_GRAPH_COLUMNS = (GRAPH_COLUMNS[0], ("kind", "kind"), *GRAPH_COLUMNS[1:])


def graph_columns(graphs: Sequence[Graph] = ()) -> tuple[tuple[str, str], ...]:
    """The graphs table's columns: with a kind column when any graph is an export."""
    return EXPORT_GRAPH_COLUMNS if any(g.export is not None for g in graphs) else GRAPH_COLUMNS


def _graph_time(g: Graph) -> float | None:
    # an export's time (it has no compile)
    return g.backend_time_s if g.export is not None else g.compile_time_s


_GRAPH_KEYS = {
    "id": lambda g: g.id, "kind": lambda g: g.kind, "compile_id": lambda g: g.compile_id,
    "function": lambda g: g.function,
    "where": lambda g: (g.file, g.line) if g.file else None, "backend": lambda g: g.backend,
    "nodes": lambda g: g.n_nodes, "compile_time": _graph_time,
    "calls": lambda g: g.calls, "mean_call": lambda g: g.mean_call_ns,
    "eager_ref": lambda g: g.eager_ref_ns,
}


def graph_sort(graphs: Sequence[Graph] = ()) -> SortState:
    """The sort of the graphs table (by id; counts and times slowest first)."""
    return SortState(tuple(k for k, _ in graph_columns(graphs)), "id",
                     descending_first=frozenset({"nodes", "compile_time", "calls", "mean_call",
                                                "eager_ref"}))


def sort_graphs(graphs: Sequence[Graph], sort: SortState) -> list[Graph]:
    """Graphs in the table's order (graphs are few: sorted in memory);
    graphs without the value last either way, ties by id."""
    key = _GRAPH_KEYS[sort.column]
    known = [g for g in graphs if key(g) is not None]
    missing = [g for g in graphs if key(g) is None]
    known.sort(key=lambda g: g.id)
    known.sort(key=key, reverse=sort.descending)
    return known + sorted(missing, key=lambda g: g.id)


def graph_cells(g: Graph, columns: Sequence[tuple[str, str]] = GRAPH_COLUMNS) -> tuple[str, ...]:
    """A graph's cells in ``columns`` order (`graph_columns`). An export's
    function is its model (the kind and backend say it was exported), its
    backend says how ("onnx (opset 20)"), its compile time is the export's."""
    t = _graph_time(g)
    cell = {
        "id": lambda: str(g.id), "kind": lambda: g.kind, "compile_id": lambda: g.compile_id or "-",
        "function": lambda: model_name(g), "where": lambda: where(g.file, g.line),
        "nodes": lambda: str(g.n_nodes if g.n_nodes is not None else "-"),
        "compile_time": lambda: ("failed" if g.status == "compile_error" else
                                 f"{t:.2f} s" if t else "-"),
        "calls": lambda: str(g.calls), "mean_call": lambda: ms(g.mean_call_ns),
        # ▲: its fastest compiled call took longer than its ops did eagerly
        "eager_ref": lambda: "-" if not g.eager_ref_ns else
        ms(g.eager_ref_ns) + (" ▲" if g.compiled_slower else ""),
        "backend": lambda: backend_label(g),
    }
    return tuple(cell[key]() for key, _ in columns)


def export_summary(run: Run, g: Graph) -> str | None:
    """An exported graph in one line, as the report says it (what was
    exported where, opset and ONNX nodes, whether ONNX Runtime was checked
    against eager, dynamic and specialised sizes); None for a compiled graph.
    A query (the calls checked node by node): from a worker thread."""
    if g.export is None:
        return None
    divergences = sum(1 for f in run.findings(kind=("divergence",)) if f.graph_id == g.id)
    return export_text(g, run.node_value_calls(g.id) if g.kind == "onnx" else None, divergences)


NODE_COLUMNS = (("idx", "#"), ("name", "node"), ("target", "target"), ("eager_ns", "eager time"),
                ("line", "where"), ("shapes", "shapes"), ("dtypes", "dtypes"),
                ("module_path", "module"), ("op", "op"))
# a graph with per-node values (checked eager against compiled) shows them
# next to the name: an 80-column screen sees the status and the errors first
VALUE_NODE_COLUMNS = (("idx", "#"), ("name", "node"), ("status", "status"),
                      ("max_abs", "max abs"), ("max_rel", "max rel"), ("eager_ns", "eager time"),
                      ("line", "where"), ("value", "value (eager)"), ("compiled_vs_fp64", "comp↔f64"),
                      ("target", "target"), ("shapes", "shapes"), ("dtypes", "dtypes"),
                      ("module_path", "module"), ("op", "op"))
# an ONNX graph's compiled side is ONNX Runtime's value
ONNX_VALUE_NODE_COLUMNS = tuple((k, "ORT↔f64") if k == "compiled_vs_fp64" else (k, label)
                                for k, label in VALUE_NODE_COLUMNS)
# widest a column gets (cells are cut with …): long FX names must not push
# the time off an 80-column screen
NODE_WIDTHS = {"idx": 4, "name": 24, "target": 24, "eager_ns": 10, "line": 22, "shapes": 18,
               "dtypes": 10, "module_path": 22, "op": 13, "status": 15, "max_abs": 8,
               "max_rel": 8, "value": 28, "compiled_vs_fp64": 9}
# a graph's inputs (FX placeholders): listed after its ops, grouped, with no time
INPUT_OPS = ("placeholder",)
# the value status a cell is coloured by (the view maps it to a theme colour)
STATUS_LEVELS = {"first divergent": "error", "differs": "warning", "ok": "success"}


def _shapes(shapes: list | None) -> str:
    if not shapes:
        return "-"
    return " ".join("[" + ",".join(map(str, s)) + "]" if isinstance(s, list) else str(s)
                    for s in shapes)


def node_cells(n: Node, value: NodeValue | None = None,
               columns: Sequence[tuple[str, str]] = NODE_COLUMNS) -> tuple[str, ...]:
    """A node's cells (with its value on the checked call, if any), in
    `columns` order."""
    v = value
    cell = {
        "idx": lambda: str(n.idx), "name": lambda: n.name, "target": lambda: n.target or "-",
        # an input (a placeholder) is not an op: nothing ran, whatever the interpreter timed
        "eager_ns": lambda: ("input" if n.op in INPUT_OPS else "-" if not n.op.startswith("call_")
                             or n.eager_ns is None else ms(n.eager_ns)),
        "line": lambda: where(n.file, n.line), "shapes": lambda: _shapes(n.shapes),
        "dtypes": lambda: " ".join(map(str, n.dtypes)) if n.dtypes else "-",
        "module_path": lambda: n.module_path or "-", "op": lambda: n.op,
        "status": lambda: v.status if v else "-",
        "max_abs": lambda: num(v.max_abs) if v else "-",
        "max_rel": lambda: num(v.max_rel) if v else "-",
        "value": lambda: stats_text(v.eager_stats) if v else "-",
        "compiled_vs_fp64": lambda: num(v.compiled_vs_fp64) if v else "-",
    }
    return tuple(cell[key]() for key, _ in columns)




def compile_summary(c: CompileTime) -> str:
    """A compile's time by phase in one line (phases under a millisecond left out)."""
    def secs(x: float) -> str:
        return f"{x:.2f} s" if x >= 0.1 else f"{x * 1e3:.0f} ms"
    parts = [f"{PHASE_LABELS.get(k, k)} {secs(v)}" for k, v in c.phases.items() if v >= 0.0005]
    cache = cache_text(c)   # as the report's table: no plain hit beside a C++ compile
    cache = f", cache: {cache}" if cache != "-" else ""
    return (f"compile {c.compile_id}: {secs(c.total_s)} = " + " · ".join(parts) + cache
            + (" (a recompile)" if c.recompile else ""))


def onnx_ops_text(n: Node, graph: Graph | None) -> str | None:
    """The ONNX ops torch.onnx.export made from a node of an ONNX graph
    (`Graph.export["onnx_ops"]`); None for other graphs and for nodes that
    are not ops (inputs, parameters, the output)."""
    if graph is None or graph.kind != "onnx" or n.op not in ("call_function", "call_method",
                                                             "call_module"):
        return None
    ops = (graph.export.get("onnx_ops") or {}).get(n.name)
    return ", ".join(ops) if ops else ("none (no ONNX node of the model comes from it: ONNX's "
                                       "optimiser removed it or merged it into another)")


def node_detail(n: Node, source: str | None, stack: Sequence = (),
                findings: Sequence[Finding] = (), graph: Graph | None = None) -> list[Line]:
    """What Enter on a node shows: every field uncut, the ONNX ops made from
    it (a node of an ONNX graph: ``graph``), its line in the snapshot, its
    call chain, and the findings at this node."""
    out = [Line("title", f"node {n.name} (#{n.idx}) of graph {n.graph_id}")]
    for label, value in (("op", n.op), ("target", n.target), ("onnx ops", onnx_ops_text(n, graph)),
                         ("args", n.args),
                         ("shapes", _shapes(n.shapes)),
                         ("dtypes", " ".join(map(str, n.dtypes)) if n.dtypes else None),
                         ("module", n.module_path), ("module class", n.module_class),
                         ("eager time", ms(n.eager_ns) if n.eager_ns is not None
                          and n.op.startswith("call_") else None),
                         ("where", f"{short(n.file)}:{n.line} in {n.function}" if n.file else None)):
        if value:
            out.append(Line("number", f"{label:>13}  {value}"))
    lines = re.split(r"\r\n|\r|\n", source) if source else []
    out += source_excerpt(lines, n.line, around=2, code=n.code)
    mine = [f for f in findings if f.graph_id == n.graph_id and f.node == n.name]
    if mine:
        out.append(Line("label", "findings at this node"))
        for f in mine:
            sev, kind, _, msg = ProblemsModel.cells(f)
            out.append(Line("text", f"{sev} {kind}: {msg}"))
    if stack:
        out.append(Line("label", "call chain (innermost last)"))
        for fr in stack:
            out.append(Line("code", f"  {short(fr.file)}:{fr.line} in {fr.function}"))
    return out


class NodePager:
    """The nodes of one graph as a table paged from SQLite: sorted and
    filtered in SQL, a page (`page_size` rows) at a time as the cursor nears
    the end of what is loaded; never the whole graph at once.

    The graph's ops come first, in the chosen order; its inputs (FX
    placeholders: the program's tensors and the module's parameters and
    buffers, which lead a graph) follow as one group, in graph order: two
    streams, the ops' pages in the sort's order (inputs skipped) and then
    the inputs' pages in graph order.

        pager = NodePager(run, graph_id=1)
        pager.extend(pager.fetch())          # in a worker, then on the UI thread
        pager.sort.select("eager_ns"); pager.reset()   # slowest first
    """

    def __init__(self, run: Run, graph_id: int, page_size: int = 200,
                 compile_id: str | None = None, graph: Graph | None = None) -> None:
        self.run = run
        self.graph_id = graph_id
        self.compile_id = compile_id       # to show the graph's compile time by phase
        self.graph = graph                 # an export's: its summary line, ONNX's labels
        self.page_size = page_size
        self.columns = NODE_COLUMNS        # value_columns once a page shows values
        self.value_columns = (ONNX_VALUE_NODE_COLUMNS if graph is not None and graph.kind == "onnx"
                              else VALUE_NODE_COLUMNS)
        self.sort = self._sort_state("idx")
        self.find = FindState()
        self.rows: list[Node] = []
        self.values: dict[int, NodeValue] = {}   # loaded rows' values on the checked call
        self.total: int | None = None      # matching nodes, known after the first fetch
        self.top_ns: int | None = None     # the graph's slowest node, for colouring
        self.generation = 0                # bumped by reset: late pages are dropped
        self.inputs_shown = 0              # input rows loaded (at the end of `rows`)
        self._offsets = {"ops": 0, "inputs": 0}   # SQL rows read by each stream
        self._done = {"ops": False, "inputs": False}

    def _sort_state(self, column: str, descending: bool = False) -> SortState:
        # times, errors and magnitudes sort largest first; the status most telling first
        return SortState(tuple(k for k, _ in self.columns), column, descending,
                         descending_first=frozenset({"eager_ns", "status", "max_abs", "max_rel",
                                                     "value", "compiled_vs_fp64"}))

    def reset(self) -> None:
        """Forget the loaded rows (after a sort or find change)."""
        self.rows = []
        self.values = {}
        self.total = None
        self.inputs_shown = 0
        self._offsets = {"ops": 0, "inputs": 0}
        self._done = {"ops": False, "inputs": False}
        self.generation += 1

    @property
    def complete(self) -> bool:
        return (self.total is not None and self._done["ops"] and self._done["inputs"]) or (
            self.total is not None and len(self.rows) >= self.total)

    def wants_more(self, cursor_row: int, margin: int | None = None) -> bool:
        """Whether a row (the cursor, the last one on screen) is close enough
        to the end of the loaded rows: within `margin` (a fifth of a page,
        at most 40, by default)."""
        if margin is None:
            margin = min(40, self.page_size // 5)
        return not self.complete and cursor_row >= len(self.rows) - margin

    @dataclass
    class Page:
        generation: int
        offset: int                                  # the stream's SQL rows read before it
        nodes: list                                  # the rows it adds (its stream's only)
        total: int
        top_ns: int | None
        values: dict = field(default_factory=dict)   # node idx -> NodeValue
        has_values: bool = False                     # the graph was checked node by node
        compile_text: str | None = None              # the graph's compile time by phase,
        #                                              or what an export is (export_summary)
        stream: str = "ops"                          # "ops" or "inputs"
        read: int = 0                                # SQL rows it read (its nodes and skipped)
        done: bool = False                           # its stream has no more rows

    def fetch(self, offset: int | None = None) -> NodePager.Page:
        """The next page (a query: call it from a worker thread): the ops'
        next page, or once they are all read the inputs' next page."""
        stream = "ops" if not self._done["ops"] else "inputs"
        offset = self._offsets[stream] if offset is None else offset
        generation = self.generation
        query = self.find.query or None
        if stream == "ops":
            read = self.run.node_page(self.graph_id, offset, self.page_size,
                                      order_by=self.sort.column, descending=self.sort.descending,
                                      find=query)
            nodes = [n for n in read if n.op not in INPUT_OPS]
            done = len(read) < self.page_size
        else:   # FX puts a graph's inputs first: in graph order, up to the first op
            read = self.run.node_page(self.graph_id, offset, self.page_size, find=query)
            nodes = list(itertools.takewhile(lambda n: n.op in INPUT_OPS, read))
            done = len(nodes) < len(read) or len(read) < self.page_size
        total = self.total if self.total is not None else self.run.node_count(self.graph_id, find=query)
        top = self.top_ns
        if top is None:
            # the slowest op (inputs are timed too, as the interpreter fetched them)
            slowest = self.run.node_page(self.graph_id, 0, 50, order_by="eager_ns",
                                         descending=True)
            top = max((n.eager_ns or 0 for n in slowest if n.op not in INPUT_OPS), default=0)
        values = self.run.node_values_at(self.graph_id, (n.idx for n in nodes))
        first = stream == "ops" and offset == 0
        has_values = bool(values) or (not first and self.columns is self.value_columns) or (
            first and self.run.node_value_call(self.graph_id) is not None)
        compile_text = None
        if first and self.compile_id is not None:
            c = next((c for c in self.run.compile_times() if c.compile_id == self.compile_id), None)
            compile_text = compile_summary(c) if c is not None else None
        elif first and self.graph is not None and self.graph.export is not None:
            compile_text = export_summary(self.run, self.graph)
        return NodePager.Page(generation, offset, nodes, total, top, values, has_values,
                              compile_text, stream, len(read), done)

    def extend(self, page: NodePager.Page) -> list[Node]:
        """Take a fetched page; returns the rows added ([] for a stale page)."""
        if page.generation != self.generation or page.offset != self._offsets[page.stream] \
                or self._done[page.stream]:
            return []
        self._offsets[page.stream] += page.read
        self._done[page.stream] = page.done
        self.rows.extend(page.nodes)
        if page.stream == "inputs":
            self.inputs_shown += len(page.nodes)
        self.values.update(page.values)
        self.total = page.total
        self.top_ns = page.top_ns
        if page.has_values and self.columns is not self.value_columns:
            self.columns = self.value_columns
            self.sort = self._sort_state(self.sort.column, self.sort.descending)
        return page.nodes

    def is_input(self, n: Node) -> bool:
        return n.op in INPUT_OPS

    def cells(self, n: Node, name_width: int | None = None) -> tuple[str, ...]:
        """A row's cells; ``name_width``: the name cut to it (with …)."""
        cells = node_cells(n, self.values.get(n.idx), self.columns)
        if name_width is not None and len(n.name) > name_width:
            i = self.column_index("name")
            cells = (*cells[:i], n.name[:name_width - 1] + "…", *cells[i + 1:])
        return cells

    def name_width(self, screen_width: int) -> int:
        """How wide the name column may be on a screen this wide: what the
        columns up to the line's leave; on a narrow screen at most
        `NODE_WIDTHS`' width, less if the time would not fit whole (never
        under 12)."""
        keys = [k for k, _ in self.columns]
        labels = dict(self.columns)

        def others(upto: str) -> int:
            # each column is padded by a cell on each side; the scrollbar and
            # the name's own padding take two each
            kept = keys[:keys.index(upto) + 1] if upto in keys else keys
            return sum(max(NODE_WIDTHS.get(k, 10), len(labels[k]) + 2) + 2
                       for k in kept if k != "name") + 4
        room = screen_width - others("line")
        if room >= NODE_WIDTHS["name"]:
            return room
        return max(12, min(NODE_WIDTHS["name"], screen_width - others("eager_ns")))

    def value_level(self, n: Node) -> str | None:
        """How the status and error cells are coloured: "error" (first
        divergent), "warning" (differs), "success" (ok) or None."""
        v = self.values.get(n.idx)
        return STATUS_LEVELS.get(v.status) if v else None

    def column_index(self, key: str) -> int | None:
        return next((i for i, (k, _) in enumerate(self.columns) if k == key), None)

    def heat(self, n: Node) -> str | None:
        return heat(n.eager_ns, self.top_ns)

    def title(self) -> str:
        shown = f"{len(self.rows)} of {self.total}" if self.total is not None else "…"
        found = f", matching {self.find.query!r}" if self.find.query else ""
        col = dict(self.columns)[self.sort.column]
        k = self.graph.n_inputs if self.graph is not None else None
        inputs = ("" if k == 0 else ", then the inputs" if k is None or self.find.query
                  else f", then its {k} input{'s' if k != 1 else ''}")
        return (f"graph {self.graph_id}: nodes {shown}{found}; ops sorted by {col} "
                f"{'▼' if self.sort.descending else '▲'}{inputs}")
