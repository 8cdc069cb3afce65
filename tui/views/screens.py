"""The screens pushed over the main one: a problem's and a node's detail,
a graph's nodes (paged), help."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.style import Style
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Static

from graphdbg.core.errors import GraphdbgError
from graphdbg.analysis.values import finding_value
from graphdbg.core.format import brief
from graphdbg.runfile.query import Finding, Graph, Node, Run
from ..model import run as m
from .theme import level_style, time_style
from .widgets import (DetailLoaded, FindBar, FindMixin, FindTable, Heading, NodesTable,
                      PageLoaded)

HELP = """\
[b]graphdbg tui[/b] — keys (the mouse works too)

  [b]1[/b]-[b]5[/b]        views: Problems, Graphs, Source, Hot spots, Run info
  [b]Enter[/b]      open: a problem's detail, a graph's nodes, a node's detail,
             a line's problem; in hot spots, the source line
  [b]Esc[/b]        back (closes the find bar first)
  [b]n[/b] / [b]N[/b]      next / previous problem, from any view; in a problem's
             detail, the next one's detail (two runs open: both
             runs' problems, each marked A or B)
  [b]s[/b]          source of the selected problem, node, line or op
  [b]d[/b]          diff: eager against compiled for the selected graph (an
             ONNX graph: against ONNX Runtime; with two runs: the two
             runs aligned); in the diff:
             [b]f[/b] differing rows only, [b]g[/b] first divergent node,
             [b]n[/b] / [b]N[/b] next / previous differing row, [b]c[/b] next recorded call
  [b]r[/b]          on a problem: graphdbg repro, a standalone script that
             reproduces it, checked in a fresh python (a notice says)
  [b]/[/b]          find in the current table (Enter: next match, Esc: close)
  [b]<[/b] [b]>[/b] [b]r[/b]      graphs, nodes: sort by previous / next column, reverse
             (or click a column header; again to reverse)
  [b]\\[[/b] [b]][/b]        source: previous / next snapshotted file
  [b]ctrl+p[/b]     command palette: views, problems, graphs, source files
  [b]?[/b]          this help
  [b]q[/b]          quit

A graph's nodes: its ops first (in the order chosen), then its inputs
  (the program's tensors, the model's parameters and buffers), untimed.
The diff: as many columns as fit; the pane under it shows the row whole.

Source gutter: g1,2 graphs with nodes at the line;
  def g1 a compiled function starts there; exp g1 an export made
  graph 1 there; B break, R recompile, D divergence, N NaN/Inf,
  C compile error, M malformed graph, E runtime error, X size an
  export specialised; the time spent at the line (eager + compiled).
"""

class DetailScreen(FindMixin, Screen):
    """A scrollable page of `model.Line`s loaded in a worker; `/` highlights."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back")]
    heading = ""

    def compose(self) -> ComposeResult:
        yield Heading(self.heading, id="detail-title")
        with VerticalScroll(id="detail-scroll"):
            yield Static("loading…", id="detail")
        yield FindBar(placeholder="find", id="find")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#detail-scroll").focus()
        self.load()

    @work(thread=True, exclusive=True, group="detail")
    def load(self) -> None:
        try:
            lines = self.make_lines()
        except GraphdbgError as exc:
            lines = [m.Line("text", str(exc))]
        self.post_message(DetailLoaded(lines))

    def make_lines(self) -> list:  # pragma: no cover - overridden (in a worker)
        return []

    def on_detail_loaded(self, msg: DetailLoaded) -> None:
        self.lines = msg.lines
        self.render_detail("")

    def render_detail(self, query: str) -> None:
        theme = self.app.current_theme
        styles = {"title": Style(bold=True), "label": Style(bold=True, underline=True),
                  "current": Style(bold=True, color=theme.accent),
                  "caret": Style(color=theme.error, bold=True), "hint": Style(color=theme.success),
                  "dim": Style(dim=True), "code": Style(), "text": Style(),
                  "number": Style(color=theme.warning)}
        find = m.FindState(query)
        text = Text()
        for line in getattr(self, "lines", []):
            t = Text(line.text, style=styles.get(line.style, Style()))
            for a, b in find.spans(line.text):
                t.stylize("reverse bold", a, b)
            text.append_text(t)
            text.append("\n")
        self.query_one("#detail", Static).update(text)

    def apply_find(self, query: str) -> None:
        self.render_detail(query)

    def next_match(self) -> None:
        pass

    def close_find(self) -> bool:
        closed = super().close_find()
        if closed:
            self.query_one("#detail-scroll").focus()
        return closed

    def action_back(self) -> None:
        if not self.close_find():
            self.app.pop_screen()


class ProblemScreen(DetailScreen):
    """Enter on a problem: source around the line, message, reason, numbers,
    hint, call chain."""

    def __init__(self, run: Run, finding: Finding, run_index: int = 0,
                 label: str | None = None, position: tuple[int, int] | None = None) -> None:
        """``run``: the finding's own run file (its source snapshot);
        ``run_index``/``label``: which of two runs open it is (0/"A", 1/"B");
        ``position``: (its row, counted from 1, and the rows) in the problems
        list, as the heading numbers it."""
        super().__init__()
        self.run, self.finding, self.run_index = run, finding, run_index
        f = finding
        whose = f", run {label} ({brief(run.path)})" if label else ""
        number = f" {position[0]} of {position[1]}" if position else ""
        self.heading = (f"Problem{number}{whose}: {m.KIND_LABELS.get(f.kind, f.kind)} at "
                        f"{m.where(f.file, f.line, f.cell)}")

    def make_lines(self) -> list:
        f = self.finding
        try:
            source = self.run.source(f.file) if f.file else None
        except GraphdbgError:
            source = None  # the detail still shows the finding's own line
        # a divergence's figures: its node's value on its call, as the diff shows it
        return m.finding_detail(f, source, finding_value(self.run, f))

    def current_item(self) -> Any:
        return self.finding

    def current_run(self) -> int:
        return self.run_index


class NodeScreen(DetailScreen):
    """Enter on a node: every field uncut, its source line and call chain,
    the findings at it."""

    def __init__(self, run: Run, node: Node) -> None:
        super().__init__()
        self.run, self.node = run, node
        self.heading = f"node {node.name} of graph {node.graph_id}"

    def make_lines(self) -> list:
        n = self.node
        source = self.run.source(n.file) if n.file else None
        return m.node_detail(n, source, self.run.stack(n.stack_id),
                             self.run.findings(kind=("divergence", "nan_inf", "malformed_graph")),
                             self.run.graph(n.graph_id))

    def current_item(self) -> Any:
        return self.node


class NodesScreen(FindMixin, Screen):
    """The nodes of one graph: paged from SQLite, sorted in SQL."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("greater_than_sign", "sort(1)", "Sort →"),
        Binding("less_than_sign", "sort(-1)", "Sort ←", show=False),
        Binding("r", "reverse", "Reverse"),
    ]

    def __init__(self, run: Run, graph: Graph, page_size: int = 100) -> None:
        super().__init__()
        self.run, self.graph = run, graph
        self.pager = m.NodePager(run, graph.id, page_size, compile_id=graph.compile_id,
                                 graph=graph)
        self._fetching = False

    def compose(self) -> ComposeResult:
        g = self.graph
        # an export's function says what exported it, and the line under the heading the rest
        how = f" ({g.backend}, compile {g.compile_id})" if g.export is None else ""
        yield Heading(f"graph {g.id} {g.function or '?'} at {m.where(g.file, g.line)}{how}",
                      id="nodes-graph")
        yield Static("", id="nodes-compile", markup=False)
        yield Static(self.pager.title(), id="nodes-title", markup=False)
        yield NodesTable(id="nodes-table")
        yield FindBar(placeholder="find nodes (name, op, target, module, shape, line)", id="find")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(FindTable)
        self.set_columns()
        table.focus()
        self.load_page()

    def current_table(self) -> FindTable:
        return self.query_one(FindTable)

    def set_columns(self) -> None:
        table = self.query_one(FindTable)
        table.clear(columns=True)
        self._name_width = self.pager.name_width(self.size.width or self.app.size.width)
        for key, label in self.pager.columns:
            # the name as wide as the longest (cut to what the screen leaves: `cells`)
            width = None if key == "name" else m.NODE_WIDTHS.get(key)
            table.add_column(label + self.pager.sort.label(key), key=key,
                             width=max(width, len(label) + 2) if width else None)

    _name_width: int | None = None

    def on_resize(self) -> None:
        """Another width: the name column gets what the screen leaves; the
        loaded rows are shown again (no query)."""
        if self._name_width is None or self._name_width == self.pager.name_width(self.size.width):
            return
        table = self.query_one(FindTable)
        items, styles, cursor = table.items, table.cell_styles, table.cursor_row
        self.set_columns()
        table.raw, table.items, table.cell_styles = [], [], []
        table.append_rows([self.pager.cells(n, self._name_width) for n in items], items, styles)
        if table.row_count:
            table.move_cursor(row=min(cursor, table.row_count - 1), animate=False)

    def load_page(self) -> None:
        self._fetching = True
        self._fetch_page()

    @work(thread=True, group="nodes")
    def _fetch_page(self) -> None:
        try:
            self.post_message(PageLoaded(self.pager.fetch()))
        except GraphdbgError as exc:
            self.app.call_from_thread(self.app.notify, str(exc), severity="error", markup=False)

    def on_page_loaded(self, msg: PageLoaded) -> None:
        self._fetching = False
        columns = self.pager.columns
        added = self.pager.extend(msg.page)
        if msg.page.compile_text:
            line = self.query_one("#nodes-compile", Static)
            line.update(msg.page.compile_text)
            line.display = True
        table = self.query_one(FindTable)
        if self.pager.columns is not columns:      # the first page brought values
            self.set_columns()
        problems = getattr(self.app, "problems", None)
        flagged = {(f.graph_id, f.node) for f in (problems.findings if problems else ())}
        error = Style(color=self.app.current_theme.error, bold=True)
        at = self.pager.column_index
        time_col = at("eager_ns")
        value_cols = [i for i in (at("status"), at("max_abs"), at("max_rel")) if i is not None]
        styles = []
        for n in added:
            st = {time_col: time_style(self.app, self.pager.heat(n)),
                  1: error if (n.graph_id, n.name) in flagged else None}
            level = level_style(self.app, self.pager.value_level(n))
            st.update(dict.fromkeys(value_cols, level))
            styles.append(st)
        table.append_rows([self.pager.cells(n, self._name_width) for n in added], added, styles)
        self.query_one("#nodes-title", Static).update(self.pager.title())
        self.maybe_more()

    def maybe_more(self) -> None:
        table = self.query_one(FindTable)
        visible_end = int(table.scroll_y) + table.size.height
        if not self._fetching and (self.pager.wants_more(table.cursor_row)
                                 or self.pager.wants_more(visible_end)):
            self.load_page()

    @on(DataTable.RowHighlighted, "#nodes-table")
    @on(NodesTable.Scrolled)
    def _row(self, event: Message) -> None:
        self.maybe_more()

    @on(DataTable.HeaderSelected, "#nodes-table")
    def _header(self, event: DataTable.HeaderSelected) -> None:
        self.pager.sort.select(str(event.column_key.value))
        self.reload()

    def action_sort(self, step: int) -> None:
        self.pager.sort.cycle(step)
        self.reload()

    def action_reverse(self) -> None:
        self.pager.sort.reverse()
        self.reload()

    def reload(self) -> None:
        self.pager.reset()
        self._fetching = False
        table = self.query_one(FindTable)
        table.raw, table.items, table.cell_styles = [], [], []
        self.set_columns()
        self.query_one("#nodes-title", Static).update(self.pager.title())
        self.load_page()

    def apply_find(self, query: str) -> None:
        # the filter is SQL (every node, not only the loaded pages); the match highlighted
        self.query_one(FindTable).find.query = query
        self.pager.find.query = query
        self.reload()

    def action_back(self) -> None:
        if not self.close_find():
            self.app.pop_screen()

    def current_item(self) -> Any:
        return self.query_one(FindTable).current_item

    def on_screen_resume(self) -> None:
        self.maybe_more()


class HelpScreen(ModalScreen):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "dismiss", "Close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 80; max-width: 100%; height: auto; max-height: 100%;
                                  border: round $primary; background: $surface; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(HELP, id="help-text")

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.app.pop_screen()
