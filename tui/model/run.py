"""The terminal UI's view state, as plain classes: no textual here.

Everything the UI decides (which rows a table shows and in what order, which
page of nodes to load next, what `/` matches, which problem `n` selects, what
the source gutter says) is decided here and unit-tested without a terminal
(tests/test_tui_model.py); the widgets in `app.py` only render it.

Reads the run file only through `graphdbg.runfile.query.Run`. Methods that query the
run (`NodePager.fetch`, `SourceModel.load`, `HotSpots.load`, ...) are meant
for worker threads; the rest is cheap and runs on the UI thread.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from graphdbg.core.format import at, brief, ms, num, short, width
from graphdbg.core.format import caret as marks
from graphdbg.reporters.report import (CARET_KINDS, backend_label, export_text, hint_and_fixes,
                                       model_name, specialized_lines)
from graphdbg.runfile.details import (CompileErrorDetail, DivergenceDetail, GraphBreakDetail,
                                      NanInfDetail, SpecializedDetail)
from graphdbg.runfile.query import (SEVERITIES, CompileTime, Finding, Graph, Node, NodeValue,
                                    Run, SourceLine)
from .diff import stats_text

VIEWS = ("problems", "graphs", "source", "hot", "info")
VIEW_TITLES = {"problems": "Problems", "graphs": "Graphs", "source": "Source",
               "hot": "Hot spots", "info": "Run info"}
ICONS = {"error": "✖", "warning": "▲", "info": "●"}
KIND_LABELS = {"graph_break": "graph break", "recompile": "recompile",
               "compile_error": "compile error", "malformed_graph": "malformed graph",
               "divergence": "divergence", "nan_inf": "NaN/Inf", "runtime_error": "runtime error",
               "check_skipped": "not checked", "export_specialized": "specialised size"}
# letters of the source gutter, one per finding kind
KIND_MARKS = {"graph_break": "B", "recompile": "R", "compile_error": "C",
              "malformed_graph": "M", "divergence": "D", "nan_inf": "N", "runtime_error": "E",
              "check_skipped": "S", "export_specialized": "X"}


def where(file: str | None, line: int | None, cell: str | None = None) -> str:
    """A line's place in a narrow column: ``model.py:12``; a notebook cell
    as IPython names it (``Cell In[3], line 7``)."""
    if cell:
        return at(file, line, cell)
    return f"{brief(file)}:{line}" if file else "-"


def one_line(text: str | None, limit: int = 200) -> str:
    if not text:
        return ""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[:limit - 1] + "…"


def bar(value: float, top: float, width: int = 20) -> str:
    """A horizontal bar of `value` against `top`, in eighths of a cell."""
    if top <= 0 or value <= 0 or width <= 0:
        return ""
    eighths = max(1, round(min(value / top, 1.0) * width * 8))
    full, rest = divmod(eighths, 8)
    return "█" * full + ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")[rest]


def heat(ns: int | None, top: int | None) -> str | None:
    """How hot a time is against the largest: "hot" (≥ 25%), "warm" (≥ 5%) or None."""
    if not ns or not top:
        return None
    share = ns / top
    return "hot" if share >= 0.25 else "warm" if share >= 0.05 else None


# -- find (`/`) ----------------------------------------------------------------------

@dataclass
class FindState:
    """What `/` looks for: a case-insensitive substring, as plain text."""
    query: str = ""

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where the query occurs in `text` (start, end), not overlapping."""
        if not self.query:
            return []
        return [(m.start(), m.end())
                for m in re.finditer(re.escape(self.query), text, re.IGNORECASE)]

    def row_matches(self, cells: Sequence[str]) -> bool:
        return bool(self.query) and any(self.spans(c) for c in cells)

    def matching_rows(self, rows: Sequence[Sequence[str]]) -> list[int]:
        return [i for i, r in enumerate(rows) if self.row_matches(r)]

    def next_row(self, rows: Sequence[Sequence[str]], current: int,
                 forward: bool = True, *, include_current: bool = False) -> int | None:
        """The next matching row after `current` (before, backwards),
        wrapping around; None without a match."""
        hits = self.matching_rows(rows)
        if not hits:
            return None
        if include_current and current in hits:
            return current
        if forward:
            return next((i for i in hits if i > current), hits[0])
        return next((i for i in reversed(hits) if i < current), hits[-1])


# -- sorting, as `py-spy top` --------------------------------------------------------

@dataclass
class SortState:
    """The sort column of a table: a key cycles through the columns, a click
    on a header sorts by it and a second click reverses it. Time columns
    sort slowest first."""
    columns: tuple[str, ...]
    column: str
    descending: bool = False
    descending_first: frozenset = frozenset()

    def _default_direction(self, column: str) -> bool:
        return column in self.descending_first

    def cycle(self, step: int = 1) -> None:
        i = self.columns.index(self.column)
        self.column = self.columns[(i + step) % len(self.columns)]
        self.descending = self._default_direction(self.column)

    def select(self, column: str) -> None:
        if column not in self.columns:
            raise ValueError(column)
        if column == self.column:
            self.descending = not self.descending
        else:
            self.column = column
            self.descending = self._default_direction(column)

    def reverse(self) -> None:
        self.descending = not self.descending

    def label(self, column: str) -> str:
        return (" ▼" if self.descending else " ▲") if column == self.column else ""


# -- problems --------------------------------------------------------------------------

PROBLEM_COLUMNS = (("severity", "sev"), ("kind", "kind"), ("where", "where"),
                   ("message", "message"))


class ProblemsModel:
    """Every finding by severity (errors, warnings, info; each by first
    appearance), the selected one, and `n`/`N`."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        order = {s: i for i, s in enumerate(SEVERITIES)}
        self.findings = sorted(findings, key=lambda f: (order.get(f.severity, 9), f.id))
        self.cursor = 0

    def __len__(self) -> int:
        return len(self.findings)

    @staticmethod
    def cells(f: Finding) -> tuple[str, str, str, str]:
        times = f" ×{f.count}" if f.count > 1 else ""
        return (f"{ICONS.get(f.severity, '?')} {f.severity}", KIND_LABELS.get(f.kind, f.kind),
                where(f.file, f.line, f.cell), one_line(f.message) + times)

    def rows(self) -> list[tuple[str, str, str, str]]:
        return [self.cells(f) for f in self.findings]

    @property
    def current(self) -> Finding | None:
        return self.findings[self.cursor] if self.findings else None

    def select(self, index: int) -> Finding | None:
        if self.findings:
            self.cursor = max(0, min(index, len(self.findings) - 1))
        return self.current

    def select_id(self, finding_id: int) -> Finding | None:
        for i, f in enumerate(self.findings):
            if f.id == finding_id:
                return self.select(i)
        return None

    def step(self, forward: bool = True, *, from_outside: bool = False) -> Finding | None:
        """`n` (forward) or `N`: the next or previous problem, wrapping.
        ``from_outside``: coming from another view, `n` selects the problem
        under the cursor first (the first one, at the start)."""
        if not self.findings:
            return None
        if not from_outside:
            self.cursor = (self.cursor + (1 if forward else -1)) % len(self.findings)
        return self.current

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.findings:
            out[f.severity] = out.get(f.severity, 0) + 1
        return out

    def summary(self) -> str:
        """"1 error, 2 warnings, 1 info" ("no problems" without one)."""
        c = self.counts()
        parts = [f"{c[s]} {s}{'s' if c[s] != 1 and s != 'info' else ''}" for s in SEVERITIES if c.get(s)]
        return ", ".join(parts) if parts else "no problems"

    def title(self) -> str:
        return f"Problems ({len(self)}): {self.summary()}"


def problem_preview(f: Finding | None) -> str:
    """The few lines under the problems table: the selected problem's whole
    message, its hint, and who called the line."""
    if f is None:
        return ""
    out = [one_line(f.message, 400)]
    if f.hint:
        out.append("hint: " + one_line(f.hint, 400))
    callers = list(f.stack[:-1])[-2:]
    if callers:
        out.append("called from " + " ← ".join(f"{where(c.file, c.line, c.cell)} {c.function}"
                                               for c in reversed(callers)))
    return "\n".join(out)


@dataclass(frozen=True)
class Line:
    """A line of a detail pane; `style` names its role (the widget picks
    colours from the theme): title, label, text, dim, code, current, caret,
    hint, number."""
    style: str
    text: str


def divergence_numbers(detail: object) -> list[tuple[str, str]]:
    """The numbers of a divergence (or NaN/Inf) finding, as (label, value)."""
    return detail.numbers() if isinstance(detail, (DivergenceDetail, NanInfDetail)) else []


def _names(xs: Sequence | None) -> str | None:
    return ", ".join(map(str, xs)) if xs else None


def export_numbers(detail: object) -> list[tuple[str, str]]:
    """What a finding about an export adds to its numbers, as (label,
    value): a divergence's ONNX ops and opset (or what each side ran at the
    line), a specialised size, an ONNX translation's op and node."""
    if isinstance(detail, DivergenceDetail) and detail.exported:
        pairs = [("exported", "torch.onnx.export" if detail.exported == "onnx" else "torch.export"),
                 ("ONNX ops", _names(detail.onnx_ops)), ("opset", detail.opset),
                 ("eager ran", _names(detail.eager_ops)),
                 ("exported ran", _names(detail.graph_ops))]
    elif isinstance(detail, SpecializedDetail):
        pairs = [("size", detail.size), ("fixed to", detail.value), ("declared", detail.declared),
                 ("symbol", detail.symbol), ("reason (torch)", detail.reason),
                 ("exported", "torch.onnx.export" if detail.exported == "onnx" else
                  "torch.export" if detail.exported else None)]
    elif isinstance(detail, CompileErrorDetail) and (detail.onnx or detail.via):
        pairs = [("exporter", "TorchScript (dynamo=False)" if detail.legacy_exporter else
                  detail.via or "torch.onnx.export"),
                 ("no ONNX op for", detail.onnx_op), ("node", detail.node)]
    else:
        return []
    return [(k, str(v)) for k, v in pairs if v is not None]


def source_excerpt(lines: Sequence[str], line: int | None, around: int = 3,
                   code: str | None = None, caret: bool = False,
                   col: int | None = None, end_col: int | None = None) -> list[Line]:
    """The lines around `line` (1-based) with the line marked; falls back to
    the finding's own code when the snapshot lacks the file. ``caret``: marks
    under the line, under ``code[col:end_col]`` (the caret's span in the
    line's code) when given, else under the whole line's code."""
    out: list[Line] = []
    if line is None:
        return out
    if not lines or line > len(lines):
        if code:
            out.append(Line("current", f"{line:>5} │ {code}"))
            if caret:
                out.append(Line("caret", f"{'':>5}   {marks(code, col, end_col)}"))
        return out
    lo, hi = max(1, line - around), min(len(lines), line + around)
    for i in range(lo, hi + 1):
        text = lines[i - 1]
        out.append(Line("current" if i == line else "code", f"{i:>5} │ {text}"))
        if i == line and caret:
            stripped = text.strip()
            pad = width(text[:len(text) - len(text.lstrip())])
            # the span is in the finding's code: not this line's if the file changed since
            span = (col, end_col) if code is None or stripped == code else (None, None)
            out.append(Line("caret", f"{'':>5}   {' ' * pad}{marks(stripped, *span)}"))
    return out
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def finding_detail(f: Finding, source: str | None) -> list[Line]:
    """What Enter on a problem shows: where, the code around the line (from
    the run file's snapshot), the message, torch's full reason, the numbers
    of a divergence, the hint, and the call chain."""
    out = [Line("title", f"{ICONS.get(f.severity, '?')} {KIND_LABELS.get(f.kind, f.kind)} "
                         f"({f.severity}) {at(f.file, f.line, f.cell) if f.file else '(no user frame)'}"
                         f"{' in ' + f.function if f.function else ''}"
                         f"{'  ×' + str(f.count) if f.count > 1 else ''}")]
    lines = re.split(r"\r\n|\r|\n", source) if source else []
    out += source_excerpt(lines, f.line, code=f.code,
                          caret=f.col is not None or f.kind in CARET_KINDS, col=f.col,
                          end_col=f.end_col)
    out.append(Line("label", "message"))
    out += [Line("text", t) for t in (f.message or "").splitlines() or [""]]
    nums = divergence_numbers(f.detail) if f.kind in ("divergence", "nan_inf") else []
    if isinstance(f.detail, DivergenceDetail) and f.detail.exported == "onnx":
        # the other side of an ONNX graph's check is ONNX Runtime, not a compiled graph
        nums = [("ONNX RT vs float64" if k == "compiled vs float64" else k, v) for k, v in nums]
    nums += export_numbers(f.detail)
    if nums:
        out.append(Line("label", "numbers"))
        out += [Line("number", f"{k:>20}  {v}") for k, v in nums]
    if f.graph_id is not None or f.node or f.op:
        out.append(Line("dim", " · ".join(p for p in (
            f"graph {f.graph_id}" if f.graph_id is not None else "",
            f"node {f.node}" if f.node else "", f"op {f.op}" if f.op else "") if p)))
    if f.compile_ids:
        out.append(Line("dim", "compile ids " + ", ".join(f.compile_ids)))
    hint, fixes = hint_and_fixes(f.hint, getattr(f.detail, "fixes", None))
    if hint:
        out.append(Line("label", "hint"))
        out += [Line("hint", t) for t in hint.splitlines()]
    if fixes:   # an op with no ONNX translation: each way out on its line
        out += [Line("hint", f"  - {fix}") for fix in fixes]
    out += [Line("text", t) for t in specialized_lines(getattr(f.detail, "specialized", None))]
    if f.reason and f.reason.strip() != (f.message or "").strip():
        out.append(Line("label", "reason (torch)"))
        # (torch.onnx's errors colour their text for a terminal: shown plain here)
        out += [Line("text", t) for t in _ANSI.sub("", f.reason).rstrip().splitlines()]
    explanation = (f.detail.explanation
                   if isinstance(f.detail, (GraphBreakDetail, CompileErrorDetail)) else None)
    if explanation:
        out.append(Line("label", "explanation"))
        out += [Line("text", t) for t in str(explanation).splitlines()]
    if f.stack:
        out.append(Line("label", "call chain (innermost last)"))
        for fr in f.stack:
            out.append(Line("code", f"  {at(fr.file, fr.line, fr.cell)} in {fr.function}"))
            if fr.code:
                out.append(Line("dim", f"      {fr.code.strip()}"))
    return out


# -- graphs and their nodes ---------------------------------------------------------

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
        "eager_ns": lambda: ms(n.eager_ns) if n.eager_ns is not None else "-",
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


PHASE_NAMES = {"dynamo": "Dynamo", "graphdbg": "graphdbg", "backend": "backend", "aot": "AOT",
               "cache": "cache load", "lowering": "lowering", "codegen": "codegen",
               "cpp": "C++ compile"}


def compile_summary(c: CompileTime) -> str:
    """A compile's time by phase in one line (phases under a millisecond left out)."""
    def secs(x: float) -> str:
        return f"{x:.2f} s" if x >= 0.1 else f"{x * 1e3:.0f} ms"
    parts = [f"{PHASE_NAMES.get(k, k)} {secs(v)}" for k, v in c.phases.items() if v >= 0.0005]
    fx = c.fx_cache or {}
    cache = (", FX cache hit" if fx.get("hits") and not fx.get("misses")
             else ", FX cache miss" if fx.get("misses") else "")
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
                         ("eager time", ms(n.eager_ns) if n.eager_ns is not None else None),
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
        self.generation += 1

    @property
    def complete(self) -> bool:
        return self.total is not None and len(self.rows) >= self.total

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
        offset: int
        nodes: list
        total: int
        top_ns: int | None
        values: dict = field(default_factory=dict)   # node idx -> NodeValue
        has_values: bool = False                     # the graph was checked node by node
        compile_text: str | None = None              # the graph's compile time by phase,
        #                                              or what an export is (export_summary)

    def fetch(self, offset: int | None = None) -> NodePager.Page:
        """The next page (a query: call it from a worker thread)."""
        offset = len(self.rows) if offset is None else offset
        generation = self.generation
        query = self.find.query or None
        nodes = self.run.node_page(self.graph_id, offset, self.page_size,
                                   order_by=self.sort.column, descending=self.sort.descending,
                                   find=query)
        total = self.total if self.total is not None else self.run.node_count(self.graph_id, find=query)
        top = self.top_ns
        if top is None:
            slowest = self.run.node_page(self.graph_id, 0, 1, order_by="eager_ns", descending=True)
            top = slowest[0].eager_ns if slowest and slowest[0].eager_ns else 0
        values = self.run.node_values_at(self.graph_id, (n.idx for n in nodes))
        has_values = bool(values) or (offset > 0 and self.columns is self.value_columns) or (
            offset == 0 and self.run.node_value_call(self.graph_id) is not None)
        compile_text = None
        if offset == 0 and self.compile_id is not None:
            c = next((c for c in self.run.compile_times() if c.compile_id == self.compile_id), None)
            compile_text = compile_summary(c) if c is not None else None
        elif offset == 0 and self.graph is not None and self.graph.export is not None:
            compile_text = export_summary(self.run, self.graph)
        return NodePager.Page(generation, offset, nodes, total, top, values, has_values,
                              compile_text)

    def extend(self, page: NodePager.Page) -> list[Node]:
        """Take a fetched page; returns the rows added ([] for a stale page)."""
        if page.generation != self.generation or page.offset != len(self.rows):
            return []
        self.rows.extend(page.nodes)
        self.values.update(page.values)
        self.total = page.total
        self.top_ns = page.top_ns
        if page.has_values and self.columns is not self.value_columns:
            self.columns = self.value_columns
            self.sort = self._sort_state(self.sort.column, self.sort.descending)
        return page.nodes

    def cells(self, n: Node) -> tuple[str, ...]:
        return node_cells(n, self.values.get(n.idx), self.columns)

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
        return (f"graph {self.graph_id}: nodes {shown}{found}; sorted by {col} "
                f"{'▼' if self.sort.descending else '▲'}")


# -- source ------------------------------------------------------------------------------

@dataclass(frozen=True)
class SourceRow:
    line: int
    text: str
    gutter: str            # e.g. "g1,2 B R 1.2ms"
    marks: str             # finding letters only
    time_ns: int
    finding_ids: tuple[int, ...]
    graphs: tuple[int, ...]


class SourceModel:
    """A snapshotted file with a gutter per line: which graphs have nodes
    there (`g1,3`), a compiled function starting there (`def g2`), an export
    made there (`exp g4`: torch.export, torch.onnx.export), findings
    (`B` break, `R` recompile, `D` divergence, `E` error, ...), and the
    eager and compiled time spent there."""

    def __init__(self, run: Run, findings: Sequence[Finding] = ()) -> None:
        self.run = run
        self.findings = list(findings)
        self.kinds = {f.id: f.kind for f in findings}
        self.files: list[str] = []
        self.file: str | None = None
        self.focus_line: int | None = None
        self.rows: list[SourceRow] = []
        self.total_lines = 0
        self.names: dict[str, str] = {}  # notebook cells' names ("Cell In[3]"), by file

    def first_line(self, file: str) -> int | None:
        """The line of the first finding in `file` (where the view opens)."""
        return next((f.line for f in self.findings if f.file == file), None)

    def choose_files(self) -> list[str]:
        """Files with a snapshot, those with findings first (a query)."""
        files = self.run.source_files()
        with_findings = []
        for f in self.run.findings():
            if f.file in files and f.file not in with_findings:
                with_findings.append(f.file)
        self.files = with_findings + [f for f in files if f not in with_findings]
        self.names = self.run.cell_names()
        return self.files

    WINDOW = 4000  # lines shown at once around the focus line (snapshots go to 4 MB)

    def load(self, file: str, line: int | None = None) -> list[SourceRow]:
        """Read a file's lines and annotations (a query: from a worker)."""
        return self.load_window(file, line, window=None)[0]

    def load_window(self, file: str, line: int | None = None,
                    window: int | None = -1) -> tuple[list[SourceRow], int]:
        """The rows of at most `window` lines (WINDOW by default) centred on
        `line`, and the file's line count (a query: from a worker)."""
        window = self.WINDOW if window == -1 else window
        self.names = self.run.cell_names()
        lines = self.run.source_lines(file)
        total = len(lines)
        if window is not None and total > window:
            lo = max(0, min((line or 1) - 1 - window // 2, total - window))
            lines = lines[lo:lo + window]
        graphs_at = self.run.node_graphs_by_line(file)
        starts: dict[int, list[int]] = {}
        exports: dict[int, list[int]] = {}
        for g in self.run.graphs():
            if g.file == file and g.line is not None:
                # a compiled function's first line; an export's call
                (starts if g.export is None else exports).setdefault(g.line, []).append(g.id)
        rows = [self.row(sl, graphs_at.get(sl.line, ()), starts.get(sl.line, ()),
                         exports.get(sl.line, ())) for sl in lines]
        return rows, total

    def row(self, sl: SourceLine, graphs: Iterable[int], starts: Iterable[int],
            exports: Iterable[int] = ()) -> SourceRow:
        graphs, exports = tuple(graphs), tuple(exports)
        marks = "".join(sorted({KIND_MARKS.get(self.kinds.get(i, ""), "!") for i in sl.findings}))
        parts = []
        if starts:
            parts.append("def g" + ",".join(map(str, starts)))
        elif graphs:
            parts.append("g" + ",".join(map(str, graphs)))
        if exports:
            parts.append("exp g" + ",".join(map(str, exports)))
        if marks:
            parts.append(marks)
        t = sl.eager_ns + sl.compiled_ns
        if t:
            parts.append(ms(t).replace(" ", ""))
        return SourceRow(sl.line, sl.text, " ".join(parts), marks, t, sl.findings, graphs)

    def show(self, file: str, rows: list[SourceRow], line: int | None,
             total: int | None = None) -> None:
        self.file, self.rows, self.focus_line = file, rows, line
        self.total_lines = len(rows) if total is None else total
        if file not in self.files:
            self.files.append(file)

    def cursor_row(self) -> int:
        """The table row of the focus line (0 without one)."""
        if self.focus_line is None or not self.rows:
            return 0
        return max(0, min(self.focus_line - self.rows[0].line, len(self.rows) - 1))

    def next_file(self, step: int = 1) -> str | None:
        if not self.files:
            return None
        if self.file not in self.files:
            return self.files[0]
        return self.files[(self.files.index(self.file) + step) % len(self.files)]

    @property
    def top_ns(self) -> int:
        return max((r.time_ns for r in self.rows), default=0)

    def title(self) -> str:
        if self.file is None:
            return "Source: no snapshotted file" if not self.files else "Source"
        n = len(self.files)
        # a notebook cell as IPython names it: "Cell In[3], line 7"
        place = at(self.file, self.focus_line, self.names.get(self.file))
        part = (f"lines {self.rows[0].line}-{self.rows[-1].line} of {self.total_lines}; "
                if self.rows and len(self.rows) < self.total_lines else "")
        return (f"{place}  ({part}{self.files.index(self.file) + 1}/{n} files; "
                f"[ ] other files)" if self.file in self.files else place)

    @staticmethod
    def cells(r: SourceRow) -> tuple[str, str, str]:
        return (r.gutter, str(r.line), r.text)


# -- hot spots ----------------------------------------------------------------------------

@dataclass
class HotSpots:
    """Nodes and source lines by time, and eager ops by total time, as bars."""
    nodes: list = field(default_factory=list)
    lines: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    width: int = 16
    kernels: dict = field(default_factory=dict)   # (file, line) -> CompiledLine

    @classmethod
    def load(cls, run: Run, limit: int = 50) -> HotSpots:
        return cls(run.hot_nodes(limit), run.hot_lines(limit), run.op_stats(limit),
                   kernels={(c.file, c.line): c for c in run.compiled_lines()})

    def node_rows(self) -> list[tuple[str, ...]]:
        top = max((n.eager_ns or 0 for n in self.nodes), default=0)
        return [(bar(n.eager_ns or 0, top, self.width), ms(n.eager_ns), f"g{n.graph_id}",
                 n.name, n.target or "-", where(n.file, n.line), n.module_path or "-")
                for n in self.nodes]

    def line_rows(self) -> list[tuple[str, ...]]:
        top = max((t.total_ns for t in self.lines), default=0)
        return [(bar(t.total_ns, top, self.width), ms(t.total_ns), where(t.file, t.line),
                 ms(t.eager_ns) if t.eager_ns else "-", ms(t.compiled_ns) if t.compiled_ns else "-",
                 self._kernels(t.file, t.line))
                for t in self.lines]

    def _kernels(self, file: str, line: int | None) -> str:
        """The line's compiled kernels (inductor), with ▲ when they are slower
        per call than the line's ops in the eager reference run."""
        c = self.kernels.get((file, line))
        if c is None:
            return "-"
        names = [k.removeprefix("extern_kernels.") for k in c.kernels]
        text = ", ".join(names[:2]) + (f" +{len(names) - 2}" if len(names) > 2 else "")
        return ("▲ " if c.compiled_slower else "") + text

    def op_rows(self) -> list[tuple[str, ...]]:
        top = max((o.total_ns for o in self.ops), default=0)
        return [(bar(o.total_ns, top, self.width), ms(o.total_ns), o.op, o.phase or "-",
                 str(o.count), where(o.file, o.line), o.module_path or "-") for o in self.ops]


HOT_NODE_COLUMNS = ("", "time", "graph", "node", "target", "where", "module")
HOT_LINE_COLUMNS = ("", "total", "where", "eager", "compiled", "kernels")
HOT_OP_COLUMNS = ("", "total", "op", "phase", "count", "where", "module")


# -- run info ------------------------------------------------------------------------------

STATUS_NOTES = {
    "complete": "the program ran to its end",
    "failed": "the program raised: see the runtime_error finding",
    "interrupted": "stopped with Ctrl-C",
    "ended without closing": "the process that wrote it is gone and never closed the run file: "
                             "it holds what was committed until about a second before the end",
    "running": "still being written (or written on another host)",
}


def run_info(run: Run, counts: dict | None = None) -> list[tuple[str, str]]:
    """(label, value) lines of the Run info view (no clock: times as stored)."""
    i = run.info
    out = [("file", short(i.file)),
           ("command", ("-m " if i.module else "") + " ".join(map(str, i.argv or []))),
           ("cwd", i.cwd or "-"),
           ("exit status", "-" if i.exit_status is None else str(i.exit_status)),
           ("status", f"{i.status or '-'}" + (f" ({STATUS_NOTES[i.status]})"
                                              if i.status in STATUS_NOTES else "")),
           ("wall time", f"{i.wall_s:.2f} s" if i.wall_s else "-"),
           ("values", i.values or "-"), ("device", i.device or "-"),
           ("stance", i.stance or "-")]
    out += [(k, v or "-") for k, v in i.versions.items()]
    out.append(("run-file schema", str(i.schema_version)))
    if i.pid is not None or i.host:
        out.append(("written by", f"pid {i.pid} on {i.host or '?'}"))
    if i.ops_dropped:
        dropped = f"{i.ops_dropped} (past --max-ops: counted and timed, not kept one by one)"
        out.append(("ops dropped", dropped))
    for k, v in sorted((i.counts or {}).items()):
        out.append((f"count: {k}", str(v)))
    for k, v in sorted((i.torch_counters or {}).items()):
        out.append((f"torch: {k}", str(v)))
    for k, v in sorted((counts or {}).items()):
        out.append((f"findings: {KIND_LABELS.get(k, k)}", str(v)))
    errors = i.internal_errors or []
    out.append(("internal errors", str(len(errors)) if errors else "none"))
    for e in errors:
        text = e if isinstance(e, str) else "; ".join(f"{k}: {v}" for k, v in e.items()) \
            if isinstance(e, dict) else str(e)
        out.append(("  graphdbg error", one_line(text, 400)))
    return out


def status_line(run: Run, problems: ProblemsModel | None) -> str:
    """The one line above the views: what ran, how it ended, what was found."""
    i = run.info
    argv = " ".join(map(str, i.argv or [])) or brief(i.file)
    found = problems.summary() if problems is not None else "loading…"
    return f"{found} · exit {i.exit_status if i.exit_status is not None else '-'} ({i.status}) · {argv}"


# -- where `s` goes ---------------------------------------------------------------------

def source_target(item) -> tuple[str, int] | None:
    """The (file, line) to open for a finding, node, op stat or line time."""
    file, line = getattr(item, "file", None), getattr(item, "line", None)
    if not file:
        return None
    return file, line
