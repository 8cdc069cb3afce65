"""Small text helpers shared by the views (report, diff, the TUI, the pytest plugin).

Plain strings only: no rich, no torch.
"""

from __future__ import annotations

import io
import os
import tokenize


def short(path: str | None) -> str:
    """A path relative to the current directory when it lies below it."""
    if not path:
        return "?"
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


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


def code_part(code: str) -> str:
    """A line without its trailing comment: the caret goes under code only."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.COMMENT:
                return code[:tok.start[1]].rstrip()
    except (tokenize.TokenError, SyntaxError):
        pass
    return code


def num(x, digits: int = 3) -> str:
    """A number in a few characters: ``digits`` significant digits (nan, inf
    and -inf as such), "-" for None, anything else as str()."""
    if x is None:
        return "-"
    if isinstance(x, (int, float)):
        return f"{x:.{digits}g}"
    return str(x)
