"""The page's problems, as `graphdbg report` says them (same order, same
words: `graphdbg.analysis.problemtext`), and each one's source excerpt
(the run file's snapshot of the file, the line marked), which its
file:line jumps to."""

from __future__ import annotations

import re

from ...analysis.problemtext import problem_text
from ...core.format import at
from ...runfile.query import Finding, Run
from .markup import JUMP, esc, note, section

ICONS = {"error": "✖", "warning": "▲", "info": "●"}
# lines shown each side of a problem's line
AROUND = 6


def problems_html(run: Run, findings: list[Finding], uid: str) -> str:
    """The Problems section (in `Run.findings`' order, as the report) and
    the Source section of their excerpts."""
    if not findings:
        return section("Problems (0)", '<p class="ok">● no problems found</p>', f"{uid}-problems")
    sources: dict[str, list[str] | None] = {}
    items, excerpts = [], []
    for i, f in enumerate(findings):
        anchor = f"{uid}-src-{i}"
        items.append(_problem(f, i, anchor))
        excerpts.append(_excerpt(run, f, i, anchor, sources))
    body = f'<div class="problems">{"".join(items)}</div>'
    src = ('<p class="dim">the run file\'s snapshot of each problem\'s file, taken during the '
           'run, around its line; a problem\'s file:line opens its excerpt</p>'
           + "".join(excerpts))
    return (section(f"Problems ({len(findings)})", body, f"{uid}-problems")
            + section("Source", src, f"{uid}-source"))


def _problem(f: Finding, i: int, anchor: str) -> str:
    p = problem_text(f)
    fn = f" in {esc(f.function)}" if f.function else ""
    times = f"  ×{f.count}" if f.count > 1 else ""
    link = (f'<a class="where" href="#{anchor}-L" onclick="{esc(JUMP)}">{esc(p.where)}</a>'
            if f.file and f.line else f'<span class="where">{esc(p.where)}</span>')
    sev = f.severity if f.severity in ICONS else "info"
    out = [f'<div class="problem p-{sev}" data-kind="{esc(f.kind)}" data-where="{esc(p.where)}" '
           f'id="{anchor}-p">',
           f'<div class="head"><span class="{_colour(sev)}">{ICONS.get(f.severity, "?")}</span> '
           f'<span class="kind">{esc(f.kind)}</span> {link}{fn}{esc(times)}</div>']
    if p.code:
        code = f"{f.line if f.line is not None else '':>5} │ {p.code}"
        caret = f'\n{"":>5}   <span class="caret">{esc(p.caret)}</span>' if p.caret else ""
        out.append(f'<pre class="code">{esc(code)}{caret}</pre>')
    if p.message is not None:
        out.append(f"<p>{esc(p.message)}</p>")
    if p.about:
        out.append(f'<p class="dim">{esc(p.about)}</p>')
    if p.hint:
        out.append(f'<p class="todo"><b>what to do:</b> {esc(p.hint)}</p>')
    if p.fixes:
        out.append('<ul class="fixes">' + "".join(f"<li>{esc(x)}</li>" for x in p.fixes) + "</ul>")
    if p.more_fixes:
        out.append(note(f"… {p.more_fixes} more with graphdbg report --full"))
    for line in p.specialized:
        out.append(note(line))
    if p.called_from:
        out.append(note(f"called from {p.called_from}"))
    out.append("</div>")
    return "".join(out)


def _colour(severity: str) -> str:
    return {"error": "err", "warning": "warn"}.get(severity, "info")


def _excerpt(run: Run, f: Finding, i: int, anchor: str,
             sources: dict[str, list[str] | None]) -> str:
    """A problem's lines in a collapsed <details>: the snapshot around its
    line, that line marked (id ``{anchor}-L``, what its link names); the
    finding's own code where the run has no snapshot of the file."""
    if not f.file or not f.line:
        return ""
    if f.file not in sources:
        text = run.source(f.file)
        sources[f.file] = re.split(r"\r\n|\r|\n", text) if text is not None else None
    lines = sources[f.file]
    if lines and f.line <= len(lines):
        lo, hi = max(1, f.line - AROUND), min(len(lines), f.line + AROUND)
        rows = [(n, lines[n - 1]) for n in range(lo, hi + 1)]
    else:
        rows = [(f.line, f.code or "(no snapshot of this file in the run)")]
    mark = f' class="hl" id="{anchor}-L"'
    trs = "".join(f'<tr{mark if n == f.line else ""}><td class="ln">{n}</td><td>{esc(text)}</td></tr>'
                  for n, text in rows)
    where = at(f.file, f.line, f.cell)
    return (f'<details class="excerpt" id="{anchor}"><summary><code>{esc(where)}</code> '
            f'<span class="dim">{esc(f.kind)} #{i + 1}</span></summary>'
            f'<table class="src">{trs}</table></details>')
