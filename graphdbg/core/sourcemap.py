"""Frames as the run file keeps them, and torch's stacks as text.

Which frame is the user's is decided at capture, by graphdbg.hooks.placement
(stored as ``frames.internal``); this module only holds the pieces the run
file and the views share. Imports neither torch nor textual.
"""

from __future__ import annotations

import linecache
import re
from typing import NamedTuple

from .format import code_part, width


class Frame(NamedTuple):
    """A place in a program. ``col``/``end_col``: the caret's span on the
    line, as 0-based character offsets into the line's code without its
    indentation (``code[col:end_col]`` is what the caret underlines, ``code``
    as `code_line` and the run file keep it), end exclusive; None: the whole
    line (no span known, or it spans the line). ``*frame`` gives all five,
    in `RunWriter.frame_id`'s order. Equal and hashed as the place (file,
    line, function), as a tuple of those three is: the same frame seen by two
    ways (the live stack, torch's text) is one frame, whichever span each
    gives it."""
    file: str
    line: int
    function: str
    col: int | None = None
    end_col: int | None = None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, tuple):
            return tuple.__eq__(self[:3], other[:3])
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash(self[:3])


def code_line(file: str, line: int) -> str:
    return linecache.getline(file, line).strip() if line else ""


_TB_LINE = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+), in (?P<func>.+)$')
_CARET = re.compile(r"^ *[\^~]+ *$")  # traceback's marks under a line's code: ^ and ~


def caret_span(code: str, caret: str, indent: int = 4) -> tuple[int | None, int | None]:
    """(col, end_col) of a `traceback` caret line (``^^^^``, ``~~^~~``) under
    a code line it printed stripped and indented by ``indent`` spaces: 0-based
    character offsets into ``code`` (the stripped line), end exclusive; (None,
    None) when there is none, or it covers the whole line. The caret counts
    terminal cells; wide characters take two."""
    if not _CARET.match(caret or "") or not code:
        return None, None
    start = len(caret) - len(caret.lstrip(" ")) - indent
    end = len(caret.rstrip(" ")) - indent
    if start < 0 or end <= start:
        return None, None
    col = end_col = None
    cells = 0
    for i, ch in enumerate(code):
        if col is None and cells >= start:
            col = i
        cells += width(ch)
        if cells >= end:
            end_col = i + 1
            break
    return span(code, col, end_col)


def span(code: str | None, col: int | None, end_col: int | None) -> tuple[int | None, int | None]:
    """(col, end_col) clamped to ``code`` without its trailing comment (a span
    that runs on to the line's end stops before it); (None, None) when
    unknown, empty, or covering the whole of the line's code: the whole line
    is what None means."""
    if col is None or end_col is None or not code:
        return None, None
    end = len(code_part(code))
    col, end_col = max(0, col), min(end_col, end)
    if end_col <= col or (col == 0 and end_col >= end):
        return None, None
    return col, end_col


def parse_traceback(text: str) -> list[tuple[Frame, str]]:
    """Frames (outermost first) with their code text from `traceback.format_list`
    output, an FX node's `stack_trace`, or the "User code traceback" of a break.
    A caret line under a frame's code (``^^^^``, ``~~^~~``) is its `Frame`'s
    col/end_col. (torch gives its frames no end line: its carets run on to the
    end of the line; graphdbg.hooks.placement.columns narrows a node's.)"""
    frames: list[tuple[Frame, str]] = []
    lines = text.splitlines()
    for i, raw in enumerate(lines):
        m = _TB_LINE.match(raw)
        if not m:
            continue
        code = ""
        col = end_col = None
        if i + 1 < len(lines) and not _TB_LINE.match(lines[i + 1]):
            nxt = lines[i + 1]
            if nxt.strip() and not _CARET.match(nxt):
                code = nxt.strip()
                if i + 2 < len(lines):
                    col, end_col = caret_span(code, lines[i + 2],
                                              indent=len(nxt) - len(nxt.lstrip(" ")))
        # (a resumed frame's `torch_dynamo_resume_in_f_at_19` is the user's `f`)
        func = original_function(m["func"].strip())[0]
        frames.append((Frame(m["file"], int(m["line"]), func, col, end_col), code))
    return frames


_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<func>.+)_at_(?P<line>\d+)$")


def original_function(co_name: str) -> tuple[str, int | None]:
    """Dynamo's resume functions (`torch_dynamo_resume_in_f_at_19`) name the
    user's function and the line where it resumed."""
    m = _RESUME.match(co_name or "")
    if m:
        return m["func"], int(m["line"])
    return co_name, None
