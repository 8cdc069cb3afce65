"""A problem's words, as `graphdbg report` says them: worked out once here so
the terminal report (`reporters/problems.py`) and the HTML page
(`reporters/html/`) say the same thing of each finding, in the same order.

`problem_text(finding, full)` returns plain text only (no markup): where,
the code and its caret, the message, the numbers in sentences, what to do,
the ways out, fixed sizes, and the calls that led there. Each view only
decides how it looks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.format import at, caret, clip
from ..runfile.details import parse as parse_detail
from ..runfile.query import Finding
from .advice import what_to_do
from .wording import CARET_KINDS, divergence_sentences, says_message, specialized_lines

__all__ = ["FIXES", "ProblemText", "problem_text"]

# ways out shown under a problem (all of them with --full)
FIXES = 3
# "... (2 compiled frames recompiled: f() at m.py:3, g() at m.py:9)" ending a recompile's message
_FRAMES = re.compile(r" \(\d+ compiled frames recompiled: .*\)$")


@dataclass(frozen=True, slots=True)
class ProblemText:
    """What a view shows of one finding, top to bottom (None: not shown)."""
    finding: Finding
    where: str                     # "demo.py:55", "Cell In[3], line 7", "(no user frame)"
    code: str | None               # the line's code (without its indentation)
    caret: str | None              # the marks under ``code`` (its span, else the whole line)
    message: str | None            # graphdbg's message (None: the sentences say it)
    about: str | None              # the numbers in sentences, or torch's explanation
    hint: str | None               # what to do
    fixes: tuple[str, ...]         # ways out, one a line
    more_fixes: int                # ways out left out (shown with --full)
    specialized: tuple[str, ...]   # sizes an export fixed
    called_from: str | None        # "m.py:71 main ← m.py:82 <module>"


def problem_text(f: Finding, full: bool = False) -> ProblemText:
    """The words of ``f`` as the report shows them (``full``: as --full does:
    every way out, a recompile's every frame, a divergence's stage)."""
    where = at(f.file, f.line, f.cell) if f.file else "(no user frame)"
    marks = None
    if f.code and (f.col is not None or f.kind in CARET_KINDS):
        # under the caret's span; the whole line only where none is known
        marks = caret(f.code, f.col, f.end_col)
    # (a divergence without a stored detail still gets its line, of unknowns)
    detail = f.detail if f.detail is not None else parse_detail(f.kind, {})
    message = f.message
    if f.kind == "recompile" and not full and message:   # each frame is a graph row
        message = _FRAMES.sub("", message)
    if f.kind == "divergence" and says_message(detail) and not full:
        message = None   # the sentences below say it
    advice = what_to_do(f.kind, f.hint, detail, getattr(detail, "fixes", None))
    if f.kind == "divergence":
        # the stage is in the advice ("a bug of the backend X"), else said here
        about = (" ".join(divergence_sentences(detail, full, stage=full or not advice.own))
                 or detail.summary())
    elif advice.own and not full:
        about = None   # graphdbg's advice says what torch's explanation says
    else:
        about = detail.summary()
    fixes = tuple(advice.fixes if full else advice.fixes[:FIXES])
    callers = list(f.stack[:-1])[-2:]
    chain = (" ← ".join(f"{at(c.file, c.line, c.cell)} {c.function}" for c in reversed(callers))
             if callers else None)
    return ProblemText(
        finding=f, where=where, code=f.code or None, caret=marks, message=message,
        about=about or None, hint=clip(advice.hint, 400) if advice.hint else None,
        fixes=fixes, more_fixes=len(advice.fixes) - len(fixes),
        specialized=tuple(specialized_lines(getattr(detail, "specialized", None))),
        called_from=chain)
