"""The terminal UI's shared view state: labels, places, bars, find (`/`),
sort, and the lines of a detail pane with their source excerpt. No textual."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from graphdbg.core.format import at, brief, width
from graphdbg.core.format import caret as marks

VIEWS = ("problems", "graphs", "source", "hot", "info")
VIEW_TITLES = {"problems": "Problems", "graphs": "Graphs", "source": "Source",
               "hot": "Hot spots", "info": "Run info"}
ICONS = {"error": "✖", "warning": "▲", "info": "●"}
KIND_LABELS = {"graph_break": "graph break", "recompile": "recompile",
               "compile_error": "compile error", "malformed_graph": "malformed graph",
               "divergence": "divergence", "nan_inf": "NaN/Inf", "runtime_error": "runtime error",
               "check_skipped": "not checked", "export_specialized": "fixed at export"}
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



@dataclass(frozen=True)
class Line:
    """A line of a detail pane; `style` names its role (the widget picks
    colours from the theme): title, label, text, dim, code, current, caret,
    hint, number."""
    style: str
    text: str


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
