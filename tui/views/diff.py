"""The diff view: eager vs compiled per node of one graph, or the ops of two
runs aligned by line and op (issue 10). Renders a `diff_model.DiffModel`;
every decision (rows, filter, jumps, paging) is the model's.

Keys: ``f`` only differing rows / all rows, ``g`` the first divergent node,
``n``/``N`` next/previous differing row, ``c`` the graph's next recorded
call, ``escape`` back.

Rows are read in a thread worker (`@work(thread=True)`) that posts
`DiffScreen.Page`; colours are the theme's (`$error`, `$warning`,
`$success`), so NO_COLOR and the themes apply.
"""

from __future__ import annotations

import sqlite3
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from graphdbg.core.errors import GraphdbgError

from ..model.diff import DiffModel, DiffRow, fit_columns
from .theme import level_style
from .widgets import Table

# what reading a run file may raise: damaged (one-line GraphdbgError) or closed
READ_ERRORS = (GraphdbgError, sqlite3.Error)


class DiffScreen(Screen):
    """A DataTable of a DiffModel's rows, side by side."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("f", "toggle_differing", "Differing only"),
        Binding("g", "first_divergent", "First divergent"),
        Binding("n", "next_differing(True)", "Next differing"),
        Binding("N", "next_differing(False)", "Prev differing", show=False),
        Binding("c", "next_call", "Next call", show=False),
    ]
    DEFAULT_CSS = """
    DiffScreen #diff-title { height: 1; text-style: bold; padding: 0 1; }
    DiffScreen #diff-status { height: 1; padding: 0 1; color: $text-muted; }
    DiffScreen #diff-table { height: 1fr; }
    DiffScreen #diff-detail { height: auto; max-height: 6; padding: 0 1;
                              border-top: solid $primary; }
    """

    class Page(Message):
        """Rows read by the worker: ``reset`` replaces the table's rows;
        ``cursor`` moves the cursor once they are shown."""

        def __init__(self, rows: list[DiffRow], generation: int, reset: bool,
                     cursor: int | None = None, note: str | None = None,
                     offset: int = 0) -> None:
            super().__init__()
            self.rows, self.generation, self.reset = rows, generation, reset
            self.cursor, self.note, self.offset = cursor, note, offset

    def __init__(self, model: DiffModel, **kwargs) -> None:
        super().__init__(**kwargs)
        self.model = model
        self._generation = 0   # pages of an older filter are dropped
        self._fetching = False

    def compose(self) -> ComposeResult:
        yield Static(self.model.title, id="diff-title", markup=False)
        yield Static("loading…", id="diff-status", markup=False)
        table: DataTable = Table(id="diff-table", cursor_type="row", zebra_stripes=False)
        yield table
        yield Static("", id="diff-detail", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#diff-table", DataTable).focus()
        self._load(reset=True)

    # -- columns: those that fit whole, as wide as their cells (`fit_columns`) ------------
    _shown: list[tuple[int, int]] | None = None   # (column, width), set by the first rows
    _fitted_to = 0                                # the width they were fitted to

    def _fit(self, rows: list[DiffRow]) -> None:
        """Choose the columns for the table's width and these rows; the
        table is rebuilt with the loaded rows when they change."""
        width = self.size.width or self.app.size.width
        shown = fit_columns(self.model.columns, [r.cells for r in rows], width - 2)
        if shown == self._shown:
            return
        self._shown, self._fitted_to = shown, width
        table = self.query_one("#diff-table", DataTable)
        cursor = table.cursor_row
        table.clear(columns=True)
        for i, w in shown:
            label = self.model.columns[i]
            table.add_column(label, key=label, width=w)
        for row in self.model.rows:
            table.add_row(*self._cells(row))
        if table.row_count:
            table.move_cursor(row=min(cursor, table.row_count - 1), animate=False)

    def on_resize(self) -> None:
        if self._shown is not None and self.size.width != self._fitted_to:
            self._fit(self.model.rows)

    # -- loading -------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="diff-page")
    def _load(self, reset: bool = False, until: int | None = None,
              cursor: int | None = None) -> None:
        model, generation = self.model, self._generation
        offset = 0 if reset else len(model.rows)
        try:
            if reset:
                model.reset()
            rows = model.load_until(until, offset) if until is not None else model.fetch(offset)
        except READ_ERRORS as exc:  # a damaged or closed run file: say so, keep the UI
            self.post_message(self.Page([], generation, reset, note=f"cannot read: {exc}"))
            return
        self.post_message(self.Page(rows, generation, reset, cursor, offset=offset))

    def on_diff_screen_page(self, msg: DiffScreen.Page) -> None:
        self._fetching = False
        if msg.generation != self._generation:
            return
        table = self.query_one("#diff-table", DataTable)
        if msg.reset:
            table.clear()
            self.model.rows = []
        # two workers (paging, a jump) may read the same rows: keep each once
        rows = msg.rows[max(0, len(self.model.rows) - msg.offset):] \
            if msg.offset <= len(self.model.rows) else []
        self.model.extend(rows)
        if self._shown is None or msg.reset:   # the first rows say how wide the columns are
            self._shown = None
            self._fit(self.model.rows)
        else:
            for row in rows:
                table.add_row(*self._cells(row), key=None)
        if msg.cursor is not None and msg.cursor < table.row_count:
            table.move_cursor(row=msg.cursor, animate=False)
        self._status(msg.note)

    def _status(self, note: str | None = None) -> None:
        m = self.model
        if note:
            text = note
        elif not m.total_all and not m.rows:
            text = m.empty_message
        else:
            text = m.status_line() + "   f: differing only   g: first divergent   n/N: next/prev"
        self.query_one("#diff-status", Static).update(text)

    def _cells(self, row: DiffRow) -> list[Text]:
        style = level_style(self.app, row.level)
        status_col = self.model.columns.index("status") if "status" in self.model.columns else -1
        return [Text(row.cells[i], style=style if i == status_col and style else "",
                     no_wrap=True, overflow="ellipsis") for i, _ in self._shown or ()]

    @on(DataTable.RowHighlighted, "#diff-table")
    def _more(self, event: DataTable.RowHighlighted) -> None:
        rows = self.model.rows
        row = rows[event.cursor_row] if 0 <= event.cursor_row < len(rows) else None
        self.query_one("#diff-detail", Static).update("\n".join(self.model.detail(row)))
        if not self._fetching and self.model.wants_more(event.cursor_row):
            self._fetching = True
            self._load()

    # -- actions -------------------------------------------------------------------
    @property
    def cursor_row(self) -> int:
        return self.query_one("#diff-table", DataTable).cursor_row

    def current_row(self) -> DiffRow | None:
        i = self.cursor_row
        return self.model.rows[i] if 0 <= i < len(self.model.rows) else None

    def current_item(self) -> DiffRow | None:
        """The row under the cursor (its file and line: the app's `s` opens them)."""
        return self.current_row()

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_toggle_differing(self) -> None:
        on_ = self.model.toggle_differing(reload=False)
        self._generation += 1
        self.notify("only rows that differ" if on_ else "all rows", timeout=2)
        self._load(reset=True)

    def action_next_call(self) -> None:
        """One graph: the next call with per-node values (a graph keeps its
        first checked call, and a later one whose divergence was localised)."""
        call = self.model.next_call()
        if call is None:
            self.notify("no other call of this graph has per-node values", timeout=2)
            return
        self._generation += 1
        self.query_one("#diff-title", Static).update(self.model.title)
        self._load(reset=True)

    def action_first_divergent(self) -> None:
        self._jump_first()

    @work(thread=True, exclusive=True, group="diff-jump")
    def _jump_first(self) -> None:
        model, generation = self.model, self._generation
        try:
            at = model.first_divergent()
        except READ_ERRORS as exc:
            self.app.call_from_thread(self.notify, f"cannot read: {exc}", severity="error",
                                      markup=False)
            return
        if at is None:
            self.app.call_from_thread(self.notify, "nothing diverges here", timeout=3)
            return
        if at < len(model.rows):
            self.app.call_from_thread(self._move, at)
            return
        offset = len(model.rows)
        self.post_message(self.Page(model.load_until(at, offset), generation, False, at,
                                    offset=offset))

    def _move(self, row: int) -> None:
        self.query_one("#diff-table", DataTable).move_cursor(row=row, animate=False)

    def action_next_differing(self, forward: bool = True) -> None:
        at = self.model.next_differing(self.cursor_row, forward)
        if at is None:
            self.notify("no differing row loaded", timeout=2)
        else:
            self._move(at)
