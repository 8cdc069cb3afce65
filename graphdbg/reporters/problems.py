"""The report's first section: each problem at its line, what it is, what
to do (`graphdbg report`; rich only inside functions).

A problem reads top to bottom: its kind and line, the code with a caret
under the span, graphdbg's message, the numbers in plain sentences (a
divergence's, a graph break's explanation), what to do (graphdbg's advice
where torch's hint is generic: `graphdbg.analysis.advice`), and the calls
that led there. The words come from `graphdbg.analysis.problemtext`
(the HTML page shows the same); only the look is decided here.
"""

from __future__ import annotations

from ..analysis.problemtext import problem_text
from ..runfile.query import Finding

__all__ = ["problems_section"]

_ICONS = {"error": "[red]✖[/]", "warning": "[yellow]▲[/]", "info": "[blue]●[/]"}


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
    """One finding's rows, from its words (`graphdbg.analysis.problemtext`,
    which the HTML page shows too)."""
    from rich.markup import escape
    p = problem_text(f, full)
    out: list = [_head(f, p.where)]

    def indented(markup: str, left: int = 4) -> None:
        out.append(_indented(markup, left))

    if p.code:
        # one row each, cut with "…" at the terminal's edge (a wrapped line
        # would lose its caret)
        out.append(_row(f"    [dim]{f.line:>5} │[/] {escape(p.code)}"))
        if p.caret is not None:
            out.append(_row(f"    {'':>5}   [red]{p.caret}[/]"))
    if p.message is not None:
        indented(escape(p.message))
    if p.about:
        indented(f"[dim]{escape(p.about)}[/]")
    if p.hint:
        indented(f"[green]what to do:[/] {escape(p.hint)}")
    for fix in p.fixes:   # one way out a line, wrapped under its own text
        out.append(_bullet(escape(fix)))
    if p.more_fixes:
        indented(f"[dim]… {p.more_fixes} more with --full[/]", 6)
    for line in p.specialized:
        indented(f"[dim]{escape(line)}[/]")
    if p.called_from:
        indented(f"[dim]called from {escape(p.called_from)}[/]")
    return out


def _head(f: Finding, where: str) -> str:
    """A problem's first line: icon, kind (as `graphdbg explain` takes it),
    where, how often."""
    from rich.markup import escape
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
