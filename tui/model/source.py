"""The source view (a snapshotted file with its gutter) and the hot spots
(nodes, lines and eager ops by time). No textual."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from graphdbg.analysis.lines import compiled_by_line, compiled_lines
from graphdbg.core.format import at, ms
from graphdbg.runfile.query import Finding, Run, SourceLine
from .common import KIND_MARKS, bar, where

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

    def __init__(self, run: Run, findings: Sequence[Finding] = (),
                 label: str | None = None) -> None:
        self.run = run
        self.label = label   # two runs open: whose snapshot this is ("run B")
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
        lines = self.run.source_lines(file, compiled_by_line(self.run))
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
        place = f"{self.label}: {place}" if self.label else place
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
        return cls(run.hot_nodes(limit), run.hot_lines(limit, compiled=compiled_by_line(run)),
                   run.op_stats(limit), kernels={(c.file, c.line): c for c in compiled_lines(run)})

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
