"""The TUI's widgets (a table that highlights `/` matches, the find bar,
headings), the find behaviour screens share, and the messages workers post."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.style import Style
from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable, Input, Static

from ..model import run as m


# -- messages from workers --------------------------------------------------------------

class RunLoaded(Message):
    """``findings`` and ``sources``: one per run open (A, and B); the rest A's
    (``info``: both runs' lines)."""

    def __init__(self, findings: list, graphs: list, info: list, files: list,
                 sources: list) -> None:
        super().__init__()
        self.findings, self.graphs = findings, graphs
        self.info, self.files, self.sources = info, files, sources


class HotLoaded(Message):
    """The hot spots, loaded after the first screen (they sum every op and node)."""

    def __init__(self, hot: m.HotSpots) -> None:
        super().__init__()
        self.hot = hot


class SourceLoaded(Message):
    def __init__(self, file: str, rows: list, line: int | None, total: int,
                 run: int = 0) -> None:
        super().__init__()
        self.file, self.rows, self.line, self.total = file, rows, line, total
        self.run = run   # whose snapshot: 0 (A, the only run) or 1 (B)


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

class Table(DataTable):
    """A DataTable whose rows are never shown at stale column widths.

    Textual measures added rows on idle, after a repaint may already have
    cached them at the widths before (a page that lands just before the
    screen refreshes: `nod…` in a column that is then wide enough for the
    name, until something else changes). Its caches are keyed by
    `_update_count`, so widths that changed get a new count: a repaint."""

    def _update_dimensions(self, new_rows) -> None:
        before = [c.content_width for c in self.columns.values()]
        super()._update_dimensions(new_rows)
        if [c.content_width for c in self.columns.values()] != before:
            self._update_count += 1
            self.refresh()


class FindTable(Table):
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


# -- find on a screen ------------------------------------------------------------

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
