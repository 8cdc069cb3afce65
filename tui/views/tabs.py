"""The main screen (the five views as tabs) and the command palette's
commands."""

from __future__ import annotations

from functools import partial
from typing import Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from ..model import run as m
from .widgets import FindBar, FindMixin, FindTable, Heading


class GraphdbgCommands(Provider):
    """The command palette: views, problems, graphs and source files."""

    def _commands(self) -> list[tuple[str, Any, str]]:
        app: Any = self.app   # the GraphdbgApp (app.py imports this module)
        out = [(f"View: {m.VIEW_TITLES[v]}", partial(app.action_view, v), f"key {i}")
               for i, v in enumerate(m.VIEWS, 1)]
        if app.problems is not None:
            two = len(app.runs) > 1
            for f, run in zip(app.problems.findings, app.problems.runs):
                sev, kind, where, msg = m.ProblemsModel.cells(f)
                whose = f"{m.RUN_LABELS[run]} " if two else ""
                out.append((f"Problem: {whose}{kind} {where} {msg}"[:120],
                            partial(app.open_problem, f.id, run), sev))
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
        # two runs open: a run column says whose each problem is
        problem_columns = m.TWO_RUN_PROBLEM_COLUMNS if len(self.app.runs) > 1 else \
            m.PROBLEM_COLUMNS
        for tid, cols in (("problems-table", [c for _, c in problem_columns]),
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

    def current_run(self) -> int:
        """Whose row is selected (0: A, 1: B): a problem's run, the source
        view's; graphs and hot spots are A's."""
        app: Any = self.app
        table = self.current_table()
        if table is not None and table.id == "problems-table" and app.problems is not None:
            return app.problems.run_of(table.cursor_row)
        if table is not None and table.id == "source-table":
            return app.source_run
        return 0

    def action_close_find(self) -> None:
        self.close_find()

    def show_graphs(self) -> None:
        """The graphs table in its sort order, the sort shown in its header."""
        app: Any = self.app   # the GraphdbgApp (app.py imports this module)
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
        """`r`: in graphs, reverse the sort; on a problem, write its repro."""
        active = self.query_one(TabbedContent).active
        if active == "graphs":
            self.app.graph_sort.reverse()
            self.show_graphs()
        elif active == "problems":
            self.app.action_repro()

    @on(DataTable.HeaderSelected, "#graphs-table")
    def _graph_header(self, event: DataTable.HeaderSelected) -> None:
        self.app.graph_sort.select(str(event.column_key.value))
        self.show_graphs()

    def action_other_file(self, step: int) -> None:
        app: Any = self.app   # the GraphdbgApp (app.py imports this module)
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
