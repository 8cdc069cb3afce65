"""`graphdbg tui DIR`: the job screen over a distributed job's folder.

The ranks (status, counts, where each was) and where they differ, from
`graphdbg.tui.model.job.JobModel` (built in a worker: the comparison reads
every rank). Enter on a rank, or on a difference (its first rank), ends this
app with that rank's run file; `run_job_tui` then opens it in the run app
(tui/views/app.py), and `q` there comes back here.

    app = JobApp(job)              # an open graphdbg.runfile.job.Job
    path = app.run()               # the run file to open, or None (q)
"""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable, Footer, Static

from graphdbg.core.errors import GraphdbgError
from graphdbg.runfile.job import Job
from ..model.job import DIFFERENCE_COLUMNS, RANK_COLUMNS, JobModel
from .app import run_tui
from .widgets import FindTable, Heading
from .theme import level_style


class JobLoaded(Message):
    def __init__(self, model: JobModel | None, error: str | None = None) -> None:
        super().__init__()
        self.model, self.error = model, error


class JobApp(App):
    """The job screen: ranks above, where they differ below."""

    TITLE = "graphdbg"
    CSS = """
    #job-header { height: auto; padding: 0 1; background: $panel; }
    #ranks { height: auto; max-height: 12; }
    #differences { height: 1fr; }
    #difference-preview { height: auto; max-height: 6; padding: 0 1;
                          border-top: solid $primary-muted; color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "focus_table('ranks')", "Ranks"),
        Binding("d", "focus_table('differences')", "Differences"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, job: Job, model: JobModel | None = None, *, rank_row: int = 0,
                 cursor_blink: bool = True) -> None:
        """``model``: one built before (coming back from a rank's run);
        ``rank_row``: the ranks table's row to select."""
        super().__init__()
        self.job, self.model = job, model
        self.rank_row = rank_row
        self.cursor_blink = cursor_blink

    def compose(self) -> ComposeResult:
        yield Static("loading…", id="job-header", markup=False)
        yield Heading("Ranks (Enter: open the rank's run; q there comes back here)")
        yield FindTable(id="ranks")
        yield Heading("Where ranks differ", id="differences-title")
        yield FindTable(id="differences")
        yield Static("", id="difference-preview", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        for tid, cols in (("ranks", RANK_COLUMNS), ("differences", DIFFERENCE_COLUMNS)):
            table = self.query_one(f"#{tid}", FindTable)
            for c in cols:
                table.add_column(c)
        self.query_one("#ranks").focus()
        if self.model is not None:
            self.show(self.model)
        else:
            self.load()

    @work(thread=True, exclusive=True, group="job")
    def load(self) -> None:
        try:
            self.post_message(JobLoaded(JobModel.load(self.job)))
        except GraphdbgError as exc:   # a damaged table: say so
            self.post_message(JobLoaded(None, str(exc)))

    def on_job_loaded(self, msg: JobLoaded) -> None:
        if msg.model is None:
            self.query_one("#job-header", Static).update(msg.error or "")
            self.notify(msg.error or "", severity="error", timeout=10, markup=False)
            return
        self.model = msg.model
        self.show(msg.model)

    def _style(self, name: str) -> Style:
        theme = self.current_theme
        return {"bold": Style(bold=True), "green": Style(color=theme.success),
                "yellow": Style(color=theme.warning), "dim": Style(dim=True)}.get(name, Style())

    def show(self, model: JobModel) -> None:
        header = Text()
        for i, (style, line) in enumerate(model.header()):
            header.append(("\n" if i else "") + line, style=self._style(style))
        self.query_one("#job-header", Static).update(header)
        ranks = self.query_one("#ranks", FindTable)
        styles = [{2: level_style(self, model.rank_level(s))} for s in model.ranks]
        ranks.set_rows(model.rank_rows(), model.ranks, styles, cursor=self.rank_row)
        diffs = self.query_one("#differences", FindTable)
        diffs.set_rows(model.difference_rows(), model.differences,
                       [{0: level_style(self, d.severity if d.severity != "info" else None)}
                        for d in model.differences], cursor=0)
        self.query_one("#differences-title", Static).update(
            f"Where ranks differ: {model.summary()} (Enter: open the first rank's run)")
        self.query_one("#difference-preview", Static).update(
            model.preview(diffs.current_item))

    def action_focus_table(self, which: str) -> None:
        self.query_one(f"#{which}", FindTable).focus()

    @on(DataTable.RowHighlighted, "#differences")
    def _difference_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self.model is not None:
            self.query_one("#difference-preview", Static).update(
                self.model.preview(event.data_table.current_item))

    @on(DataTable.RowSelected, "#ranks, #differences")
    def _selected(self, event: DataTable.RowSelected) -> None:
        if self.model is None:
            return
        path = self.model.run_of(event.data_table.current_item)
        if path is not None:
            if event.data_table.id == "ranks":
                self.rank_row = event.data_table.cursor_row
            self.exit(path)


def run_job_tui(folder: str) -> int:
    """The job screen; a rank's run in the run app, then back, until `q`
    on the job screen. The job is opened first (a folder without a readable
    rank file raises GraphdbgError before the terminal is taken over)."""
    with Job.open(folder) as job:
        model, row = None, 0
        while True:
            app = JobApp(job, model, rank_row=row)
            path = app.run()
            model, row = app.model or model, app.rank_row
            if not path:
                return app.return_code or 0
            run_tui([path])
