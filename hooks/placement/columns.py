"""The caret's span: which part of the user's line a frame is at.

Python 3.11's code objects carry each instruction's columns (``co_positions``):
Python's tracebacks underline ``x @ x``, not ``f = torch.compile(lambda x: x @
x)``. A span is ``(col, end_col)``: 0-based character offsets into the line's
code without its indentation (``code[col:end_col]``, ``code`` as
`graphdbg.core.sourcemap.code_line` and the run file keep it), end
exclusive; ``(None, None)`` means the whole line (no span known, or the span
covers the line). It travels in `Frame.col`/`Frame.end_col` and is stored with
each frame (``frames.col``, ``frames.end_col``).

- `of_frame`: a live frame, at the instruction it runs (``f_lasti``);
- `of_summary`: a ``traceback.FrameSummary`` (``colno``/``end_colno``);
- torch's text (a node's ``stack_trace``, a graph break's user traceback):
  its caret lines are read by `graphdbg.core.sourcemap.parse_traceback`
  (the reading side parses text too); `of_node` narrows a node's;
- `of_node`: an FX node, from its ``stack_trace``'s caret and the node's op.

A span over several lines is clamped to the frame's line (it runs on to the
line's end). Columns are UTF-8 byte offsets in ``co_positions`` and in the
AST; spans are characters.
"""

from __future__ import annotations

import ast
import functools
import itertools
import linecache
from types import FrameType

from graphdbg.core.format import code_part
from graphdbg.core.sourcemap import Frame, span

Span = tuple[int | None, int | None]
NO_SPAN: Span = (None, None)


def _chars(text: str, offset: int) -> int:
    """A UTF-8 byte offset into ``text`` as a character offset."""
    if text.isascii():
        return offset
    return len(text.encode("utf-8")[:offset].decode("utf-8", errors="ignore"))


def in_line(file: str, line: int, col: int | None, end_col: int | None,
            end_line: int | None = None) -> Span:
    """The span of UTF-8 byte columns ``col``..``end_col`` of ``line`` in
    ``file`` (as ``co_positions`` and the AST count them); a span that ends
    on another line (``end_line``), or without an end, runs on to the end of
    the line."""
    raw = linecache.getline(file, line).rstrip("\r\n") if line else ""
    if col is None or not raw.strip():
        return NO_SPAN
    indent = len(raw) - len(raw.lstrip())
    start = _chars(raw, col)
    if end_line is not None and end_line != line and (test := _test_from(file, line, start)):
        start, end = test   # a jump: its span is the whole `if`/`while` statement
    elif end_col is None or (end_line is not None and end_line != line):
        end = len(raw.rstrip())
    else:
        end = _chars(raw, end_col)
    return span(raw.strip(), start - indent, end - indent)


def _test_from(file: str, line: int, start: int) -> tuple[int, int] | None:
    """(start, end) characters of the first ``if``/``while``/``assert`` test
    that starts at or after ``start`` on ``line`` and ends on it."""
    found = [(st, c[1]) for (ln, st), cands in _expressions(file).items()
             if ln == line and st >= start for c in cands if c[4] and c[0] == line]
    return min(found) if found else None


def of_positions(file: str, line: int, positions: tuple) -> Span:
    """The span of one instruction's ``co_positions`` entry ``(lineno,
    end_lineno, col, end_col)`` on ``line``."""
    lineno, end_lineno, col, end_col = positions
    if lineno != line:
        return NO_SPAN
    return in_line(file, line, col, end_col, end_lineno)


def of_frame(f: FrameType) -> Span:
    """The span of the instruction a live frame runs (the call a caller's
    frame is in)."""
    lasti = f.f_lasti
    if lasti < 0:
        return NO_SPAN
    code = f.f_code
    pos = _position(code, lasti // 2)   # one entry per 2-byte code unit; f_lasti counts bytes
    if pos is None:
        return NO_SPAN
    return of_positions(code.co_filename, f.f_lineno or 0, pos)


@functools.lru_cache(maxsize=4096)
def _position(code, index: int) -> tuple | None:
    """``co_positions()``'s entry ``index`` (a walk over the code's entries:
    a module's code has thousands)."""
    return next(itertools.islice(code.co_positions(), index, None), None)


def of_summary(fs) -> Span:
    """The span of a ``traceback.FrameSummary``. torch makes its summaries
    (``real_stack``, a node's stack) without an end line: where the code
    shows whether the columns end on the frame's line, that decides it."""
    col, end_col = getattr(fs, "colno", None), getattr(fs, "end_colno", None)
    line = fs.lineno or 0
    if col is None:
        return NO_SPAN
    end_line = getattr(fs, "end_lineno", None)
    if end_line is None:
        end_line = _end_line(fs.filename, line, col, end_col)
    return in_line(fs.filename, line, col, end_col, end_line)


def _end_line(file: str, line: int, col: int, end_col: int | None) -> int:
    """The line an expression from (line, col) to end_col ends on, as the
    file's code says; without one there, ``line`` when the columns can be
    one span on it, else a later line (the span runs to this one's end)."""
    raw = linecache.getline(file, line)
    starts = _expressions(file).get((line, _chars(raw, col)), ())
    if end_col is not None:
        for end_lineno, end, *_ in starts:
            if end == _chars(linecache.getline(file, end_lineno), end_col):
                return end_lineno
    return line if end_col is not None and end_col > col else line + 1


# -- FX nodes -------------------------------------------------------------------------

_BINOPS = {"add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow", "lshift",
           "rshift", "and_", "or_", "xor"}
_UNARY = {"neg", "pos", "invert", "not_"}
_COMPARE = {"lt", "le", "eq", "ne", "gt", "ge"}
# ATen's names for what Python writes as an operator
_ATEN_SUBSCRIPT = {"slice", "select", "index"}
_ATEN_BINOPS = {"div", "remainder", "floor_divide", "bitwise_and", "bitwise_or", "bitwise_xor"}


def _wanted(node) -> tuple[str, str | None] | None:
    """The expression an FX node's instruction is: (kind, name), or None for
    nodes that are no instruction of the user's (inputs, outputs)."""
    target = node.target
    if node.op == "call_function" and getattr(target, "__module__", None) in ("_operator",
                                                                               "operator"):
        name = getattr(target, "__name__", "")
        if name == "getitem":
            return "Subscript", None
        if name in _BINOPS:
            return "BinOp", None
        if name in _UNARY:
            return "UnaryOp", None
        if name in _COMPARE:
            return "Compare", None
        return None
    packet = getattr(target, "overloadpacket", None)   # an ATen op (an exported program's)
    if node.op == "call_function" and packet is not None:
        name = getattr(packet, "__name__", "").rstrip("_")
        if name in _ATEN_SUBSCRIPT:
            return "Subscript", None
        if name in _BINOPS or name in _ATEN_BINOPS:
            return "BinOp", None
        if name in _COMPARE:
            return "Compare", None
        return "Call", name
    if node.op == "call_function":
        return "Call", getattr(target, "__name__", None)
    if node.op in ("call_method", "call_module"):
        return "Call", str(target).rsplit(".", 1)[-1]
    return None


def _line_and_indent(file: str, line: int, code: str) -> tuple[str, int] | None:
    """The file's line of ``code`` and its indentation; None when the file
    (as linecache has it) no longer holds that code there."""
    raw = linecache.getline(file, line).rstrip("\r\n") if line else ""
    if not code or raw.strip() != code:
        return None
    return raw, len(raw) - len(raw.lstrip())


def _at(file: str, line: int, start: int) -> list[tuple]:
    """The expressions that start at character ``start`` of ``line`` and end
    on it, smallest first."""
    return sorted((c for c in _expressions(file).get((line, start), ()) if c[0] == line),
                  key=lambda c: c[:2])


def of_text(file: str, line: int, code: str, col: int | None, end_col: int | None) -> Span:
    """The span of a frame torch wrote down as text (``traceback.format_list``:
    a graph break's user stack, a node's ``stack_trace``), read from its caret
    line (`parse_traceback`). torch gives its frames no end line, so its
    carets run on to the end of the line: narrowed here to the expression
    that starts at the caret, as the code shows it: the test of an ``if`` or
    ``while`` (a jump), else the outermost call (``x.abs().max().item()``),
    else the outermost expression that ends on the line."""
    found = _line_and_indent(file, line, code)
    col, end_col = span(code, col, end_col)
    if found is None or col is None or end_col < len(code_part(code)):
        return col, end_col   # exact, or nothing to narrow it with
    raw, indent = found
    cands = _at(file, line, indent + col)
    pick = (next((c for c in cands if c[4]), None)   # a test
            or next((c for c in reversed(cands) if c[2] == "Call"), None)
            or (cands[-1] if cands else None))
    return span(code, col, pick[1] - indent) if pick is not None else (col, end_col)


def narrow(frames: list[tuple[Frame, str]]) -> list[tuple[Frame, str]]:
    """`of_text` for each (frame, code) of `parse_traceback`."""
    out = []
    for f, c in frames:
        if f.col is not None:
            col, end_col = of_text(f.file, f.line, c, f.col, f.end_col)
            f = f._replace(col=col, end_col=end_col)
        out.append((f, c))
    return out


def of_node(node, file: str, line: int, code: str, col: int | None, end_col: int | None
            ) -> Span:
    """An FX node's span on its user line (``file``, ``line``, ``code`` and
    the caret's ``col``/``end_col`` from its ``stack_trace``): the expression
    of the node's op that starts at the caret (a call of its name, an
    operator's expression), where the file shows one; else `of_text`. (A
    caret that spans the whole line is no caret: then from the line's start.)"""
    want = _wanted(node)
    found = _line_and_indent(file, line, code)
    if want is None or found is None:
        return of_text(file, line, code, col, end_col)
    raw, indent = found
    kind, name = want
    if col is None:   # no caret (a non-strict export's nodes): the line's one such expression
        only = [(st, c) for (ln, st), cs in _expressions(file).items() if ln == line
                for c in cs if c[0] == line and c[2] == kind and _named(c, name)]
        if len({st for st, _ in only}) != 1:
            return of_text(file, line, code, col, end_col)
        start = only[0][0]
        cands = [c for _, c in only]
    else:
        start = indent + col
        cands = [c for c in _expressions(file).get((line, start), ()) if c[2] == kind]
        if name is not None and cands:
            cands = [c for c in cands if _named(c, name)] or cands
    if not cands:
        return of_text(file, line, code, col, end_col)
    end_line, end = min(c[:2] for c in cands)  # the innermost
    if end_line != line:
        end = len(raw.rstrip())
    return span(code, start - indent, end - indent)


def _named(c: tuple, name: str | None) -> bool:
    """Whether expression ``c`` calls ``name`` (any, for operators)."""
    return name is None or c[3] == name or name.endswith("_" + str(c[3]))


# -- the file's expressions, by where they start ----------------------------------------

_INDEX: dict[str, tuple[list, dict]] = {}


def _call_name(e: ast.Call) -> str | None:
    f = e.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _expressions(file: str) -> dict[tuple[int, int], list[tuple]]:
    """Every expression of a file by its start (line, character column):
    ``(end line, end character column, kind, name, test)``: ``kind`` its AST
    type's name, ``name`` what a call calls (``fc`` of ``self.fc(x)``), and
    ``test`` whether it is the test of an ``if``, ``while``, ``assert`` or a
    conditional expression. Parsed once per version of the file linecache
    holds; {} when it does not parse."""
    lines = linecache.getlines(file)
    hit = _INDEX.get(file)
    if hit is not None and hit[0] is lines:
        return hit[1]
    index: dict[tuple[int, int], list] = {}
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        tree = None
    tests = set()
    for e in ast.walk(tree) if tree is not None else ():
        if isinstance(e, (ast.If, ast.While, ast.Assert, ast.IfExp)):
            tests.add(id(e.test))
        if not isinstance(e, ast.expr) or getattr(e, "end_lineno", None) is None:
            continue
        start_text = lines[e.lineno - 1] if e.lineno <= len(lines) else ""
        end_text = lines[e.end_lineno - 1] if e.end_lineno <= len(lines) else ""
        index.setdefault((e.lineno, _chars(start_text, e.col_offset)), []).append(
            (e.end_lineno, _chars(end_text, e.end_col_offset), type(e).__name__,
             _call_name(e) if isinstance(e, ast.Call) else None, id(e) in tests))
    if len(_INDEX) > 256:
        _INDEX.clear()
    _INDEX[file] = (lines, index)
    return index
