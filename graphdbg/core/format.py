"""Small text helpers shared by the views (report, diff, the TUI, the pytest plugin).

Plain strings only: no rich, no torch.
"""

from __future__ import annotations

import functools
import io
import os
import tokenize
import unicodedata


def short(path: str | None) -> str:
    """A path relative to the current directory when it lies below it."""
    if not path:
        return "?"
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def at(file: str | None, line: int | None, cell: str | None = None) -> str:
    """Where a line is, as a user reads it: ``Cell In[3], line 7`` for a
    notebook cell (``cell``: its name, as the run file keeps it), else the
    short path and the line (``model.py:12``)."""
    if cell:
        return f"{cell}, line {line}" if line else cell
    return f"{short(file)}:{line}" if line else short(file)


def clip(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, cut after a whole sentence where
    one ends in its second half, else after a whole word, marked with "…"."""
    if len(text) <= limit:
        return text
    end = text.rfind(". ", 0, limit)
    if end >= limit // 2:
        return text[:end + 1] + " …"
    end = text.rfind(" ", 0, limit)
    return text[:end if end > 0 else limit].rstrip(" ,;:") + "…"


def brief(path: str | None) -> str:
    """The file name alone (tables are narrow)."""
    return os.path.basename(path) if path else "?"


def ms(ns: float | None) -> str:
    """A duration in ns as s, ms or µs."""
    if ns is None:
        return "-"
    if ns >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e3:.1f} µs"


@functools.lru_cache(maxsize=4096)
def code_part(code: str) -> str:
    """A line without its trailing comment: the caret goes under code only."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.COMMENT:
                return code[:tok.start[1]].rstrip()
    except (tokenize.TokenError, SyntaxError):
        pass
    return code


def caret(code: str, col: int | None = None, end_col: int | None = None) -> str:
    """The marks under ``code`` (a line without its indentation): ``^`` under
    ``code[col:end_col]``, the caret's span, else under the whole line's code
    (its trailing comment aside). Wide characters take two cells, as in
    Python's tracebacks."""
    if col is None or end_col is None or not 0 <= col < end_col <= len(code):
        return "^" * width(code_part(code))
    return " " * width(code[:col]) + "^" * max(1, width(code[col:end_col]))


def width(text: str) -> int:
    """Terminal cells of ``text`` (wide East Asian characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def num(x, digits: int = 3) -> str:
    """A number in a few characters: ``digits`` significant digits (nan, inf
    and -inf as such), "-" for None, anything else as str()."""
    if x is None:
        return "-"
    if isinstance(x, (int, float)):
        return f"{x:.{digits}g}"
    return str(x)
