"""`graphdbg tui`: the Textual app over one run file (or two, for the diff).

Thin: every decision (rows, order, pages, find, next problem, gutter) is made
by the plain classes of `graphdbg.tui.model.run`; the views render them:
this module (the app: loading, keys, actions), `tabs` (the main screen's five
views, the command palette), `screens` (detail, nodes, help) and `widgets`. Queries run in thread workers (`@work(thread=True)`) that post
messages back: the UI never waits on SQLite (`query.Run` gives each thread
its own connection).

    app = GraphdbgApp(["x.run"])          # opens the run(s): GraphdbgError if bad
    app.run()

Keys: 1-5 views, Enter opens, Esc back, n/N next/previous problem (in a problem's
detail: the next one's detail), s source,
d diff, / find (Enter next match, Esc close), < > r sort (nodes; or click a
header), [ ] other source file, ? help, ctrl+p command palette, q quit.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any, ClassVar

from rich.style import Style
from textual import on, work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.notifications import Notification, Notify
from textual.widgets import DataTable, Input, Static, TabbedContent, TabPane

from graphdbg.core.errors import GraphdbgError
from graphdbg.runfile.query import Finding, Graph, Node, Run
from ..model import run as m
from .screens import HelpScreen, NodeScreen, NodesScreen, ProblemScreen
from .tabs import GraphdbgCommands, MainScreen
from .theme import time_style
from .widgets import DiffReady, FindTable, HotLoaded, RunLoaded, SourceLoaded


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
        Binding("r", "repro", "Repro", show=False),
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
        # the source view shows one run's snapshot at a time (two runs open: `s`
        # on B's problem shows B's file)
        self.sources = [m.SourceModel(r) for r in self.runs]
        self.source, self.source_run = self.sources[0], 0
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
        """What the first screen needs: both runs' findings and source files
        (two runs open), A's graphs and run info. The hot spots (they sum
        every op and node) and the first source file are read once the
        problems are on screen (`_after_first_paint`)."""
        run, two = self.run_a, len(self.runs) > 1
        findings = [r.findings() for r in self.runs]
        graphs = run.graphs()
        counts = [{k: v.count for k, v in r.finding_counts().items()} for r in self.runs]
        info = m.runs_info(self.runs, counts) if two else m.run_info(run, counts[0])
        sources = [m.SourceModel(r, fs, label=f"run {m.RUN_LABELS[k]}" if two else None)
                   for k, (r, fs) in enumerate(zip(self.runs, findings))]
        files = [s.choose_files() for s in sources][0]
        self.post_message(RunLoaded(findings, graphs, info, files, sources))

    @work(thread=True, exclusive=True, group="hot")
    def load_hot(self) -> None:
        try:
            self.post_message(HotLoaded(m.HotSpots.load(self.run_a)))
        except GraphdbgError as exc:
            self.call_from_thread(self.notify, str(exc), severity="error", timeout=10, markup=False)

    def _after_first_paint(self, files: list[str]) -> None:
        """The rest of the views, read while the user reads the problems."""
        self.load_hot()
        if files and self.source.file is None:
            self.show_source(files[0], self.source.first_line(files[0]), switch=False)

    def on_run_loaded(self, msg: RunLoaded) -> None:
        main = self.main
        self.problems = m.ProblemsModel.of_runs(msg.findings)
        self.sources = msg.sources
        self.source = self.sources[self.source_run]
        self.graph_list = msg.graphs
        if m.graph_columns(msg.graphs) is not m.GRAPH_COLUMNS:   # exports: a kind column
            self.graph_sort = m.graph_sort(msg.graphs)
        problems = main.query_one("#problems-table", FindTable)
        problems.set_rows(self.problems.rows(), self.problems.findings)
        main.show_graphs()
        main.query_one("#info-table", FindTable).set_rows(msg.info)
        main.query_one("#status", Static).update(
            "\n".join(m.status_lines(self.runs, self.problems)))
        tabs = main.query_one(TabbedContent)
        tabs.get_tab("problems").label = f"1 Problems ({len(self.problems)})"
        # two runs open: the graphs and hot spots are A's (the diff, `d`, has both)
        of_a = " of A" if len(self.runs) > 1 else ""
        tabs.get_tab("graphs").label = f"2 Graphs{of_a} ({len(msg.graphs)})"
        if of_a:
            tabs.get_tab("hot").label = f"4 Hot spots{of_a}"
        self.call_after_refresh(self._after_first_paint, msg.files)

    def on_hot_loaded(self, msg: HotLoaded) -> None:
        main, hot = self.main, msg.hot
        main.query_one("#hot-nodes", FindTable).set_rows(hot.node_rows(), hot.nodes)
        main.query_one("#hot-lines", FindTable).set_rows(hot.line_rows(), hot.lines)
        main.query_one("#hot-ops", FindTable).set_rows(hot.op_rows(), hot.ops)

    def show_source(self, file: str, line: int | None, *, switch: bool = True,
                    run: int | None = None) -> None:
        """``run``: whose snapshot (0: A, 1: B; default: the one shown)."""
        if switch:
            self.action_view("source")
        self.load_source(file, line, self.source_run if run is None else run)

    @work(thread=True, exclusive=True, group="source")
    def load_source(self, file: str, line: int | None, run: int = 0) -> None:
        try:
            rows, total = self.sources[run].load_window(file, line)
        except GraphdbgError as exc:
            self.call_from_thread(self.notify, str(exc), severity="error", markup=False)
            rows, total = [], 0
        self.post_message(SourceLoaded(file, rows, line, total, run))

    def on_source_loaded(self, msg: SourceLoaded) -> None:
        self.source, self.source_run = self.sources[msg.run], msg.run
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
            self.notify("still loading" if self.problems is None else
                        "no problems in this run" if len(self.runs) == 1 else
                        "no problems in either run", timeout=2)
            return
        table = self.main.query_one("#problems-table", FindTable)
        if isinstance(self.screen, ProblemScreen):
            # in a problem's detail: the next (previous) problem's detail
            shown = self.screen
            self.problems.select_id(shown.finding.id, shown.run_index)
            f = self.problems.step(forward)
            self.open_problem(f.id, self.problems.current_run)
            return
        outside = self.screen is not self.main or \
            self.main.query_one(TabbedContent).active != "problems"
        self.problems.select(table.cursor_row)
        self.problems.step(forward, from_outside=outside)
        self.action_view("problems")
        table.move_cursor(row=self.problems.cursor, animate=False)
        table.focus()

    def open_problem(self, finding_id: int, run: int = 0) -> None:
        """The detail of finding `finding_id` of run `run` (0: A, 1: B), read
        from that run's file."""
        self.action_view("problems")
        f = self.problems.select_id(finding_id, run) if self.problems else None
        if f is None:
            return
        self.main.query_one("#problems-table", FindTable).move_cursor(row=self.problems.cursor)
        label = m.RUN_LABELS[run] if len(self.runs) > 1 else None
        self.push_screen(ProblemScreen(self.runs[run], f, run, label,
                                       (self.problems.cursor + 1, len(self.problems))))

    def open_graph(self, graph_id: int) -> None:
        g = next((g for g in self.graph_list if g.id == graph_id), None)
        if g is None:
            return
        self.action_view("graphs")
        self.push_screen(NodesScreen(self.run_a, g, self.page_size))

    def current_item(self) -> Any:
        getter = getattr(self.screen, "current_item", None)
        return getter() if getter else None

    def current_run(self) -> int:
        """The run of the selected row (0: A, 1: B): a problem's own; the
        source view's; A's for graphs, nodes and hot spots."""
        getter = getattr(self.screen, "current_run", None)
        return getter() if getter else 0

    def action_source(self) -> None:
        item = self.current_item()
        target = m.source_target(item) if item is not None else None
        if target is None:
            if item is not None:
                self.notify("no source line for this row", timeout=2)
            self.action_view("source")
            return
        self.show_source(*target, run=self.current_run())

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

    # graphdbg/repro/base.py's (a view does not import the repro package: it runs the command)
    REPRO_KINDS: ClassVar[tuple[str, ...]] = ("divergence", "compile_error", "malformed_graph",
                                              "graph_break", "recompile")

    def action_repro(self) -> None:
        """`r` on a problem: `graphdbg repro RUN N` in a worker (a fresh
        process: the same command, checked the same way); its verdict as a notice."""
        item = self.current_item()
        if not isinstance(item, Finding):
            self.notify("select a problem first (r writes its repro)", timeout=3)
            return
        if item.kind not in self.REPRO_KINDS:
            self.notify(f"no repro for a {item.kind}: graphdbg repro makes scripts of divergences, "
                        f"compile errors, malformed graphs, graph breaks and recompiles",
                        severity="warning", timeout=4)
            return
        run = self.current_run()
        ids = [f.id for f in self.runs[run].findings()]
        if item.id not in ids:
            return
        number = ids.index(item.id) + 1
        # shown until the check ends (it may take a minute), then replaced by its verdict
        checking = Notification(message=f"graphdbg repro {self.paths[run]} {number}: checking it "
                                        f"in a fresh python…", title="", severity="information",
                                timeout=300)
        self.post_message(Notify(checking))
        self.make_repro(self.paths[run], number, checking)

    def _checked(self, checking: Notification, message: str, severity: str, timeout: float) -> None:
        """The repro's verdict in place of its "checking" notice."""
        try:
            self._unnotify(checking)
        except (AttributeError, KeyError, TypeError):   # gone already, or another Textual
            pass
        self.notify(message, severity=severity, timeout=timeout)

    @work(thread=True, group="repro")
    def make_repro(self, path: str, number: int, checking: Notification) -> None:
        import subprocess
        import sys
        try:
            done = subprocess.run([sys.executable, "-m", "graphdbg", "repro", path, str(number)],
                                  capture_output=True, text=True, timeout=300)
        except Exception as exc:  # noqa: BLE001 - said, the UI goes on
            self.call_from_thread(self._checked, checking, f"repro: {exc}", "error", 6)
            return
        said = " ".join((done.stdout + done.stderr).split())
        if done.returncode == 0:
            m = re.search(r"wrote (\S+)/", said)
            where = m.group(1) if m else "the repro folder"
            self.call_from_thread(self._checked, checking, f"repro: reproduced; wrote {where}",
                                  "information", 8)
        else:
            m = re.search(r"(did not reproduce: .*|graphdbg: .*)", said)
            self.call_from_thread(self._checked, checking,
                                  f"repro: {m.group(1) if m else said}"[:400], "warning", 10)

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
            self.open_problem(f.id, self.problems.run_of(event.data_table.cursor_row))

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
            self.open_problem(row.finding_ids[0], self.source_run)

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
