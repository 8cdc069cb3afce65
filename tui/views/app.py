"""`graphdbg tui`: the Textual app over one run file (or two, for the diff).

Thin: every decision (rows, order, pages, find, next problem, gutter) is made
by the plain classes of `graphdbg.tui.model.run`; this module renders them and
wires keys. Queries run in thread workers (`@work(thread=True)`) that post
messages back: the UI never waits on SQLite (`query.Run` gives each thread
its own connection).

    app = GraphdbgApp(["x.run"])          # opens the run(s): GraphdbgError if bad
    app.run()

Keys: 1-5 views, Enter opens, Esc back, n/N next/previous problem, s source,
d diff, / find (Enter next match, Esc close), < > r sort (nodes; or click a
header), [ ] other source file, ? help, ctrl+p command palette, q quit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any, ClassVar

from rich.style import Style
from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Input, Static, TabbedContent, TabPane

from graphdbg.core.errors import GraphdbgError
from graphdbg.runfile.query import Finding, Graph, Node, Run
from ..model import run as m
from .theme import level_style, time_style

HELP = """\
[b]graphdbg tui[/b] — keys (the mouse works too)

  [b]1[/b]-[b]5[/b]        views: Problems, Graphs, Source, Hot spots, Run info
  [b]Enter[/b]      open: a problem's detail, a graph's nodes, a node's detail,
             a line's problem; in hot spots, the source line
  [b]Esc[/b]        back (closes the find bar first)
  [b]n[/b] / [b]N[/b]      next / previous problem, from any view
  [b]s[/b]          source of the selected problem, node, line or op
  [b]d[/b]          diff: eager against compiled for the selected graph (an
             ONNX graph: against ONNX Runtime; with two runs: the two
             runs aligned); in the diff:
             [b]f[/b] differing rows only, [b]g[/b] first divergent node,
             [b]n[/b] / [b]N[/b] next / previous differing row, [b]c[/b] next recorded call
  [b]/[/b]          find in the current table (Enter: next match, Esc: close)
  [b]<[/b] [b]>[/b] [b]r[/b]      graphs, nodes: sort by previous / next column, reverse
             (or click a column header; again to reverse)
  [b]\\[[/b] [b]][/b]        source: previous / next snapshotted file
  [b]ctrl+p[/b]     command palette: views, problems, graphs, source files
  [b]?[/b]          this help
  [b]q[/b]          quit

Source gutter: g1,2 graphs with nodes at the line;
  def g1 a compiled function starts there; exp g1 an export made
  graph 1 there; B break, R recompile, D divergence, N NaN/Inf,
  C compile error, M malformed graph, E runtime error, X size an
  export specialised; the time spent at the line (eager + compiled).
"""


# -- messages from workers --------------------------------------------------------------

class RunLoaded(Message):
    def __init__(self, findings: list, graphs: list,
                 info: list, files: list, counts: dict) -> None:
        super().__init__()
        self.findings, self.graphs = findings, graphs
        self.info, self.files, self.counts = info, files, counts


class HotLoaded(Message):
    """The hot spots, loaded after the first screen (they sum every op and node)."""

    def __init__(self, hot: m.HotSpots) -> None:
        super().__init__()
        self.hot = hot


class SourceLoaded(Message):
    def __init__(self, file: str, rows: list, line: int | None, total: int) -> None:
        super().__init__()
        self.file, self.rows, self.line, self.total = file, rows, line, total


class PageLoaded(Message):
    def __init__(self, page: m.NodePager.Page) -> None:
        super().__init__()
        self.page = page


class DetailLoaded(Message):
    def __init__(self, lines: list) -> None:
        super().__init__()
        self.lines = lines


class DiffReady(Message):
    def __init__(self, make_screen: Any) -> None:
        super().__init__()
        self.make_screen = make_screen


# -- widgets ---------------------------------------------------------------------------

class FindTable(DataTable):
    """A DataTable of plain-text rows that highlights `/` matches."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("cursor_type", "row")
        kwargs.setdefault("zebra_stripes", False)
        super().__init__(*args, **kwargs)
        self.raw: list[tuple[str, ...]] = []
        self.items: list[Any] = []
        self.cell_styles: list[dict[int, Style]] = []
        self.find = m.FindState()

    def render_cell(self, text: str, style: Style | None = None) -> Text:
        t = Text(text, style=style or "", no_wrap=True, overflow="ellipsis")
        for a, b in self.find.spans(text):
            t.stylize("reverse bold", a, b)
        return t

    def set_rows(self, rows: Iterable[Sequence[str]], items: Iterable[Any] = (),
                 styles: Iterable[dict] | None = None, *, cursor: int | None = None) -> None:
        keep = self.cursor_row if cursor is None else cursor
        self.clear()
        self.raw, self.items, self.cell_styles = [], [], []
        self.append_rows(rows, items, styles)
        if self.row_count:
            self.move_cursor(row=max(0, min(keep, self.row_count - 1)), animate=False)

    def append_rows(self, rows: Iterable[Sequence[str]], items: Iterable[Any] = (),
                    styles: Iterable[dict] | None = None) -> None:
        rows, items = [tuple(r) for r in rows], list(items)
        styles = list(styles) if styles is not None else [{} for _ in rows]
        for i, r in enumerate(rows):
            st = styles[i] if i < len(styles) else {}
            self.add_row(*(self.render_cell(c, st.get(j)) for j, c in enumerate(r)))
        self.raw += rows
        self.items += items + [None] * (len(rows) - len(items))
        self.cell_styles += styles + [{}] * (len(rows) - len(styles))

    def set_find(self, query: str) -> None:
        before = set(self.find.matching_rows(self.raw))
        self.find.query = query
        after = set(self.find.matching_rows(self.raw))
        for i in sorted(before | after):
            for j, c in enumerate(self.raw[i]):
                self.update_cell_at((i, j), self.render_cell(c, self.cell_styles[i].get(j)))

    def goto_match(self, forward: bool = True, include_current: bool = False) -> bool:
        row = self.find.next_row(self.raw, self.cursor_row, forward,
                                 include_current=include_current)
        if row is None:
            return False
        self.move_cursor(row=row, animate=False)
        return True

    @property
    def current_item(self) -> Any:
        if 0 <= self.cursor_row < len(self.items):
            return self.items[self.cursor_row]
        return None


class NodesTable(FindTable):
    """The nodes table: scrolling near the end of the loaded rows asks for
    the next page (as moving the cursor there does)."""

    class Scrolled(Message):
        pass

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if int(old_value) != int(new_value):
            self.post_message(self.Scrolled())


class FindBar(Input):
    """`/`: find in the screen's current table."""

    def on_mount(self) -> None:
        self.cursor_blink = getattr(self.app, "cursor_blink", True)

    DEFAULT_CSS = """
    FindBar { dock: bottom; display: none; height: 3; }
    FindBar.-shown { display: block; }
    """


class Heading(Static):
    """One bold line of plain text (file names may hold `[`: no markup)."""

    DEFAULT_CSS = "Heading { height: 1; text-style: bold; padding: 0 1; }"

    def __init__(self, content: str = "", **kwargs) -> None:
        kwargs.setdefault("markup", False)
        super().__init__(content, **kwargs)


# -- screens ---------------------------------------------------------------------------

class FindMixin:
    """Screens with a find bar and a current table: `/` remembers the table
    that had the focus, and finds in it while the bar has the focus."""

    _find_target: FindTable | None = None

    def current_table(self) -> FindTable | None:  # pragma: no cover - overridden
        return None

    def find_target(self) -> FindTable | None:
        return self._find_target if self._find_target is not None else self.current_table()

    def open_find(self) -> None:
        self._find_target = self.current_table()
        bar = self.query_one(FindBar)
        bar.add_class("-shown")
        bar.focus()

    def close_find(self) -> bool:
        bar = self.query_one(FindBar)
        if not bar.has_class("-shown"):
            return False
        bar.remove_class("-shown")
        table = self.find_target()
        self._find_target = None
        if table is not None:
            table.focus()
        return True

    def apply_find(self, query: str) -> None:
        table = self.find_target()
        if table is not None:
            table.set_find(query)
            table.goto_match(include_current=True)

    def next_match(self) -> None:
        table = self.find_target()
        if table is not None and not table.goto_match():
            self.app.notify(f"no match for {table.find.query!r}", timeout=2, markup=False)


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

    def __init__(self, run: Run, finding: Finding) -> None:
        super().__init__()
        self.run, self.finding = run, finding
        f = finding
        self.heading = (f"Problem #{f.id}: {m.KIND_LABELS.get(f.kind, f.kind)} at "
                        f"{m.where(f.file, f.line, f.cell)}")

    def make_lines(self) -> list:
        f = self.finding
        try:
            source = self.run.source(f.file) if f.file else None
        except GraphdbgError:
            source = None  # the detail still shows the finding's own line
        return m.finding_detail(f, source)

    def current_item(self) -> Any:
        return self.finding


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
        for key, label in self.pager.columns:
            width = m.NODE_WIDTHS.get(key)
            table.add_column(label + self.pager.sort.label(key), key=key,
                             width=max(width, len(label) + 2) if width else None)

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
        table.append_rows([self.pager.cells(n) for n in added], added, styles)
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


class GraphdbgCommands(Provider):
    """The command palette: views, problems, graphs and source files."""

    def _commands(self) -> list[tuple[str, Any, str]]:
        app: GraphdbgApp = self.app  # type: ignore[assignment]
        out = [(f"View: {m.VIEW_TITLES[v]}", partial(app.action_view, v), f"key {i}")
               for i, v in enumerate(m.VIEWS, 1)]
        if app.problems is not None:
            for f in app.problems.findings:
                sev, kind, where, msg = m.ProblemsModel.cells(f)
                out.append((f"Problem: {kind} {where} {msg}"[:120],
                            partial(app.open_problem, f.id), sev))
        for g in app.graph_list:
            out.append((f"Graph {g.id}: {g.function} {m.where(g.file, g.line)} "
                        f"({m.backend_label(g)})",
                        partial(app.open_graph, g.id), f"{g.n_nodes} nodes"))
        for file in list(app.source.files):
            name = app.source.names.get(file) or file   # a notebook cell: "Cell In[3]"
            out.append((f"Source: {name}", partial(app.show_source, file,
                                                   app.source.first_line(file)), "snapshot"))
        return out

    async def discover(self) -> Hits:
        for text, command, help in self._commands():
            yield DiscoveryHit(text, command, help=help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, command, help in self._commands():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), command, text=text, help=help)


class MainScreen(FindMixin, Screen):
    """The five views as tabs."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close_find", "", show=False),
                Binding("greater_than_sign", "sort(1)", "", show=False),
                Binding("less_than_sign", "sort(-1)", "", show=False),
                Binding("r", "reverse", "", show=False),
                Binding("left_square_bracket", "other_file(-1)", "", show=False),
                Binding("right_square_bracket", "other_file(1)", "", show=False)]

    def compose(self) -> ComposeResult:
        yield Static("loading…", id="status", markup=False)
        with TabbedContent(id="views", initial="problems"):
            with TabPane("1 Problems", id="problems"):
                yield FindTable(id="problems-table")
                yield Static("", id="problem-preview", markup=False)
            with TabPane("2 Graphs", id="graphs"):
                yield FindTable(id="graphs-table")
            with TabPane("3 Source", id="source"):
                yield Static("Source: press s on a problem, node or line", id="source-title",
                             markup=False)
                yield FindTable(id="source-table")
            with TabPane("4 Hot spots", id="hot"), VerticalScroll(id="hot-scroll"):
                yield Heading("Graph nodes by eager time")
                yield FindTable(id="hot-nodes")
                yield Heading("Source lines by time (eager + compiled)")
                yield FindTable(id="hot-lines")
                yield Heading("Eager ops by total time")
                yield FindTable(id="hot-ops")
            with TabPane("5 Run info", id="info"):
                yield FindTable(id="info-table", show_header=False)
        yield FindBar(placeholder="find in this table (Enter: next match, Esc: close)", id="find")
        yield Footer()

    def on_mount(self) -> None:
        for tid, cols in (("problems-table", [c for _, c in m.PROBLEM_COLUMNS]),
                          ("source-table", ["", "line", "code"]),
                          ("hot-nodes", m.HOT_NODE_COLUMNS), ("hot-lines", m.HOT_LINE_COLUMNS),
                          ("hot-ops", m.HOT_OP_COLUMNS), ("info-table", ["", ""])):
            table = self.query_one(f"#{tid}", FindTable)
            for c in cols:
                table.add_column(c)
        self.query_one("#problems-table").focus()

    def current_table(self) -> FindTable | None:
        focused = self.focused
        if isinstance(focused, FindTable):
            return focused
        view = self.query_one(TabbedContent).active
        ids = {"problems": "problems-table", "graphs": "graphs-table",
               "source": "source-table", "hot": "hot-nodes", "info": "info-table"}
        return self.query_one(f"#{ids.get(view, 'problems-table')}", FindTable)

    def current_item(self) -> Any:
        table = self.current_table()
        return table.current_item if table is not None else None

    def action_close_find(self) -> None:
        self.close_find()

    def show_graphs(self) -> None:
        """The graphs table in its sort order, the sort shown in its header."""
        app: GraphdbgApp = self.app  # type: ignore[assignment]
        table = self.query_one("#graphs-table", FindTable)
        table.clear(columns=True)
        columns = m.graph_columns(app.graph_list)
        for key, label in columns:
            table.add_column(label + app.graph_sort.label(key), key=key)
        graphs = m.sort_graphs(app.graph_list, app.graph_sort)
        table.set_rows([m.graph_cells(g, columns) for g in graphs], graphs, cursor=0)

    def action_sort(self, step: int) -> None:
        if self.query_one(TabbedContent).active == "graphs":
            self.app.graph_sort.cycle(step)
            self.show_graphs()

    def action_reverse(self) -> None:
        if self.query_one(TabbedContent).active == "graphs":
            self.app.graph_sort.reverse()
            self.show_graphs()

    @on(DataTable.HeaderSelected, "#graphs-table")
    def _graph_header(self, event: DataTable.HeaderSelected) -> None:
        self.app.graph_sort.select(str(event.column_key.value))
        self.show_graphs()

    def action_other_file(self, step: int) -> None:
        app: GraphdbgApp = self.app  # type: ignore[assignment]
        if self.query_one(TabbedContent).active == "source":
            file = app.source.next_file(step)
            if file:
                app.show_source(file, None)

    @on(TabbedContent.TabActivated)
    def _tab(self, event: TabbedContent.TabActivated) -> None:
        self.close_find()
        view = event.pane.id
        first = {"problems": "#problems-table", "graphs": "#graphs-table",
                 "source": "#source-table", "hot": "#hot-nodes", "info": "#info-table"}.get(view)
        if first:
            self.query_one(first).focus()
        if view == "source":
            self.call_after_refresh(self.app.center_source)


# -- the app ---------------------------------------------------------------------------

class GraphdbgApp(App):
    """The terminal UI on one run (or two: the diff aligns them)."""

    CSS_PATH = "app.tcss"
    TITLE = "graphdbg"
    COMMANDS = App.COMMANDS | {GraphdbgCommands}
    ENABLE_COMMAND_PALETTE = True
    BINDINGS: ClassVar[list[BindingType]] = [
        *(Binding(str(i), f"view('{v}')", m.VIEW_TITLES[v], show=False)
          for i, v in enumerate(m.VIEWS, 1)),
        Binding("n", "next_problem(True)", "Next problem"),
        Binding("N", "next_problem(False)", "Prev problem", show=False),
        Binding("s", "source", "Source"),
        Binding("d", "diff", "Diff"),
        Binding("slash", "find", "Find"),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, paths: list[str], runs: list[Run] | None = None, *,
                 page_size: int = 100, cursor_blink: bool = True) -> None:
        """``runs``: the paths already opened (`run_tui` opens them first);
        ``cursor_blink=False`` for tests and snapshots."""
        super().__init__()
        self.cursor_blink = cursor_blink
        self.paths = list(paths)
        self._own_runs = runs is None
        self.runs = runs if runs is not None else []
        if runs is None:
            try:
                for p in self.paths:
                    self.runs.append(Run(p))
            except BaseException:
                self.close_runs()
                raise
        self.run_a = self.runs[0]
        self.page_size = page_size
        self.problems: m.ProblemsModel | None = None
        self.graph_list: list[Graph] = []
        self.graph_sort = m.graph_sort()
        self.source = m.SourceModel(self.run_a)
        self.main: MainScreen | None = None

    def close_runs(self) -> None:
        for r in self.runs:
            r.close()

    def on_mount(self) -> None:
        self.main = MainScreen()
        self.push_screen(self.main)
        self.load_run()

    def on_unmount(self) -> None:
        if self._own_runs:
            self.close_runs()

    # -- loading ---------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="run")
    def load_run(self) -> None:
        try:
            self._load_run()
        except GraphdbgError as exc:  # a damaged table: say so, keep what loads
            self.call_from_thread(self.notify, str(exc), severity="error", timeout=10, markup=False)

    def _load_run(self) -> None:
        run = self.run_a
        findings = run.findings()
        graphs = run.graphs()
        counts = {k: v.count for k, v in run.finding_counts().items()}
        info = m.run_info(run, counts)
        if len(self.runs) > 1:
            info = [("run B", self.runs[1].info.file)] + info
        self.source = m.SourceModel(run, findings)
        files = self.source.choose_files()
        self.post_message(RunLoaded(findings, graphs, info, files, counts))
        self.post_message(HotLoaded(m.HotSpots.load(run)))

    def on_run_loaded(self, msg: RunLoaded) -> None:
        main = self.main
        self.problems = m.ProblemsModel(msg.findings)
        self.graph_list = msg.graphs
        if m.graph_columns(msg.graphs) is not m.GRAPH_COLUMNS:   # exports: a kind column
            self.graph_sort = m.graph_sort(msg.graphs)
        problems = main.query_one("#problems-table", FindTable)
        problems.set_rows(self.problems.rows(), self.problems.findings)
        main.show_graphs()
        main.query_one("#info-table", FindTable).set_rows(msg.info)
        main.query_one("#status", Static).update(m.status_line(self.run_a, self.problems))
        tabs = main.query_one(TabbedContent)
        tabs.get_tab("problems").label = f"1 Problems ({len(self.problems)})"
        tabs.get_tab("graphs").label = f"2 Graphs ({len(msg.graphs)})"
        if msg.files and self.source.file is None:
            self.show_source(msg.files[0], self.source.first_line(msg.files[0]), switch=False)

    def on_hot_loaded(self, msg: HotLoaded) -> None:
        main, hot = self.main, msg.hot
        main.query_one("#hot-nodes", FindTable).set_rows(hot.node_rows(), hot.nodes)
        main.query_one("#hot-lines", FindTable).set_rows(hot.line_rows(), hot.lines)
        main.query_one("#hot-ops", FindTable).set_rows(hot.op_rows(), hot.ops)

    def show_source(self, file: str, line: int | None, *, switch: bool = True) -> None:
        if switch:
            self.action_view("source")
        self.load_source(file, line)

    @work(thread=True, exclusive=True, group="source")
    def load_source(self, file: str, line: int | None) -> None:
        try:
            rows, total = self.source.load_window(file, line)
        except GraphdbgError as exc:
            self.call_from_thread(self.notify, str(exc), severity="error", markup=False)
            rows, total = [], 0
        self.post_message(SourceLoaded(file, rows, line, total))

    def on_source_loaded(self, msg: SourceLoaded) -> None:
        self.source.show(msg.file, msg.rows, msg.line, msg.total)
        table = self.main.query_one("#source-table", FindTable)
        top = self.source.top_ns
        styles = [{0: time_style(self, m.heat(r.time_ns, top)) if not r.marks else
                   Style(color=self.current_theme.warning, bold=True),
                   2: Style(bold=True) if r.line == msg.line else None} for r in msg.rows]
        table.set_rows([m.SourceModel.cells(r) for r in msg.rows], msg.rows, styles,
                       cursor=self.source.cursor_row())
        if msg.line is not None and table.row_count:
            table.move_cursor(row=self.source.cursor_row(), animate=False)
            self.call_after_refresh(self.center_source)
        title = self.source.title() if msg.rows else \
            f"{msg.file}: no snapshot of this file in the run file"
        self.main.query_one("#source-title", Static).update(title)

    def center_source(self) -> None:
        """Scroll the source so that the focus line sits mid-screen."""
        table = self.main.query_one("#source-table", FindTable)
        if table.size.height and self.source.focus_line:
            table.scroll_to(y=max(0, self.source.cursor_row() - table.size.height // 2),
                            animate=False, immediate=True)

    # -- actions ---------------------------------------------------------------------
    def to_main(self) -> None:
        while len(self.screen_stack) > 1 and self.screen is not self.main:
            self.pop_screen()

    VIEW_TABLES: ClassVar[dict[str, str]] = {
        "problems": "#problems-table", "graphs": "#graphs-table", "source": "#source-table",
        "hot": "#hot-nodes", "info": "#info-table"}

    def action_view(self, view: str) -> None:
        self.to_main()
        self.main.query_one(TabbedContent).active = view
        # now, not on TabActivated: a key typed right after goes to the new view
        self.main.query_one(self.VIEW_TABLES[view]).focus()

    def action_next_problem(self, forward: bool = True) -> None:
        if self.problems is None or not len(self.problems):
            self.notify("still loading" if self.problems is None else "no problems in this run",
                        timeout=2)
            return
        table = self.main.query_one("#problems-table", FindTable)
        outside = self.screen is not self.main or \
            self.main.query_one(TabbedContent).active != "problems"
        self.problems.select(table.cursor_row)
        self.problems.step(forward, from_outside=outside)
        self.action_view("problems")
        table.move_cursor(row=self.problems.cursor, animate=False)
        table.focus()

    def open_problem(self, finding_id: int) -> None:
        self.action_view("problems")
        f = self.problems.select_id(finding_id) if self.problems else None
        if f is None:
            return
        self.main.query_one("#problems-table", FindTable).move_cursor(row=self.problems.cursor)
        self.push_screen(ProblemScreen(self.run_a, f))

    def open_graph(self, graph_id: int) -> None:
        g = next((g for g in self.graph_list if g.id == graph_id), None)
        if g is None:
            return
        self.action_view("graphs")
        self.push_screen(NodesScreen(self.run_a, g, self.page_size))

    def current_item(self) -> Any:
        getter = getattr(self.screen, "current_item", None)
        return getter() if getter else None

    def action_source(self) -> None:
        item = self.current_item()
        target = m.source_target(item) if item is not None else None
        if target is None:
            if item is not None:
                self.notify("no source line for this row", timeout=2)
            self.action_view("source")
            return
        self.show_source(*target)

    def action_find(self) -> None:
        if hasattr(self.screen, "open_find"):
            self.screen.open_find()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def selected_graph_id(self) -> int | None:
        """The graph of the selected row (a graph, node or problem), or of
        the nodes view, or the only graph; None otherwise."""
        item = self.current_item()
        if isinstance(item, Graph):
            return item.id
        if isinstance(item, (Node, Finding)) and item.graph_id is not None:
            return item.graph_id
        if isinstance(self.screen, NodesScreen):
            return self.screen.graph.id
        return self.graph_list[0].id if len(self.graph_list) == 1 else None

    def action_diff(self) -> None:
        """`d`: the diff view (another module, issue 10 §3): eager against
        compiled per node for the selected graph (the first with values when
        none is), or the two runs aligned."""
        try:
            from ..model.diff import DiffModel
            from .diff import DiffScreen
        except ImportError:
            self.notify("the diff view is not in this build", severity="warning", timeout=3)
            return
        self.build_diff(DiffModel, DiffScreen, self.selected_graph_id())

    @work(thread=True, exclusive=True, group="diff")
    def build_diff(self, diff_model: Any, diff_screen: type, graph_id: int | None) -> None:
        try:
            if len(self.runs) > 1:
                model = diff_model.for_runs(self.runs[0], self.runs[1])
            else:
                model = diff_model.for_graph(self.run_a, graph_id)
        except Exception as exc:  # noqa: BLE001 - the diff's own error: a notice, the UI goes on
            self.call_from_thread(self.notify, f"diff: {exc}", severity="error", timeout=5, markup=False)
            return
        self.post_message(DiffReady(partial(diff_screen, model)))  # made on the UI thread

    def on_diff_ready(self, msg: DiffReady) -> None:
        self.push_screen(msg.make_screen())

    # -- events ----------------------------------------------------------------------
    @on(DataTable.RowHighlighted, "#problems-table")
    def _problem_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.main.query_one("#problem-preview", Static).update(
            m.problem_preview(event.data_table.current_item))

    def _misrouted(self, event: DataTable.RowSelected) -> bool:
        """Enter typed right after a view key reaches the old view's table
        (focus moves a moment later): hand it to the view now shown."""
        if event.data_table.screen is not self.main:
            return False
        view = self.main.query_one(TabbedContent).active
        pane = next((a for a in event.data_table.ancestors if isinstance(a, TabPane)), None)
        if pane is None or pane.id == view:
            return False
        self.main.query_one(self.VIEW_TABLES[view], FindTable).action_select_cursor()
        return True

    @on(DataTable.RowSelected, "#problems-table")
    def _problem_selected(self, event: DataTable.RowSelected) -> None:
        if self._misrouted(event):
            return
        f = event.data_table.current_item
        if f is not None:
            self.open_problem(f.id)

    @on(DataTable.RowSelected, "#graphs-table")
    def _graph_selected(self, event: DataTable.RowSelected) -> None:
        if self._misrouted(event):
            return
        g = event.data_table.current_item
        if g is not None:
            self.open_graph(g.id)

    @on(DataTable.RowSelected, "#source-table")
    def _line_selected(self, event: DataTable.RowSelected) -> None:
        if self._misrouted(event):
            return
        row = event.data_table.current_item
        if row is not None and row.finding_ids:
            self.open_problem(row.finding_ids[0])

    @on(DataTable.RowSelected, "#nodes-table")
    def _node_selected(self, event: DataTable.RowSelected) -> None:
        node = event.data_table.current_item
        if node is not None:
            self.push_screen(NodeScreen(self.run_a, node))

    @on(DataTable.RowSelected, "#hot-nodes, #hot-lines, #hot-ops")
    def _hot_selected(self, event: DataTable.RowSelected) -> None:
        if self._misrouted(event):
            return
        self.action_source()

    @on(Input.Changed, "#find")
    def _find_changed(self, event: Input.Changed) -> None:
        self.screen.apply_find(event.value)

    @on(Input.Submitted, "#find")
    def _find_next(self, event: Input.Submitted) -> None:
        self.screen.next_match()


def run_tui(paths: list[str]) -> int:
    """Open the run(s) (a bad file raises GraphdbgError before the terminal
    is taken over), then run the UI until `q`."""
    runs: list[Run] = []
    try:
        for p in paths:
            runs.append(Run(p))
        app = GraphdbgApp(paths, runs)
        app.run()
        return app.return_code or 0
    finally:
        for r in runs:
            r.close()
