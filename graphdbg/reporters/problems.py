"""The report's first section: each problem at its line, what it is, what
to do (`graphdbg report`; rich only inside functions).

A problem reads top to bottom: its kind and line, the code with a caret
under the span, graphdbg's message, the numbers in plain sentences (a
divergence's, a graph break's explanation), what to do (graphdbg's advice
where torch's hint is generic: `graphdbg.analysis.advice`), and the calls
that led there.
"""

from __future__ import annotations

import re

from ..analysis.advice import what_to_do
from ..analysis.wording import (CARET_KINDS, divergence_sentences, says_message,
                                specialized_lines)
from ..core.format import at, caret, clip
from ..runfile.details import parse as parse_detail
from ..runfile.query import Finding

__all__ = ["problems_section"]

_ICONS = {"error": "[red]✖[/]", "warning": "[yellow]▲[/]", "info": "[blue]●[/]"}
# ways out shown under a problem (all of them with --full)
_FIXES = 3
# "... (2 compiled frames recompiled: f() at m.py:3, g() at m.py:9)" ending a recompile's message
_FRAMES = re.compile(r" \(\d+ compiled frames recompiled: .*\)$")


def problems_section(findings: list[Finding], full: bool = False) -> list:
    """The Problems rule and each finding (errors first, as `Run.findings`
    gives them); nothing without findings."""
    from rich.console import NewLine
    from rich.rule import Rule
    if not findings:
        return []
    out: list = [NewLine(), Rule(f"Problems ({len(findings)})", align="left")]
    for f in findings:
        out += _problem(f, full)
    return out


def _problem(f: Finding, full: bool) -> list:
    from rich.markup import escape
    out: list = [_head(f)]

    def indented(markup: str, left: int = 4) -> None:
        out.append(_indented(markup, left))

    if f.code:
        # one row each, cut with "…" at the terminal's edge (a wrapped line
        # would lose its caret)
        out.append(_row(f"    [dim]{f.line:>5} │[/] {escape(f.code)}"))
        if f.col is not None or f.kind in CARET_KINDS:
            # under the caret's span; the whole line only where none is known
            out.append(_row(f"    {'':>5}   [red]{caret(f.code, f.col, f.end_col)}[/]"))
    # (a divergence without a stored detail still gets its line, of unknowns)
    detail = f.detail if f.detail is not None else parse_detail(f.kind, {})
    message = f.message
    if f.kind == "recompile" and not full:   # each frame is a graph row (--full: all)
        message = _FRAMES.sub("", message)
    if not (f.kind == "divergence" and says_message(detail) and not full):
        indented(escape(message))   # (else the sentences below say it)
    advice = what_to_do(f.kind, f.hint, detail, getattr(detail, "fixes", None))
    if f.kind == "divergence":
        # the stage is in the advice ("a bug of the backend X"), else said here
        about = (" ".join(divergence_sentences(detail, full, stage=full or not advice.own))
                 or detail.summary())
    elif advice.own and not full:
        about = None   # graphdbg's advice says what torch's explanation says
    else:
        about = detail.summary()
    if about:
        indented(f"[dim]{escape(about)}[/]")
    if advice.hint:
        indented(f"[green]what to do:[/] {escape(clip(advice.hint, 400))}")
    fixes = advice.fixes if full else advice.fixes[:_FIXES]
    for fix in fixes:   # one way out a line, wrapped under its own text
        out.append(_bullet(escape(fix)))
    if len(fixes) < len(advice.fixes):
        indented(f"[dim]… {len(advice.fixes) - len(fixes)} more with --full[/]", 6)
    for line in specialized_lines(getattr(detail, "specialized", None)):
        indented(f"[dim]{escape(line)}[/]")
    callers = list(f.stack[:-1])[-2:]
    if callers:
        chain = " ← ".join(f"{at(c.file, c.line, c.cell)} {c.function}"
                           for c in reversed(callers))
        indented(f"[dim]called from {escape(chain)}[/]")
    return out


def _head(f: Finding) -> str:
    """A problem's first line: icon, kind (as `graphdbg explain` takes it),
    where, how often."""
    from rich.markup import escape
    where = at(f.file, f.line, f.cell) if f.file else "(no user frame)"
    fn = f" in {escape(f.function)}" if f.function else ""
    times = f"  ×{f.count}" if f.count > 1 else ""
    return f"{_ICONS.get(f.severity, '?')} [bold]{f.kind}[/] [cyan]{escape(where)}[/]{fn}{times}"


def _row(markup: str):
    from rich.text import Text
    text = Text.from_markup(markup, emoji=False, overflow="ellipsis")
    text.no_wrap = True
    return text


def _bullet(markup: str):
    """"- text", the text wrapped under itself, under the finding's text."""
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text
    grid = Table.grid(padding=(0, 1, 0, 0))
    grid.add_column(no_wrap=True)
    grid.add_column()
    grid.add_row(Text("-", style="green"), Text.from_markup(markup, emoji=False))
    return Padding(grid, (0, 0, 0, 4), expand=False)


def _indented(markup: str, left: int):
    """Text wrapped under its own indent (a finding's lines stay under it)."""
    from rich.padding import Padding
    from rich.text import Text
    return Padding(Text.from_markup(markup, emoji=False), (0, 0, 0, left), expand=False)
